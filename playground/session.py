"""One browser session's latest run: the Run (so Stop can cancel it), its batches of Steps, its stream.

The UI keeps a `Session` in gr.State, so each browser tab has its own and two tabs never mix runs.
The run goes on in its own thread (BackgroundRun, below); the page's handler takes the Steps made so
far in batches, at most one batch per `UPDATE_INTERVAL`, and packs only those into the run's
StepStream (live.py): the server's work per update does not grow with the run. Stop cancels the run
within one step; the trace ends with StopReason.CANCELLED and keeps every token made so far.

Left out: gradio (playground/ui/ wires this in) and anything kept after the tab closes.
"""
from __future__ import annotations

import queue
import shutil
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Iterator

from .charts.run import plot_kv_cache, plot_step_latency, plot_timeline, plot_top_k
from .jobs import ABANDONED_AFTER, BackgroundJob
from .live import StepStream
from .serve.perfetto import trace_json
from .trace import Step

# Updates a page gets while a run streams: at most one per 50 ms, and none while no step is new. Each
# carries only the steps made since the last. A page that reads the stream itself as each step is made
# (the live channel, ui/live_channel.py) needs them only as a backup: one a second. A run that shares the
# engine loop with others may ask for them less often (`Session.start`'s `interval`).
UPDATE_INTERVAL = 0.05
WATCHED_INTERVAL = 1.0
EARLIER_KEPT = 4   # earlier runs a session keeps (their traces), to measure a speedup against


class Session:
    def __init__(self):
        self.run, self.background, self.steps, self.stream = None, None, None, None
        self.earlier: deque = deque(maxlen=EARLIER_KEPT)   # the session's earlier runs' traces, oldest first
        self.exports = ExportFolder("trace-")

    @property
    def trace(self):
        return self.run.trace if self.run else None

    def start(self, run, interval=UPDATE_INTERVAL) -> tuple[StepStream, Iterator[list[Step]]]:
        """Supersede any earlier run of this session (cancelling it) and start the new one; returns its stream
        and its batches (a handler keeps those: another handler of this session may start a run meanwhile).
        `interval`: the least time between two batches, in seconds, or a function giving it as the run goes."""
        self.stop()
        pace = interval if callable(interval) else (lambda: interval)
        if self.run is not None:
            self.earlier.append(self.run.trace)   # what a later run is compared with (run_view.speculation_html)
        stream = StepStream(run.trace)   # each step goes in as it is made (a live channel's reader sees it at once)
        background = BackgroundRun(run, lease=ABANDONED_AFTER, on_step=lambda step: stream.add((step,)),
                                   interval=lambda: WATCHED_INTERVAL if stream.watched else pace())
        steps = iter(background)
        # one assignment: a second handler of this session (two jobs at once) never sees a half-started run
        self.run, self.stream, self.background, self.steps = run, stream, background, steps
        return stream, steps

    def finish_stream(self, stream: StepStream | None = None) -> str:
        """A run's stream (the latest by default) with every step and its end line, carrying the four figures
        (built once per run)."""
        stream = stream or self.stream
        if stream.ended:
            return stream.text
        trace = stream.trace
        return stream.finish({"timeline": plot_timeline(trace), "latency": plot_step_latency(trace),
                              "kv": plot_kv_cache(trace), "topk": plot_top_k(trace)})

    def stop(self, grace: float = 2.0) -> None:
        """Cancel the run and wait (up to `grace` seconds) for its current step to end."""
        if self.background is not None:
            self.background.stop(wait=grace)

    def export(self) -> list[str]:
        """The trace as trace.json, trace.csv and trace-perfetto.json (Chrome Trace Events; paths for a gr.File),
        replacing the last run's."""
        return self.exports.write({"trace.json": self.trace.to_json(), "trace.csv": self.trace.to_csv(),
                                   "trace-perfetto.json": trace_json(self.trace)})

    def close(self) -> None:
        """The session is gone: stop its run (releasing the KV cache) and delete its files."""
        self.stop()
        self.exports.remove()

    def __deepcopy__(self, memo):   # gr.State copies its initial value per session: start each one fresh
        return type(self)()


class BackgroundRun(BackgroundJob):
    """A Run iterated in its own thread (a BackgroundJob); the consumer takes the Steps made so far, in batches.

    A slow consumer (a page redrawing charts) then never stalls the step loop, so the time between two
    tokens measures the model, not the UI. `stop()` ends it within one step, like `Run.cancel()`.
    With `lease` (seconds), a consumer that stops asking for that long without ending the iteration
    (a handler abandoned by a closed page, never closed) is taken as gone: the run cancels itself.
    With `interval` (seconds, or a function giving them), batches come at most that often: the steps made
    meanwhile are coalesced. `on_step(step)` is called in the run's thread as each Step is made.

        for batch in BackgroundRun(engine.run(prompt, settings)):   # [Step, ...], at least one each
            draw(batch)
    """

    def __init__(self, run, lease: float | None = None, interval=0.0, on_step=None):
        super().__init__()
        self.run, self._steps, self.lease, self.on_step = run, queue.SimpleQueue(), lease, on_step
        self.interval = interval if callable(interval) else (lambda: interval)
        self._waiting = False   # is the consumer asking now?
        self._ended = threading.Event()
        self.start(BackgroundRun._work, done=self._end, name="run-steps")

    def _end(self) -> None:
        self._steps.put(None)   # None: the end
        self._ended.set()

    def _work(self) -> None:   # a failure is in the trace too (stop_reason "error")
        for step in self.run:
            if self.on_step is not None:
                self.on_step(step)
            self._steps.put(step)
            if not self._waiting and self.abandoned():
                self.run.cancel()   # nobody has asked for tokens in `lease` seconds: stop within a step

    def __iter__(self) -> Iterator[list[Step]]:
        last = -float("inf")
        while True:
            self._waiting = True
            batch = [self._steps.get()]
            self._waiting, self.asked = False, time.monotonic()
            interval = self.interval()
            if batch[0] is not None and self.asked - last < interval:
                self._coalesce(interval - (self.asked - last))
            last = time.monotonic()
            while not self._steps.empty():
                batch.append(self._steps.get())
            ended = batch[-1] is None
            batch = [s for s in batch if s is not None]
            if batch:
                yield batch
            if ended:
                return

    def _coalesce(self, seconds: float) -> None:
        """Wait `seconds` for more Steps to take with the one in hand, or less: the run's end ends the wait."""
        self._ended.wait(seconds)

    def stop(self, wait: float = 0.0) -> bool:
        """Cancel the run (it ends within one step) and wait up to `wait` seconds for it; True when it ended."""
        self.run.cancel()
        return super().stop(wait)


class ExportFolder:
    """A temporary folder made on first write; each write replaces its files; `remove()` deletes it."""

    def __init__(self, prefix: str):
        self.prefix, self.path = prefix, None
        self._lock = threading.Lock()   # Stop and the ending generate handler may both export at once

    def write(self, files: dict[str, str]) -> list[str]:
        with self._lock:
            if self.path is None or not self.path.exists():
                self.path = Path(tempfile.mkdtemp(prefix=self.prefix))
            for old in self.path.iterdir():
                if old.name not in files:
                    old.unlink(missing_ok=True)
            for name, text in files.items():
                (self.path / name).write_text(text, encoding="utf-8")
            return [str(self.path / name) for name in files]

    def remove(self) -> None:
        with self._lock:
            if self.path is not None:
                shutil.rmtree(self.path, ignore_errors=True)
                self.path = None
