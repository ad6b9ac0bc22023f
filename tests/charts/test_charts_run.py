"""Run charts drawn from a real Trace of the tiny model: the traces each figure holds, and their values."""
from __future__ import annotations

import json

import pytest

from playground.charts.run import (TEMPLATE_JSON, kv_cache_spec, plot_kv_cache, plot_step_latency, plot_timeline,
                                   plot_top_k, run_specs, step_latency_spec, timeline_spec, top_k_spec, whole_json)
from playground.config import GenerationSettings

N = 9


@pytest.fixture(scope="module")
def trace(tiny_engine):
    return tiny_engine.generate("What is the capital of France?", GenerationSettings(max_new_tokens=N))


def test_timeline_has_one_prefill_bar_then_a_bar_per_decode_step(trace):
    fig = plot_timeline(trace)
    prefill, decode = fig.data
    assert (prefill.name, len(prefill.x), len(decode.x)) == ("prefill (TTFT)", 1, N - 1)
    assert prefill.x[0] == pytest.approx(trace.steps[0].time * 1e3)
    # each decode bar starts where the previous token became available and ends at its own time
    ends = [b + w for b, w in zip(decode.base, decode.x)]
    assert ends == pytest.approx([s.time * 1e3 for s in trace.steps[1:]])
    assert decode.base[0] == pytest.approx(prefill.x[0])


def test_a_long_timeline_labels_its_axis_in_seconds(trace):
    """A 20-s wait read "5k … 20k" on an axis titled in ms: each tick now carries its unit, seconds on a long span."""
    from dataclasses import replace
    waited = plot_timeline(replace(trace, queued=20.0)).layout.xaxis
    assert list(waited.ticktext[:3]) == ["0 s", "5 s", "10 s"] and all(t.endswith(" s") for t in waited.ticktext)
    assert waited.tickvals[-1] >= 20_000 + trace.steps[-1].time * 1e3 and "(ms)" not in waited.title.text
    short = plot_timeline(replace(trace, steps=[replace(s, time=s.time / 1e3) for s in trace.steps])).layout.xaxis
    assert all(t.endswith(" ms") for t in short.ticktext)   # a run under a second: in ms


def test_timeline_draws_the_wait_for_a_turn_and_the_passes_others_shared(trace):
    from dataclasses import replace
    steps = [replace(s, rows=3 if s.index in (2, 3) else 1) for s in trace.steps]
    waited = replace(trace, steps=steps, queued=0.25)
    wait, prefill, alone, shared = plot_timeline(waited).data
    assert (wait.name, wait.base[0], wait.x[0]) == ("waiting for a turn", 0.0, pytest.approx(250.0))
    assert prefill.base[0] == pytest.approx(250.0)   # the model's prefill keeps its own figure, after the wait
    assert prefill.x[0] == pytest.approx(trace.steps[0].time * 1e3)
    assert [d[0] for d in shared.customdata] == [2, 3] and {d[2] for d in shared.customdata} == {3}
    assert len(alone.x) == N - 3
    ends = sorted([b + w for b, w in zip(alone.base, alone.x)] + [b + w for b, w in zip(shared.base, shared.x)])
    assert ends == pytest.approx([250.0 + s.time * 1e3 for s in trace.steps[1:]])
    assert "arrived" in plot_timeline(waited).layout.xaxis.title.text


def test_latency_chart_separates_ttft_from_inter_token_latencies(trace):
    ttft, itl = plot_step_latency(trace).data
    assert ttft.y[0] == pytest.approx(trace.metrics().ttft * 1e3)
    assert list(itl.y) == pytest.approx([x * 1e3 for x in trace.metrics().itl])


def test_kv_measured_and_formula_lines_agree_for_the_tiny_model(trace):
    measured, formula = plot_kv_cache(trace).data
    assert measured.name == "measured" and formula.name.startswith("formula (estimate)")
    assert len(measured.y) == N
    assert list(measured.y) == pytest.approx(list(formula.y))
    assert list(measured.y) == sorted(measured.y)   # the cache only grows


@pytest.mark.parametrize("step", [0, 4, None])
def test_top_k_bars_for_the_selected_step(trace, step):
    chosen = trace.steps[-1 if step is None else step]
    bars, picked = plot_top_k(trace, step).data   # the candidates; the picked bar's legend entry (no bar)
    assert list(bars.x) == [c.prob for c in reversed(chosen.top)]
    assert picked.name == "picked token" and list(picked.x) == [None] and picked.marker.color == bars.marker.color[
        [c.token_id for c in reversed(chosen.top)].index(chosen.token_id)]
    assert f"step {chosen.index}" in plot_top_k(trace, step).layout.title.text


def test_labels_are_escaped_for_plotly(tiny_engine, trace):
    from dataclasses import replace
    odd = replace(trace, steps=[replace(trace.steps[0], text="<b>x</b>")] + trace.steps[1:])
    title = plot_top_k(odd, 0).layout.title.text
    assert "&lt;b&gt;" in title and "<b>" not in title


def test_latency_ticks_read_in_ms_on_a_log_axis(trace):
    """Plotly's own minor labels on a log axis read "2 … 5" (200 ms showed as "2"): named ticks instead."""
    axis = plot_step_latency(trace).layout.yaxis
    assert axis.type == "log" and all(t.endswith((" ms", " s")) for t in axis.ticktext)
    latencies = [s.latency * 1e3 for s in trace.steps]
    assert min(axis.tickvals) <= min(latencies) and max(axis.tickvals) >= max(latencies) / 2.5


def test_empty_trace_gives_a_hint_not_an_error():
    for fig in (plot_timeline(None), plot_step_latency(None), plot_kv_cache(None), plot_top_k(None)):
        assert not fig.data and "Generate" in fig.layout.annotations[0].text


@pytest.mark.subprocess
def test_charts_import_pandas_before_any_thread_draws():
    """Regression: plotly's lazy pandas import raced between two handler threads ("partially initialized
    module 'pandas'"); importing playground.charts must leave pandas fully imported."""
    import subprocess
    import sys
    code = "import sys, playground.charts; print(hasattr(sys.modules.get('pandas'), 'Series'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_labels_show_markup_and_quotes_as_text(trace):
    from dataclasses import replace

    from playground.trace import Candidate
    step = replace(trace.steps[0], text='"<b>&', top=(Candidate(1, "<a href='x'>", 0.5),))
    fig = plot_top_k(replace(trace, steps=[step]))
    assert "chose “\"&lt;b&gt;&amp;”" in fig.layout.title.text   # plotly decodes &lt; &gt; &amp;, not &quot;
    assert fig.data[0].y[0].startswith("&lt;a·href='x'&gt;")


def test_a_live_gantt_draws_a_request_whose_end_is_being_recorded():
    """A scheduler sets a record's stop reason before its end time; a live view drawing between the two draws its
    prefill up to now instead of failing."""
    from playground.charts.serve import _segments
    from playground.serve.records import RequestRecord, WorkloadResult
    from playground.serve.workload import Request, Workload
    from playground.trace import Phase, StopReason
    record = RequestRecord(Request(0, "short", "Hi", 4, 0.0), prompt_tokens=3, admitted=0.5,
                           stop_reason=StopReason.ERROR)
    result = WorkloadResult("a", "one at a time", "src", Workload((record.request,)), [record])
    segments = _segments(result, 2.0)
    assert segments["prefill pass"] == [("#0 short", 0.5, 2.0, "prefill (TTFT from admission): 1.500 s")]
    assert segments[Phase.DECODE] == []


def _figure_json(fig) -> dict:
    out = json.loads(fig.to_json())
    out["layout"].pop("template")
    return out


def _variants(trace):
    """Traces that take every branch of the four charts: plain, waited with shared passes, thinking, sampled,
    without measured KV bytes or top-k, empty."""
    from dataclasses import replace
    waited = replace(trace, steps=[replace(s, rows=3 if s.index in (2, 3) else 1) for s in trace.steps], queued=0.25)
    thinking = replace(trace, steps=[replace(s, thinking=s.index < 3) for s in trace.steps])
    sampled = replace(trace, settings=replace(trace.settings, temperature=0.8, top_k=5),
                      steps=[replace(s, top=[replace(c, sample_prob=c.prob / 2) for c in s.top]) for s in trace.steps])
    bare = replace(trace, kv_shape=None, steps=[replace(s, kv_bytes=None, top=None) for s in trace.steps])
    return [trace, waited, thinking, sampled, bare, replace(trace, steps=[]), None]


@pytest.mark.parametrize("chart", ["timeline", "latency", "kv", "topk"])
def test_each_spec_is_its_figures_json_without_the_template(trace, chart):
    """The page draws a run's specs (run_specs); everything else draws the figures: they must be the same."""
    specs = {"timeline": (timeline_spec, plot_timeline), "latency": (step_latency_spec, plot_step_latency),
             "kv": (kv_cache_spec, plot_kv_cache), "topk": (top_k_spec, plot_top_k)}
    spec, plot = specs[chart]
    for t in _variants(trace):
        assert json.loads(json.dumps(spec(t))) == _figure_json(plot(t))
    if chart == "topk":
        for step, limit in ((0, None), (3, 2), (None, 1)):
            assert json.loads(json.dumps(top_k_spec(trace, step, limit))) == _figure_json(plot_top_k(trace, step, limit))


def test_the_run_specs_and_template_rebuild_the_figures(trace):
    """The end line's specs plus the one template they share are the four figures whole."""
    import plotly.graph_objects as go
    for name, spec in run_specs(trace).items():
        whole = go.Figure(data=spec["data"], layout={**spec["layout"], "template": TEMPLATE_JSON})
        assert whole.layout.template.layout.paper_bgcolor == "white", name
        assert len(whole.data) == len(spec["data"]) > 0


def test_a_spec_made_whole_is_its_figures_json_template_included(trace):
    """/top_k answers with whole_json(top_k_spec(...)): the JSON of plot_top_k's figure, built without it."""
    for step in (0, 4, None):
        assert json.loads(json.dumps(whole_json(top_k_spec(trace, step)))) == json.loads(plot_top_k(trace, step).to_json())
