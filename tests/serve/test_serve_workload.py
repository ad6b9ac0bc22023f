"""Workloads: class counts follow the shares, arrivals are seeded and replayable, bad input is refused by name;
summaries on hand-made timelines give the numbers worked out by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

from playground.config import GenerationSettings
from playground.prompts import SHORT_QUESTION, SUMMARIZE_INSTRUCTION
from playground.serve import RequestClass, Workload, check_tokens, default_classes, goodput, parse_mix, summarize
from playground.serve.records import RequestRecord, WorkloadResult
from playground.charts.serve import over_time
from playground.serve.summary import class_stats, compare, lesson, throughput
from playground.serve.workload import class_counts
from playground.trace import Step, Trace

SHORT, LONG = RequestClass("short", "q?", 8, 0.8), RequestClass("long", "doc " * 50, 8, 0.2)


@pytest.mark.parametrize("n, shares, expected", [(16, (0.8, 0.2), [13, 3]), (10, (0.5, 0.5), [5, 5]),
                                                 (1, (0.8, 0.2), [1, 0]), (64, (1, 0), [64, 0]), (7, (2, 1), [5, 2])])
def test_class_counts_follow_the_shares(n, shares, expected):
    classes = [RequestClass("a", "x", 1, shares[0]), RequestClass("b", "y", 1, shares[1])]
    assert class_counts(classes, n) == expected
    w = Workload.build(classes, n, seed=3)
    assert [r.cls for r in w.requests].count("a") == expected[0] and len(w.requests) == n


def test_the_same_seed_draws_the_same_workload_and_another_seed_another():
    a, b = (Workload.build([SHORT, LONG], 32, "poisson", 2.0, seed=7) for _ in range(2))
    c = Workload.build([SHORT, LONG], 32, "poisson", 2.0, seed=8)
    assert a == b and a != c
    assert Workload.from_dict(a.to_dict()) == a


def test_arrival_patterns():
    assert [r.arrival for r in Workload.build([SHORT], 4).requests] == [0.0] * 4
    assert [r.arrival for r in Workload.build([SHORT], 4, "fixed", 4.0).requests] == [0.0, 0.25, 0.5, 0.75]
    poisson = [r.arrival for r in Workload.build([SHORT], 64, "poisson", 2.0, seed=1).requests]
    gaps = np.diff(poisson)
    assert poisson[0] == 0.0 and (gaps > 0).all()
    assert 0.35 < gaps.mean() < 0.7   # exponential gaps of mean 1/rate = 0.5 s (63 draws)


def test_scaled_keeps_the_requests_and_redraws_the_arrivals():
    w = Workload.build([SHORT, LONG], 16, "poisson", 1.0, seed=2)
    fast = w.scaled(4.0)
    assert [r.cls for r in fast.requests] == [r.cls for r in w.requests] and fast.rate == 4.0
    assert fast.requests[-1].arrival < w.requests[-1].arrival


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "requests must be"), ({"n": 65}, "requests must be"), ({"n": 2.5}, "requests must be"),
    ({"n": True}, "requests must be"), ({"arrival": "burst"}, "arrival must be"),
    ({"arrival": "poisson", "rate": 0}, "rate must be"), ({"arrival": "fixed", "rate": float("nan")}, "rate must be"),
    ({"arrival": "poisson", "rate": None}, "rate must be"),
])
def test_bad_workloads_are_refused_by_name(kwargs, message):
    args = {"n": 4, "arrival": "all-at-once", "rate": None} | kwargs
    with pytest.raises(ValueError, match=message):
        Workload.build([SHORT], args["n"], args["arrival"], args["rate"])


@pytest.mark.parametrize("cls, message", [(RequestClass("e", "  ", 4, 1.0), "prompt is empty"),
                                          (RequestClass("m", "x", 0, 1.0), "max new tokens"),
                                          (RequestClass("s", "x", 4, -1.0), "share"),
                                          (RequestClass("z", "x", 4, 0.0), "add up to 0")])
def test_bad_classes_are_refused_by_name(cls, message):
    with pytest.raises(ValueError, match=message):
        Workload.build([cls], 4)


@pytest.mark.parametrize("text", ["short", "short:abc", "", ":0.5", "short:-1", "long:inf"])
def test_bad_mixes_are_refused(text):
    with pytest.raises(ValueError, match="mix"):
        parse_mix(text)


def test_default_classes_are_the_lessons_requests_cut_to_the_window(tiny_engine):
    short, long = default_classes(tiny_engine, 16, {"short": 0.5, "long": 0.5})
    assert short.prompt == SHORT_QUESTION and long.prompt.startswith(SUMMARIZE_INSTRUCTION)
    assert (short.share, long.share) == (0.5, 0.5)
    _, ids = tiny_engine.prompt_ids(long.prompt, GenerationSettings(max_new_tokens=16))
    assert len(ids) + 16 < tiny_engine.info.context_window   # the tiny model's window is 512
    with pytest.raises(ValueError, match="classes are short and long"):
        default_classes(tiny_engine, 16, {"medium": 1.0})


def test_token_cap_names_the_total():
    w = Workload.build([RequestClass("a", "x" * 10, 100, 1.0)], 10)
    assert check_tokens(w, len, limit=1100) == 1100
    with pytest.raises(ValueError, match="1,100 tokens"):
        check_tokens(w, len, limit=1099)


# --- summaries on hand-made timelines

def record(req_id, cls, arrival, admitted, token_times, chunks=(), stop="length", prompt_tokens=10):
    """A finished request whose tokens came at the given absolute times."""
    from playground.serve.workload import Request
    trace = Trace("p", "p", [1] * prompt_tokens, GenerationSettings(), "fake", "cpu", "float32", "m", None)
    prev = 0.0
    for i, t in enumerate(token_times):
        trace.steps.append(Step(index=i, token_id=5, text="x", special=False, phase="decode" if i else "prefill", time=t - admitted, latency=t - admitted - prev,
                                prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None))
        prev = t - admitted
    trace.stop_reason = stop
    return RequestRecord(Request(req_id, cls, "p", 8, arrival), prompt_tokens, admitted, trace, list(chunks),
                         token_times[-1], stop)


def hand_made(scheduler="batching"):
    recs = [record(0, "long", 0.0, 0.0, [2.0, 2.5, 3.0], chunks=[(0.0, 1.0, 500), (1.0, 2.0, 400)], prompt_tokens=900),
            record(1, "short", 0.5, 2.0, [2.5, 3.0]), record(2, "short", 1.5, 2.0, [2.5, 2.75]),
            record(3, "short", 3.5, 3.5, [3.75, 4.0])]
    w = Workload(tuple(r.request for r in recs))
    return WorkloadResult(scheduler, scheduler, "fake source", w, recs, done=True)


def test_phases_add_up_and_percentiles_are_numpys():
    result = hand_made()
    for r in result.records:
        assert r.waiting + r.prefill + r.decode == pytest.approx(r.e2e)
    stats = class_stats(result)["short"]
    assert stats["ttft_p50"] == pytest.approx(np.percentile([2.0, 1.0, 0.25], 50))
    assert stats["waiting_p95"] == pytest.approx(np.percentile([1.5, 0.5, 0.0], 95))


def test_throughput_goodput_and_over_time():
    result = hand_made()
    tp = throughput(result)
    assert (tp["output_tokens"], tp["wall_s"], tp["output_tps"]) == (9, 4.0, 2.25)
    good = goodput(result, ttft=1.0, tpot=0.4)   # #2 (TTFT 1.0, TPOT 0.25) and #3 (0.25, 0.25) qualify
    assert (good["met"], good["goodput_rps"]) == (2, 0.5)
    series = over_time(result, window=1.0)
    assert sum(series["output_tps"]) == 9 and sum(series["requests_per_s"]) == 4


def test_the_lesson_sentence_states_the_measured_delay():
    # shorts #1 and #2 waited during the long prefill passes [0, 2]: overlaps 1.5 s and 0.5 s; #3 none
    text = lesson(hand_made())
    assert "of the 3 short requests, the long requests' prefill delayed 2 first tokens by a median of 1.00 s" in text
    one = lesson(hand_made("one-at-a-time"))   # the whole long service [0, 3] holds the engine
    assert "service (prefill and decode, one at a time) delayed 2 first tokens" in one and "median of 1.50 s" in one
    assert math.isclose(throughput(hand_made())["output_tps"], 2.25)
    assert "with the same output tokens/s as A (one-at-a-time): 2.2 against 2.2 (1.00×; not as expected" in \
        compare(hand_made("one-at-a-time"), hand_made())
    assert summarize(hand_made())["lesson"] == text
