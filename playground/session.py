"""One browser session's latest run: the Run (so Stop can cancel it), its batches of Steps, its chips.

The UI keeps a `Session` in gr.State, so each browser tab has its own and two tabs never mix runs.
The run goes on in its own thread (engine.BackgroundRun), so drawing the page never delays a token
and never shows up in a step's latency. Stop cancels it within one step; the trace ends with
stop_reason "cancelled" and keeps every token made so far.

Left out: gradio (playground/ui/ wires this in) and anything kept after the tab closes.
"""
from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

from .engine import BackgroundRun

# A page that asks for no tokens for this long has gone (its handler was dropped without being closed):
# its run stops. A live page asks every few hundred milliseconds, even while drawing charts.
ABANDONED_AFTER = 5.0


class Session:
    def __init__(self):
        self.run, self.background, self.steps, self.chips = None, None, None, []
        self.exports = ExportFolder("trace-")

    @property
    def trace(self):
        return self.run.trace if self.run else None

    def start(self, run) -> None:
        """Supersede any earlier run of this session (cancelling it) and start the new one."""
        self.stop()
        self.run, self.chips, self.background = run, [], BackgroundRun(run, lease=ABANDONED_AFTER)
        self.steps = iter(self.background)   # batches of Steps, as they come

    def stop(self, grace: float = 2.0) -> None:
        """Cancel the run and wait (up to `grace` seconds) for its current step to end."""
        if self.run is not None:
            self.background.cancel(wait=grace)

    def export(self) -> list[str]:
        """The trace as trace.json and trace.csv (paths for a gr.File), replacing the last run's."""
        return self.exports.write({"trace.json": self.trace.to_json(), "trace.csv": self.trace.to_csv()})

    def close(self) -> None:
        """The session is gone: stop its run (releasing the KV cache) and delete its files."""
        self.stop()
        self.exports.remove()

    def __deepcopy__(self, memo):   # gr.State copies its initial value per session: start each one fresh
        return type(self)()


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
