"""One benchmark row per backend: the engine's step loop vs the runtime's own plain `generate()`.

    python -m playground.bench_backends                # one JSON row per backend in DEFAULT_BACKENDS
    python -m playground.bench_backends onnx-int8      # just the named ones

`bench_backend(name, prompt, max_new_tokens)` measures, on the same backend and the same chat prompt:
  - engine: TTFT and decode tok/s from the Trace (metrics.py definitions)
  - generate: the same two figures from plain greedy `generate()`, timed by a streamer whose first
    `put` is the prompt and every later `put` is one new token
  - peak RSS of the process (ru_maxrss) after the engine runs, and again after generate() (which,
    for ONNX, opens a second session on the same file), and RSS now (psutil)
  - for the onnx variants (int8, int4, gguf4...): the share of greedy tokens identical to ONNX fp32's,
    position by position
Each figure is the median over `repeats` runs after one short warm-up run; engine runs come first,
then generate() runs, so a noisy neighbour on shared cores can favour either side. The CLI runs every backend
in its own process, so one backend's peak RSS does not include another's weights.

Left out: CUDA timings (torch on GPU is measured by the same code, but this machine has no GPU).
"""
from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time

from .backends import create_backend
from .compare import token_agreement
from .config import GenerationSettings
from .engine import Engine

PROMPT = "Explain in two sentences why the KV cache makes decoding cheaper than prefill."
MAX_NEW_TOKENS = 64
DEFAULT_BACKENDS = ["torch", "onnx", "onnx-int8", "onnx-int4", "onnx-gguf4", "onnx-gguf4-int8", "onnx-gguf4-fp32"]


class TimingStreamer:
    """A transformers streamer that only timestamps: times[0] = the prompt, times[i] = token i."""

    def __init__(self, clock=time.perf_counter):
        self.clock, self.times = clock, []

    def put(self, value) -> None:
        self.times.append(self.clock())

    def end(self) -> None:
        pass


def time_generate(backend, prompt_ids: list[int], max_new_tokens: int) -> dict:
    """TTFT and decode tok/s of plain generate(), with the engine's definitions (t0 = call start)."""
    streamer = TimingStreamer()
    t0 = time.perf_counter()
    ids = backend.generate_reference(prompt_ids, max_new_tokens, streamer=streamer)
    tokens = streamer.times[1:]
    span = tokens[-1] - tokens[0] if len(tokens) > 1 else 0.0
    return {"ttft": tokens[0] - t0 if tokens else None,
            "decode_tps": (len(tokens) - 1) / span if span > 0 else None, "ids": ids}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def rss_mb() -> float:
    import psutil
    return psutil.Process().memory_info().rss / 2**20


# --- one row

def bench_backend(name: str, prompt: str = PROMPT, max_new_tokens: int = MAX_NEW_TOKENS, model: str | None = None,
                  repeats: int = 3) -> dict:
    t = time.perf_counter()
    backend = create_backend(name, model, device="cpu" if name != "torch" else None)
    load_s = time.perf_counter() - t
    engine = Engine(backend)
    settings = GenerationSettings(max_new_tokens=max_new_tokens, temperature=0.0)
    engine.generate(prompt, settings.with_(max_new_tokens=4))   # warm-up: first-call allocations
    runs = [engine.generate(prompt, settings) for _ in range(repeats)]
    engine_peak = peak_rss_mb()  # before generate() below loads its own copy (a second ORT session)
    backend.generate_reference(runs[0].prompt_ids, 4)
    plain = [time_generate(backend, runs[0].prompt_ids, max_new_tokens) for _ in range(repeats)]
    metrics = [r.metrics() for r in runs]
    row = {
        "backend": name, "device": backend.device, "dtype": backend.dtype, "model": backend.model_name,
        "prompt_tokens": metrics[0].prompt_tokens, "new_tokens": metrics[0].output_tokens, "repeats": repeats,
        "engine_ttft_s": _median(m.ttft for m in metrics),
        "engine_decode_tps": _median(m.decode_tps for m in metrics),
        "generate_ttft_s": _median(p["ttft"] for p in plain),
        "generate_decode_tps": _median(p["decode_tps"] for p in plain),
        "engine_matches_generate": token_agreement(runs[0].output_ids, plain[0]["ids"])[0],
        "load_s": round(load_s, 2), "engine_peak_rss_mb": round(engine_peak, 1), "peak_rss_mb": round(peak_rss_mb(), 1), "rss_mb": round(rss_mb(), 1),
    }
    row["decode_ratio_engine_vs_generate"] = _ratio(row["engine_decode_tps"], row["generate_decode_tps"])
    row["ttft_ratio_engine_vs_generate"] = _ratio(row["engine_ttft_s"], row["generate_ttft_s"])
    if name.startswith("onnx-"):  # loaded after the RSS figures were taken, so they exclude it
        fp32 = Engine(create_backend("onnx", model, device="cpu")).generate(prompt, settings)
        row["agreement_with_fp32"], row["first_divergence_from_fp32"] = token_agreement(
            runs[0].output_ids, fp32.output_ids)
    return row


def _ratio(a, b) -> float | None:
    return round(a / b, 3) if a and b else None


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


# --- command line

def main(argv: list[str]) -> None:
    if argv[:1] == ["--one"]:
        print(json.dumps(bench_backend(argv[1])), flush=True)
        return
    for name in argv or DEFAULT_BACKENDS:
        print(row_in_subprocess("playground.bench_backends", "--one", name), flush=True)


def row_in_subprocess(module: str, flag: str, name: str, *extra: str) -> str:
    """`python -m module flag name [extra...]` in a fresh process (so one backend's memory never counts in
    another's); its last JSON line, or a JSON error row carrying the end of its stderr."""
    out = subprocess.run([sys.executable, "-m", module, flag, name, *extra], capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return lines[-1] if lines else json.dumps({"backend": name, "error": out.stderr.strip()[-500:]})


if __name__ == "__main__":
    main(sys.argv[1:])
