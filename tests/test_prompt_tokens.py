"""The Tokens tab's content: the typed and the templated prompt, in the model's tokenizer and cl100k_base."""
from __future__ import annotations

import pytest

from playground.config import GenerationSettings
from playground.tokens.prompt import prompt_tokens

FRANCE = "What is the capital of France?"


@pytest.mark.parametrize("chat", [True, False])
def test_chips_show_the_ids_the_model_reads(tiny_engine, chat):
    view = prompt_tokens(tiny_engine, FRANCE, GenerationSettings(chat=chat))
    assert "the model's ids match these chips" in view.summary
    assert view.summary.splitlines()[0].split(" · ")[1] == "cl100k_base: 6 words → 7 tokens (1.17 tokens/word)"
    assert ("&lt;|im_start|&gt;" in view.html) is chat   # the template's markers, escaped
    assert view.html.count('class="tok-title"') == 4     # (typed, read) x (model, cl100k_base)


def test_a_prompt_the_engine_refuses_raises_value_error(tiny_engine):
    with pytest.raises(ValueError, match="prompt is empty"):
        prompt_tokens(tiny_engine, "  ", GenerationSettings())
