"""The roofline row of `make bench`: does the roofline explain a long prefill, and how far off is decode?

    python -m playground.bench roofline               # one JSON row: the bundled model on onnx-gguf4 (~1 minute)
    python -m playground.bench roofline --model tiny  # the tiny model on onnx fp32 (what the tests run)

Method, in one process: the machine's ceilings (playground.roofline.machine_ceilings: ONNX Runtime
MatMul peak and ReduceSum bandwidth, the model's thread count, measured here); then, after a warm-up,
REPEATS greedy Runs of the default backend from PROMPT_TOKENS exact ids (capped below the context window),
DECODE_STEPS new tokens each, EOS ignored. Prefill: the best TTFT of the Runs against the roofline's
prediction for that prompt (compute-bound: the peak should explain it). Decode: the median of every
decode step's measured / predicted time (memory-bound on paper; on a 135M model on 2 cores the fixed
cost of a step -- graph launch, norms, attention, sampling -- dominates: printed, not gated).

Target (issue 26):
    prefill_off_by   max(measured/predicted, predicted/measured) for the prefill   <= 2
`targets_met` says whether it holds; decode_ratio is printed beside it, not gated.

Left out: batched decode (the `roofline` experiment and the batch row measure it) and a GPU.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..trace import Phase
from .rows import Row, parser, say_timed
from .stats import targets_met, targets_text


@dataclass(frozen=True, kw_only=True)
class RooflineRow(Row):
    """Measured prefill and decode against the machine's roofline (roofline.roofline_row)."""

    bench: str = field(default="roofline", init=False)
    backend: str
    model: str
    storage: str                          # the weights' storage (e.g. fp32, 4-bit)
    threads: int
    peak_gflops: float                    # the measured MatMul peak, GFLOP/s
    bandwidth_gb_s: float                 # the measured ReduceSum bandwidth, GB/s
    ridge_flop_per_byte: float
    peak_method: str
    bandwidth_method: str
    prefill_tokens: int
    prefill_gflop: float                  # the prefill's work, GFLOP
    prefill_measured_ms: float            # the best TTFT of the runs
    prefill_predicted_ms: float
    prefill_bound: str                    # "compute" or "memory"
    prefill_ratio: float                  # measured / predicted
    prefill_off_by: float                 # max(ratio, 1 / ratio)
    prefill_achieved_gflops: float
    decode_steps: int
    decode_bound: str | None
    decode_measured_ms: float | None      # medians over the decode steps
    decode_predicted_ms: float | None
    decode_ratio: float | None
    targets: dict[str, str]
    targets_met: dict[str, bool | None]


PROMPT_TOKENS, DECODE_STEPS, REPEATS = 1024, 16, 2
TARGETS = {"prefill_off_by": ("<=", 2.0)}


def off_by(ratio: float) -> float:
    """How many times apart two figures are, whichever is larger.

    >>> off_by(0.5), off_by(1.5)
    (2.0, 1.5)
    """
    return max(ratio, 1 / ratio)


def roofline_row(model: str | None = None, backend: str | None = None, prompt_tokens: int = PROMPT_TOKENS,
                 decode_steps: int = DECODE_STEPS, repeats: int = REPEATS) -> RooflineRow:
    from ..backends import create_backend, default_backend_name
    from ..config import GenerationSettings
    from ..engine import Engine
    from ..measure import exact_length_ids
    from ..roofline import ModelShape, machine_ceilings, storage_of, trace_points

    engine = Engine(create_backend(backend or default_backend_name("cpu", model), model, device="cpu"))
    engine.warm_up()
    ceilings = machine_ceilings()
    backend_ = engine.backend
    shape, storage = ModelShape.of(backend_.config), storage_of(backend_)
    prompt_tokens = min(prompt_tokens, backend_.context_window - decode_steps - 1)
    ids = exact_length_ids(engine, prompt_tokens)
    points = []
    for _ in range(repeats):
        trace = engine.run_ids(ids, GenerationSettings(max_new_tokens=decode_steps + 1), ignore_eos=True).wait()
        points += trace_points(trace, shape, storage, ceilings)
    prefill = min((p for p in points if p.phase == Phase.PREFILL), key=lambda p: p.measured_s)
    decode = [p for p in points if p.phase == Phase.DECODE]
    gated = {"prefill_off_by": round(off_by(prefill.ratio), 2)}
    return RooflineRow(
        backend=backend_.name, model=backend_.model_name, storage=storage.label, threads=ceilings.threads,
        peak_gflops=round(ceilings.peak_flops / 1e9, 1), bandwidth_gb_s=round(ceilings.bandwidth / 1e9, 1),
        ridge_flop_per_byte=round(ceilings.ridge, 2), peak_method=ceilings.peak_method,
        bandwidth_method=ceilings.bandwidth_method, prefill_tokens=prompt_tokens,
        prefill_gflop=round(prefill.flops / 1e9, 2), prefill_measured_ms=round(prefill.measured_s * 1e3, 1),
        prefill_predicted_ms=round(prefill.predicted_s * 1e3, 1), prefill_bound=prefill.bound,
        prefill_ratio=round(prefill.ratio, 2), **gated,
        prefill_achieved_gflops=round(prefill.achieved_flops / 1e9, 1),
        decode_steps=len(decode), decode_bound=decode[0].bound if decode else None,
        decode_measured_ms=round(statistics.median(p.measured_s for p in decode) * 1e3, 2) if decode else None,
        decode_predicted_ms=round(statistics.median(p.predicted_s for p in decode) * 1e3, 2) if decode else None,
        decode_ratio=round(statistics.median(p.ratio for p in decode), 2) if decode else None,
        targets=targets_text(TARGETS), targets_met=targets_met(gated, TARGETS))


def main(argv: list[str]) -> None:
    p = parser("roofline", __doc__)
    p.add_argument("--backend", default=None)
    p.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS)
    args = p.parse_args(argv)
    say_timed(lambda: roofline_row(args.model, args.backend, args.prompt_tokens))
