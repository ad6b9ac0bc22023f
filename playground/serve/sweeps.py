"""The two sweeps that explain batching, as vLLM's `bench serve`, GenAI-Perf and guidellm report them.

    sweep = run_batch_sweep(scheduler, sizes=(1, 2, 4, 8, 16), new_tokens=64)
    [(p.concurrency, p.per_request_tps, p.total_tps) for p in sweep.points]   # each slows, the total rises
    curve = run_rate_sweep(scheduler, workload, rates=[0.5, 1, 2], ttft_slo=1.0, tpot_slo=0.2)
    [(p.rate, p.output_tps, p.ttft_p95, p.goodput_rps) for p in curve.points]  # the latency-throughput curve
    chunks = run_chunk_sweep(lambda c: batching_at(c), interference_workload, sizes=(32, 64, 128, 256, 512))
    [(p.prefill_chunk, p.document_ttft, p.itl_p95) for p in chunks.points]    # TTFT falls, ITL p95 rises

Batch-size sweep: `b` copies of one request, all at once, EOS ignored (every request decodes exactly
`new_tokens`). Per request: the median of each request's own decode tok/s ((N-1)/(tN-t1)) and the
median of their TPOTs, and the most rows a step carried (where the source's Steps say). Total: the
output tokens all requests made while all of them were decoding (from the last first token to the
first last token) over that window; with no such window (one at a time) all tokens over the span from
the first token to the last. Decode is memory-bound: reading the weights once serves the whole batch,
so the total rises while each request slows.

Rate sweep: the same requests (classes, order) with Poisson arrivals redrawn at each rate; per rate the
throughput, p50/p95 TTFT and TPOT, and goodput: requests/s that finished within both SLOs.

Chunk sweep (Sarathi-Serve's trade-off): one workload with a long prompt among decoding requests (the
"a long document among chatters" preset, serve/presets.py) on our batching at each prefill chunk. Per size
the long prompt's TTFT (its prefill takes fewer iterations as the chunk grows) and the decoding requests'
inter-token latency p95 (each iteration that carries a chunk holds their next token for longer), with the
p95 of only the tokens whose interval held a prefill pass. `chunk_trend` reads the two targets off the
points: the TTFT falls and the ITL p95 rises from the smallest chunk to the largest (and the ITL p95 of the
tokens that waited for a chunk, which sees each stall however few tokens it holds up).

    >>> pts = [ChunkPoint(32, 2.0, 0.05, 0.06, 0.04, 28), ChunkPoint(512, 1.2, 0.11, 0.2, 0.04, 2)]
    >>> chunk_trend(pts)
    {'document_ttft_falls': True, 'itl_p95_rises': True, 'itl_p95_with_chunk_rises': True}
    >>> print(chunk_sentence(pts))
    Prefill chunk 32: the long prompt's TTFT 2.00 s, the decoding requests' ITL p95 50 ms; 512: 1.20 s, 110 ms. From 32 to 512 the long prompt's TTFT fell (0.60×), the ITL p95 over every decoding token rose (2.20×) and that of the tokens that waited for a chunk rose (3.33×).
    >>> pts[1] = ChunkPoint(512, 1.2, 0.02, 0.2, 0.02, 2)   # fewer tokens waited: the p95 over all fell
    >>> print(chunk_trend_sentence(*pts))   # doctest: +NORMALIZE_WHITESPACE
    From 32 to 512 the long prompt's TTFT fell (0.60×), the ITL p95 over every decoding token fell (0.40×, against the
    expectation) and that of the tokens that waited for a chunk rose (3.33×). Each chunk held its iteration longer, but
    at 512 the long prompt took 2 prefill passes against 28 at 32: fewer tokens waited for one, too few for the p95
    over every token to see them.

Left out: warm-up runs between points (the first point pays any first-call cost; it is labelled).
"""
from __future__ import annotations

import statistics
import threading
from dataclasses import asdict, dataclass, field

from ..measure import Progress, ProgressFn
from ..metrics import percentile
from ..charts.serve import decode_itl
from ..prompts import SHORT_QUESTION
from .summary import goodput, served, throughput
from .workload import RequestClass, Workload

BATCH_SIZES = (1, 2, 4, 8, 16)
RATES = (0.25, 0.5, 1, 2)   # requests/s
CHUNK_SIZES = (32, 64, 128, 256, 512)
LONG_CLASS = "document"   # the interference workload's long prompt (serve/presets.py)


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
class ChunkPoint:
    prefill_chunk: int              # prompt tokens read per iteration
    document_ttft: float | None     # the long prompt's TTFT (s)
    itl_p95: float | None           # the decoding requests' inter-token latency p95 (s), every decode step
    itl_p95_with_chunk: float | None  # the same, of the steps whose interval held a prefill pass
    itl_p50: float | None
    document_passes: int            # the long prompt's prefill passes


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


def run_chunk_sweep(scheduler_at, workload: Workload, sizes=CHUNK_SIZES, progress: ProgressFn | None = None,
                    cancel: threading.Event | None = None, live: list | None = None) -> Sweep:
    """`workload` (a long prompt of class LONG_CLASS among decoding requests) on `scheduler_at(chunk)`, our
    batching at each prefill chunk in `sizes`."""
    sizes = sorted({int(x) for x in sizes})
    if not sizes or not all(1 <= x <= 4096 for x in sizes):
        raise ValueError("a chunk sweep needs prefill chunks between 1 and 4096 tokens, e.g. 32,64,128,256,512")
    if not any(r.cls == LONG_CLASS for r in workload.requests):
        raise ValueError(f"a chunk sweep's workload needs a long prompt of class {LONG_CLASS!r} among its requests")
    report = Progress(progress, cancel)
    first = scheduler_at(sizes[0])
    sweep = Sweep("chunk", first.name, first.source.info.describe(),
                  {"sizes": sizes, "requests": len(workload.requests), "long_class": LONG_CLASS})
    if live is not None:
        live.append(sweep)
    for k, size in enumerate(sizes):
        if report.cancelled:
            break
        scheduler = first if k == 0 else scheduler_at(size)
        result = scheduler.run(workload, lambda f, m: report((k + f) / len(sizes), f"chunk {size}: {m}"), cancel)
        if result.cancelled:
            break
        sweep.points.append(chunk_point(result, size))
    sweep.cancelled, sweep.elapsed = report.cancelled, report.elapsed()
    return sweep


def chunk_point(result, size: int) -> ChunkPoint:
    """One point of a chunk sweep from a finished run: the long prompt's TTFT, the others' decode ITL."""
    itl = [(latency, carried) for _, latency, carried, cls, _ in decode_itl(result) if cls != LONG_CLASS]
    longs = [r for r in served(result) if r.request.cls == LONG_CLASS]
    return ChunkPoint(size, percentile([r.ttft for r in longs], 50), percentile([x for x, _ in itl], 95),
                      percentile([x for x, c in itl if c], 95), percentile([x for x, _ in itl], 50),
                      sum(len(r.chunks) for r in result.records if r.request.cls == LONG_CLASS))


def chunk_trend(points) -> dict[str, bool | None]:
    """The chunk sweep's targets, smallest chunk against largest: the long prompt's TTFT falls, the decoding requests'
    ITL p95 rises, and so does the ITL p95 of their tokens that waited for a chunk (None: fewer than two points, or a
    figure missing). The p95 over every token can fall with a large chunk although each stall grows: fewer passes
    hold up fewer tokens, and when they are under 5% of all the p95 no longer sees them."""
    pts = sorted(points, key=lambda p: p.prefill_chunk)
    if len(pts) < 2:
        return dict.fromkeys(TRENDS)
    a, b = pts[0], pts[-1]
    out = {}
    for key, (attr, rises) in TRENDS.items():
        x, y = getattr(a, attr), getattr(b, attr)
        out[key] = None if x is None or y is None else (y > x if rises else y < x)
    return out


TRENDS = {"document_ttft_falls": ("document_ttft", False), "itl_p95_rises": ("itl_p95", True),
          "itl_p95_with_chunk_rises": ("itl_p95_with_chunk", True)}   # key: (ChunkPoint field, whether it should rise)


def chunk_sentence(points) -> str:
    """The chunk sweep in words, every figure from its points."""
    pts = sorted(points, key=lambda p: p.prefill_chunk)
    if not pts:
        return "No chunk size was measured."

    def s(x, scale=1.0, fmt=".2f", unit=" s"):
        return "missing" if x is None else f"{x * scale:{fmt}}{unit}"
    head, rest = pts[0], pts[1:]
    parts = [f"Prefill chunk {head.prefill_chunk}: the long prompt's TTFT {s(head.document_ttft)}, the decoding "
             f"requests' ITL p95 {s(head.itl_p95, 1e3, '.0f', ' ms')}"]
    parts += [f"{p.prefill_chunk}: {s(p.document_ttft)}, {s(p.itl_p95, 1e3, '.0f', ' ms')}" for p in rest]
    text = "; ".join(parts) + "."
    return text + (" " + chunk_trend_sentence(head, pts[-1]) if rest else "")


TREND_NAMES = {"document_ttft": "the long prompt's TTFT", "itl_p95": "the ITL p95 over every decoding token",
               "itl_p95_with_chunk": "that of the tokens that waited for a chunk"}


def chunk_trend_sentence(a: ChunkPoint, b: ChunkPoint) -> str:
    """Smallest chunk against largest: each figure's computed word (rose, fell) and ratio, whether it went the way
    expected (the TTFT falls, both ITL p95s rise), and why the p95 over every token can fall while the tokens that
    waited for a chunk waited longer: the document took fewer passes, so fewer tokens waited for one."""
    said, expected = [], {attr: rises for attr, rises in TRENDS.values()}
    for attr, name in TREND_NAMES.items():
        x, y = getattr(a, attr), getattr(b, attr)
        if x is None or y is None:
            continue
        word = "rose" if y > x else "fell" if y < x else "did not change"
        agreed = "" if (word == "rose") == expected[attr] and word != "did not change" else ", against the expectation"
        said.append(f"{name} {word}" + (f" ({y / x:.2f}×{agreed})" if x else agreed))
    if not said:
        return ""
    text = f"From {a.prefill_chunk} to {b.prefill_chunk} " + ", ".join(said[:-1]) + \
        (" and " if len(said) > 1 else "") + said[-1] + "."
    return text + _fewer_passes_reason(a, b)


def _fewer_passes_reason(a: ChunkPoint, b: ChunkPoint) -> str:
    """Why the ITL p95 over every token did not rise while that of the tokens that waited for a chunk did ("" when
    that is not what the points show)."""
    every, waited = (a.itl_p95, b.itl_p95), (a.itl_p95_with_chunk, b.itl_p95_with_chunk)
    if None in every or None in waited or every[1] > every[0] or waited[1] <= waited[0]:
        return ""
    return (f" Each chunk held its iteration longer, but at {b.prefill_chunk} the long prompt took "
            f"{b.document_passes} prefill passes against {a.document_passes} at {a.prefill_chunk}: fewer tokens "
            "waited for one, too few for the p95 over every token to see them.")
