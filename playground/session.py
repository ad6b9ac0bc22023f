"""One browser session's latest run: the Run (so Stop can cancel it), its step iterator, its chips.

The UI keeps a `Session` in gr.State, so each browser tab has its own and two tabs never mix runs.
Stop has two paths to cover: a handler still iterating sees `run.cancel()` within one step; a handler
whose Gradio event was cancelled never resumes, so its idle iterator is closed here instead. Either
way the trace ends with stop_reason "cancelled" and keeps every token made so far.

Left out: gradio (playground/ui/ wires this in) and anything kept after the tab closes.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path


class Session:
    def __init__(self):
        self.run, self.steps, self.chips = None, None, []

    @property
    def trace(self):
        return self.run.trace if self.run else None

    def start(self, run) -> None:
        """Supersede any earlier run of this session (cancelling it) and iterate the new one."""
        self.stop()
        self.run, self.steps, self.chips = run, iter(run), []

    def stop(self, grace: float = 2.0) -> None:
        """Cancel the run; if its iterator sits idle (its Gradio event was cancelled), close it."""
        if self.run is None:
            return
        self.run.cancel()
        deadline = time.monotonic() + grace
        while not self.trace.finished and time.monotonic() < deadline:
            time.sleep(0.02)   # a handler still iterating notices the cancel within one step
        if not self.trace.finished and not self.steps.gi_running:
            self.steps.close()   # GeneratorExit inside the run sets stop_reason "cancelled"


def export_files(trace) -> list[str]:
    """The trace as trace.json and trace.csv in a fresh temporary folder (paths for a gr.File)."""
    folder = Path(tempfile.mkdtemp(prefix="trace-"))
    (folder / "trace.json").write_text(trace.to_json(), encoding="utf-8")
    (folder / "trace.csv").write_text(trace.to_csv(), encoding="utf-8")
    return [str(folder / "trace.json"), str(folder / "trace.csv")]
