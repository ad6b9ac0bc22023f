"""`make bench` (`python -m playground.bench`): speed figures and ratios, as JSON lines.

In order, each backend measured in its own process on the bundled model:
  - llama.cpp's own `llama-bench` on the same GGUF (bench_peer.py), and the machine's fp32 matmul peak;
  - one row per backend (torch, onnx, onnx-int8, onnx-int4, onnx-gguf4 and its int8 / fp32 activation
    variants): the engine's TTFT and decode tok/s against plain `generate()` on the same runtime, and
    their ratio (`decode_ratio_engine_vs_generate` >= 0.97 means instrumentation costs under 3%), peak
    RSS, and for the onnx variants their greedy agreement with fp32;
  - a 1024-token prefill per backend;
  - fidelity per backend (bench_fidelity.py): teacher-forced top-1 agreement with fp32, mean KL, perplexity;
  - llama-bench again, and a summary: every decode and prefill as a multiple of llama.cpp's (the mean
    of its two runs, which bracket ours) and prefill as a share of the matmul peak.

    python -m playground.bench                 # every backend
    python -m playground.bench onnx-int8       # just one (still with llama.cpp and the fidelity reference)
    python -m playground.bench --speed onnx onnx-gguf4   # no fidelity rows (they take ~1-5 min a backend)

Figures, not tests: they depend on the machine and its load; report them with this command.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

from .bench_backends import DEFAULT_BACKENDS, row_in_subprocess
from .bench_fidelity import fidelity_rows
from .bench_peer import (
    llama_bench_row,
    matmul_peak_row,
    mean_llama_row,
    model_config,
    ratios_row,
)

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
    speed_only = argv[:1] == ["--speed"]
    names = argv[speed_only:] or DEFAULT_BACKENDS
    llama_runs = [_say(llama_bench_row()), _say(matmul_peak_row())]
    rows = [_say(json.loads(row_in_subprocess("playground.bench_backends", "--one", name))) for name in names]
    prefills = [_say(json.loads(row_in_subprocess("playground.bench", "--prefill", name))) for name in names]
    if not speed_only:
        fidelity_rows(names)   # prints its rows
    llama_runs.append(_say(llama_bench_row()))
    llama = mean_llama_row(llama_runs[0], llama_runs[2])
    _say(ratios_row(llama, llama_runs[1], rows, prefills, model_config()))


def _say(row: dict) -> dict:
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main(sys.argv[1:])
