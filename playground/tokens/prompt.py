"""What the model reads, token by token: the prompt as typed and as templated, in two tokenizers.

`prompt_tokens(engine, prompt, settings)` shows the typed prompt and the chat-templated text the
engine actually feeds the model (`engine.prompt_ids`), each with the model's own tokenizer and
OpenAI's cl100k_base side by side, and checks that the chips' token ids are the ids the model gets.

Example:
    >>> view = prompt_tokens(tiny_engine, "What is the capital of France?", GenerationSettings())
    >>> print(view.summary.splitlines()[0].split(" · ")[1])
    cl100k_base: 6 words → 7 tokens (1.17 tokens/word)

Left out: gradio (playground/ui/ lays the HTML out), the figure (charts/tokens.py draws `typed`, and
`templated` apart) and tokenizers
other than these two.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from ..config import GenerationSettings
from .chips import render_chips_html
from .compare import Comparison, compare
from .views import hf_view, tiktoken_view


@dataclass(frozen=True)
class PromptTokens:
    summary: str       # Markdown: counts per tokenizer, for the typed and the templated prompt
    html: str          # chips, one block per (text, tokenizer)
    read: Comparison   # the tokenizers on the templated text
    typed: Comparison  # the tokenizers on the prompt as typed (charts/tokens.py compares these)
    templated: int | None = None   # the ids the model gets with the chat template applied; None: raw prompt


def prompt_tokens(engine, prompt: str, settings: GenerationSettings) -> PromptTokens:
    """Raises ValueError on a prompt the engine refuses (empty, too long for the context window)."""
    templated, ids = engine.prompt_ids(prompt, settings)
    tokenizer = engine.tokenizer   # None: a server whose tokenizer is not here (its ids still count)
    model_view = hf_view(tokenizer, name=f"model ({engine.info.model})") if tokenizer is not None else None
    views = [v for v in (model_view, tiktoken_view()) if v is not None]
    typed = compare(prompt, views)
    read = compare(templated, views, special_tokens=True)
    read_ids = [s.token_id for s in read.spans[model_view.name]] if model_view else None
    match = ("the model's ids match these chips" if read_ids == ids else
             f"the source counts {len(ids)} tokens; its tokenizer is not here, so no chips show them"
             if read_ids is None else f"note: the engine feeds {len(ids)} ids; the chips show {len(read_ids)}")
    summary = "\n\n".join([f"**As typed**: {' · '.join(typed.summary)}",
                           f"**As the model reads it** ({'chat template' if settings.chat else 'raw'}): "
                           f"{' · '.join(read.summary)} — {match}", *typed.notes])
    blocks = []
    for title, comparison in (("As typed", typed), ("As the model reads it", read)):
        for name, spans in comparison.spans.items():
            blocks.append(f'<h4 class="tok-title">{html.escape(title)} · {html.escape(name)} · '
                          f"{len(spans):,} tokens</h4>{render_chips_html(spans, text=comparison.text)}")
    return PromptTokens(summary, "".join(blocks), read, typed, len(ids) if settings.chat else None)
