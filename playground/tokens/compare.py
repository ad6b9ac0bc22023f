"""Counts side by side: characters, words, tokens per tokenizer, tokens per word, one-line summaries.

Example:
    >>> from playground.tokens import tiktoken_view
    >>> c = compare("The capital of France is Paris.", [tiktoken_view()])
    >>> c.chars, c.words, c.counts, c.summary
    (31, 6, {'cl100k_base': 7}, ['cl100k_base: 6 words → 7 tokens (1.17 tokens/word)'])

Words are runs of non-whitespace (`str.split`). Scripts written without spaces between words (Chinese,
Japanese, Thai, Lao, Khmer, Myanmar) have no words to split, so their letters are counted one by one as
characters, and the summary says "characters" for them:

    >>> c = compare("今天天气很好", [tiktoken_view()])
    >>> c.words, c.unspaced, c.summary[0].split(" → ")[0]
    (0, 6, 'cl100k_base: 6 characters')

Lone surrogates (broken UTF-8 from a paste) are replaced by U+FFFD up front and noted in `notes`.
Counts are always complete; only the chips are capped (chips.py).
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from .spans import TokenSpan, TokenizerView, clean_text


# scripts written without spaces between words: CJK ideographs (and extensions, compatibility forms),
# kana (full and half width), Thai, Lao, Myanmar, Khmer
UNSPACED = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f\u3040-\u30ff\u31f0-\u31ff"
                      "\uff66-\uff9f\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff]")
CJK_PUNCTUATION = re.compile("[\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]")   # 。，「」！


def count_words(text: str) -> tuple[int, int]:
    """(words separated by spaces, letters of scripts written without spaces); a run of such letters
    separates words like a space ("我爱Python编程": 1 word, 4 characters). Marks and punctuation of
    those scripts ("。", "，") separate too and are not counted (a Thai vowel sign is part of its letter).

    >>> count_words("The capital of France is Paris."), count_words("我爱Python编程。"), count_words("")
    ((6, 0), (1, 4), (0, 0))
    """
    unspaced = sum(1 for ch in UNSPACED.findall(text) if unicodedata.category(ch).startswith("L"))
    return len(CJK_PUNCTUATION.sub(" ", UNSPACED.sub(" ", text)).split()), unspaced


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


def units_text(words: int, characters: int = 0) -> str:
    """What a text holds, in the units a reader counts: words, characters (unspaced scripts), or both.

    >>> units_text(8), units_text(0, 14), units_text(3, 1)
    ('8 words', '14 characters', '3 words + 1 character')
    """
    if not characters:
        return plural(words, "word")
    return plural(characters, "character") if not words else f"{plural(words, 'word')} + {plural(characters, 'character')}"


def summary_line(words: int, tokens: int, characters: int = 0) -> str:
    """The lesson's one-line form; `characters`: letters of scripts written without spaces.

    >>> summary_line(8, 9), summary_line(1, 1), summary_line(0, 81, characters=14)
    ('8 words → 9 tokens', '1 word → 1 token', '14 characters → 81 tokens')
    """
    return f"{units_text(words, characters)} → {plural(tokens, 'token')}"


@dataclass(frozen=True)
class Comparison:
    text: str                          # after lone surrogates were replaced
    chars: int
    words: int                         # separated by spaces (outside unspaced scripts)
    spans: dict[str, list[TokenSpan]]  # tokenizer name -> all spans (never capped)
    notes: tuple[str, ...] = ()
    unspaced: int = 0                  # letters of scripts written without spaces (each counted alone)

    @property
    def counts(self) -> dict[str, int]:
        return {name: len(spans) for name, spans in self.spans.items()}

    @property
    def units(self) -> int:
        """Words and unspaced characters together: what tokens are counted per."""
        return self.words + self.unspaced

    @property
    def per_unit(self) -> str:
        """'tokens/word', 'tokens/character', or for a mix 'tokens per word or character'."""
        return ("tokens/word" if not self.unspaced else "tokens/character" if not self.words
                else "tokens per word or character")

    def tokens_per_word(self, name: str) -> float | None:
        """Tokens per unit (word, or character of an unspaced script); None for an empty text."""
        return len(self.spans[name]) / self.units if self.units else None

    @property
    def summary(self) -> list[str]:
        lines = []
        for name, count in self.counts.items():
            ratio = self.tokens_per_word(name)
            lines.append(f"{name}: {summary_line(self.words, count, self.unspaced)}"
                         + (f" ({ratio:.2f} {self.per_unit})" if ratio is not None else ""))
        return lines


def compare(text: str, views: list[TokenizerView], *, special_tokens: bool | None = None) -> Comparison:
    text, replaced = clean_text(text)
    notes = (f"replaced {replaced} lone surrogate(s) (broken UTF-8) with U+FFFD",) if replaced else ()
    spans = {view.name: view.encode_spans(text, special_tokens=special_tokens) for view in views}
    words, unspaced = count_words(text)
    return Comparison(text, len(text), words, spans, notes, unspaced)
