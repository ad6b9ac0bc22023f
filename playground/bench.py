"""`make bench` (`python -m playground.bench`): speed figures and ratios, as JSON lines.

In order, each backend measured in its own process on the bundled model:
  - llama.cpp's own `llama-bench` on the same GGUF (bench_peer.py), the machine's fp32 matmul peak, and
    the kernel floor (onnx-gguf4's MatMulNBits alone, per decode token);
  - one row per backend (every registry entry): the engine's TTFT and decode tok/s against plain
    `generate()` on the same runtime, and their ratio (`decode_ratio_engine_vs_generate` >= 0.97 means
    instrumentation costs under 3%), peak RSS, and for the ONNX variants their greedy agreement with fp32;
  - a 1024-token prefill per backend;
  - fidelity per backend (bench_fidelity.py): teacher-forced top-1 agreement with fp32, mean KL, perplexity;
  - llama-bench again, and a summary: every decode and prefill as a multiple of llama.cpp's (the mean
    of its two runs, which bracket ours), prefill as a share of the matmul peak, and the ceilings the
    floors set on those ratios;
  - the rows "ui" and "ui-flat" (bench_ui.py): the app against a headless run, and its work per update;
  - with every backend (no names given): the batch row (bench_batch.py: our continuous batching's
    batch-size sweep against llama.cpp's `llama-batched-bench`, and the bound the 4-bit kernels set) and
    the serve row (bench_serve.py: the pinned workload one at a time and with our batching, the same backend),
    the aiperf row, and the speculative row (bench_speculative.py: prompt-lookup speculative decoding against
    plain decoding on the default backend, tokens per forward pass and decode tok/s);
  - last, the remote row (bench_remote.py): this client against a llama-server the bench starts on the
    same model.

    python -m playground.bench                 # every backend
    python -m playground.bench onnx-int8       # just one (with llama.cpp and the fidelity reference)
    python -m playground.bench --speed onnx onnx-gguf4   # no fidelity rows (they take ~1-5 min a backend)
    python -m playground.bench --model tiny torch   # the tiny test model (what the test suite runs)

Figures, not tests: they depend on the machine and its load; report them with this command.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys

from .bench_backends import DEFAULT_BACKENDS, row_in_subprocess
from .bench_fidelity import fidelity_rows
from .bench_peer import (
    kernel_floor_row,
    llama_bench_row,
    matmul_peak_row,
    mean_llama_row,
    model_config,
    ratios_row,
)

PREFILL_TOKENS = 1024


def prefill_row(name: str, tokens: int = PREFILL_TOKENS, repeats: int = 3, model: str | None = None) -> dict:
    """The prefill figure of backend `name` (see measure_prefill)."""
    from .backends import create_backend
    from .engine import Engine

    return measure_prefill(Engine(create_backend(name, model)), tokens, repeats)


def measure_prefill(source, tokens: int = PREFILL_TOKENS, repeats: int = 3) -> dict:
    """Median TTFT of a one-token Run from exactly `tokens` prompt ids (warm-up run excluded): the
    prefill experiment's measurement, through the source's own step loop like every other figure."""
    from .config import GenerationSettings
    from .measure import exact_length_ids, require

    require(source, "exact_ids", "the prefill row")
    name = source.info.name
    tokens = min(tokens, (source.info.context_window or 2**31) - 1)   # the tiny test model's window is 512
    ids = exact_length_ids(source, tokens)   # real text, as the prefill experiment uses
    one = GenerationSettings(max_new_tokens=1)
    source.run_ids(ids[:64], one).wait()
    times = [source.run_ids(ids, one).wait().steps[0].time for _ in range(repeats)]
    return {"backend": name, "prefill_tokens": tokens, "prefill_s": round(statistics.median(times), 3),
            "prefill_tps": round(tokens / statistics.median(times), 1)}


def main(argv: list[str]) -> None:
    from .bench_backends import parse_args
    args = parse_args([a for a in argv if a not in ("--prefill", "--speed")])
    if "--prefill" in argv:
        print(json.dumps(prefill_row(args.one or args.names[0], model=args.model)), flush=True)
        return
    names = args.names or DEFAULT_BACKENDS
    peer = args.model is None   # llama.cpp and fidelity on the bundled model only
    llama_runs = [_say(llama_bench_row()), _say(matmul_peak_row())] if peer else []
    floor = _say(kernel_floor_row()) if peer else None
    rows = [_say(json.loads(row_in_subprocess("playground.bench_backends", "--one", name, args.model)))
            for name in names]   # each in its own process
    prefills = [_say(json.loads(row_in_subprocess("playground.bench", "--prefill", name, args.model)))
                for name in names]
    from .bench_ui import browser_flags   # the app's cost to what it measures: rows "ui" and "ui-flat"
    subprocess.run([sys.executable, "-m", "playground.bench_ui", "--backend", "onnx" if "onnx" in names else names[0],
                    *(["--model", args.model] if args.model else []), *browser_flags()], check=True)   # --pin: its own process
    if not args.names:   # continuous batching: the batch-size sweep (bench_batch.py), then the workload (bench_serve.py)
        _say(json.loads(row_in_subprocess("playground.bench_batch", "--row", "batch", args.model)))
        _say(json.loads(row_in_subprocess("playground.bench_serve", "--row", "serve", args.model)))
        _say(json.loads(row_in_subprocess("playground.bench_aiperf", "--row", "aiperf", args.model)))  # AIPerf vs Steps
        _say(json.loads(row_in_subprocess("playground.bench_roofline", "--row", "roofline", args.model)))  # issue 26
        _say(json.loads(row_in_subprocess("playground.bench_speculative", "--row", "speculative", args.model)))
    if not peer:
        return
    if "--speed" not in argv:
        fidelity_rows(names)   # prints its rows
    llama_runs.append(_say(llama_bench_row()))
    llama = mean_llama_row(llama_runs[0], llama_runs[2])
    _say(ratios_row(llama, llama_runs[1], rows, prefills, model_config(), floor))
    if not args.names:   # the client against llama.cpp's own server (bench_remote.py)
        from .bench_remote import remote_row
        _say(remote_row())


def _say(row: dict) -> dict:
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main(sys.argv[1:])
