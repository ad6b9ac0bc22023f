"""Headless serving (tiny model): `python -m playground.serve` writes a replayable workload, JSON
per request and a standalone report; sweeps give one point per size or rate; Ctrl-C cancels every request."""
from __future__ import annotations

import json
import signal
import threading

import pytest

from playground.serve import SCHEDULERS, RequestClass, Workload
from playground.serve.cli import in_background, main
from playground.serve.sweeps import run_batch_sweep, run_rate_sweep


@pytest.mark.slow
def test_serve_writes_json_per_request_and_a_report_and_replays(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--model", "tiny", "--requests", "5", "--mix", "short:0.6,long:0.4", "--rate", "20",
            "--max-new-tokens", "4", "--scheduler", "batching", "--compare", "one-at-a-time", "--backend", "onnx",
            "--out", str(out)]
    assert main(args) == 0
    workload = json.loads((out / "workload.json").read_text())
    assert len(workload["requests"]) == 5 and workload["arrival"] == "poisson"
    for name in ("batching", "one-at-a-time"):
        files = sorted((out / name / "requests").glob("*.json"))
        records = [json.loads(f.read_text()) for f in files]
        assert [r["id"] for r in records] == list(range(5))
        assert all(r["stop_reason"] in ("eos", "length") and r["trace"]["steps"] for r in records)
        assert json.loads((out / f"{name}.json").read_text())["summary"]["lesson"].startswith("On ")
    perfetto = json.loads((out / "perfetto.json").read_text())
    names = sorted(e["args"]["name"] for e in perfetto["traceEvents"] if e["name"] == "process_name")
    assert [n[:3] for n in names] == ["A: ", "B: "] and "batching" in names[0]   # A and B, a process each
    html = (out / "serve.html").read_text()
    # plotly inlined; the comparing sentence (on the tiny model the two throughputs are close: either way round)
    assert "<script" in html and ("as expected" in html or "this run came out the other way" in html)
    assert '"scheduler": "one-at-a-time"' in capsys.readouterr().out
    replay = tmp_path / "replay"
    assert main(["--model", "tiny", "--workload", str(out / "workload.json"), "--scheduler", "batching",
                 "--out", str(replay)]) == 0
    assert json.loads((replay / "workload.json").read_text()) == workload


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt, as in a terminal. A shell that starts pytest in the background hands it
    SIGINT ignored, and then `interrupt_main()` does nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_interrupting_the_cli_cancels_every_request(tiny_engine, sigint_raises):
    cancel, scheduler = threading.Event(), SCHEDULERS["one-at-a-time"].create(tiny_engine)
    w = Workload.build([RequestClass("q", "What is the capital of France?", 400, 1.0)], 3, ignore_eos=True)

    pressed = threading.Event()

    def ctrl_c_at_the_first_step(*_):   # once a request is decoding, not after a fixed delay it might outrun
        if not pressed.is_set():
            pressed.set()
            _interrupt()

    def work():
        return scheduler.run(w, progress=ctrl_c_at_the_first_step, cancel=cancel)
    result, interrupted = in_background(work, cancel)
    assert interrupted and cancel.is_set() and {r.stop_reason for r in result.records} == {"cancelled"}


def _interrupt():
    import _thread
    _thread.interrupt_main()   # what Ctrl-C does: KeyboardInterrupt in the main thread


def test_batch_sweep_gives_a_point_per_size(tiny_onnx_engine):
    sweep = run_batch_sweep(SCHEDULERS["batching"].create(tiny_onnx_engine), sizes=(1, 2, 4), new_tokens=6)
    assert [p.concurrency for p in sweep.points] == [1, 2, 4]
    assert all(p.output_tokens == 6 * p.concurrency and p.total_tps and p.per_request_tps for p in sweep.points)


@pytest.mark.slow
def test_rate_sweep_gives_a_point_per_rate_with_goodput(tiny_engine):
    w = Workload.build([RequestClass("q", "What is the capital of France?", 4, 1.0)], 4)
    sweep = run_rate_sweep(SCHEDULERS["one-at-a-time"].create(tiny_engine), w, [20, 5], ttft_slo=10.0, tpot_slo=10.0)
    assert [p.rate for p in sweep.points] == [5.0, 20.0]
    assert all(p.met == p.of == 4 and p.goodput_rps == pytest.approx(p.requests_per_s) for p in sweep.points)
    with pytest.raises(ValueError, match="rates"):
        run_rate_sweep(SCHEDULERS["one-at-a-time"].create(tiny_engine), w, [])


@pytest.mark.server
@pytest.mark.integration
def test_a_server_serves_the_workload_concurrently_and_one_at_a_time(llama_server, tmp_path):
    out = tmp_path / "server"
    assert main(["--url", llama_server.url, "--requests", "3", "--mix", "short:1", "--max-new-tokens", "4",
                 "--scheduler", "concurrent", "--compare", "one-at-a-time", "--out", str(out)]) == 0
    for name in ("concurrent", "one-at-a-time"):
        result = json.loads((out / f"{name}.json").read_text())
        assert "llama.cpp" in result["source"] and result["summary"]["classes"]["short"]["served"] == 3


@pytest.mark.slow
def test_the_chunk_sweep_runs_headless_and_says_what_it_found(tmp_path, capsys):
    out = tmp_path / "chunks"
    assert main(["--model", "tiny", "--backend", "onnx", "--scheduler", "batching", "--sweep", "chunk",
                 "--chunks", "256,32", "--requests", "3", "--out", str(out)]) == 0
    sweep = json.loads((out / "sweep-chunk-batching.json").read_text())
    assert [p["prefill_chunk"] for p in sweep["points"]] == [32, 256] and sweep["settings"]["requests"] == 3
    printed = capsys.readouterr().out
    first, last = sweep["points"]
    assert f"Prefill chunk 32: the long prompt's TTFT {first['document_ttft']:.2f} s" in printed
    assert "Prefill-chunk sweep" in (out / "serve.html").read_text()
    with pytest.raises(SystemExit, match="--sweep chunk runs our batching"):
        main(["--model", "tiny", "--scheduler", "one-at-a-time", "--sweep", "chunk", "--out", str(out)])


@pytest.mark.slow
def test_the_memory_pressure_preset_prints_its_finding_with_what_it_measures(tmp_path, capsys):
    """`--preset "memory pressure"`: both runs, then the preset's own measurement (the recompute's teacher-forced
    agreement) on A's source, and the finding on stdout."""
    args = ["--model", "tiny", "--requests", "4", "--max-new-tokens", "4", "--backend", "onnx",
            "--preset", "memory pressure", "--out", str(tmp_path / "run")]
    assert main(args) == 0
    said = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    finding = next(s for s in said if "preset" in s)
    assert finding["preset"] == "memory pressure" and finding["finding"]
