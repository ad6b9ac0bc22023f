"""The prompts the experiments, the lesson and the Serve tab share: a short question and a long document.

    long_document()                                    # assets/long_document.txt (~800 SmolLM2 tokens)
    text, cut = long_prompt(tokenizer, 2048, 48)       # the summarize instruction + the document, cut to fit

The document is self-written; a model with a small context window gets it cut by tokens, and says so.
"""
from __future__ import annotations

from pathlib import Path

LONG_DOCUMENT_PATH = Path(__file__).resolve().parents[1] / "assets" / "long_document.txt"
SHORT_QUESTION = "What is the capital of France?"
SUMMARIZE_INSTRUCTION = "Summarize the following document in three sentences.\n\n"
TEMPLATE_ALLOWANCE = 64  # tokens kept free for the chat template around the document


def long_document() -> str:
    """The shipped summarization text (assets/long_document.txt, self-written, ~800 SmolLM2 tokens)."""
    return LONG_DOCUMENT_PATH.read_text(encoding="utf-8")


def long_prompt(tokenizer, context_window: int | None, max_new_tokens: int,
                document: str | None = None) -> tuple[str, bool]:
    """(instruction + document, whether the document was cut by tokens to fit the context window).

    Without a local tokenizer or a known window (a server that does not say) the document goes whole.
    """
    document = document or long_document()
    if tokenizer is None or context_window is None:
        return SUMMARIZE_INSTRUCTION + document, False
    room = max(16, context_window - max_new_tokens - TEMPLATE_ALLOWANCE
               - len(tokenizer(SUMMARIZE_INSTRUCTION, add_special_tokens=False)["input_ids"]))
    ids = tokenizer(document, add_special_tokens=False)["input_ids"]
    if len(ids) <= room:
        return SUMMARIZE_INSTRUCTION + document, False
    return SUMMARIZE_INSTRUCTION + tokenizer.decode(ids[:room]), True
