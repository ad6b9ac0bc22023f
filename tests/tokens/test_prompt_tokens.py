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


def test_the_chart_compares_the_prompt_as_typed_and_shows_the_template_apart(tiny_engine):
    """The tokenizers compared on the same text, as typed (another tokenizer reading the model's chat template
    splits its special tokens into pieces: 41 vs 63 for 23 "words" of template); the templated count is a bar
    apart, labelled, equal to the ids the model gets."""
    from playground.charts.tokens import plot_token_comparison
    view = prompt_tokens(tiny_engine, FRANCE, GenerationSettings(chat=True))
    fig = plot_token_comparison(view.typed, view.templated)
    typed, templated = fig.data[0], fig.data[1]
    assert list(typed.y) == list(view.typed.counts.values()) != list(view.read.counts.values())
    assert "6 words, as typed" in fig.layout.annotations[0].text
    _, ids = tiny_engine.prompt_ids(FRANCE, GenerationSettings(chat=True))
    assert list(templated.y) == [len(ids)] and "chat template" in templated.x[0]
    assert prompt_tokens(tiny_engine, FRANCE, GenerationSettings(chat=False)).templated is None


def test_the_counts_chart_keeps_its_labels_and_numbers_inside(tiny_engine):
    """Tick labels drawn level (rotated, they ran into the legend) and every count inside the plot's range
    (the tallest bar's "63" was cut at the top)."""
    from playground.charts.tokens import plot_token_comparison
    view = prompt_tokens(tiny_engine, FRANCE * 5, GenerationSettings(chat=True))
    fig = plot_token_comparison(view.typed, view.templated)
    tallest = max(max(t.y) for t in fig.data[:2])
    assert fig.layout.xaxis.tickangle == 0 and fig.layout.yaxis.range[1] >= tallest * 1.15
    assert all(t.cliponaxis is False and t.textposition == "outside" for t in fig.data[:2])
    assert fig.layout.legend.y > 1   # above the plots, away from the tick labels


@pytest.mark.slow
def test_the_counts_follow_typing(tiny_engine):
    """The Tokens tab answers each edit of its box (Gradio's input event), the latest pending one only."""
    from playground.ui import build_demo
    demo = build_demo(tiny_engine)
    box = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "tokens-prompt")
    tokens = next(d for d in demo.config["dependencies"] if d.get("api_name") == "tokens")
    assert [box._id, "input"] in [list(t) for t in tokens["targets"]] and tokens["trigger_mode"] == "always_last"
