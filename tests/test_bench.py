"""The benchmark's rows are computed from real runs (tiny model here; figures are not asserted)."""
from playground.bench import prefill_row
from playground.bench_backends import bench_backend


def test_bench_row_compares_the_engine_with_plain_generate():
    row = bench_backend("torch", "Prefill reads the prompt once.", 8, model="tiny", repeats=1)
    assert row["engine_matches_generate"] == 1.0 and row["new_tokens"] == 8
    assert row["decode_ratio_engine_vs_generate"] == round(row["engine_decode_tps"] / row["generate_decode_tps"], 3)
    assert row["engine_ttft_s"] > 0 and row["peak_rss_mb"] > 0


def test_prefill_row_times_exactly_the_requested_length():
    row = prefill_row("torch", tokens=100, repeats=1, model="tiny")
    assert row["prefill_tokens"] == 100 and row["prefill_tps"] > 0
    assert abs(100 / row["prefill_tps"] - row["prefill_s"]) <= 0.0005 + 1e-6   # prefill_s is rounded to 1 ms
