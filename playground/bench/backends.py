"""One benchmark row per backend: the engine's step loop vs the runtime's own plain `generate()`.

    python -m playground.bench backends                # one JSON row per backend in the registry
    python -m playground.bench backends onnx-int8      # just the named ones

`bench_backend(name, prompt, max_new_tokens)` measures, on the same backend and the same chat prompt ids
(templated and tokenized once, outside both timed regions):
  - engine: TTFT and decode tok/s of a Run from those ids (metrics.py definitions)
  - generate: the same two figures from plain greedy `generate()` on the same ids, timed by a streamer
    whose first `put` is the prompt and every later `put` is one new token; for ONNX it uses the
    same I/O path as the engine (IO binding), and its own token count is reported
  - peak RSS of the process (ru_maxrss) and RSS now (psutil)
  - for the other ONNX variants (int8, int4, gguf4, ...): the share of greedy tokens identical to ONNX fp32's
Each figure is the median over `repeats` runs after one warm-up of each; engine and generate() runs
alternate, so a burst of load on the shared cores hits both sides alike. The CLI runs every backend in
its own process, so one backend's peak RSS does not include another's weights.

Left out: CUDA timings (torch on GPU is measured by the same code, but this machine has no GPU).
"""
from __future__ import annotations

import resource
import time
from dataclasses import dataclass

from ..backends import BACKENDS, create_backend
from ..compare import token_agreement
from ..config import GenerationSettings
from ..engine import Engine
from .process import row_in_subprocess
from .rows import Row, say
from .stats import median, ratio


@dataclass(frozen=True)
class BackendRow(Row):
    """The engine's step loop against the runtime's plain generate() on one backend (backends.bench_backend)."""

    OPTIONAL = ("agreement_with_fp32", "first_divergence_from_fp32")   # the ONNX variants only

    backend: str
    device: str
    dtype: str
    model: str
    prompt_tokens: int
    new_tokens: int
    generate_new_tokens: int
    repeats: int
    engine_ttft_s: float | None
    engine_decode_tps: float | None
    generate_ttft_s: float | None
    generate_decode_tps: float | None
    engine_matches_generate: float
    load_s: float
    peak_rss_mb: float
    rss_mb: float
    decode_ratio_engine_vs_generate: float | None
    ttft_ratio_engine_vs_generate: float | None
    agreement_with_fp32: float | None = None      # the share of greedy tokens identical to fp32's
    first_divergence_from_fp32: int | None = None


PROMPT = "Explain in two sentences why the KV cache makes decoding cheaper than prefill."
MAX_NEW_TOKENS = 64
DEFAULT_BACKENDS = list(BACKENDS)


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
                  repeats: int = 3) -> BackendRow:
    t = time.perf_counter()
    backend = create_backend(name, model, device="cpu" if name != "torch" else None)
    load_s = time.perf_counter() - t
    engine = Engine(backend)
    settings = GenerationSettings(max_new_tokens=max_new_tokens, temperature=0.0)
    _, ids = engine.prompt_ids(prompt, settings)   # templated and tokenized once, outside both timed regions
    engine.run_ids(ids, settings.with_(max_new_tokens=4)).wait()   # warm-up: first-call allocations
    backend.generate_reference(ids, 4)                              # (generate() opens its own session)
    runs, plain = [], []
    for _ in range(repeats):   # alternating, so a burst of load on the shared cores hits both sides alike
        runs.append(engine.run_ids(ids, settings).wait())
        plain.append(time_generate(backend, ids, max_new_tokens))
    metrics = [r.metrics() for r in runs]
    engine_ttft, engine_tps = median((m.ttft for m in metrics), 4), median((m.decode_tps for m in metrics), 4)
    plain_ttft, plain_tps = median((p["ttft"] for p in plain), 4), median((p["decode_tps"] for p in plain), 4)
    agreement = divergence = None
    if BACKENDS[name].runtime == "onnx" and BACKENDS[name].variant:
        fp32 = Engine(create_backend("onnx", model, device="cpu")).run_ids(ids, settings).wait()
        agreement, divergence = token_agreement(runs[0].output_ids, fp32.output_ids)
    return BackendRow(
        backend=name, device=backend.device, dtype=backend.dtype, model=backend.model_name,
        prompt_tokens=len(ids), new_tokens=metrics[0].output_tokens, generate_new_tokens=len(plain[0]["ids"]),
        repeats=repeats, engine_ttft_s=engine_ttft, engine_decode_tps=engine_tps, generate_ttft_s=plain_ttft,
        generate_decode_tps=plain_tps, engine_matches_generate=token_agreement(runs[0].output_ids, plain[0]["ids"])[0],
        load_s=round(load_s, 2), peak_rss_mb=round(peak_rss_mb(), 1), rss_mb=round(rss_mb(), 1),
        decode_ratio_engine_vs_generate=ratio(engine_tps, plain_tps, 3),
        ttft_ratio_engine_vs_generate=ratio(engine_ttft, plain_ttft, 3),
        agreement_with_fp32=agreement, first_divergence_from_fp32=divergence)


# --- command line

def main(argv: list[str]) -> None:
    """`python -m playground.bench backends [NAMES] [--model M]`: one row per backend, each in its own process."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench backends", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"backends (default: {' '.join(DEFAULT_BACKENDS)})")
    p.add_argument("--model", default=None, help="model spec (default: the bundled SmolLM2; 'tiny' for tests)")
    p.add_argument("--one", action="store_true", help="one backend, in this process (what each subprocess runs)")
    args = p.parse_args(argv)
    if args.one:
        say(bench_backend(args.names[0], model=args.model))
        return
    for name in args.names or DEFAULT_BACKENDS:
        say(row_in_subprocess("backends", name, "--one", label=name, model=args.model))
