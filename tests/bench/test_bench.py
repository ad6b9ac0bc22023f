"""The benchmark's rows come from real runs (tiny model here; figures are not asserted, only their shape)."""
import json
import subprocess
import sys

import pytest

from playground.bench.backends import bench_backend
from playground.bench.prefill import prefill_row


@pytest.mark.slow
def test_bench_row_compares_the_engine_with_plain_generate():
    row = bench_backend("torch", "Prefill reads the prompt once.", 8, model="tiny", repeats=1)
    assert row.engine_matches_generate == 1.0 and row.new_tokens == 8 == row.generate_new_tokens
    # the ratio is the two measured rates' (how close they are is the bench's figure, not a test's)
    assert row.engine_decode_tps > 0 and row.generate_decode_tps > 0
    assert row.decode_ratio_engine_vs_generate == round(row.engine_decode_tps / row.generate_decode_tps, 3)
    assert row.engine_ttft_s > 0 and row.peak_rss_mb > 0
    assert "agreement_with_fp32" not in row.to_json()   # torch is not an ONNX variant: no fp32 comparison


@pytest.mark.slow
def test_prefill_row_times_exactly_the_requested_length():
    row = prefill_row("torch", tokens=100, repeats=1, model="tiny")
    assert row.prefill_tokens == 100 and row.prefill_tps > 0
    # prefill_s is rounded to 1 ms and prefill_tps to 0.1 tok/s: 100 / tps is off by up to 100 * 0.05 / tps^2 more
    assert abs(100 / row.prefill_tps - row.prefill_s) <= 0.0005 + 100 * 0.05 / row.prefill_tps ** 2 + 1e-9


@pytest.mark.subprocess
def test_make_bench_runs_to_the_end_with_its_subprocess_rows():
    """`python -m playground.bench` end to end on the tiny model: the stamp first (and once: the child processes
    print none), then the rows; every line is JSON and no row is an error."""
    out = subprocess.run([sys.executable, "-m", "playground.bench", "--model", "tiny", "torch"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    stamp, *rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert stamp["row"] == "stamp" and stamp["command"] == "python -m playground.bench --model tiny torch"
    assert rows and not [r for r in rows if "error" in r or r.get("row") == "stamp"], rows
    assert {"engine_decode_tps", "prefill_s"} <= {k for r in rows for k in r}
    assert {"ui", "ui-flat"} <= {r.get("row") for r in rows}   # the app's cost: bench/ui.py
    from playground.bench.ui import browser_flags
    if "--browser" in browser_flags():   # and a run watched by Chromium: chips timed, charts counted
        ui = next(r for r in rows if r.get("row") == "ui")
        watched = ui.get("with_chromium_on_its_own_cpu") or ui["with_chromium_on_the_same_machine"]
        assert watched["chip_in_dom_p95_ms"] >= 0 and watched["steps_by_live_channel"] > 0
        watch = next(r for r in rows if r.get("row") == "watch")   # the Watch view while clients stream
        assert watch["clients"] == 4 and watch["answers_streamed"] > 0 and len(watch["screenshot_s"]) == 2


@pytest.mark.subprocess
def test_the_ui_row_drives_the_app_against_a_headless_run_of_the_same_tokens():
    from playground.bench.ui import ui_row
    row = ui_row("torch", model="tiny", tokens=8, repeats=1).to_json()
    assert row["same_tokens"] and row["new_tokens"] == 8
    assert row["decode_ratio_ui_vs_headless"] == round(row["ui_decode_tps"] / row["headless_decode_tps"], 3)
    assert 3 <= row["sse_events"] and 1_000 < row["wire_bytes"] < 200_000   # the stream as received, compact
    assert row["server_cpu_s_per_token"] > 0 and row["model_cpu_s_per_token"] > 0


@pytest.mark.subprocess
def test_the_flat_row_reads_the_work_per_update_early_and_late_in_a_run():
    from playground.bench.ui import flat_row
    row = flat_row(steps=300).to_json()
    assert row["steps"] == 300 and row["sse_events"] >= 10
    early, late = row["bytes_per_update_first_quarter"], row["bytes_per_update_last_quarter"]
    assert early and late and late < 2 * early   # O(new steps) per update, not O(run)


@pytest.mark.subprocess
def test_pin_puts_the_bench_on_one_cpu_and_chromium_on_another():
    import os

    import pytest
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("pinning needs 2 CPUs")
    code = ("import os; from playground.bench.ui import pin_cpus; pin_cpus(); "
            "print(sorted(os.sched_getaffinity(0))); print(open(os.environ['PLAYGROUND_CHROMIUM']).read())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PLAYGROUND_CHROMIUM": "/usr/bin/chromium"}).stdout
    cpus = sorted(os.sched_getaffinity(0))
    assert out.startswith(f"[{cpus[0]}]\n")
    assert f'exec taskset -c {cpus[1]} "/usr/bin/chromium" "$@"' in out


@pytest.mark.subprocess
def test_the_client_side_of_a_pinned_bench_runs_on_the_other_cpu():
    """While the app serves a request, every thread of the bench (gradio_client, the counting proxy, one
    started meanwhile) is on the client's CPU; afterwards all are back on the model's CPU."""
    import os

    import pytest
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("pinning needs 2 CPUs")
    code = """if True:
        import os, threading
        from playground.bench.ui import client_side, pin_cpus
        def cpus_of_all():
            return sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir('/proc/self/task')})
        idle = threading.Event()
        threading.Thread(target=idle.wait, daemon=True).start()   # a thread from before
        pin_cpus()
        print(cpus_of_all())
        with client_side():
            threading.Thread(target=idle.wait, daemon=True).start()   # a thread started while serving
            print(cpus_of_all())
        print(cpus_of_all())
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PLAYGROUND_CHROMIUM": "/usr/bin/chromium"}).stdout.splitlines()
    model, client = sorted(os.sched_getaffinity(0))[:2]
    assert out == [f"[({model},)]", f"[({client},)]", f"[({model},)]"]
