"""The KV-memory rows of `make bench`: prefix caching, preemption under a KV budget, the prefill-chunk sweep.

    python -m playground.bench kvmem                  # three JSON rows on the default CPU backend
    python -m playground.bench kvmem --model tiny --requests 4 --sizes 32,512   # what the test suite runs

1. prefix-cache: the "shared system prompt" preset (serve/presets.py: a ~800-token shared instruction, 16
   short questions, seeded Poisson arrivals at 2 requests/s, 16 new tokens each) on our batching, without and
   with the prefix cache, in this process: TTFT p50 and p95 of each, their ratio (target: with / without
   <= 0.25), the hit rate (prompt tokens copied from cached blocks / prompt tokens), whether every
   request's greedy tokens are the same, and where the TTFT with the cache went (ttft_parts: waiting, the
   copy, its own prefill passes, the rest of its time in a slot; p50 for the requests that found a cached
   prefix and for those that computed their whole prompt).
2. preemption: the "memory pressure" preset (12 chats of 128 tokens, EOS ignored, all at once) without a
   budget and under a KV budget of a third of its demand: preemptions (target: > 0), completed requests,
   whether the output is identical, output tok/s of each and their ratio (printed, not a target).
3. chunk-sweep: the "a long document among chatters" preset at prefill chunks 32…512 (serve/sweeps.py's
   run_chunk_sweep, as the Serve tab's chunk sweep): the document's TTFT and the chatters' decode ITL p95 per
   size, and a sentence of them (targets: the TTFT falls and the ITL p95 rises from the smallest chunk to the
   largest; printed as met or not, never tuned for: timings on a shared machine are noisy).

A two-request warm-up runs first (the pool's first calls of both graphs). Figures, not tests.
Left out: llama.cpp's or vLLM's prefix caching on the same workload (their own servers' figures).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..config import GenerationSettings
from ..serve import SCHEDULERS
from ..serve.presets import PRESETS, identical_requests
from ..serve.batching import BatchConfig
from ..metrics import percentile
from ..serve.summary import served, throughput
from ..serve.sweeps import CHUNK_SIZES, chunk_sentence, chunk_trend, run_chunk_sweep
from .rows import Row, parser, say_timed
from .serve import load
from .stats import ratio, targets_met, targets_text


@dataclass(frozen=True, kw_only=True)
class PrefixCacheRow(Row):
    """The shared-system-prompt workload on our batching without and with the prefix cache (kvmem.prefix_cache_row).
    `without` and `with_cache`: ttft_p50_s, ttft_p95_s, output_tps; `with_cache` also ttft_parts_p50 (where its
    TTFT went: kvmem.ttft_parts)."""

    bench: str = field(default="prefix-cache", init=False)
    backend: str
    requests: int
    rate_rps: float | None                # Poisson arrivals, requests/s
    prompt_tokens_min: int                # the shortest prompt (the shared instruction and a question)
    cache_positions: int                  # the prefix cache's budget
    without: dict
    with_cache: dict
    hit_rate: float | None                # prompt tokens copied from cached blocks / prompt tokens looked up
    cached_tokens: int
    prompt_tokens: int
    output_identical: bool                # every request's greedy tokens, with and without
    ttft_p50_ratio: float | None          # with / without
    targets: dict[str, str]
    targets_met: dict[str, bool | None]
    finding: str


@dataclass(frozen=True, kw_only=True)
class PreemptionRow(Row):
    """The memory-pressure workload without a KV budget and under one (kvmem.preemption_row)."""

    bench: str = field(default="preemption", init=False)
    backend: str
    requests: int
    kv_budget: int                        # positions the running requests may hold in all
    demand_positions: int                 # prompt + output positions of every request
    preemptions: int
    preempted_requests: int
    recomputed_positions: int             # prefilled again after a preemption
    copied_back_positions: int            # copied back from the prefix cache instead
    completed: int
    output_identical: bool
    requests_identical: int               # requests whose tokens equal the unpressured run's
    unpressured_output_tps: float | None
    pressured_output_tps: float | None
    throughput_ratio: float | None        # pressured / unpressured (printed, not a target)
    targets: dict[str, str]
    targets_met: dict[str, bool | None]
    finding: str


@dataclass(frozen=True, kw_only=True)
class ChunkSweepRow(Row):
    """A long document among chatters at each prefill chunk (kvmem.chunk_sweep_row). Each point: prefill_chunk,
    document_ttft_s, chatters_itl_p95_s, chatters_itl_p95_with_chunk_s (tokens whose interval held a prefill
    pass), chatters_itl_p50_s, document_passes (its prefill passes)."""

    bench: str = field(default="chunk-sweep", init=False)
    backend: str
    requests: int
    sizes: list[int]
    points: list[dict]
    targets: dict[str, str]
    targets_met: dict[str, bool | None]   # first size against the last; None: a figure is missing
    finding: str = ""                      # every size's two figures and the trend, in one sentence


BASE = BatchConfig(slots=16, prefill_chunk=128)
CHUNKS = CHUNK_SIZES
TARGETS = {"ttft_p50_ratio": ("<=", 0.25)}


def _r(x, digits: int = 4):
    return None if x is None else round(x, digits)


def _preset_runs(engine, name: str, requests: int | None, base: BatchConfig = BASE):
    """The preset's workload and its A and B results (A first), on `engine`."""
    preset = PRESETS[name]
    workload = preset.build(engine, requests or preset.requests, preset.rate, 0)
    count = lambda p: len(engine.prompt_ids(p, GenerationSettings())[1])   # noqa: E731
    a, b = preset.configs(workload, count, base)
    return workload, count, [SCHEDULERS["batching"].create(engine, batch=c).run(workload) for c in (a, b)]


def _ids(result):
    return [r.trace.output_ids if r.trace else None for r in result.records]


def _ttft(result, q: float, cls: str | None = None):
    return _r(percentile([r.ttft for r in served(result) if cls is None or r.request.cls == cls], q))


def ttft_parts(result) -> dict:
    """Where the requests' TTFT went, p50 per group (requests that found a cached prefix, and those that computed
    their whole prompt): waiting (arrival to admission), the copy of cached blocks, the passes that read its own
    prompt, and the rest of the time it held a slot before its first token (other requests' decode steps and
    prefill passes in the same iterations, and waiting for blocks another request is still reading).

    >>> from types import SimpleNamespace as S
    >>> r = S(steps=[1], ttft=1.0, waiting=0.2, prefill=0.8, cached_tokens=32, cache_copies=[(0.2, 0.25, 32)],
    ...       chunks=[(0.6, 0.9, 9)])
    >>> ttft_parts(S(records=[r]))["found_cached"]
    {'requests': 1, 'ttft_s': 1.0, 'waiting_s': 0.2, 'copy_s': 0.05, 'own_prefill_s': 0.3, 'other_work_s': 0.45}
    """
    groups = {"found_cached": [], "computed_whole": []}
    for r in result.records:
        if r.steps and r.prefill is not None:
            groups["found_cached" if r.cached_tokens else "computed_whole"].append(r)
    out = {}
    for key, recs in groups.items():
        copy = [sum(b - a for a, b, _ in r.cache_copies) for r in recs]
        own = [sum(b - a for a, b, _ in r.chunks) for r in recs]
        other = [r.prefill - c - o for r, c, o in zip(recs, copy, own)]
        out[key] = {"requests": len(recs), "ttft_s": _r(percentile([r.ttft for r in recs], 50)),
                    "waiting_s": _r(percentile([r.waiting for r in recs], 50)), "copy_s": _r(percentile(copy, 50)),
                    "own_prefill_s": _r(percentile(own, 50)), "other_work_s": _r(percentile(other, 50))}
    return out


def prefix_cache_row(engine, name: str, requests: int | None = None) -> PrefixCacheRow:
    workload, count, (off, on) = _preset_runs(engine, "shared system prompt", requests)
    pool = on.pool
    row = {"ttft_p50_ratio": ratio(_ttft(on, 50), _ttft(off, 50), 3)}
    shared = min(count(r.prompt) for r in workload.requests)
    return PrefixCacheRow(backend=name, requests=len(workload.requests), rate_rps=workload.rate,
                          prompt_tokens_min=shared, cache_positions=pool["prefix_cache_blocks"] * pool["block_size"],
                          without={"ttft_p50_s": _ttft(off, 50), "ttft_p95_s": _ttft(off, 95),
                                   "output_tps": _r(throughput(off)["output_tps"], 2)},
                          with_cache={"ttft_p50_s": _ttft(on, 50), "ttft_p95_s": _ttft(on, 95),
                                      "output_tps": _r(throughput(on)["output_tps"], 2),
                                      "ttft_parts_p50": ttft_parts(on)},
                          hit_rate=_r(pool["cached"] / pool["looked_up"] if pool["looked_up"] else None, 3),
                          cached_tokens=pool["cached"], prompt_tokens=pool["looked_up"],
                          output_identical=_ids(off) == _ids(on), ttft_p50_ratio=row["ttft_p50_ratio"],
                          targets=targets_text(TARGETS), targets_met=targets_met(row, TARGETS),
                          finding=PRESETS["shared system prompt"].finding(off, on))


def preemption_row(engine, name: str, requests: int | None = None) -> PreemptionRow:
    workload, _, (free, pressed) = _preset_runs(engine, "memory pressure", requests)
    preemptions = sum(len(r.preemptions) for r in pressed.records)
    completed = sum(r.stop_reason in ("eos", "length") for r in pressed.records)
    identical = _ids(free) == _ids(pressed)
    tps = [_r(throughput(x)["output_tps"], 2) for x in (free, pressed)]
    return PreemptionRow(backend=name, requests=len(workload.requests), kv_budget=pressed.pool["kv_budget"],
                         demand_positions=sum(len(r.trace.prompt_ids) + r.output_tokens for r in free.records),
                         preemptions=preemptions, preempted_requests=sum(bool(r.preemptions) for r in pressed.records),
                         recomputed_positions=sum(n for r in pressed.records for p in r.preemptions for *_, n in p.chunks),
                         copied_back_positions=sum(p.cached for r in pressed.records for p in r.preemptions),
                         completed=completed, output_identical=identical,
                         requests_identical=identical_requests(free, pressed), unpressured_output_tps=tps[0],
                         pressured_output_tps=tps[1], throughput_ratio=ratio(tps[1], tps[0], 3),
                         targets={"preemptions": "> 0", "completed": "all", "output_identical": "true"},
                         targets_met={"preemptions": preemptions > 0, "completed": completed == len(workload.requests),
                                      "output_identical": identical},
                         finding=PRESETS["memory pressure"].finding(free, pressed))


def chunk_sweep_row(engine, name: str, requests: int | None = None, sizes=CHUNKS) -> ChunkSweepRow:
    preset = PRESETS["a long document among chatters"]
    workload = preset.build(engine, requests or preset.requests, preset.rate, 0)
    sweep = run_chunk_sweep(lambda size: SCHEDULERS["batching"].create(engine, batch=replace(BASE, prefill_chunk=size)),
                            workload, sizes)
    points = [{"prefill_chunk": p.prefill_chunk, "document_ttft_s": _r(p.document_ttft),
               "chatters_itl_p95_s": _r(p.itl_p95), "chatters_itl_p95_with_chunk_s": _r(p.itl_p95_with_chunk),
               "chatters_itl_p50_s": _r(p.itl_p50), "document_passes": p.document_passes} for p in sweep.points]
    trend = chunk_trend([replace(p, document_ttft=_r(p.document_ttft), itl_p95=_r(p.itl_p95),
                                 itl_p95_with_chunk=_r(p.itl_p95_with_chunk)) for p in sweep.points])
    return ChunkSweepRow(backend=name, requests=len(workload.requests), sizes=sweep.settings["sizes"], points=points,
                         targets={"document_ttft": "falls as the chunk grows", "chatters_itl_p95": "rises as the "
                                  "chunk grows", "chatters_itl_p95_with_chunk": "rises as the chunk grows"},
                         targets_met={"document_ttft": trend["document_ttft_falls"],
                                      "chatters_itl_p95": trend["itl_p95_rises"],
                                      "chatters_itl_p95_with_chunk": trend["itl_p95_with_chunk_rises"]},
                         finding=chunk_sentence(sweep.points))


def main(argv: list[str]) -> None:
    p = parser("kvmem", __doc__)
    p.add_argument("--backend", default=None, help="an ONNX backend (default: onnx-gguf4 for a GGUF, else onnx)")
    p.add_argument("--requests", type=int, default=None, help="requests per workload (default: each preset's)")
    p.add_argument("--sizes", default=",".join(map(str, CHUNKS)), help="prefill chunks of the sweep")
    args = p.parse_args(argv)
    from ..backends import default_backend_name
    name = args.backend or default_backend_name("cpu", args.model)
    engine = load(name, args.model)
    SCHEDULERS["batching"].create(engine, batch=BASE).run(PRESETS["memory pressure"].build(engine, 2, None, 0))   # warm-up
    say_timed(lambda: prefix_cache_row(engine, name, args.requests))
    say_timed(lambda: preemption_row(engine, name, args.requests))
    say_timed(lambda: chunk_sweep_row(engine, name, args.requests, [int(x) for x in args.sizes.split(",")]))
