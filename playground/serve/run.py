"""Serve runs, written once: a workload on A and then B, a preset's (with what it measures after both runs), a sweep.
The Serve tab (ui/serve_tab.py, in a background job holding the machine alone) and `python -m playground.serve`
(cli.py, in a thread that Ctrl-C cancels) both build and run through here; each keeps only what it shows.

    schedulers, workload = workload_setup(picks, get_source, form)                 # a drawn workload on A (and B)
    schedulers, workload = workload_setup(picks, get_source, form, PRESETS[name])  # a preset's A and B
    results = run_workload(schedulers, workload, progress=lambda i: report, cancel=cancel)
    measured = measure_preset(preset, schedulers[0].source, results, report, cancel)   # its finding's keywords
    workload, notes = replay_file("trace.jsonl", source, time_scale=0.5)       # a file: a workload.json or a trace
    plan = sweep_setup("rate", Pick("batching", "onnx"), get_source, rates="0.5,1", requests=8)
    sweep = run_sweep(plan, report, cancel, live=sweeps)                           # a point per rate

`get_source(name)` hands out a source by name (the app's registry, the CLI's own engines); every setup raises
ValueError in words (setup.py's parsers and make_scheduler). A run is cancelled by its `cancel` Event within one
step; what ran until then is kept.

Left out: the inputs' own forms (setup.py: the tab's form and the CLI's flags read into WorkloadForm and Pick) and
what is shown (the tab's frames, the CLI's files and JSON lines).
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..trace import StopReason
from .setup import (at_chunk, build_workload, interference_workload, make_scheduler, parse_chunks, parse_rates,
                    parse_sizes, preset_setup, prompt_counter, sweep_mix)
from .sweeps import BATCH_SIZES, CHUNK_SIZES, RATES, Sweep, run_batch_sweep, run_chunk_sweep, run_rate_sweep
from .agent_trace import to_workload
from .trace_import import read_trace
from .mooncake import BLOCK_TOKENS
from .workload import MAX_REQUESTS, MAX_WORKLOAD_TOKENS, Workload, check_tokens

if TYPE_CHECKING:
    from ..measure import ProgressFn
    from .presets import Preset
    from .records import WorkloadResult
    from .schedulers import Scheduler
    from .setup import Pick, WorkloadForm

SWEEP_KINDS = ("batch", "rate", "chunk")


def workload_setup(picks: list[Pick], get_source: Callable[[str], Any], form: WorkloadForm,
                   preset: Preset | None = None, offered=None, limit: int = MAX_WORKLOAD_TOKENS,
                   replay: Callable[[Any], Workload] | None = None) -> tuple[list[Scheduler], Workload]:
    """The schedulers the picks name and their workload: with `preset`, its workload (the form's count, rate and seed)
    on our batching twice, A and B with its settings over the first pick's; with `replay(source)`, a workload read
    back (checked against `limit` where the source counts tokens); else the form's, drawn. `offered`: the source names
    the app has (None: any). ValueError in words."""
    if preset is not None:
        first = make_scheduler(picks[0], get_source, offered)
        return preset_setup(preset, first.source, form, first.config, limit)
    schedulers = [make_scheduler(p, get_source, offered) for p in picks]
    source = schedulers[0].source
    if replay is None:
        return schedulers, build_workload(source, form, limit)
    workload = replay(source)
    if source.capabilities.local_tokenizer:
        check_tokens(workload, prompt_counter(source), limit)
    return schedulers, workload


def replay_file(path, source, time_scale: float = 1.0, block_size: int = BLOCK_TOKENS,
                limit: int = MAX_REQUESTS) -> tuple[Workload, list[str]]:
    """A file replayed on `source`: a workload.json as it was written, or a trace -- Mooncake lines with or without
    AIPerf's session fields, a Weka trace, an ATIF trajectory (agent_trace.py) -- read with `source`'s tokenizer, its
    first `limit` turns, times × `time_scale`; (the workload, lines saying what was done). ValueError in words."""
    trace = read_trace(path, block_size)
    if trace is None:
        return Workload.from_dict(json.loads(Path(path).read_text(encoding="utf-8"))), []
    tokenizer = getattr(source, "tokenizer", None)
    if tokenizer is None:
        raise ValueError("a trace is replayed from token ids: pick a local backend (its tokenizer)")
    return to_workload(trace, tokenizer, time_scale, limit)


def not_run(result: WorkloadResult) -> None:
    """Mark a workload stopped before it began: ended and cancelled, never started, every request cancelled."""
    for record in result.records:
        record.stop_reason = StopReason.CANCELLED
    result.cancelled = result.done = True


def run_workload(schedulers: list[Scheduler], workload: Workload,
                 progress: Callable[[int], ProgressFn | None] | None = None, cancel: threading.Event | None = None,
                 results: list | None = None, ran: Callable[[int, WorkloadResult], None] | None = None) -> list:
    """`workload` on each scheduler in turn, A then B; returns each one's result. Once `cancel` is set the run in
    progress stops within a step and the ones after it are marked not run (not_run). `results`: a list given every
    result at once, each filled in place while it runs (a page draws them live); `progress(i)`: the i-th run's
    progress callback; `ran(i, result)`: called after each run that ran."""
    cancel = cancel if cancel is not None else threading.Event()
    results = [] if results is None else results
    results[:] = [s.prepare(workload) for s in schedulers]
    for i, (scheduler, result) in enumerate(zip(schedulers, results)):
        if cancel.is_set():   # stopped before this one began: it did not run
            not_run(result)
            continue
        scheduler.run(workload, progress(i) if progress is not None else None, cancel, result)
        if ran is not None:
            ran(i, result)
    return results


def measure_preset(preset: Preset | None, source, results: list, progress: ProgressFn | None = None,
                   cancel: threading.Event | None = None) -> dict:
    """What `preset` measures after both runs on `source` (the machine still held): its finding's keywords; {} for
    no preset, a preset that measures nothing, or runs that did not both end."""
    if preset is None or preset.measure is None or not all(r.done and not r.cancelled for r in results):
        return {}
    if progress is not None:
        progress(1.0, "replaying the requests whose tokens parted, teacher-forced")
    return preset.measure(source, *results, cancel)


@dataclass
class SweepPlan:
    """A sweep ready to run: its kind, the scheduler, and what the kind reads (the batch sizes and tokens each
    decodes; the rates, the SLO and the workload replayed at each; the prefill chunks and the workload read at each)."""
    kind: str
    scheduler: Any
    sizes: list[int] = field(default_factory=list)
    new_tokens: int = 64
    rates: list[float] = field(default_factory=list)
    slo: tuple[float | None, float | None] = (None, None)   # TTFT, TPOT seconds (None: no limit)
    chunks: list[int] = field(default_factory=list)
    workload: Workload | None = None


def plan_sweep(kind: str, scheduler, *, sizes=BATCH_SIZES, new_tokens=64, rates=RATES,
               slo: tuple[float | None, float | None] = (None, None), chunks=CHUNK_SIZES, requests=16,
               workload: Workload | None = None) -> SweepPlan:
    """The sweep of `kind` on `scheduler`, its inputs read (sizes, rates and chunks as "1,2,4" text or numbers);
    `workload`: the one the rate sweep replays at each rate (default: the lesson's mix of `requests`, Poisson) or
    the chunk sweep reads at each chunk (default: the preset "a long document among chatters"). ValueError in
    words.

    >>> plan_sweep("batch", None, sizes="4,1").sizes
    [4, 1]
    >>> plan_sweep("latency", None)
    Traceback (most recent call last):
    ...
    ValueError: a sweep is one of batch, rate, chunk; got 'latency'
    """
    as_text = lambda v: v if isinstance(v, str) else ",".join(map(str, v))   # noqa: E731
    if kind == "batch":
        return SweepPlan(kind, scheduler, sizes=parse_sizes(as_text(sizes)), new_tokens=int(new_tokens))
    if kind == "rate":
        rates = parse_rates(as_text(rates))
        base = workload if workload is not None else build_workload(scheduler.source, sweep_mix(requests))
        return SweepPlan(kind, scheduler, rates=rates, slo=slo, workload=base)
    if kind == "chunk":
        if scheduler.name != "batching":
            raise ValueError(f"the prefill-chunk sweep runs our batching, not {scheduler.name}")
        chunks = parse_chunks(as_text(chunks))
        base = workload if workload is not None else interference_workload(scheduler.source)
        return SweepPlan(kind, scheduler, chunks=chunks, workload=base)
    raise ValueError(f"a sweep is one of {', '.join(SWEEP_KINDS)}; got {kind!r}")


def sweep_setup(kind: str, pick: Pick, get_source: Callable[[str], Any], offered=None, **inputs) -> SweepPlan:
    """The scheduler `pick` names, made, and the sweep of `kind` planned on it (plan_sweep's `inputs`); ValueError in
    words."""
    return plan_sweep(kind, make_scheduler(pick, get_source, offered), **inputs)


def run_sweep(plan: SweepPlan, progress: ProgressFn | None = None, cancel: threading.Event | None = None,
              live: list | None = None) -> Sweep:
    """The plan's sweep, a point per size, rate or chunk (sweeps.py); `live`: a list the Sweep joins at once, so a
    view draws its points as they come."""
    kw = {"progress": progress, "cancel": cancel, "live": live}
    if plan.kind == "batch":
        return run_batch_sweep(plan.scheduler, plan.sizes, plan.new_tokens, **kw)
    if plan.kind == "chunk":
        return run_chunk_sweep(lambda chunk: at_chunk(plan.scheduler, chunk), plan.workload, plan.chunks, **kw)
    return run_rate_sweep(plan.scheduler, plan.workload, plan.rates, *plan.slo, **kw)
