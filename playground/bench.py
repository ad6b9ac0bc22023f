"""`make bench` (`python -m playground.bench`): speed figures and ratios, as JSON lines.

One row per backend (torch, onnx, onnx-int8, onnx-int4), each measured in its own process on the bundled model:
the engine's TTFT and decode tok/s against plain `generate()` on the same runtime, and their ratio
(`decode_ratio_engine_vs_generate` >= 0.97 means instrumentation costs under 3%), peak RSS, and for
int8 and int4 their greedy agreement with fp32. Then a 1024-token prefill per backend (the north star: < 1 s).

    python -m playground.bench                 # every backend
    python -m playground.bench onnx-int8       # just one
    python -m playground.bench --model tiny torch   # the tiny test model (what the test suite runs)

Figures, not tests: they depend on the machine and its load; report them with this command.
"""
from __future__ import annotations

import json
import statistics
import sys

from .bench_backends import DEFAULT_BACKENDS, main as bench_rows, row_in_subprocess

PREFILL_TOKENS = 1024


def prefill_row(name: str, tokens: int = PREFILL_TOKENS, repeats: int = 3, model: str | None = None) -> dict:
    """Median TTFT of a one-token Run from exactly `tokens` prompt ids (warm-up run excluded): the
    prefill experiment's measurement, through the same step loop as every other figure."""
    from .backends import create_backend
    from .config import GenerationSettings
    from .engine import Engine
    from .experiments.common import exact_length_ids

    engine = Engine(create_backend(name, model))
    tokens = min(tokens, engine.info.context_window - 1)   # the tiny test model's window is 512
    ids = exact_length_ids(engine, tokens)   # real text, as the prefill experiment uses
    one = GenerationSettings(max_new_tokens=1)
    engine.run_ids(ids[:64], one).wait()
    times = [engine.run_ids(ids, one).wait().steps[0].time for _ in range(repeats)]
    return {"backend": name, "prefill_tokens": tokens, "prefill_s": round(statistics.median(times), 3),
            "prefill_tps": round(tokens / statistics.median(times), 1)}


def main(argv: list[str]) -> None:
    from .bench_backends import parse_args
    args = parse_args([a for a in argv if a != "--prefill"])
    if "--prefill" in argv:
        print(json.dumps(prefill_row(args.one or args.names[0], model=args.model)), flush=True)
        return
    names = args.names or DEFAULT_BACKENDS
    bench_rows(names + (["--model", args.model] if args.model else []))
    for name in names:  # each in its own process, like the rows above
        print(row_in_subprocess("playground.bench", "--prefill", name, args.model), flush=True)
    if not args.names:   # the serve row: one at a time vs continuous batching (bench_serve.py)
        print(row_in_subprocess("playground.bench_serve", "--row", "serve", args.model), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
