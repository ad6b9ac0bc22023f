"""The benchmark's rows come from real runs (tiny model here; figures are not asserted, only their shape)."""
import json
import subprocess
import sys

from playground.bench import prefill_row
from playground.bench_backends import bench_backend


def test_bench_row_compares_the_engine_with_plain_generate():
    row = bench_backend("torch", "Prefill reads the prompt once.", 8, model="tiny", repeats=1)
    assert row["engine_matches_generate"] == 1.0 and row["new_tokens"] == 8 == row["generate_new_tokens"]
    assert 0.2 < row["decode_ratio_engine_vs_generate"] < 5   # both sides timed the same work
    assert row["engine_ttft_s"] > 0 and row["peak_rss_mb"] > 0


def test_prefill_row_times_exactly_the_requested_length():
    row = prefill_row("torch", tokens=100, repeats=1, model="tiny")
    assert row["prefill_tokens"] == 100 and row["prefill_tps"] > 0
    assert abs(100 / row["prefill_tps"] - row["prefill_s"]) <= 0.0005 + 1e-6   # prefill_s is rounded to 1 ms


def test_make_bench_runs_to_the_end_with_its_subprocess_rows():
    """`python -m playground.bench` end to end on the tiny model: every row is JSON and none is an error."""
    out = subprocess.run([sys.executable, "-m", "playground.bench", "--model", "tiny", "torch"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert rows and not [r for r in rows if "error" in r], rows
    assert {"engine_decode_tps", "prefill_s"} <= {k for r in rows for k in r}
