"""The serve bench row on the tiny model: one at a time and our continuous batching on the same backend, the
workload arriving at 0.8x one at a time's measured capacity, the ratios and targets from the printed figures,
and the saturated run's bounds from the rates measured beside it."""
from __future__ import annotations

import pytest

from playground.bench.serve import TARGETS, serve_row, throughput_ratio_ceiling, work_bounds


@pytest.fixture(scope="module")
def row():
    return serve_row("tiny", requests=4, max_new_tokens=6).to_json()


def test_both_schedulers_run_on_the_default_backend_at_0_8x_its_capacity(row):
    assert row["backend"] == "onnx"   # the tiny model is no GGUF: onnx fp32 is the CPU default
    assert row["rate_rps"] == pytest.approx(0.8 * row["single_stream"]["capacity_rps"], abs=1e-3)
    assert row["batch_config"] == {"slots": 8, "prefill_chunk": 128}


def test_both_schedulers_serve_every_request_and_the_ratios_follow(row):
    for key in ("one_at_a_time", "batching"):
        assert row[key]["completed"] == 4 and row[key]["output_tps"] > 0
        assert row["saturated"][key]["completed"] == 4
    assert row["throughput_ratio"] == round(row["batching"]["output_tps"] / row["one_at_a_time"]["output_tps"], 2)
    assert row["short_p95_ttft_ratio"] == round(row["batching"]["short_ttft_p95_s"]
                                                / row["one_at_a_time"]["short_ttft_p95_s"], 2)
    assert row["targets_met"] == {"short_p95_ttft_ratio": row["short_p95_ttft_ratio"] <= 0.25,
                                  "throughput_ratio": row["throughput_ratio"] >= 1.0}
    assert set(row["targets"]) == set(TARGETS)
    sat = row["saturated"]
    assert sat["throughput_ratio"] == round(sat["batching"]["output_tps"] / sat["one_at_a_time"]["output_tps"], 2)


def test_the_throughput_ceiling_is_one_at_a_times_wall_over_the_last_arrival(row):
    from playground.serve import Workload, default_classes
    from playground.serve.workload import Request
    ceiling = row["throughput_ratio_ceiling"]
    assert ceiling is not None and ceiling >= 1   # one at a time cannot end before the last arrival either
    # the batching run, whatever it served, stayed under it (same tokens; its wall >= the last arrival)
    tokens = row["batching"]["output_tokens"] / row["one_at_a_time"]["output_tokens"]
    assert row["throughput_ratio"] <= ceiling * tokens + 0.02
    at_once = Workload.build(default_classes(None, 6, {"short": 1.0, "long": 0.0}), 3)
    assert throughput_ratio_ceiling(at_once, {"wall_s": 5.0}) is None   # no arrivals to wait for: no bound
    late = Workload((Request(0, "short", "q", 6, 0.0), Request(1, "short", "q", 6, 4.0)), "fixed", 0.5)
    assert throughput_ratio_ceiling(late, {"wall_s": 6.0}) == 1.5


def test_the_saturated_bounds_follow_from_the_workloads_tokens_and_the_measured_rates(row):
    b = row["saturated"]["bounds"]
    assert "bounds" in b["kind"] and "not measurements" in b["kind"]
    assert b["output_tokens"] == row["saturated"]["batching"]["output_tokens"] and b["prompt_tokens"] > 0
    rates = b["prefill_rates_tps"]
    assert b["prefill_rate_from"] == max(rates, key=rates.get)   # the faster rate: the looser, safe bound
    assert "511-token prompt" in " ".join(rates) and "128-token chunk" in " ".join(rates)   # tiny window: 512
    assert b["prefill_bound_s"] == pytest.approx(b["prompt_tokens"] / rates[b["prefill_rate_from"]], rel=0.01, abs=1e-3)
    decode_s = (b["output_tokens"] - 4) / 8 * b["decode_step_ms_8_rows"] / 1e3
    assert b["decode_bound_s"] == pytest.approx(decode_s, rel=0.01, abs=1e-3)
    assert b["output_tps_max_in_turn"] <= min(b["output_tps_max_prefill"], b["output_tps_max_decode"])


@pytest.mark.parametrize("prompt, output, requests, rate, step_s, rows, expected", [
    (1000, 200, 10, 500.0, 0.1, 8, {"prefill_bound_s": 2.0, "decode_bound_s": 2.375, "output_tps_max_in_turn": 45.71}),
    (100, 10, 10, 100.0, 0.5, 8, {"prefill_bound_s": 1.0, "decode_bound_s": 0.0, "output_tps_max_decode": None}),
])
def test_work_bounds_known_answers(prompt, output, requests, rate, step_s, rows, expected):
    out = work_bounds(prompt, output, requests, rate, step_s, rows)
    assert {k: out[k] for k in expected} == expected


def test_the_tiny_row_does_not_start_a_server_for_another_model(row):
    assert "skipped" in row["llama_server"]


@pytest.mark.server
def test_llama_server_serves_the_workload_one_at_a_time_and_concurrently():
    from playground.bench.serve import server_rows
    from playground.serve import Workload, default_classes
    workload = Workload.build(default_classes(None, 6, {"short": 1.0, "long": 0.0}), 3)
    out = server_rows(workload, None, parallel=2)
    assert "error" not in out, out
    for key in ("one_at_a_time", "concurrent"):   # (batched arithmetic may end an answer elsewhere: counts only)
        assert out[key]["completed"] == 3 and 3 <= out[key]["output_tokens"] <= 3 * 6
    assert out["throughput_ratio"] == round(out["concurrent"]["output_tps"] / out["one_at_a_time"]["output_tps"], 2)
    assert out["throughput_ratio_ceiling"] is None   # every request at once: no arrival bound
