"""Requests sent concurrently to a source that batches them itself (a server: vLLM, llama.cpp --parallel N).

    scheduler = ConcurrentScheduler(remote_source, max_concurrency=None)   # None: every request at once
    result = scheduler.run(workload)

One thread per request, started at its arrival time, calls `source.run(prompt, settings)` and iterates
the Run; the server's own scheduler decides batching, chunking and queueing. So this works with any
StepSource whose runs may be iterated from several threads at once. `max_concurrency` caps the requests
in flight (the rest wait here, and that wait is measured); otherwise `admitted` means "sent", and any
queueing inside the server is part of the prefill time (the client cannot see it).

KV cache in use over time: the server's own figure, sampled every half second, when the source offers
`kv_cache_usage() -> (used, total, unit[, note]) | None`, or is a RemoteSource whose server reports one (vLLM:
the KV pool's share in use; llama.cpp: tokens held in its slots, of their context sizes, from /slots);
else the sum of the running requests' measured `Step.kv_bytes` when the source measures them; else missing.

Left out: retries; a request that fails ends with StopReason.ERROR and the others go on.
"""
from __future__ import annotations

import threading

from .schedulers import Scheduler, drive, fail, progress_line, start_run
from .sessions import Releases

KV_SAMPLE_INTERVAL = 0.5   # seconds between samples of the server's own KV figure


def server_kv_usage(source):
    """A callable giving the server's own KV figure as (used, total, unit), or None when there is none. A server of
    several engines gives the mean of their pools' shares ("fraction, mean of N engines"); a busy slot that does
    not say what it holds makes the sample missing, never a 0."""
    usage = getattr(source, "kv_cache_usage", None)
    if callable(usage):
        return usage
    figures = getattr(source, "figures", None)
    if not callable(figures):
        return None

    def read():
        now = figures()
        if "kv_pool_used_share" in now:
            engines = len(now.get("kv_pool_used_share_by_engine") or {})
            return now["kv_pool_used_share"], 1.0, "fraction", (
                f"the server's own KV-cache figure: the mean of its {engines} engines' shares, each of its own pool"
                if engines else "the server's own KV-cache figure")
        busy = [s for s in now.get("slots") or [] if s.get("processing")]
        if not now.get("slots") or any(s.get("prompt_tokens") is None or s.get("decoded") is None for s in busy):
            return None
        held = sum(s["prompt_tokens"] + s["decoded"] for s in busy)
        return (held, sum(s.get("n_ctx") or 0 for s in now["slots"]) or None, "tokens",
                "tokens held in the server's slots (llama.cpp /slots), of their context")
    return read


class ConcurrentScheduler(Scheduler):
    name, label = "concurrent", "concurrent requests (the server batches them itself)"
    admitted_means = "the request was sent (queueing inside the server is part of its prefill time)"

    def __init__(self, source, max_concurrency: int | None = None):
        super().__init__(source)
        if max_concurrency is not None and not 1 <= int(max_concurrency) <= 64:
            raise ValueError(f"max concurrency must be between 1 and 64, got {max_concurrency}")
        self.max_concurrency = max_concurrency

    def prepare(self, workload):
        """The result, its label and what "admitted" means saying the cap (`max_concurrency`) where there is one."""
        result = super().prepare(workload)
        yields = getattr(self.source, "priority", 0)
        if yields:   # a yielding source (RemoteSource.yielding): the server reads the others' requests first
            result.scheduler_label = f"{self.label}, yielding to other requests (priority {yields})"
        if self.max_concurrency:
            result.scheduler_label = f"{result.scheduler_label}, at most {self.max_concurrency} in flight at once"
            result.admitted_means = (f"the request was sent, at most {self.max_concurrency} at once (the rest waited "
                                     "here, that wait measured); queueing inside the server is part of its prefill time")
        return result

    def _run(self, result, clock, report):
        usage = server_kv_usage(self.source)
        if usage is not None:
            result.kv_note = "the server's own KV-cache figure"
        elif self.source.capabilities.kv_bytes:
            result.kv_unit, result.kv_note = "bytes", "summed measured KV-cache bytes of the running requests"
        slots = threading.BoundedSemaphore(self.max_concurrency or len(result.records))
        runs, lock, last_kv = {}, threading.Lock(), {}

        def on_step(record, step):
            if result.kv_unit == "bytes" and step.kv_bytes is not None:
                with lock:
                    last_kv[record.request.id] = step.kv_bytes
                    result.kv.append((record.admitted + step.time, sum(last_kv.values())))

        releases = Releases(result.records)

        def one(record):
            if record.request.after is not None:   # a session's later turn: its predecessor's end, then its delay
                while (at := releases.release_at(record)) is None:
                    if not clock.wait_until(clock.now() + 0.05, report.event):
                        return
                if not clock.wait_until(at, report.event):
                    return
                record.released = clock.now()
            with slots:
                if report.cancelled:
                    return
                record.admitted = clock.now()
                try:
                    run = start_run(self.source, record.request)
                except Exception as exc:  # noqa: BLE001 - this request fails; the others go on
                    fail(record, clock, exc)
                    return
                record.prompt_tokens = len(run.trace.prompt_ids) if run.trace.prompt_ids else None
                with lock:
                    runs[record.request.id] = run
                drive(record, run, clock, report.event, on_step)
                with lock:
                    if last_kv.pop(record.request.id, None) is not None:
                        result.kv.append((record.finished, sum(last_kv.values())))

        sampled = [-KV_SAMPLE_INTERVAL]

        def tick():
            if callable(usage) and clock.now() - sampled[0] >= KV_SAMPLE_INTERVAL:
                sampled[0] = clock.now()
                self._sample_server(result, usage, sampled[0])
            report(*progress_line(result))

        threads = []
        for record in sorted(result.records, key=lambda r: (r.request.after is not None, r.arrival)):
            if record.request.after is None and not clock.wait_until(record.arrival, report.event, tick):
                break
            thread = threading.Thread(target=one, args=(record,), daemon=True, name=f"serve-request-{record.request.id}")
            thread.start()
            threads.append(thread)
        while any(t.is_alive() for t in threads):
            if report.cancelled:
                with lock:
                    for run in runs.values():
                        run.cancel()
            for t in threads:
                t.join(0.1)
            tick()

    @staticmethod
    def _sample_server(result, usage, t):
        try:
            figure = usage()
        except Exception:  # noqa: BLE001 - a failed metrics call is a missing sample, not a failed workload
            figure = None
        if figure is not None:
            used, total, unit, *note = figure   # a server's figure says what it is; a source's own may not
            result.kv_unit, result.kv_total = unit, total
            result.kv.append((t, used))
            if note:
                result.kv_note = note[0]
