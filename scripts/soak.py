"""Long-session check: many generations in one process, then resident memory and thread counts.

    python scripts/soak.py                       # 200 runs on the bundled model (torch), 16 tokens each
    python scripts/soak.py --model tiny --runs 50

Memory is read after a warm-up (the first `--warmup` runs fill allocator pools and caches) and at the
end; growth over 10% or more live threads than after warm-up is reported as a failure (exit 1).
Prints one JSON object. Left out: the browser side (see tests/test_ui*.py for the app's own checks).
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

from playground import Engine, GenerationSettings, create_backend  # noqa: E402

PROMPTS = ["What is the capital of France?", "Name three colours.", "Why is the sky blue?",
           "Write one sentence about tokens.", "2 + 2 = ?"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=16)
    args = ap.parse_args(argv)

    proc = psutil.Process()
    engine = Engine(create_backend(args.backend, args.model))
    t0, rss_warm, threads_warm = time.perf_counter(), None, None
    for i in range(args.runs):
        s = GenerationSettings(max_new_tokens=args.tokens, temperature=0.7 if i % 2 else 0.0, seed=i)
        run = engine.run(PROMPTS[i % len(PROMPTS)], s)
        for step in run:
            if i % 7 == 3 and step.index == 2:
                run.cancel()   # some runs are stopped midway, as users do
        run.trace.to_json(), run.trace.to_csv()
        if i + 1 == args.warmup:
            gc.collect()
            rss_warm, threads_warm = proc.memory_info().rss, threading.active_count()
        if (i + 1) % 20 == 0:
            print(f"  {i + 1}/{args.runs} runs, rss {proc.memory_info().rss / 2**20:.0f} MiB", file=sys.stderr)
    gc.collect()
    rss_end, threads_end = proc.memory_info().rss, threading.active_count()
    growth = (rss_end - rss_warm) / rss_warm
    result = {"runs": args.runs, "backend": engine.backend.describe(), "model": engine.backend.model_name,
              "seconds": round(time.perf_counter() - t0, 1), "rss_after_warmup_mib": round(rss_warm / 2**20, 1),
              "rss_end_mib": round(rss_end / 2**20, 1), "rss_growth": round(growth, 4),
              "threads_after_warmup": threads_warm, "threads_end": threads_end,
              "ok": growth <= 0.10 and threads_end <= threads_warm}
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
