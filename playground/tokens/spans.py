"""Token spans: a token's id, exact bytes and the characters of the text it touches.

`spans_from_pieces` turns (id, bytes, special) pieces whose bytes join to the text into `TokenSpan`s in
one pass: char offsets come from counting UTF-8 lead bytes, and spans that share a character (a byte-level
BPE split inside an emoji or a CJK character) get the same `group`, the index of the group's first span.

Example:
    >>> pieces = [(0, b"a\\xc3", False), (1, b"\\xa9b", False)]     # "aéb" with é split in two
    >>> [(s.start, s.end, s.group) for s in spans_from_pieces(pieces, "aéb".encode())]
    [(0, 2, 0), (1, 3, 0)]

`TokenizerView` is the adaptor every tokenizer becomes (see views.py): a name and a function
text -> pieces. Left out: grouping by grapheme cluster (a ZWJ family emoji is several code points).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, NamedTuple

from .visible import visible

Piece = tuple[int, bytes, bool]   # (token id, exact bytes, special)
_SURROGATE = re.compile("[\ud800-\udfff]")


class TokenizerUnavailable(ValueError):
    """A tokenizer that could not be loaded; the message says what was tried and what is accepted."""


# --- spans

class UnencodableText(ValueError):
    """The tokenizer makes no token of a non-empty text: its vocabulary lacks every character's bytes (SmolLM2's
    has no token for some control bytes, e.g. U+0006, and drops them)."""


class TokenSpan(NamedTuple):   # immutable, and cheaper to build than a frozen dataclass (70k per text)
    index: int          # position in the token sequence
    token_id: int
    data: bytes         # the token's exact bytes
    start: int          # first character (code point) of the text this span touches
    end: int            # one past the last character it touches
    special: bool       # a special/control token (<|im_start|>, <|endoftext|>, ...)
    group: int | None   # index of the first span sharing a character with this one; None when whole

    @property
    def partial(self) -> bool:
        return self.group is not None

    @property
    def display(self) -> str:
        return visible(self.data)


def clean_text(text: str) -> tuple[str, int]:
    """(text with lone surrogates replaced by U+FFFD, how many were replaced); TypeError for non-str."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    return _SURROGATE.subn("\ufffd", text)


def spans_from_pieces(pieces: list[Piece], encoded: bytes) -> list[TokenSpan]:
    """Attach char offsets and groups to pieces whose bytes join to `encoded` (one pass, O(n))."""
    spans, chars, pos, group, n = [], 0, 0, None, len(encoded)
    for index, (token_id, data, special) in enumerate(pieces):
        end_pos = pos + len(data)
        starts_inside = bool(data) and (data[0] & 0xC0) == 0x80         # continuation byte
        ends_inside = end_pos < n and (encoded[end_pos] & 0xC0) == 0x80
        leads = len(data) if data.isascii() else sum((b & 0xC0) != 0x80 for b in data)
        if not starts_inside:
            group = index if ends_inside else None
        start = chars - 1 if starts_inside else chars
        chars += leads
        spans.append(TokenSpan(index, token_id, data, start, chars, special, group))
        pos = end_pos
    return spans


# --- the adaptor every tokenizer becomes

@dataclass(frozen=True)
class TokenizerView:
    """name + a function text -> pieces; `special_tokens`: None = the tokenizer's serving default
    (HF matches its added tokens, tiktoken reads special-token text as plain text), True/False force it."""
    name: str
    pieces: Callable[[str, bool | None], list[Piece]]

    def encode_spans(self, text: str, *, special_tokens: bool | None = None) -> list[TokenSpan]:
        text, _ = clean_text(text)
        encoded = text.encode("utf-8")
        pieces = self.pieces(text, special_tokens)
        if text and not pieces:
            chars = ", ".join(dict.fromkeys(f"U+{ord(c):04X}" for c in text[:200]))
            raise UnencodableText(f"{self.name} makes no token of this text: its vocabulary has none for {chars}, so "
                                  "it drops them")
        if b"".join(p[1] for p in pieces) != encoded:
            raise RuntimeError(f"{self.name}: span bytes do not join to the text (a bug, not bad input)")
        return spans_from_pieces(pieces, encoded)
