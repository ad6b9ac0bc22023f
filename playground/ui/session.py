"""One browser session's latest run: the Run (so Stop can cancel it), its batches of Steps, its stream.

The UI keeps a `Session` in gr.State, so each browser tab has its own and two tabs never mix runs.
The run goes on in its own thread (jobs.BackgroundRun); the page's handler takes the Steps made so
far in batches, at most one batch per `UPDATE_INTERVAL`, and packs only those into the run's
StepStream (playground/step_stream.py): the server's work per update does not grow with the run. Stop
cancels the run within one step; the trace ends with StopReason.CANCELLED and keeps every token made so far.
Its exports go to an ExportFolder (export_folder.py).

Left out: gradio (the tabs wire this in) and anything kept after the tab closes.
"""
from __future__ import annotations

from collections import deque

from ..charts.run import TEMPLATE_JSON, run_specs
from ..jobs import ABANDONED_AFTER, BackgroundRun
from ..serve.perfetto import trace_json
from ..step_stream import StepStream
from .export_folder import ExportFolder

# Updates a page gets while a run streams: at most one per 50 ms, and none while no step is new. Each
# carries only the steps made since the last. A page that reads the stream itself as each step is made
# (the live channel, ui/live/channel.py) needs them only as a backup: one a second. A run that shares the
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

    def start(self, run, interval=UPDATE_INTERVAL) -> tuple[StepStream, BackgroundRun]:
        """Supersede any earlier run of this session (cancelling it) and start the new one; returns its stream
        and its BackgroundRun, whose iteration gives its batches (a handler keeps those: another handler of this
        session may start a run meanwhile). Each Step goes into the stream once, in the run's thread, as it is
        made. `interval`: the least time between two batches, in seconds, or a function giving it as the run goes."""
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
        return stream, background

    def finish_stream(self, stream: StepStream | None = None) -> str:
        """A run's stream (the latest by default) with every step and its end line, carrying the four figures
        (built once per run, as specs: charts/run.py run_specs)."""
        stream = stream or self.stream
        if stream.ended:
            return stream.text
        return stream.finish(run_specs(stream.trace), TEMPLATE_JSON)

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
