"""The KV-memory bench rows on the tiny model (bench/kvmem.py): prefix caching's TTFT and hit rate, preemption
under a KV budget with identical output, the prefill-chunk sweep; their targets read from the printed figures."""
from __future__ import annotations

import pytest

from playground.bench.kvmem import chunk_sweep_row, preemption_row, prefix_cache_row
from playground.bench.serve import load


@pytest.fixture(scope="module")
def engine():
    return load("onnx", "tiny")


@pytest.mark.slow
def test_the_prefix_cache_row_says_what_was_cached_and_compares_ttft(engine):
    row = prefix_cache_row(engine, "onnx", requests=4).to_json()
    assert row["bench"] == "prefix-cache" and row["output_identical"] is True
    assert 0 < row["cached_tokens"] < row["prompt_tokens"] and row["hit_rate"] == pytest.approx(
        row["cached_tokens"] / row["prompt_tokens"], abs=1e-3)
    assert row["ttft_p50_ratio"] == pytest.approx(row["with_cache"]["ttft_p50_s"] / row["without"]["ttft_p50_s"],
                                                  abs=2e-3)
    assert row["targets_met"]["ttft_p50_ratio"] == (row["ttft_p50_ratio"] <= 0.25)
    parts = row["with_cache"]["ttft_parts_p50"]   # where the TTFT with the cache went
    found, whole = parts["found_cached"], parts["computed_whole"]
    assert found["requests"] + whole["requests"] == 4 and found["requests"] >= 1 and whole["requests"] >= 1
    assert found["copy_s"] > 0 and whole["copy_s"] == 0 and found["own_prefill_s"] > 0
    assert all(v >= -1e-3 for p in (found, whole) for k, v in p.items() if k.endswith("_s"))


@pytest.mark.slow
def test_the_preemption_row_completes_every_request_with_identical_output(engine):
    row = preemption_row(engine, "onnx", requests=4).to_json()
    assert row["preemptions"] > 0 and row["completed"] == 4 and row["output_identical"] is True
    assert row["kv_budget"] < row["demand_positions"] and all(row["targets_met"].values())


@pytest.mark.slow
def test_the_chunk_sweep_row_has_a_point_per_size(engine):
    row = chunk_sweep_row(engine, "onnx", requests=3, sizes=[32, 512]).to_json()
    assert [p["prefill_chunk"] for p in row["points"]] == [32, 512]
    assert all(p["document_ttft_s"] > 0 and p["chatters_itl_p95_s"] > 0 for p in row["points"])
    first, last = row["points"][0], row["points"][-1]
    assert row["targets_met"]["document_ttft"] == (last["document_ttft_s"] < first["document_ttft_s"])
    assert row["targets_met"]["chatters_itl_p95"] == (last["chatters_itl_p95_s"] > first["chatters_itl_p95_s"])
    waited = [p["chatters_itl_p95_with_chunk_s"] for p in (first, last)]   # None: no chatter waited for a chunk
    assert row["targets_met"]["chatters_itl_p95_with_chunk"] == (None if None in waited else waited[1] > waited[0])
    assert first["document_passes"] > last["document_passes"] >= 1
    assert row["finding"].startswith("Prefill chunk 32: the long prompt's TTFT ") and "From 32 to 512 the long prompt's TTFT " in row["finding"]
