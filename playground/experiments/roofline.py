"""Why decode is slow: prefill lengths and decode batch sizes on the roofline, against ceilings measured here.

    sweep = run_roofline(source, min_length=32, max_length=512, points=4, max_batch=8)
    sweep.ceilings                 # matmul peak and memory bandwidth, measured on the spot (playground.roofline)
    sweep.points                   # RooflinePoints: FLOPs, bytes, measured and predicted seconds
    sweep.summary()                # measured / predicted for the longest prefill and the one-row decode

Each prompt length is one greedy Run of the source from exact ids (EOS ignored, DECODE_STEPS tokens):
its first Step is the prefill (measured: TTFT), the others one-row decode steps (measured: their
latency). On an ONNX backend, one batched decode step (`decode_rows`, the continuous-batching scheduler's
call) is timed at 1, 2, 4 … `max_batch` rows, every row at `min_length` positions (median of
BATCH_REPEATS calls after a warm-up): the same weights are read once for B rows, so the point moves
right as B grows. Seen with SmolLM2-135M (onnx-gguf4, 2 threads, a shared machine; bench_roofline):
a 1024-token prefill took 7.0 s against 3.7 s predicted (compute-bound, 1.9x), a one-row decode step
at depth ~1030 42 ms against 12.9 ms predicted (memory-bound, 3.3x): overhead, not bytes, dominates.

Left out: batched decode on torch (transformers' manager schedules it; no single step to time).
"""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field

from ..config import GenerationSettings
from ..roofline import (Ceilings, ModelShape, RooflinePoint, decode_cost, machine_ceilings, point, storage_of,
                        trace_points)
from ..units import precise_duration, times, tokens
from ..measure import Progress, ProgressFn, exact_length_ids, follow, require, warm_up
from .common import ResultBase, RunInfo
from .prefill import geometric_lengths
from ..trace import Phase, StopReason

DECODE_STEPS = 4
BATCH_REPEATS, BATCH_WARM_UP = 5, 2


@dataclass
class RooflineSweep(ResultBase):
    NAME = "roofline"
    info: RunInfo
    storage: str                                   # how the weights are stored (what the bytes assume)
    ceilings: Ceilings
    points: list[RooflinePoint] = field(default_factory=list)
    batch_note: str = ""                           # why batched decode was left out, when it was
    cancelled: bool = False
    elapsed: float = 0.0

    def summary(self) -> dict:
        prefill = [p for p in self.points if p.phase == Phase.PREFILL]
        single = [p.ratio for p in self.points if p.phase == Phase.DECODE and p.rows == 1]
        out = {"peak_gflops": self.ceilings.peak_flops / 1e9, "bandwidth_gb_s": self.ceilings.bandwidth / 1e9}
        if prefill:
            longest = max(prefill, key=lambda p: p.rows)
            out.update(prefill_tokens=longest.rows, prefill_measured_s=longest.measured_s,
                       prefill_predicted_s=longest.predicted_s, prefill_ratio=longest.ratio)
        if single:
            out["decode_ratio_median"] = statistics.median(single)
        return out

    def findings(self) -> list[str]:
        c = self.ceilings
        out = [f"this machine, measured here: matmul peak {c.peak_flops / 1e9:,.1f} GFLOP/s, memory bandwidth "
               f"{c.bandwidth / 1e9:,.1f} GB/s; below {c.ridge:,.1f} FLOPs per byte a step is memory-bound"]
        prefill = [p for p in self.points if p.phase == Phase.PREFILL]
        decode = [p for p in self.points if p.phase == Phase.DECODE]
        if prefill:
            p = max(prefill, key=lambda p: p.rows)
            out.append(f"prefill of {tokens(p.rows)}: {_against(p)}")
        single = [p for p in decode if p.rows == 1]
        if single:
            out.append(f"one decode step (one request): {_against(_median_point(single))}")
        batched = [p for p in decode if p.rows > 1]
        if batched:
            p = max(batched, key=lambda p: p.rows)
            out.append(f"one decode step for {p.rows} requests at once: {_against(p)}")
        if self.batch_note:
            out.append(self.batch_note)
        return out

    def to_dict(self) -> dict:
        """As ResultBase, each point with its derived figures too (intensity, achieved FLOP/s, ratio)."""
        out = super().to_dict()
        for d, p in zip(out["points"], self.points):
            d.update(intensity=p.intensity, achieved_flops=p.achieved_flops, ratio=p.ratio)
        return out


def _against(p: RooflinePoint) -> str:
    """A point's measured time against the roofline's prediction, in words."""
    return (f"{precise_duration(p.measured_s)} measured, {precise_duration(p.predicted_s)} predicted "
            f"({times(p.ratio)} the prediction, {p.bound}-bound)")


def _median_point(points: list[RooflinePoint]) -> RooflinePoint:
    """The point of median measured/predicted ratio (the upper one of an even count)."""
    return sorted(points, key=lambda p: p.ratio)[len(points) // 2]


def batched_decode_s(backend, rows: int, context: int, cancel: threading.Event | None = None) -> float | None:
    """Median seconds of one `decode_rows` call with `rows` rows at `context` positions; None when cancelled."""
    from ..backends.onnx_batch import KVSlots, decode_rows

    kv = KVSlots(backend, rows, context + 1)
    tokens, lengths = [(100 + r) % 256 for r in range(rows)], [context] * rows
    times = []
    for i in range(BATCH_WARM_UP + BATCH_REPEATS):
        if cancel is not None and cancel.is_set():
            return None
        start = time.perf_counter()
        decode_rows(backend, kv, tokens, lengths)
        if i >= BATCH_WARM_UP:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def batch_sizes(max_batch: int) -> list[int]:
    """1, 2, 4 … up to and including `max_batch`."""
    sizes = [1]
    while sizes[-1] * 2 <= max_batch:
        sizes.append(sizes[-1] * 2)
    return sizes if sizes[-1] == max_batch else sizes + [max_batch]


def run_roofline(source, min_length: int = 32, max_length: int = 512, points: int = 4, max_batch: int = 8,
                 progress: ProgressFn | None = None, cancel: threading.Event | None = None) -> RooflineSweep:
    require(source, "exact_ids", "the roofline")
    backend = getattr(source, "backend", None)
    if getattr(backend, "config", None) is None:
        raise ValueError(f"the roofline needs a local backend (the model's shape and storage); "
                         f"{source.info.name} has none")
    report = Progress(progress, cancel)
    shape, storage = ModelShape.of(backend.config), storage_of(backend)
    report(0.0, "measuring the machine's matmul peak and memory bandwidth")
    ceilings = machine_ceilings(cancel=cancel)
    result = RooflineSweep(RunInfo.of(source), storage.label, ceilings)
    if ceilings.cancelled:   # no ceilings, no predictions: nothing to draw against
        result.cancelled, result.elapsed = True, report.elapsed()
        report(1.0, StopReason.CANCELLED)
        return result
    lengths = geometric_lengths(min_length, max_length, points, (source.info.context_window or 2**31) - DECODE_STEPS)
    sizes = batch_sizes(max_batch) if backend.name.startswith("onnx") else []
    if not sizes:
        result.batch_note = f"batched decode needs an ONNX backend; {backend.name} runs one row a step here"
    total = len(lengths) + len(sizes)
    if not report.cancelled:
        report(0.1, "warming up")
        warm_up(source)
    for i, length in enumerate(lengths):
        if report.cancelled:
            break
        run = source.run_ids(exact_length_ids(source, length), GenerationSettings(max_new_tokens=DECODE_STEPS),
                             ignore_eos=True)
        result.points += trace_points(follow(run, report), shape, storage, ceilings)
        report(0.1 + 0.9 * (i + 1) / total, f"prefill of {length} tokens and {DECODE_STEPS} decode steps")
    for j, rows in enumerate(sizes):
        seconds = None if report.cancelled else batched_decode_s(backend, rows, min_length, cancel)
        if seconds is None:
            break
        cost = decode_cost(shape, storage, [min_length + 1] * rows)
        result.points.append(point(Phase.DECODE, cost, rows, min_length + 1, seconds, ceilings))
        report(0.1 + 0.9 * (len(lengths) + j + 1) / total, f"decode step of {rows} rows: {seconds * 1e3:.1f} ms")
    result.cancelled = report.cancelled or ceilings.cancelled
    result.elapsed = report.elapsed()
    report(1.0, StopReason.CANCELLED if result.cancelled else "done")
    return result
