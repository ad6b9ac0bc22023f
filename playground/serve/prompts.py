"""Prompts of a workload: the lesson's two classes, a prompt cut to a source's window, the cap on tokens.

    default_classes(engine, 48, {"short": 0.8, "long": 0.2})   # SHORT_QUESTION and the long document
    fit_to_window(engine, text, 48)                            # (text cut by tokens, whether it was cut)
    check_tokens(workload, lambda p: len(engine.prompt_ids(p, settings)[1]))   # ValueError above the cap

Left out: counting tokens without a tokenizer (a remote source without one is not capped here).
"""
from __future__ import annotations

from dataclasses import replace

from .workload import RequestClass, Workload

MAX_WORKLOAD_TOKENS = 60_000  # prompt + new tokens over the whole workload (64 long documents is ~57k)


def default_classes(source=None, max_new_tokens: int = 48, mix: dict[str, float] | None = None) -> list[RequestClass]:
    """The lesson's two requests (the short-vs-long experiment's): a one-line question and a document to
    summarize, cut to the source's context window when it has a tokenizer and says its window."""
    from ..prompts import SHORT_QUESTION, long_prompt
    tokenizer = getattr(source, "tokenizer", None)
    window = source.info.context_window if source is not None else None
    document, _ = long_prompt(tokenizer, window, max_new_tokens)
    classes = [RequestClass("short", SHORT_QUESTION, max_new_tokens, 0.8),
               RequestClass("long", document, max_new_tokens, 0.2)]
    if mix:
        unknown = set(mix) - {c.name for c in classes}
        if unknown:
            raise ValueError(f"mix names {', '.join(sorted(unknown))}: the classes are short and long")
        classes = [replace(c, share=mix.get(c.name, 0.0)) for c in classes]
    return classes


def fit_to_window(source, text: str, max_new_tokens: int, allowance: int = 64) -> tuple[str, bool]:
    """(text, cut?): `text` cut by tokens so a chat request with it leaves room for `max_new_tokens`."""
    tokenizer, window = getattr(source, "tokenizer", None), source.info.context_window
    if tokenizer is None or window is None:
        return text, False
    room = max(16, window - max_new_tokens - allowance)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return (text, False) if len(ids) <= room else (tokenizer.decode(ids[:room]), True)


def total_tokens(workload: Workload, count_prompt) -> int:
    """Prompt + new tokens over the workload; `count_prompt(prompt) -> int` (the source's tokenizer; a request's
    exact ids, where it has them, count as they are)."""
    counts = {p: count_prompt(p) for p in {r.prompt for r in workload.requests if r.prompt_ids is None}}
    return sum((counts[r.prompt] if r.prompt_ids is None else len(r.prompt_ids)) + r.max_new_tokens
               for r in workload.requests)


def check_tokens(workload: Workload, count_prompt, limit: int = MAX_WORKLOAD_TOKENS) -> int:
    total = total_tokens(workload, count_prompt)
    if total > limit:
        raise ValueError(f"the workload is {total:,} tokens (prompts + new tokens); the limit is {limit:,}: "
                         "fewer requests, a smaller share of long ones, or fewer new tokens")
    return total
