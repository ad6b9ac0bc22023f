"""A conversation's turns drawn from their cache records (serve/cache_miss.py): what each prompt reused.

    fig = plot_ribbon(records, tokens=texts)   # one row per turn: each prompt token found in the cache, unchanged
    #                                            but computed again, or new this turn; hover: the token, its message
    fig = plot_reuse(records)                  # per turn: the ideal reuse (the common prefix's full blocks) against
    #                                            what the lookup found, over the prompt's length

A record is a `CacheRecord` or its JSON (`CacheRecord.as_dict()`, or the text-less one a Trace keeps in
`trace.cache`); `tokens`, when given, is one list of token texts per record (its prompt's tokens, in order), which
the hover shows made visible; without it the hover names the position only and says the text was not kept.

The ribbon's three parts are the record's own counts, in prompt order: [0, cached) found in the cache,
[cached, cached + recomputed) unchanged from the previous turn but computed again, the rest new this turn. A turn
that parted from what the cache held is marked at its first differing position.

>>> records = [{"turn": 1, "prompt_tokens": 20, "cached": 0, "ideal": 0, "first_difference": None,
...             "cause": "new conversation", "ribbon": {"cached": 0, "recomputed": 0, "new": 20}, "spans": []},
...            {"turn": 2, "prompt_tokens": 40, "cached": 16, "ideal": 16, "first_difference": None,
...             "cause": "no miss", "ribbon": {"cached": 16, "recomputed": 8, "new": 16}, "spans": []}]
>>> segments(records[1])
[('cached', 0, 16), ('recomputed', 16, 24), ('new', 24, 40)]
>>> fig = plot_reuse(records)
>>> [(t.name, list(t.y)) for t in fig.data][:2]
[('ideal: the shared history, full blocks', [0, 16]), ('actual: found in the cache', [0, 16])]
>>> plot_ribbon(records).data[0].type
'heatmap'

Pure functions: no state, no I/O; no records gives an empty figure with a hint.
Left out: the cache's blocks themselves (the Serve tab's KV chart draws them) and turns past the newest ROWS
(a long conversation's ribbon shows its latest turns, and says how many it left out).
"""
from __future__ import annotations

import html

import plotly.graph_objects as go

from ..tokens import visible
from .run import _empty, _figure, titled

KINDS = ("cached", "recomputed", "new")
COLOURS = {"cached": "#0d9488", "recomputed": "#d97706", "new": "#2563eb"}
LABELS = {"cached": "found in the cache", "recomputed": "unchanged, computed again", "new": "new this turn"}
IDEAL, ACTUAL, PROMPT, DIFFERS = "#9ca3af", "#0d9488", "#374151", "#dc2626"
ROWS = 12           # turns the ribbon draws at most (the newest)
EMPTY = "Send a turn to see this chart"
# the legend under the plot: a half-width chart has no room for it beside its title
BELOW = dict(orientation="h", x=0, y=0, xanchor="left", yanchor="bottom", yref="container")


def as_record(record) -> dict:
    """A record as JSON: a `CacheRecord` through its `as_dict`, a dict as it is.

    >>> as_record({"turn": 1})
    {'turn': 1}
    """
    return record if isinstance(record, dict) else record.as_dict()


def segments(record) -> list[tuple[str, int, int]]:
    """[(kind, start, end)]: the prompt's runs of tokens found in the cache, computed again though unchanged, and
    new, in prompt order (empty runs left out)."""
    ribbon, start, out = as_record(record)["ribbon"], 0, []
    for kind in KINDS:
        n = int(ribbon.get(kind, 0))
        if n > 0:
            out.append((kind, start, start + n))
        start += n
    return out


def kind_at(record, position: int) -> str | None:
    """Which part of the ribbon token `position` lies in; None past the prompt.

    >>> kind_at({"ribbon": {"cached": 16, "recomputed": 0, "new": 3}}, 17)
    'new'
    """
    return next((kind for kind, start, end in segments(record) if start <= position < end), None)


def _span_at(spans, position: int) -> dict | None:
    return next((s for s in spans if s["start"] <= position < s["end"]), None)


def where_text(span: dict | None) -> str:
    """A token's message and part in words.

    >>> where_text({"message": 2, "role": "user", "part": "content"}), where_text(None)
    ('message 2 (user, content)', 'message unknown')
    >>> where_text({"message": None, "role": "assistant", "part": "generation prompt"})
    "the template's own text (assistant, generation prompt)"
    >>> where_text({"message": 0, "role": "system", "part": "tools", "name": "get_time"})
    'message 0 (system, tools: get_time)'
    """
    if span is None:
        return "message unknown"
    part = span["part"] + (f": {span['name']}" if span.get("name") else "")
    who = f"message {span['message']}" if span.get("message") is not None else "the template's own text"
    return f"{who} ({span['role'] or 'no role'}, {part})"


def _token_label(text: str) -> str:
    """A token's text for a hover: whitespace made visible, escaped (plotly reads tags in hover text)."""
    return html.escape(visible(text.encode("utf-8", errors="surrogateescape")) or "∅", quote=False)


def plot_ribbon(records, tokens=None, rows: int = ROWS) -> go.Figure:
    """Each turn's prompt as a ribbon over its token positions (one row per turn, turn 1 on top), coloured found
    in the cache / unchanged but computed again / new this turn; a cross at a turn's first differing position.
    `tokens`: per record, its prompt's token texts (the hover shows them); `rows`: the newest turns drawn."""
    records = [as_record(r) for r in records]
    texts = list(tokens) if tokens is not None else [None] * len(records)
    left_out = max(0, len(records) - rows)
    records, texts = records[left_out:], texts[left_out:]
    subtitle = f"the latest {len(records)} turns of {len(records) + left_out}" if left_out else ""
    fig = _figure(titled("Each turn's prompt, token by token", subtitle), "prompt token (position)", "",
                  height=190 + 34 * max(1, len(records)))
    if not records:
        return _empty(fig, EMPTY)
    width = max(r["prompt_tokens"] for r in records)
    names = [f"turn {r['turn']}" for r in records]
    z, hover = [], []
    for record, text in zip(records, texts):
        kinds = [kind_at(record, i) for i in range(record["prompt_tokens"])]
        z.append([KINDS.index(k) if k is not None else None for k in kinds] + [None] * (width - len(kinds)))
        hover.append([_hover(record, i, k, text) for i, k in enumerate(kinds)] + [""] * (width - len(kinds)))
    scale = []
    for k, kind in enumerate(KINDS):
        scale += [[k / 3, COLOURS[kind]], [(k + 1) / 3, COLOURS[kind]]]
    fig.add_trace(go.Heatmap(z=z, x=list(range(width)), y=names, text=hover, hovertemplate="%{text}<extra></extra>",
                             zmin=-0.5, zmax=2.5, colorscale=scale, showscale=False, xgap=0, ygap=3,
                             name="prompt tokens"))
    for kind in KINDS:   # the legend: a heatmap has none of its own
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=LABELS[kind],
                                 marker=dict(symbol="square", size=14, color=COLOURS[kind])))
    parted = [(r["first_difference"], name, r["cause"]) for r, name in zip(records, names)
              if r.get("first_difference") is not None]
    if parted:
        fig.add_trace(go.Scatter(x=[p for p, _, _ in parted], y=[n for _, n, _ in parted], mode="markers",
                                 name="first difference", marker=dict(symbol="x-thin", size=16, color=DIFFERS,
                                                                     line=dict(width=3, color=DIFFERS)),
                                 hovertemplate="%{text}<extra></extra>",
                                 text=[f"{n}: parts at token {p} ({html.escape(c, quote=False)})"
                                       for p, n, c in parted]))
    fig.update_yaxes(autorange="reversed", type="category", categoryorder="array", categoryarray=names)
    fig.update_xaxes(range=[-0.5, width - 0.5])
    return fig.update_layout(margin=dict(l=80, r=20, t=90 if subtitle else 60, b=110), legend=BELOW)


def _hover(record: dict, position: int, kind: str, text) -> str:
    token = _token_label(text[position]) if text is not None and position < len(text) else "(text not kept)"
    where = where_text(_span_at(record.get("spans") or [], position))
    return f"turn {record['turn']} · token {position}: {token}<br>{where}<br>{LABELS[kind]}"


def plot_reuse(records, current: int | None = None) -> go.Figure:
    """Per turn, over the conversation: the ideal reuse (the common prefix with the previous turn's whole sequence,
    in full blocks) against the actual (what the lookup found), with each prompt's length as a line; `current`, a
    turn number, is outlined. The hover names each turn's cause."""
    records = [as_record(r) for r in records]
    fig = _figure(titled("Reuse per turn", "ideal against actual"), "turn", "prompt tokens", height=380)
    if not records:
        return _empty(fig, EMPTY)
    turns = [r["turn"] for r in records]
    causes = [html.escape(r["cause"], quote=False) for r in records]
    outline = [3 if t == current else 0 for t in turns]
    fig.add_trace(go.Bar(x=turns, y=[r["ideal"] for r in records], name="ideal: the shared history, full blocks",
                         marker=dict(color=IDEAL, line=dict(width=outline, color="#111827")), customdata=causes,
                         hovertemplate="turn %{x}: ideal %{y} tokens<br>%{customdata}<extra></extra>"))
    fig.add_trace(go.Bar(x=turns, y=[r["cached"] for r in records], name="actual: found in the cache",
                         marker=dict(color=ACTUAL, line=dict(width=outline, color="#111827")), customdata=causes,
                         hovertemplate="turn %{x}: found %{y} tokens<br>%{customdata}<extra></extra>"))
    fig.add_trace(go.Scatter(x=turns, y=[r["prompt_tokens"] for r in records], name="prompt",
                             mode="lines+markers", line=dict(color=PROMPT, dash="dot"),
                             hovertemplate="turn %{x}: prompt %{y} tokens<extra></extra>"))
    if len(turns) <= 20:   # one tick per turn while they fit
        fig.update_xaxes(tickmode="array", tickvals=turns)
    return fig.update_layout(barmode="group", legend=BELOW, margin=dict(l=60, r=20, t=80, b=130))
