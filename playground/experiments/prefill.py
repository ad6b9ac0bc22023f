"""Prefill scaling: how time to first token grows with prompt length, with a fitted a + bL + cL^2.

    sweep = run_prefill_sweep(source)              # lengths 16..1024 (8, geometric), 3 repeats each
    sweep.points[-1].median, sweep.points[-1].tokens_per_s
    sweep.fit.coefficients                         # (a, b, c): fixed cost, per-token cost, attention's L^2

Each sample is the TTFT of a one-token Run from exactly L ids of real text (the long document repeated;
no chat template, no tokenizing): prefill + synchronize + the pick of the first token, as the engine
times every request. Repeats go
round-robin over the lengths, so a burst of background load spreads over lengths instead of landing
on one. The fit is least squares over the per-length medians.

Left out: batching several prompts, and memory use of the activations during prefill.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from ..config import GenerationSettings
from ..run_view import format_seconds
from ..measure import Progress, ProgressFn, exact_length_ids, require, warm_up
from ..metrics import percentile
from .common import Fit, ResultBase, RunInfo, fit_polynomial
from ..units import formula
from ..trace import Phase, StopReason


@dataclass
class PrefillPoint:
    length: int             # prompt tokens
    times: list[float]      # seconds, one per repeat (measured)
    median: float
    q1: float               # 25th percentile
    q3: float               # 75th percentile
    min: float
    max: float
    tokens_per_s: float     # length / median


@dataclass
class PrefillSweep(ResultBase):
    NAME = str(Phase.PREFILL)   # the sweep is named after the phase it measures
    info: RunInfo
    repeats: int
    points: list[PrefillPoint] = field(default_factory=list)
    fit: Fit | None = None  # a + bL + cL^2 over the medians (seconds)
    cancelled: bool = False
    elapsed: float = 0.0    # seconds the whole experiment took

    def summary(self) -> dict:
        if not self.fit:
            return {}
        a, b, c = self.fit.coefficients
        return {"fit": f"{a:.4g} + {b:.4g}·L + {c:.4g}·L²", "r2": self.fit.r2,
                "max_length": self.points[-1].length, "max_length_median_s": self.points[-1].median}

    def findings(self) -> list[str]:
        if not self.points:
            return []
        first, last = self.points[0], self.points[-1]
        out = [f"shortest prompt ({first.length:,} tokens): median {format_seconds(first.median)}",
               f"longest prompt ({last.length:,} tokens): median {format_seconds(last.median)}, "
               f"{last.tokens_per_s:,.0f} tokens/s"]
        if self.fit and len(self.points) > 1:
            out.append(f"fit to the medians: TTFT ≈ {formula(self.fit.coefficients, 'L')}, where L is the "
                       f"prompt length in tokens (R² {self.fit.r2:.3f})")
        return out


def geometric_lengths(start: int = 16, stop: int = 1024, count: int = 8, limit: int | None = None) -> list[int]:
    """Distinct integer lengths spaced geometrically from start to stop, capped at limit - 1.

    >>> geometric_lengths(16, 1024, 7)
    [16, 32, 64, 128, 256, 512, 1024]
    """
    if limit is not None:
        stop = min(stop, limit - 1)
    start = max(1, min(start, stop))
    return sorted({int(round(x)) for x in np.geomspace(start, stop, max(1, count))})


def run_prefill_sweep(source, lengths: list[int] | None = None, repeats: int = 3,
                      progress: ProgressFn | None = None, cancel: threading.Event | None = None) -> PrefillSweep:
    require(source, "exact_ids", "the prefill sweep")
    window = source.info.context_window or 2**31
    lengths = sorted(set(lengths or geometric_lengths(limit=window)))
    if not lengths or lengths[0] < 1 or lengths[-1] >= window:
        raise ValueError(f"prompt lengths must be between 1 and {window - 1}, got {lengths}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    report = Progress(progress, cancel)
    result = PrefillSweep(RunInfo.of(source), repeats)
    ids = exact_length_ids(source, lengths[-1])
    one_token = GenerationSettings(max_new_tokens=1)
    samples: dict[int, list[float]] = {n: [] for n in lengths}
    # progress weighted by tokens: a 1024-token prefill costs far more than a 16-token one
    total, done = repeats * sum(lengths), 0
    report(0.0, "warming up")
    warm_up(source)
    for r in range(repeats):
        for n in lengths:
            if report.cancelled:
                result.cancelled = True
                break
            seconds = source.run_ids(ids[:n], one_token).wait().steps[0].time   # TTFT
            samples[n].append(seconds)
            done += n
            report(done / total, f"prefill {n} tokens (repeat {r + 1}/{repeats}): {seconds * 1000:.0f} ms")
        if result.cancelled:
            break
    result.points = [_point(n, ts) for n, ts in samples.items() if ts]
    result.fit = fit_polynomial([p.length for p in result.points], [p.median for p in result.points], 2)
    result.elapsed = report.elapsed()
    report(1.0, StopReason.CANCELLED if result.cancelled else "done")
    return result


def _point(length: int, times: list[float]) -> PrefillPoint:
    q1, med, q3 = (percentile(times, q) for q in (25, 50, 75))
    return PrefillPoint(length, list(times), med, q1, q3, float(min(times)), float(max(times)), length / med)
