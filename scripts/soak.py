"""Long-session check: many generations in one process, then resident memory and thread counts.

    python scripts/soak.py                       # 200 runs on the bundled model (torch), 16 tokens each
    python scripts/soak.py --model tiny --runs 50
    python scripts/soak.py --ui --backend onnx    # the same through the app: app.py in a subprocess,
                                                 # driven by gradio_client; the server's RSS is measured

Memory is read after a warm-up (the first `--warmup` runs fill allocator pools and caches) and at the
end; growth over 10%, or more live threads at the end than at any point of the first half (pools of
worker threads grow lazily up to their limit; a leak keeps growing), is a failure (exit 1).
Prints one JSON object. Left out: the browser side (see tests/ui/test_ui*.py for the app's own checks).
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from playground import Engine, GenerationSettings, create_backend  # noqa: E402
from playground.ports import free_port  # noqa: E402

PROMPTS = ["What is the capital of France?", "Name three colours.", "Why is the sky blue?",
           "Write one sentence about tokens.", "2 + 2 = ?"]


def engine_runs(args):
    """Generations straight through the engine, in this process; yields after each run."""
    engine = Engine(create_backend(args.backend, args.model))
    yield psutil.Process(), lambda: threading.active_count(), engine.backend.describe()
    for i in range(args.runs):
        s = GenerationSettings(max_new_tokens=args.tokens, temperature=0.7 if i % 2 else 0.0, seed=i)
        run = engine.run(PROMPTS[i % len(PROMPTS)], s)
        for step in run:
            if i % 7 == 3 and step.index == 2:
                run.cancel()   # some runs are stopped midway, as users do
        run.trace.to_json(), run.trace.to_csv()
        yield i


def app_runs(args):
    """Generations through the app's /generate endpoint: app.py in a subprocess, one client session."""
    import subprocess

    from gradio_client import Client

    from playground.ui.generate_handlers import OUTPUTS   # /generate's outputs, in order

    port = free_port()
    cmd = [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--backend", args.backend]
    server = subprocess.Popen(cmd + (["--model", args.model] if args.model else []), cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = None
        for _ in range(240):
            try:
                client = Client(f"http://127.0.0.1:{port}/", verbose=False)
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.5)
        proc = psutil.Process(server.pid)
        yield proc, proc.num_threads, f"app.py --backend {args.backend}"
        for i in range(args.runs):
            args_ = (PROMPTS[i % len(PROMPTS)], 0.7 if i % 2 else 0.0, 0, 1.0, str(i), args.tokens, True, 0.15,
                     0.6, args.backend)
            out = dict(zip(OUTPUTS, client.predict(*args_, api_name="/generate")))
            if "finished" not in out["status"]:
                raise RuntimeError(f"run {i} did not finish: {out['status']}")
            yield i
    finally:
        server.terminate()
        server.wait(30)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--ui", action="store_true", help="drive the app (a subprocess) instead of the engine")
    args = ap.parse_args(argv)

    runs = app_runs(args) if args.ui else engine_runs(args)
    proc, count_threads, describe = next(runs)
    t0, rss_warm, threads_warm, threads_first_half = time.perf_counter(), None, None, 0
    for i in runs:
        if args.warmup <= i < (args.warmup + args.runs) // 2:   # worker pools may grow lazily, then stay
            threads_first_half = max(threads_first_half, count_threads())
        if i + 1 == args.warmup:
            gc.collect()
            rss_warm, threads_warm = proc.memory_info().rss, count_threads()
        if (i + 1) % 20 == 0:
            print(f"  {i + 1}/{args.runs} runs, rss {proc.memory_info().rss / 2**20:.0f} MiB", file=sys.stderr)
        if i + 1 == args.runs:   # measured before the generator ends (and stops the app's process)
            gc.collect()
            rss_end, threads_end = proc.memory_info().rss, count_threads()
    growth = (rss_end - rss_warm) / rss_warm
    result = {"runs": args.runs, "backend": describe, "model": args.model or "default",
              "seconds": round(time.perf_counter() - t0, 1), "rss_after_warmup_mib": round(rss_warm / 2**20, 1),
              "rss_end_mib": round(rss_end / 2**20, 1), "rss_growth": round(growth, 4),
              "threads_after_warmup": threads_warm, "threads_peak_first_half": threads_first_half,
              "threads_end": threads_end,
              "ok": growth <= 0.10 and threads_end <= max(threads_warm, threads_first_half)}
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
