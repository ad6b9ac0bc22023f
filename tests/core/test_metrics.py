"""Metrics arithmetic on hand-made traces (the definitions of vLLM's benchmark and GenAI-Perf)."""
import csv
import io
import json

import pytest

from playground.config import GenerationSettings
from playground.metrics import compute_metrics, estimate_cost
from playground.trace import KVShape, Step, Trace


MEASURED = 7_000   # bytes per step of a fake runtime cache that is not what the formula says


def make_trace(times, prompt_tokens=10, tokens=None):
    shape = KVShape(2, 2, 4, 4)
    steps, prev = [], 0.0
    for i, t in enumerate(times):
        steps.append(Step(index=i, token_id=5, text="x", special=False, phase="prefill" if i == 0 else "decode", time=t, latency=t - prev, prob=0.5, sample_prob=1.0, top=(),
                          seq_len=prompt_tokens + i, kv_bytes=MEASURED * (i + 1), tokens=tokens[i] if tokens else 1))
        prev = t
    return Trace("p", "p", list(range(prompt_tokens)), GenerationSettings(), "torch", "cpu", "float32",
                 "m", shape, steps=steps)


def test_docstring_example():
    m = compute_metrics(make_trace([0.5, 0.6, 0.8]))
    assert m.ttft == 0.5 and m.e2e == 0.8
    assert m.itl == pytest.approx((0.1, 0.2))
    assert m.tpot == pytest.approx(0.15) and m.decode_tps == pytest.approx(2 / 0.3)
    assert m.prefill_tps == pytest.approx(20.0)
    assert m.kv_bytes == 3 * MEASURED   # the last step's measurement, not the formula (512 here)


def test_events_carrying_several_tokens_count_tokens_not_events():
    """A server's stream: events of 2, 3 and 1 tokens at 0.5, 0.6, 0.8 s: 6 tokens, 4 after the first event."""
    m = compute_metrics(make_trace([0.5, 0.6, 0.8], tokens=[2, 3, 1]))
    assert m.output_tokens == 6 and m.itl == pytest.approx((0.1, 0.2))   # ITL per event
    assert m.tpot == pytest.approx(0.3 / 4) and m.decode_tps == pytest.approx(4 / 0.3)


def test_empty_and_single_token_traces():
    m0 = compute_metrics(make_trace([]))
    assert (m0.output_tokens, m0.ttft, m0.tpot, m0.decode_tps, m0.kv_bytes) == (0, None, None, None, None)
    m1 = compute_metrics(make_trace([0.25]))
    assert (m1.ttft, m1.e2e, m1.tpot, m1.decode_tps, m1.itl) == (0.25, 0.25, None, None, ())


def test_cost_estimate_per_million_tokens():
    m = compute_metrics(make_trace([0.1] * 1, prompt_tokens=1_000_000))
    assert estimate_cost(m, 2.0, 8.0) == pytest.approx(2.0 + 8.0 / 1e6)


def test_csv_and_json_exports_have_one_row_per_token():
    trace = make_trace([0.1, 0.2, 0.35])
    trace.stop_reason = "length"
    rows = list(csv.DictReader(io.StringIO(trace.to_csv())))
    assert len(rows) == 3 and rows[2]["latency_s"] == "0.150000" and rows[0]["phase"] == "prefill"
    assert int(rows[1]["kv_bytes_measured"]) == 2 * MEASURED                     # the Step's own figure
    assert int(rows[1]["kv_bytes_formula_estimate"]) == KVShape(2, 2, 4, 4).formula_bytes(11)
    assert rows[0]["model_prob_T1"] == "0.500000" and rows[0]["sample_prob"] == "1.000000"
    d = json.loads(trace.to_json())
    assert len(d["steps"]) == 3 and d["metrics"]["output_tokens"] == 3 and d["text"] == "xxx"
    assert "at temperature 1" in d["fields"]["prob"] and "warpers" in d["fields"]["sample_prob"]


def test_exports_leave_missing_figures_empty_never_zero():
    from dataclasses import replace
    trace = make_trace([0.1, 0.2])
    trace.steps = [replace(s, kv_bytes=None, prob=None, sample_prob=None, top=None) for s in trace.steps]
    trace.kv_shape = None
    rows = list(csv.DictReader(io.StringIO(trace.to_csv())))
    assert all(r[k] == "" for r in rows for k in ("kv_bytes_measured", "kv_bytes_formula_estimate",
                                                  "model_prob_T1", "sample_prob", "top_k_model_prob_T1"))
    assert compute_metrics(trace).kv_bytes is None
