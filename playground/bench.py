"""`make bench` (`python -m playground.bench`): speed figures and ratios, as JSON lines.

One row per backend (torch, onnx, onnx-int8, onnx-int4), each measured in its own process on the bundled model:
the engine's TTFT and decode tok/s against plain `generate()` on the same runtime, and their ratio
(`decode_ratio_engine_vs_generate` >= 0.97 means instrumentation costs under 3%), peak RSS, and for
int8 and int4 their greedy agreement with fp32. Then a 1024-token prefill per backend (the north star: < 1 s).

    python -m playground.bench                 # every backend
    python -m playground.bench onnx-int8       # just one

Figures, not tests: they depend on the machine and its load; report them with this command.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

from .bench_backends import DEFAULT_BACKENDS, main as bench_rows

PREFILL_TOKENS = 1024


def prefill_row(name: str, tokens: int = PREFILL_TOKENS, repeats: int = 3, model: str | None = None) -> dict:
    """Median time of one prefill of exactly `tokens` prompt tokens (warm-up run excluded)."""
    from .backends import create_backend
    from .experiments.common import exact_length_ids

    backend = create_backend(name, model)
    ids = exact_length_ids(backend.tokenizer, tokens)   # real text, as the prefill experiment uses
    backend.prefill(ids[:64])
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        backend.prefill(ids)
        backend.synchronize()
        times.append(time.perf_counter() - t)
    return {"backend": name, "prefill_tokens": tokens, "prefill_s": round(statistics.median(times), 3),
            "prefill_tps": round(tokens / statistics.median(times), 1)}


def main(argv: list[str]) -> None:
    if argv[:1] == ["--prefill"]:
        print(json.dumps(prefill_row(argv[1])), flush=True)
        return
    names = argv or DEFAULT_BACKENDS
    bench_rows(names)
    for name in names:  # each in its own process, like the rows above
        print(row_in_subprocess("playground.bench", "--prefill", name), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
