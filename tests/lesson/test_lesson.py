"""Lesson mode: the eight steps on the tiny model, their takeaways built from their own numbers, the handout."""
from __future__ import annotations

import html
import json
import threading

import pytest

from playground.charts.run import LABEL_PX, NOMINAL_WIDTH_PX
from playground.lesson import STEPS, Lesson
from playground.lesson.handout import number_cell, write_handout
from playground.run_view import format_bytes, format_seconds


@pytest.fixture(scope="module")
def lesson(tiny_engine):
    lesson = Lesson(tiny_engine)
    lesson.run_all()
    return lesson


@pytest.mark.slow
def test_every_step_runs_and_states_a_takeaway(lesson):
    assert sorted(lesson.results) == list(STEPS) == [1, 2, 3, 4, 5, 6, 7, 8]
    for n, r in lesson.results.items():
        assert r.number == n and r.title == STEPS[n].title and len(r.takeaway) > 40 and not r.cancelled
        assert len(r.takeaway.split()) <= 35, (n, r.takeaway)   # a room reads it at a glance
        assert "slide" not in r.takeaway and " a 8" not in r.takeaway   # no slide in this lesson; "an 845-token"


@pytest.mark.slow
def test_a_newcomer_gets_each_term_explained(lesson):
    one, three, four = (lesson.results[n] for n in (1, 3, 4))
    assert "cl100k_base, OpenAI's GPT-4 tokenizer" in one.takeaway
    assert "(TTFT, time to first token)" in three.takeaway
    assert "<b>KV cache</b>: the keys and values" in four.html


@pytest.mark.slow
def test_takeaways_quote_the_runs_own_numbers(lesson, tiny_engine):
    trace = lesson.shared["trace"]
    m = trace.metrics()
    one, two, three = (lesson.results[n] for n in (1, 2, 3))
    assert one.numbers["model_tokens"] == len(tiny_engine.encode("Serving LLMs is not like serving web apps."))
    assert f"8 words → {one.numbers['model_tokens']} tokens" in one.takeaway
    assert f"This {m.output_tokens}-token answer took {len(trace.steps)} prediction steps" in two.takeaway
    assert three.numbers["ttft_s"] == m.ttft and three.numbers["tpot_s"] == m.tpot
    assert f"came after {format_seconds(m.ttft)} (TTFT" in three.takeaway
    assert f"{m.prompt_tokens} prompt tokens" in three.takeaway and f"averaged {format_seconds(m.tpot)}." in three.takeaway
    four = lesson.results[4]
    kv = [s.kv_bytes for s in trace.steps]
    assert four.numbers["kv_per_token"] == (kv[-1] - kv[0]) / (len(kv) - 1) and four.numbers["identical"]
    assert four.numbers["same_answer"] and four.numbers["shared_tokens"] > 200
    # its growth and the run without it, one figure: the takeaway names both
    labels = [a.text.replace("<br>", " ") for a in four.figures["kv"].layout.annotations]
    assert list(four.figures) == ["kv"] and labels[0].startswith("Its size per step: ") and \
        labels[1].startswith("Step latency: ")
    assert f"{format_bytes(round(four.numbers['kv_per_token']))} per token" in labels[0]   # the takeaway's figure, drawn
    five = lesson.results[5]
    low, mid, high = five.numbers["contract_prefill_s"]
    assert 0 < low <= mid <= high and f"{format_seconds(mid)} of prefill (extrapolated)" in five.takeaway
    assert any(f"{format_seconds(low)} to {format_seconds(high)}" in n and "context window" in n for n in five.notes)
    six = lesson.results[6]
    n = six.numbers   # the question waits for what is left of the document's run after it arrived (50 ms in)
    assert n["short_wait_s"] >= max(0.0, n["long_e2e_s"] - 0.05) - 0.01
    assert n["short_ttft_seen_s"] == pytest.approx(n["short_wait_s"] + n["short_ttft_alone_s"]) and n["short_ttft_seen_s"] > 0
    seen = n["short_ttft_seen_all_s"]
    assert len(seen) == 3 and seen[0] == n["short_ttft_seen_s"] and min(seen) > 0
    assert f"Its first token took {format_seconds(seen[0])}" in six.takeaway
    assert f"within {format_seconds(max(n['short_ttft_batched_all_s']))}" in six.takeaway
    assert list(six.figures) == ["gantt"] and "one at a time" in six.html   # the Serve tab's chart and sentence
    # the cure on the same engine: transformers' manager batches the tiny torch model; every question sooner
    assert n["batched_scheduler"] == "batching-torch"
    # both runs in one figure, one panel each on one time axis: the takeaway names both
    gantt = six.figures["gantt"].layout
    assert [a.text for a in gantt.annotations] == ["One at a time", "With continuous batching"]
    assert gantt.xaxis.range == gantt.xaxis2.range and gantt.xaxis.range is not None
    batched = n["short_ttft_batched_all_s"]   # how much sooner is a speed claim: the bundled model's, not tiny's
    assert len(batched) == 3 and min(batched) > 0 and "continuous batching" in six.html


@pytest.mark.slow
def test_step_seven_measures_the_prefix_cache_and_preemption_in_its_own_numbers(tiny_onnx_engine):
    from playground.lesson.steps_scale import memory_sentence
    seven = Lesson(tiny_onnx_engine).run(7)
    n = seven.numbers
    assert not seven.cancelled and seven.takeaway == memory_sentence(n) and len(seven.takeaway.split()) <= 35
    cold, warm = n["ttft_p50_s"]
    assert n["ttft_ratio"] == pytest.approx(warm / cold) and cold > 0 and warm > 0
    said = (f"cut TTFT p50 from {format_seconds(cold)} to {format_seconds(warm)}" if warm < cold else
            f"saved no TTFT here ({format_seconds(warm)} against {format_seconds(cold)})")
    assert f"Caching a shared {n['shared_tokens']}-token prompt {said}." in seven.takeaway
    assert 2 * 16 <= n["shared_tokens"] < min(n["prompt_tokens"]) and len(n["prompt_tokens"]) == 4
    # every question after the first found the shared blocks: whole blocks, never its last token
    assert 0 < n["cached_tokens"] < n["looked_up_tokens"] == sum(n["prompt_tokens"]) and n["cached_tokens"] % 16 == 0
    assert n["cached_tokens"] >= 3 * (n["shared_tokens"] // 16 * 16 - 16)
    assert f"{n['cached_tokens']:,} of {n['looked_up_tokens']:,} prompt tokens" in seven.html
    assert n["kv_budget"] < n["demand_positions"] and n["preemptions"] > 0
    assert (f"With {n['kv_budget']} of the {n['demand_positions']} KV positions needed, {n['preemptions']} "
            "preemption") in seven.takeaway
    assert n["completed"] == n["requests"] == 4 and "all 4 requests still finished" in seven.takeaway
    assert n["identical"] == 4   # the tiny model's fp32 graph: a recompute gives the very same tokens
    assert list(seven.figures) == ["runs"] and "<b>Preemption</b>" in seven.html   # the three runs, one figure
    runs = seven.figures["runs"].layout
    # each label on lines that fit its third of the width at presenter mode's 18 px: side by side, they ran together
    assert [a.text.replace("<br>", " ") for a in runs.annotations] == [
        "Without prefix cache", "With prefix cache", f"KV budget: {n['kv_budget']} positions"]
    plot_px = NOMINAL_WIDTH_PX - LABEL_PX * max(map(len, runs.yaxis.ticktext)) - 24   # the first panel's row labels
    for note, axis in zip(runs.annotations, (runs.xaxis, runs.xaxis2, runs.xaxis3)):   # each line within its panel
        assert all(len(line) * LABEL_PX <= (axis.domain[1] - axis.domain[0]) * plot_px for line in note.text.split("<br>"))
    assert runs.xaxis.range == runs.xaxis2.range and runs.xaxis3.range is None   # the budget's run: its own axis


@pytest.mark.slow
def test_step_seven_says_what_is_missing_without_our_batching(lesson):
    seven = lesson.results[7]   # the tiny torch model: no ONNX batching, no prefix cache to drive
    assert "pick onnx-gguf4" in seven.takeaway and not seven.figures and seven.notes


@pytest.mark.slow
def test_the_handout_carries_the_same_numbers(lesson, tmp_path):
    page = write_handout(lesson, tmp_path).read_text()
    assert page.count("<h2>") == 8 and page.count("plotly.js") >= 1
    for r in lesson.results.values():
        assert f"<p class='takeaway'>{html.escape(r.takeaway)}</p>" in page
        for key, value in r.numbers.items():
            assert f"<td>{key}</td><td>{html.escape(number_cell(value))}</td>" in page
    assert "<script>alert" not in page


@pytest.mark.slow
def test_the_handout_cli_runs_headless(tmp_path, capsys, monkeypatch):
    from playground.lesson.__main__ import main
    monkeypatch.setenv("PLAYGROUND_MODEL", "tiny")   # settings from the environment, as the app reads them
    assert main(["--out", str(tmp_path), "--backend", "torch"]) == 0
    out = capsys.readouterr().out
    page = (tmp_path / "lesson.html").read_text()
    assert out.count("\n") >= 9 and len(page) > 1_000_000   # plotly.js inlined
    assert "<p>tiny-random-llama on" in page   # not the bundled SmolLM2


def test_a_stopped_step_is_not_kept(tiny_engine):
    lesson, cancel = Lesson(tiny_engine), threading.Event()
    result = lesson.run(4, progress=lambda f, m: f > 0.2 and cancel.set(), cancel=cancel)
    assert result.cancelled and 4 not in lesson.results
    with pytest.raises(ValueError, match="steps 1-8"):
        lesson.run(9)


@pytest.mark.slow
def test_numbers_are_json_ready(lesson):
    json.dumps({n: r.numbers for n, r in lesson.results.items()})


@pytest.mark.slow
def test_step_six_names_a_request_that_failed(tiny_engine):
    class Failing:   # the tiny engine, except that the long document is refused (as a server might)
        def __init__(self, engine):
            self._engine = engine

        def __getattr__(self, name):
            return getattr(self._engine, name)

        def run(self, prompt, settings):
            if len(prompt) > 500:
                raise ValueError("the server refused the document (test)")
            return self._engine.run(prompt, settings)
    result = Lesson(Failing(tiny_engine)).run(6)
    assert "Request 0 (long) produced no token" in result.takeaway and "refused the document" in result.takeaway


def test_step_one_rule_of_thumb_adds_up(tiny_engine):
    """The sentence's own numbers agree: N words at R tokens a word is N × R, as written."""
    import re
    result = Lesson(tiny_engine).run(1)
    text = result.takeaway
    words = int(re.search(r"(\d+) words →", text).group(1))
    rate = float(re.search(r"\(([\d.]+) tokens a word\)", text).group(1))
    said = re.search(r"tokens a word\) says (\d+(?:\.\d+)?)", text).group(1)
    decimals = len(said.partition(".")[2])
    assert float(said) == round(words * rate, decimals), text
    assert result.numbers["rule_of_thumb"] == pytest.approx(words * rate)


def quoted(text: str) -> list[str]:
    """The names a sentence quotes: “The” and “L” in 'the model gave “The” 15% and “L” 14%'."""
    import re
    return re.findall(r"“([^”]*)”", text)


def test_every_label_a_takeaway_names_is_labelled_in_its_chart(tiny_engine):
    """Step 2 names the model's two likeliest tokens; its top-k chart labels each bar (every tick drawn: a
    category axis left to itself skips labels when ten bars are crowded on a projector)."""
    from tests.helpers import doubtful_trace
    lesson = Lesson(tiny_engine)
    lesson.shared["trace"] = doubtful_trace(tiny_engine)
    result = lesson.run(2)
    names = quoted(result.takeaway)
    assert names == ["The", "L"], result.takeaway
    figure = result.figures["top_k"]
    axis = figure.layout.yaxis
    shown = [label.split("  (id ")[0] for label in axis.ticktext]
    assert list(axis.tickvals) == list(figure.data[0].y)   # one tick per bar
    assert len(shown) <= 5 and all(name in shown for name in names), (names, shown)
    assert figure.data[0].textposition == "outside"   # each value beside its bar, never over a neighbour


@pytest.mark.slow
def test_step_six_progress_names_each_run_and_says_100_percent_only_at_its_end(tiny_engine):
    """Step 6's progress said "100% · done" when its first run ended, then ran the second for seconds unnamed."""
    seen = []
    Lesson(tiny_engine).run(6, lambda fraction, message: seen.append((fraction, message)))
    *running, last = seen
    assert last == (1.0, "done") and [f for f, _ in seen] == sorted(f for f, _ in seen)
    first = [f for f, m in running if m.startswith("one at a time (1 of 2): ")]
    second = [f for f, m in running if m.startswith("continuous batching (2 of 2): ")]
    assert first and second and len(first) + len(second) == len(running), running
    assert max(first) <= 0.5 <= min(second)   # the first run's end is half the step, not all of it
