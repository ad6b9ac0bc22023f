"""Bytes as text a reader can see: whitespace and controls drawn, split characters as hex, never U+FFFD.

    >>> visible(b"a b\\tc\\n\\x00\\xf0\\x9f")
    'a·b→c↵␀⟨F0 9F⟩'

Space ·, tab →, newline ↵, other C0 controls as control pictures (␀ ␛ …), DEL ␡; C1 controls, invisible
format characters and bidi overrides as ⟨U+202E⟩; bytes of a split character as ⟨F0 9F⟩; a text starting
with a combining mark gets a dotted circle ◌ to lean on. Used by the chips (chips.py), the spans'
`display` (spans.py) and the run view; the result is plain text: escape it before it goes into HTML.
"""
from __future__ import annotations

import re
import unicodedata

_VISIBLE = {0x20: "·", 0x09: "→", 0x0A: "↵", 0x7F: "␡"}
_VISIBLE.update({c: chr(0x2400 + c) for c in range(0x20) if c not in _VISIBLE})
_INVISIBLE = [*range(0x80, 0xA1), 0xAD, *range(0x200B, 0x2010), *range(0x2028, 0x202F),
              *range(0x2060, 0x2065), *range(0x2066, 0x206A), 0xFEFF]
_VISIBLE.update({c: f"⟨U+{c:04X}⟩" for c in _INVISIBLE})


_ESCAPED_BYTES = re.compile("[\udc80-\udcff]+")   # what surrogateescape makes of undecodable bytes


def _hex(match: re.Match) -> str:
    return "⟨" + " ".join(f"{ord(c) - 0xDC00:02X}" for c in match.group()) + "⟩"


def visible(data: bytes) -> str:
    """The bytes as text a reader can see: whitespace and controls drawn, split characters as hex."""
    text = _ESCAPED_BYTES.sub(_hex, data.decode("utf-8", errors="surrogateescape").translate(_VISIBLE))
    if text and unicodedata.category(text[0]) in ("Mn", "Me"):
        text = "◌" + text
    return text
