"""Metrics arithmetic on hand-made traces (the definitions of vLLM's benchmark and GenAI-Perf)."""
import pytest

from playground.config import GenerationSettings
from playground.metrics import compute_metrics, estimate_cost
from playground.trace import KVShape, Step, Trace


def make_trace(times, prompt_tokens=10):
    shape = KVShape(2, 2, 4, 4)
    steps, prev = [], 0.0
    for i, t in enumerate(times):
        steps.append(Step(i, 5, "x", False, "prefill" if i == 0 else "decode", t, t - prev, 0.5, (),
                          prompt_tokens + i, shape.formula_bytes(prompt_tokens + i)))
        prev = t
    return Trace("p", "p", list(range(prompt_tokens)), GenerationSettings(), "torch", "cpu", "float32",
                 "m", shape, steps=steps)


def test_docstring_example():
    m = compute_metrics(make_trace([0.5, 0.6, 0.8]))
    assert m.ttft == 0.5 and m.e2e == 0.8
    assert m.itl == pytest.approx((0.1, 0.2))
    assert m.tpot == pytest.approx(0.15) and m.decode_tps == pytest.approx(2 / 0.3)
    assert m.prefill_tps == pytest.approx(20.0)
    assert m.kv_bytes == KVShape(2, 2, 4, 4).formula_bytes(12)


def test_empty_and_single_token_traces():
    m0 = compute_metrics(make_trace([]))
    assert (m0.output_tokens, m0.ttft, m0.tpot, m0.decode_tps, m0.kv_bytes) == (0, None, None, None, 0)
    m1 = compute_metrics(make_trace([0.25]))
    assert (m1.ttft, m1.e2e, m1.tpot, m1.decode_tps, m1.itl) == (0.25, 0.25, None, None, ())


def test_cost_estimate_per_million_tokens():
    m = compute_metrics(make_trace([0.1] * 1, prompt_tokens=1_000_000))
    assert estimate_cost(m, 2.0, 8.0) == pytest.approx(2.0 + 8.0 / 1e6)


def test_csv_and_json_exports_have_one_row_per_token():
    import csv, io, json
    trace = make_trace([0.1, 0.2, 0.35])
    trace.stop_reason = "length"
    rows = list(csv.DictReader(io.StringIO(trace.to_csv())))
    assert len(rows) == 3 and rows[2]["latency"] == "0.150000" and rows[0]["phase"] == "prefill"
    assert int(rows[1]["kv_bytes"]) == int(rows[1]["kv_formula_bytes"])
    d = json.loads(trace.to_json())
    assert len(d["steps"]) == 3 and d["metrics"]["output_tokens"] == 3 and d["text"] == "xxx"
