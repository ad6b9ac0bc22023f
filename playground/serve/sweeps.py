"""The two sweeps that explain batching, as vLLM's `bench serve`, GenAI-Perf and guidellm report them.

    sweep = run_batch_sweep(scheduler, sizes=(1, 2, 4, 8, 16), new_tokens=64)
    [(p.concurrency, p.per_request_tps, p.total_tps) for p in sweep.points]   # each slows, the total rises
    curve = run_rate_sweep(scheduler, workload, rates=[0.5, 1, 2], ttft_slo=1.0, tpot_slo=0.2)
    [(p.rate, p.output_tps, p.ttft_p95, p.goodput_rps) for p in curve.points]  # the latency-throughput curve

Batch-size sweep: `b` copies of one request, all at once, EOS ignored (every request decodes exactly
`new_tokens`). Per request: the median of each request's own decode tok/s ((N-1)/(tN-t1)) and the
median of their TPOTs, and the most rows a step carried (where the source's Steps say). Total: the
output tokens all requests made while all of them were decoding (from the last first token to the
first last token) over that window; with no such window (one at a time) all tokens over the span from
the first token to the last. Decode is memory-bound: reading the weights once serves the whole batch,
so the total rises while each request slows.

Rate sweep: the same requests (classes, order) with Poisson arrivals redrawn at each rate; per rate the
throughput, p50/p95 TTFT and TPOT, and goodput: requests/s that finished within both SLOs.

Left out: warm-up runs between points (the first point pays any first-call cost; it is labelled).
"""
from __future__ import annotations

import statistics
import threading
from dataclasses import asdict, dataclass, field

from ..measure import Progress, ProgressFn
from ..prompts import SHORT_QUESTION
from .summary import goodput, percentile, served, throughput
from .workload import RequestClass, Workload

BATCH_SIZES = (1, 2, 4, 8, 16)


@dataclass
class BatchPoint:
    concurrency: int
    per_request_tps: float | None   # median of the requests' own decode tok/s
    total_tps: float | None         # all requests' output tokens/s while all decoded
    output_tokens: int
    tpot_s: float | None = None     # median of the requests' TPOT ((tN-t1)/(N-1))
    rows_max: int | None = None     # the most rows one forward pass carried (Step.rows), None where unknown


@dataclass
class RatePoint:
    rate: float                     # offered: requests per second (Poisson)
    output_tps: float | None
    requests_per_s: float | None
    ttft_p50: float | None
    ttft_p95: float | None
    tpot_p50: float | None
    tpot_p95: float | None
    e2e_p50: float | None
    goodput_rps: float | None       # requests/s that met both SLOs
    met: int
    of: int


@dataclass
class Sweep:
    kind: str                       # "batch" | "rate"
    scheduler: str
    source: str
    settings: dict
    points: list = field(default_factory=list)
    cancelled: bool = False
    elapsed: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def decode_window_tps(result) -> float | None:
    recs = served(result)
    if not recs:
        return None
    start, end = max(r.first_token for r in recs), min(r.last_token for r in recs)
    times = [t for r in recs for t, _ in r.token_times()]
    if end - start > 0 and len(recs) > 1:
        return sum(start < t <= end for t in times) / (end - start)
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else None


def run_batch_sweep(scheduler, sizes=BATCH_SIZES, new_tokens: int = 64, prompt: str = SHORT_QUESTION,
                    progress: ProgressFn | None = None, cancel: threading.Event | None = None,
                    live: list | None = None) -> Sweep:
    """`live`: a list the Sweep is appended to at once, so a view can draw its points as they come."""
    report = Progress(progress, cancel)
    sweep = Sweep("batch", scheduler.name, scheduler.source.info.describe(),
                  {"sizes": list(sizes), "new_tokens": new_tokens, "prompt": prompt, "ignore_eos": True})
    if live is not None:
        live.append(sweep)
    for k, size in enumerate(sizes):
        if report.cancelled:
            break
        workload = Workload.build([RequestClass("request", prompt, new_tokens, 1.0)], size, ignore_eos=True)
        result = scheduler.run(workload, lambda f, m: report((k + f) / len(sizes), f"{size} at once: {m}"), cancel)
        if result.cancelled:
            break
        recs = served(result)
        rates, tpots = [r.trace.metrics().decode_tps for r in recs], [r.tpot for r in recs if r.tpot]
        rows = [s.rows for r in recs for s in r.steps if s.rows]
        sweep.points.append(BatchPoint(size, statistics.median([r for r in rates if r]) if any(rates) else None,
                                       decode_window_tps(result), sum(r.output_tokens for r in result.records),
                                       statistics.median(tpots) if tpots else None, max(rows, default=None)))
    sweep.cancelled, sweep.elapsed = report.cancelled, report.elapsed()
    return sweep


def run_rate_sweep(scheduler, workload: Workload, rates, ttft_slo: float | None = None, tpot_slo: float | None = None,
                   progress: ProgressFn | None = None, cancel: threading.Event | None = None,
                   live: list | None = None) -> Sweep:
    rates = sorted(float(r) for r in rates)
    if not rates or not all(0.01 <= r <= 1000 for r in rates):
        raise ValueError("a rate sweep needs rates between 0.01 and 1000 requests per second")
    report = Progress(progress, cancel)
    sweep = Sweep("rate", scheduler.name, scheduler.source.info.describe(),
                  {"rates": rates, "requests": len(workload.requests), "ttft_slo_s": ttft_slo, "tpot_slo_s": tpot_slo})
    if live is not None:
        live.append(sweep)
    for k, rate in enumerate(rates):
        if report.cancelled:
            break
        result = scheduler.run(workload.scaled(rate), lambda f, m: report((k + f) / len(rates), f"{rate:g} req/s: {m}"),
                               cancel)
        if result.cancelled:
            break
        recs, tp, good = served(result), throughput(result), goodput(result, ttft_slo, tpot_slo)
        ttft, tpot = [r.ttft for r in recs], [r.tpot for r in recs]
        sweep.points.append(RatePoint(rate, tp["output_tps"], tp["requests_per_s"], percentile(ttft, 50),
                                      percentile(ttft, 95), percentile(tpot, 50), percentile(tpot, 95),
                                      percentile([r.e2e for r in recs], 50), good["goodput_rps"], good["met"],
                                      good["of"]))
    sweep.cancelled, sweep.elapsed = report.cancelled, report.elapsed()
    return sweep
