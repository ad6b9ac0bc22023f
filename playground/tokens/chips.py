"""Token spans as HTML chips: one coloured chip per token, whitespace visible, everything escaped.

gr.HTML inserts markup as is, so every text and attribute value here goes through
`html.escape(..., quote=True)`: `<script>`, `&` and quotes in user text reach the page as text.

Example:
    >>> from playground.tokens import tiktoken_view
    >>> html = render_chips_html(tiktoken_view().encode_spans("a <b>"))
    >>> html.count('class="tok '), "&lt;" in html, "<b" in html
    (4, True, False)
    >>> visible(b"a b\\tc\\n\\x00\\xf0\\x9f")
    'a·b→c↵␀⟨F0 9F⟩'

Visible text: space ·, tab →, newline ↵, other C0 controls as control pictures (␀ ␛ …), DEL ␡;
C1 controls, invisible format characters and bidi overrides as ⟨U+202E⟩; bytes of a split character as
⟨F0 9F⟩ (never U+FFFD); a chip starting with a combining mark gets a dotted circle ◌ to lean on.
Chips are capped (`max_chips`) with a "showing first N of M tokens" note; counts live elsewhere.
Left out: colour by token id (colour cycles by position so neighbours always differ).
"""
from __future__ import annotations

import html

from .spans import TokenSpan
from .visible import visible

TOKEN_CSS = """
.tok-view { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 1.15rem; line-height: 2.1; }
.tok-view .tok { display: inline-block; unicode-bidi: isolate; padding: 0 .25em; margin: 0 1px 3px 0;
  border-radius: 4px; color: #111; white-space: pre; border: 1px solid transparent; }
.tok-view .tok-c0 { background: #fde68a; } .tok-view .tok-c1 { background: #a7f3d0; }
.tok-view .tok-c2 { background: #bfdbfe; } .tok-view .tok-c3 { background: #fbcfe8; }
.tok-view .tok-c4 { background: #ddd6fe; } .tok-view .tok-c5 { background: #fed7aa; }
.tok-view .tok-partial { border: 2px dashed #b91c1c; }
.tok-view .tok-special { background: #1f2937; color: #fff; font-weight: 700; }
.tok-view .tok-thinking { background: #e0e7ff; color: #3730a3; font-weight: 400; font-style: italic; }
.tok.tok-accepted, .tok-view .tok.tok-accepted { background: #4ade80; border-color: #15803d; }
.tok.tok-replaced, .tok-view .tok.tok-replaced { background: #fca5a5; border-color: #b91c1c; }
.tok.tok-ordinary, .tok-view .tok.tok-ordinary { background: #e5e7eb; }
.tok-view .tok-note { font-family: system-ui, sans-serif; font-size: 1rem; color: #374151; margin: .3em 0; }
"""
PALETTE_SIZE = 6

def _title(span: TokenSpan, text: str | None) -> str:
    parts = [f"#{span.index} · id {span.token_id}", f"{len(span.data)} byte{'s' * (len(span.data) != 1)}: "
             + (span.data.hex(" ").upper() or "(none)"), f"chars {span.start}–{span.end}"]
    if span.special:
        parts.append("special token")
    if span.partial:
        piece = f" {text[span.start:span.end]!r}" if text is not None else ""
        parts.append(f"shares a character{piece} with its neighbours (group {span.group})")
    return " · ".join(parts)


# --- chips

def render_chips_html(spans: list[TokenSpan], max_chips: int = 2000, text: str | None = None) -> str:
    """A <div class="tok-view"> of at most `max_chips` chips; `text` (optional) names split characters."""
    shown = spans[:max(0, max_chips)]
    chips = []
    for span in shown:
        classes = ["tok", f"tok-c{(span.group if span.partial else span.index) % PALETTE_SIZE}"]
        classes += ["tok-special"] * span.special + ["tok-partial"] * span.partial
        chips.append(f'<span class="{" ".join(classes)}" title="{html.escape(_title(span, text), quote=True)}">'
                     f"{html.escape(visible(span.data) or '∅', quote=True)}</span>")
    note = ""
    if len(shown) < len(spans):
        note = f'<p class="tok-note">showing first {len(shown):,} of {len(spans):,} tokens</p>'
    return f'<div class="tok-view">{"".join(chips)}{note}</div>'
