"""The Serve tab's words and charts on hand-made runs: the status after Stop (only finished requests counted
as finished; a run stopped before it began says so and claims no missing KV figure), what batching costs as
well as what it buys (the short requests' TPOT and E2E), a run that came out the other way, and the A and B
Gantt charts on one x-range."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from playground.lesson.steps_scale import batching_cost
from playground.serve.records import WorkloadResult
from playground.serve.summary import compare
from playground.serve.workload import Request, Workload
from playground.serve.records import RequestRecord
from playground.trace import StopReason
from playground.serve.run import not_run
from playground.ui.serve_views import OUTPUTS, pool_markdown, status_text, view
from tests.serve.test_serve_workload import record


def result(scheduler: str, records, **kw) -> WorkloadResult:
    return WorkloadResult(scheduler, scheduler, "fake source", Workload(tuple(r.request for r in records)), records,
                          **kw)


def job(*results) -> SimpleNamespace:
    return SimpleNamespace(error=None, message="", results=list(results), slo=(None, None))


# --- finding: after Stop, "16/16 finished" for a run that was cancelled, and B "missing" a KV figure

def test_after_stop_only_finished_requests_count_and_b_says_it_did_not_run():
    a = result("one-at-a-time", [record(0, "short", 0.0, 0.0, [0.1, 0.2]), record(1, "short", 0.0, 0.2, [0.3]),
                                 record(2, "short", 0.0, 0.3, [0.4], stop=StopReason.CANCELLED),
                                 RequestRecord(Request(3, "short", "p", 8, 0.1), 10, stop_reason=StopReason.CANCELLED)],
               done=True, cancelled=True, started=time.perf_counter() - 1, elapsed=0.5)
    b = result("batching", [RequestRecord(Request(i, "short", "p", 8, 0.0), 10) for i in range(4)])
    waiting = status_text(job(a, b))
    assert "**B** = batching on fake source: waiting for A to end" in waiting
    assert "known once it runs" in pool_markdown([a, b]).split("**B**")[1]
    not_run(b)
    text = status_text(job(a, b))
    assert "cancelled · 2/4 finished · 0 running · 0 waiting · 2 cancelled · 4 tokens" in text
    assert "**B** = batching on fake source: did not run: stopped before it began" in text
    assert "4/4 finished" not in text and "0 tokens" not in text
    pool = pool_markdown([a, b])
    assert "missing" not in pool.split("**B**")[1] and "it did not run" in pool


# --- finding: the headline names what batching buys, never what it costs

def two_runs(batched_tpot: float, batched_tokens: int):
    """A: one at a time (a long request, then two short ones, 0.1 s a token); B: batched, the short ones at
    `batched_tpot` s a token, `batched_tokens` tokens each."""
    alone = [record(0, "long", 0.0, 0.0, [1.0, 1.1, 1.2], prompt_tokens=900),
             record(1, "short", 0.1, 1.2, [1.3, 1.4, 1.5]), record(2, "short", 0.2, 1.5, [1.6, 1.7, 1.8])]
    steps = [0.4 + batched_tpot * i for i in range(batched_tokens)]
    batched = [record(0, "long", 0.0, 0.0, [1.0, 1.1, 1.2], prompt_tokens=900),
               record(1, "short", 0.1, 0.1, steps), record(2, "short", 0.2, 0.2, steps)]
    return result("one-at-a-time", alone, done=True), result("batching", batched, done=True)


def test_the_headline_says_what_batching_cost_in_its_own_numbers():
    a, b = two_runs(batched_tpot=0.3, batched_tokens=8)   # more tokens/s, each short token 3x slower
    text = compare(a, b, named=True)
    assert ("B served the same 3 requests with more output tokens/s than A: 7.6 against 5.0 (1.52×; as expected "
            "(batching should give more output tokens/s: a step carries several requests))") in text
    assert ("What it cost: the short requests' TPOT p50 was 0.300 s on B against 0.100 s on A (3.0× longer per "
            "token), and their E2E p50 2.35 s against 1.50 s") in text
    step6 = batching_cost(a, b, {})
    assert "The cost: a question's tokens came every 300 ms (TPOT p50) against 100 ms alone (3.0× slower)" in step6
    assert "its whole answer in 2.3 s against 1.5 s" in step6 and "Throughput: 7.6 against 5.0 tokens/s." in step6


def test_a_run_that_came_out_the_other_way_says_so():
    a, b = two_runs(batched_tpot=2.0, batched_tokens=3)   # fewer tokens/s batched
    text = compare(a, b, named=True)
    assert ("with fewer output tokens/s than A: 2.0 against 5.0 (0.41×; this run came out the other way (expected: "
            "batching should give more output tokens/s") in text
    assert "Throughput came out lower batched on this run: 2.0 against 5.0 tokens/s." in batching_cost(a, b, {})


def test_a_cheaper_token_is_not_called_a_cost():
    a, b = two_runs(batched_tpot=0.05, batched_tokens=3)
    assert "Per token it cost nothing here" in compare(a, b, named=True)
    assert "No cost per token here" in batching_cost(a, b, {})


# --- finding: A and B's Gantt charts side by side on different x-ranges

def test_a_and_b_gantt_charts_share_one_x_range():
    a, b = two_runs(batched_tpot=0.3, batched_tokens=8)   # A ends at 1.8 s, B at 2.5 s
    out = SimpleNamespace(**{name: name for name in OUTPUTS})
    figures = view(job(a, b), out, charts=False)
    ranges = [list(figures[f"gantt_{side}"].layout.xaxis.range) for side in "ab"]
    assert ranges[0] == ranges[1] and ranges[0][0] == 0 and ranges[0][1] == pytest.approx(2.5 * 1.03)


def test_every_time_chart_of_a_and_b_shares_the_gantts_x_range():
    """Throughput, KV in use, the KV map and the ITL chart sat on each run's own axis (A to 26 s, B to 17 s):
    the faster run looked as long as the slower one."""
    a, b = two_runs(batched_tpot=0.3, batched_tokens=8)
    out = SimpleNamespace(**{name: name for name in OUTPUTS})
    figures = view(job(a, b), out, charts=True)
    gantt = list(figures["gantt_a"].layout.xaxis.range)
    for name in ("throughput", "kv", "kv_map", "itl"):
        for side in "ab":
            assert list(figures[f"{name}_{side}"].layout.xaxis.range) == gantt, (name, side)
