"""The harness every scheduler shares: the Scheduler base, its clock, and the helpers that start, drive and end
requests. The schedulers: one_at_a_time.py, batching.py (ours), batching_torch.py, concurrent.py; the registry:
registry.py.

    scheduler = SCHEDULERS["one-at-a-time"].create(source)     # any Scheduler subclass
    result = scheduler.prepare(workload)                        # the live record (a UI draws it while it grows)
    scheduler.run(workload, progress, cancel, result)           # returns it, every request ended

Every scheduler releases each request at its arrival time on one perf_counter clock, stamps when it
admits it, and keeps the Steps its source made (records.py). Cancel (a threading.Event) stops the
running request(s) within one step; requests not yet started end as StopReason.CANCELLED.

Left out: priorities; preemption is the batching schedulers' own (batcher.py under a KV budget; transformers'
manager decides for itself).
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from ..config import GenerationSettings
from ..measure import Progress, ProgressFn
from .records import RequestRecord, WorkloadResult, new_result
from .workload import Request, Workload
from ..trace import StopReason


class Clock:
    """Seconds since the workload started; `wait_until` sleeps until then, or returns False once cancelled."""

    def __init__(self):
        self.start = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.start

    def since(self, t_abs: float) -> float:
        return t_abs - self.start

    def restart(self, result=None) -> None:
        """Count from now: a scheduler's setup (its prompts tokenized, its KV pool allocated) is no request's wait,
        so the workload's time starts when it can take the first request (`result.started` follows)."""
        self.start = time.perf_counter()
        if result is not None:
            result.started = self.start

    def wait_until(self, t: float, cancel: threading.Event | None, tick: Callable[[], None] | None = None) -> bool:
        while (left := t - self.now()) > 0:
            if cancel is None:
                time.sleep(min(left, 0.25))
            elif cancel.wait(min(left, 0.25)):
                return False
            if tick is not None:
                tick()
        return not (cancel is not None and cancel.is_set())


def settings_for(request: Request) -> GenerationSettings:
    """Greedy, the class's token budget, one top candidate (the cheapest step every source can take)."""
    return GenerationSettings(max_new_tokens=request.max_new_tokens, top_candidates=1).validate()


def request_ids(source, request: Request) -> tuple[str, list[int]]:
    """(text, ids) the model reads for a workload request: its exact ids (a replayed trace), else its chat prompt."""
    if request.prompt_ids is not None:
        return request.prompt, list(request.prompt_ids)
    return source.prompt_ids(request.prompt, settings_for(request))


def start_run(source, request: Request):
    """A Run of `request` on `source`: its chat prompt, or exact ids (a replayed trace; with EOS ignored: the
    sweeps). A source that cannot run from exact ids is sent a trace's prompt as its text."""
    settings = settings_for(request)
    exact = source.capabilities.exact_ids and (request.prompt_ids is not None or source.capabilities.local_tokenizer)
    if exact and (request.ignore_eos or request.prompt_ids is not None):
        return source.run_ids(request_ids(source, request)[1], settings, ignore_eos=request.ignore_eos)
    return source.run(request.prompt, settings)


def drive(record: RequestRecord, run, clock: Clock, cancel: threading.Event | None, on_step=None) -> None:
    """Iterate `run` to its end (cancelling it once `cancel` is set); the record keeps its trace and end."""
    record.trace = run.trace
    try:
        for step in run:
            if cancel is not None and cancel.is_set():
                run.cancel()
            if on_step is not None:
                on_step(record, step)
    except Exception:  # noqa: BLE001 - the trace holds the error (StopReason.ERROR)
        pass
    record.finished = clock.now()
    record.stop_reason, record.error = run.trace.stop_reason or StopReason.CANCELLED, run.trace.error


def fail(record: RequestRecord, clock: Clock, exc: Exception) -> None:
    record.finished, record.stop_reason = clock.now(), StopReason.ERROR
    record.error = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"


def progress_line(result: WorkloadResult) -> tuple[float, str]:
    """(share of requests ended, a line): finished (ran to their end or failed), running, waiting, cancelled.

    >>> from .workload import Request, Workload
    >>> result = WorkloadResult("s", "S", "src", Workload(()), [RequestRecord(Request(i, "short", "", 8, 0.0))
    ...                                                         for i in range(3)])
    >>> result.records[0].stop_reason, result.records[1].admitted = StopReason.LENGTH, 0.1
    >>> result.records[1].stop_reason, result.records[2].stop_reason = StopReason.CANCELLED, StopReason.CANCELLED
    >>> progress_line(result)[1]
    '1/3 finished · 0 running · 0 waiting · 2 cancelled · 0 tokens'
    """
    recs = result.records
    ended = sum(r.stop_reason is not None for r in recs)
    cancelled = sum(r.stop_reason == StopReason.CANCELLED for r in recs)
    running = sum(r.admitted is not None and r.stop_reason is None for r in recs)
    tokens = sum(r.output_tokens for r in recs)
    return ended / len(recs), (f"{ended - cancelled}/{len(recs)} finished · {running} running · "
                               f"{len(recs) - ended - running} waiting · "
                               + (f"{cancelled} cancelled · " if cancelled else "") + f"{tokens} tokens")


class Scheduler:
    name, label = "", ""
    admitted_means = "the scheduler began the request's prefill"

    def __init__(self, source):
        self.source = source

    def prepare(self, workload: Workload) -> WorkloadResult:
        result = new_result(self, self.source.info.describe(), workload)
        result.admitted_means = self.admitted_means
        return result

    def run(self, workload: Workload, progress: ProgressFn | None = None, cancel: threading.Event | None = None,
            result: WorkloadResult | None = None) -> WorkloadResult:
        result = result or self.prepare(workload)
        report, clock = Progress(progress, cancel), Clock()
        result.started = clock.start
        try:
            self._run(result, clock, report)
        finally:
            for record in result.records:
                if record.stop_reason is None:
                    record.stop_reason = StopReason.CANCELLED
                    record.finished = record.finished if record.finished is not None else clock.now()
            result.elapsed, result.cancelled, result.done = clock.now(), report.cancelled, True
            report(1.0, StopReason.CANCELLED if report.cancelled else "done")
        return result

    def _run(self, result: WorkloadResult, clock: Clock, report: Progress) -> None:
        raise NotImplementedError
