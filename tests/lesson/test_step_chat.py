"""Lesson step 8 on the tiny model (ONNX Runtime, our batching): four turns of a chat find their history in the
prefix cache; the same turns with the reasoning template are a template rewrite at the previous turn's empty
<think> block; the takeaway, the ribbons and the handout say so in the runs' own figures."""
from __future__ import annotations

import html
import re
import threading

import pytest

from playground.lesson import STEPS, Lesson
from playground.lesson.handout import number_cell, render_handout
from playground.lesson.steps_chat import CHAT_TITLE, TEMPLATE_NAMES, chat_sentence


@pytest.fixture(scope="module")
def eight(tiny_onnx_engine):
    lesson = Lesson(tiny_onnx_engine)
    lesson.run(8)
    return lesson


def test_each_later_turn_finds_its_whole_history_up_to_its_last_full_block(eight):
    r = eight.results[8]
    n = r.numbers
    assert not r.cancelled and r.title == CHAT_TITLE == STEPS[8].title and n["turns"] == 4
    assert n["causes"] == ["new conversation", "no miss", "no miss", "no miss"] and n["miss"] is None
    prompts, cached, answers = n["prompt_tokens"], n["cached_tokens"], n["answer_tokens"]
    assert cached[0] == 0
    for t in range(1, 4):   # the previous turn's prompt and answer, less its last token (never fed), in full blocks
        assert cached[t] >= 16 * ((prompts[t - 1] + answers[t - 1] - 1) // 16) > 0, (t, n)
    for prefix in ("", "rewritten_"):   # the ribbon covers each prompt once
        assert [c + r + w for c, r, w in zip(n[f"{prefix}cached_tokens"], n[f"{prefix}recomputed_tokens"],
                                             n[f"{prefix}new_tokens"])] == n[f"{prefix}prompt_tokens"]
    assert n["cached_share"] == sum(cached[1:]) / sum(prompts[1:])


def test_the_reasoning_template_rewrites_each_answer_and_the_miss_is_named(eight):
    r = eight.results[8]
    n = r.numbers
    assert n["rewritten_causes"] == ["new conversation"] + ["template rewrite"] * 3
    miss = n["rewritten_miss"]
    assert miss["turn"] == 2 and miss["cause"] == "template rewrite"
    # the tokens computed: the prompt less the full blocks of the history it shares (up to the difference)
    assert miss["recomputed"] == miss["prompt_tokens"] - 16 * (miss["position"] // 16)
    assert n["rewritten_cached_share"] < n["cached_share"]
    said = re.findall(r"tok-c5'>([^<]*)</span>", r.html)   # the cache's tokens from the difference on
    assert html.unescape("".join(said)).startswith("<think>"), r.html
    assert "“template rewrite”" in r.html and "<b>Chat template</b>" in r.html


def test_the_takeaway_is_computed_from_the_figures(eight):
    r = eight.results[8]
    n = r.numbers
    assert r.takeaway == chat_sentence(n) and len(r.takeaway.split()) <= 35
    assert f"found {round(100 * n['cached_share'])}% of their prompt tokens" in r.takeaway
    assert f"cut that to {round(100 * n['rewritten_cached_share'])}%" in r.takeaway
    assert f"“template rewrite” at turn 2's token {n['rewritten_miss']['position']}" in r.takeaway


def test_the_ribbons_are_one_figure_of_two_panels_on_one_scale(eight):
    r = eight.results[8]
    n = r.numbers
    assert list(r.figures) == ["ribbons"]
    layout = r.figures["ribbons"].layout
    assert [a.text for a in layout.annotations] == list(TEMPLATE_NAMES.values())
    longest = max(n["prompt_tokens"] + n["rewritten_prompt_tokens"])
    assert tuple(layout.xaxis.range) == tuple(layout.xaxis2.range) == (-0.5, longest - 0.5)
    data = r.figures["ribbons"].data
    assert [t.showlegend for t in data if t.type == "heatmap"] == [False, False]
    legend = [t.name for t in data if t.showlegend is not False]
    assert legend == ["found in the cache", "unchanged, computed again", "new this turn", "first difference"]
    marks = [t for t in data if t.name == "first difference"]   # only the rewriting run parted from the cache
    assert len(marks) == 1 and marks[0].xaxis == "x2"
    assert list(marks[0].x) == n["rewritten_first_difference"][1:] and n["rewritten_first_difference"][0] is None
    assert marks[0].x[0] == n["rewritten_miss"]["position"]


def test_the_handout_carries_step_eight(eight):
    page = render_handout(eight)
    assert f"<h2>8. {html.escape(CHAT_TITLE)}</h2>" in page
    assert f"<p class='takeaway'>{html.escape(eight.results[8].takeaway)}</p>" in page
    for key, value in eight.results[8].numbers.items():
        assert f"<td>{key}</td><td>{html.escape(number_cell(value))}</td>" in page
    assert page.count("not run") == 7 and "plotly.js" in page


def test_without_our_batching_step_eight_says_what_is_missing(tiny_engine):
    r = Lesson(tiny_engine).run(8)   # the tiny torch model: no prefix cache of ours to drive
    assert "pick onnx-gguf4" in r.takeaway and not r.figures and r.notes and r.title == CHAT_TITLE


def test_step_eight_progress_names_each_turn_and_a_stopped_step_is_not_kept(tiny_onnx_engine):
    seen = []
    Lesson(tiny_onnx_engine).run(8, lambda fraction, message: seen.append((fraction, message)))
    assert seen[-1] == (1.0, "done") and [f for f, _ in seen] == sorted(f for f, _ in seen)
    named = {m.split(": ")[0] for _, m in seen[:-1]}
    assert {f"{t} template, turn {k} ({i} of 8)" for i, (t, k) in enumerate(
        [(t, k) for t in TEMPLATE_NAMES for k in range(1, 5)], 1)} == named, named
    lesson, cancel = Lesson(tiny_onnx_engine), threading.Event()
    stopped = lesson.run(8, lambda f, m: f > 0.3 and cancel.set(), cancel)
    assert stopped.cancelled and 8 not in lesson.results
