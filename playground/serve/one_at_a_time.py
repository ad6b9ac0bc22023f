"""One at a time: first come, first served, the next request starting when the last one ends (what Generate
does, queued). The harness it runs in: schedulers.py.

    scheduler = OneAtATime(source)                              # any StepSource (a local Engine, a server)
    result = scheduler.run(workload)                            # every request ended, one after another

Left out: batching (batching.py, batching_torch.py) and parallel requests to a server (concurrent.py).
"""
from __future__ import annotations

from .schedulers import Scheduler, drive, fail, progress_line, start_run
from .sessions import Releases


class OneAtATime(Scheduler):
    """First come first served: the next request starts when the last one ends (what Generate does, queued)."""
    name, label = "one-at-a-time", "one at a time (first come, first served)"

    def _run(self, result, clock, report):
        if self.source.capabilities.kv_bytes:
            result.kv_unit, result.kv_note = "bytes", "measured KV-cache bytes of the running request"
        releases = Releases(result.records)
        pending = sorted(result.records, key=lambda r: r.arrival)
        while (first := releases.next(pending)) is not None:
            if not clock.wait_until(first[1], report.event):
                return
            record = releases.take(first[0], pending, clock.now())
            record.admitted = clock.now()
            try:
                run = start_run(self.source, record.request)
            except Exception as exc:  # noqa: BLE001 - a bad request ends in error; the others still run
                fail(record, clock, exc)
                continue
            record.prompt_tokens = len(run.trace.prompt_ids)
            drive(record, run, clock, report.event, lambda rec, step: self._step(result, rec, step, report))
            if result.kv_unit:
                result.kv.append((record.finished, 0))   # its cache is released with the request

    @staticmethod
    def _step(result, record, step, report):
        if step.kv_bytes is not None and result.kv_unit:
            result.kv.append((record.admitted + step.time, step.kv_bytes))
        report(*progress_line(result))
