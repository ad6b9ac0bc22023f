"""Counts side by side: characters, words, tokens per tokenizer, tokens per word, one-line summaries.

Example:
    >>> from playground.tokens import tiktoken_view
    >>> c = compare("The capital of France is Paris.", [tiktoken_view()])
    >>> c.chars, c.words, c.counts, c.summary
    (31, 6, {'cl100k_base': 7}, ['cl100k_base: 6 words → 7 tokens (1.17 tokens/word)'])

Words are runs of non-whitespace (`str.split`), so a CJK sentence without spaces counts as one word.
Lone surrogates (broken UTF-8 from a paste) are replaced by U+FFFD up front and noted in `notes`.
Counts are always complete; only the chips are capped (chips.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from .spans import TokenSpan, TokenizerView, clean_text


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
