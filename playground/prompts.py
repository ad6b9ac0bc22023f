"""Every prompt the playground ships, in one place: the lesson's short question and long document, the Serve tab's
default question, the speculative presets' prompts, and cutting a prompt to a context window.

    long_document()                                    # assets/long_document.txt (~800 SmolLM2 tokens)
    text, cut = long_prompt(tokenizer, 2048, 48)       # the summarize instruction + the document, cut to fit
    text, cut = fit_to_window(source, text, 48)        # any text cut by tokens to leave room for 48 new tokens
    reread_text(long_document())                       # the document, then its start again: a prompt to copy from

The document is self-written; a model with a small context window gets it cut by tokens, and says so.

>>> cut_to_window(None, 2048, "whole", 48)
('whole', False)

Left out: a workload's request classes and token cap (serve/workload.py).
"""
from __future__ import annotations

from pathlib import Path

LONG_DOCUMENT_PATH = Path(__file__).resolve().parents[1] / "assets" / "long_document.txt"
SHORT_QUESTION = "What is the capital of France?"   # the lesson's short request (the short-vs-long experiment's)
SUMMARIZE_INSTRUCTION = "Summarize the following document in three sentences.\n\n"
TEMPLATE_ALLOWANCE = 64  # tokens kept free for the chat template around the document
# The Serve tab's default short class: a question whose answer runs to the budget (decode-heavy, where batching's
# gain in tokens/s shows)
LONG_ANSWER_QUESTION = "Explain in a few sentences why the sky is blue."
# The speculative presets (experiments/speculative.py, the Generate tab's): a short open question, nothing to copy
OPEN_QUESTION = "Why is the sky blue? Answer in a few sentences."
# an extractive summary, raw text: the document, then the start of a quoted list the model fills by copying
QUOTE_END = "\n\nThe three most important sentences of the document above, quoted word for word:\n\n1. \""
# the Generate tab's preset where speculation can copy: raw text, the document, then its start again, so the
# model goes on copying what it read (on the bundled model, onnx-gguf4, 64 tokens: 29 of 69 drafts accepted,
# 64 tokens in 35 forward passes, and 23 of 47 in another run; the `quote` prompt's list got 0 of 4: the model
# writes sentences of its own)
REREAD_END = "\n\nThe document above, again from its start:\n\n"
REREAD_CHARS = 80
# Lesson step 8's conversation: the France question of step 2, then three follow-ups, each turn sending the whole
# conversation again
CHAT_SYSTEM = "You are a helpful assistant. Answer in two sentences."
CHAT_QUESTIONS = (SHORT_QUESTION, "How many people live there?", "Which river runs through it?",
                  "Name one museum there.")


def long_document() -> str:
    """The shipped summarization text (assets/long_document.txt, self-written, ~800 SmolLM2 tokens)."""
    return LONG_DOCUMENT_PATH.read_text(encoding="utf-8")


def reread_text(document: str) -> str:
    """The document, then its first REREAD_CHARS characters again after REREAD_END: a prompt to copy from.

    >>> reread_text("Lighthouses. A fire on a hill.").split(REREAD_END)
    ['Lighthouses. A fire on a hill.', 'Lighthouses. A fire on a hill.']
    """
    return document + REREAD_END + document[:REREAD_CHARS]


def cut_to_window(tokenizer, context_window: int | None, text: str, max_new_tokens: int,
                  allowance: int = TEMPLATE_ALLOWANCE) -> tuple[str, bool]:
    """(text, cut?): `text` cut by tokens so that `allowance` tokens around it and `max_new_tokens` still fit the
    window. Without a local tokenizer or a known window (a server that does not say) the text goes whole."""
    if tokenizer is None or context_window is None:
        return text, False
    room = max(16, context_window - max_new_tokens - allowance)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return (text, False) if len(ids) <= room else (tokenizer.decode(ids[:room]), True)


def fit_to_window(source, text: str, max_new_tokens: int, allowance: int = TEMPLATE_ALLOWANCE) -> tuple[str, bool]:
    """(text, cut?): `text` cut by `source`'s tokenizer so a chat request with it leaves room for `max_new_tokens`;
    a source without a local tokenizer that counts tokens itself (`encode`: a server's /tokenize) by that count."""
    tokenizer, window = getattr(source, "tokenizer", None), source.info.context_window
    if tokenizer is None and window and callable(getattr(source, "encode", None)):
        return cut_by_count(source.encode, window, text, max_new_tokens, allowance)
    return cut_to_window(tokenizer, window, text, max_new_tokens, allowance)


def cut_by_count(encode, context_window: int, text: str, max_new_tokens: int,
                 allowance: int = TEMPLATE_ALLOWANCE) -> tuple[str, bool]:
    """(text, cut?): `text` cut by characters until `encode(text)` (token ids, counted where the text is read: a
    server) leaves `allowance` and `max_new_tokens` room in the window: each cut in proportion to the excess, a
    little more, then counted again.

    >>> words = lambda text: text.split()   # a word a token
    >>> text, cut = cut_by_count(words, 64, "lorem ipsum " * 100, 8, allowance=16)
    >>> cut, len(words(text)) <= 64 - 8 - 16, len(words(text)) > 30
    (True, True, True)
    >>> cut_by_count(words, 64, "short", 8, allowance=16)
    ('short', False)
    """
    room = max(16, context_window - max_new_tokens - allowance)
    count, cut = len(encode(text)), False
    while count > room and len(text) > 1:
        text, cut = text[:max(1, int(len(text) * room / count * 0.97))], True
        count = len(encode(text))
    return text, cut


def long_prompt(tokenizer, context_window: int | None, max_new_tokens: int,
                document: str | None = None) -> tuple[str, bool]:
    """(instruction + document, whether the document was cut by tokens to fit the context window)."""
    document = document or long_document()
    instruction = 0 if tokenizer is None else len(tokenizer(SUMMARIZE_INSTRUCTION, add_special_tokens=False)["input_ids"])
    text, cut = cut_to_window(tokenizer, context_window, document, max_new_tokens, TEMPLATE_ALLOWANCE + instruction)
    return SUMMARIZE_INSTRUCTION + text, cut
