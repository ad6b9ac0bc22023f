"""The serve bench row on the tiny model: the fastest backend is chosen from the measured capacities, the
workload arrives at 0.8x that capacity, and both schedulers' figures and the target ratios are reported."""
from __future__ import annotations

import pytest

from playground.bench_serve import serve_row, throughput_ratio_ceiling


@pytest.fixture(scope="module")
def row():
    return serve_row("tiny", requests=4, max_new_tokens=6)


def test_the_fastest_single_stream_backend_is_chosen_by_measured_capacity(row):
    measured = {n: c["capacity_rps"] for n, c in row["single_stream"].items() if "capacity_rps" in c}
    assert "torch" in measured and row["fastest_single_stream"] == max(measured, key=measured.get)
    assert row["rate_rps"] == pytest.approx(0.8 * measured[row["fastest_single_stream"]], abs=1e-3)


def test_both_schedulers_serve_every_request_and_the_ratios_follow(row):
    for key in ("one_at_a_time", "batching"):
        assert row[key]["completed"] == 4 and row[key]["output_tps"] > 0
        assert row["saturated"][key]["completed"] == 4
    assert row["throughput_ratio"] == round(row["batching"]["output_tps"] / row["one_at_a_time"]["output_tps"], 2)
    assert row["targets_met"]["throughput_2x"] == (row["throughput_ratio"] >= 2)


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


def test_the_tiny_row_does_not_start_a_server_for_another_model(row):
    assert "skipped" in row["llama_server"]


@pytest.mark.server
def test_llama_server_serves_the_workload_one_at_a_time_and_concurrently():
    from playground.bench_serve import server_rows
    from playground.serve import Workload, default_classes
    workload = Workload.build(default_classes(None, 6, {"short": 1.0, "long": 0.0}), 3)
    out = server_rows(workload, None, parallel=2)
    assert "error" not in out, out
    for key in ("one_at_a_time", "concurrent"):   # (batched arithmetic may end an answer elsewhere: counts only)
        assert out[key]["completed"] == 3 and 3 <= out[key]["output_tokens"] <= 3 * 6
    assert out["throughput_ratio"] == round(out["concurrent"]["output_tps"] / out["one_at_a_time"]["output_tps"], 2)
    assert out["throughput_ratio_ceiling"] is None   # every request at once: no arrival bound
