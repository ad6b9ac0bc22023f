"""A temporary folder for a session's downloads (a run's trace, a workload's records, an experiment's figure).

    exports = ExportFolder("trace-")
    paths = exports.write({"trace.json": text, "trace.csv": table})   # paths for a gr.File
    exports.remove()                                                   # the session is gone

Left out: gradio (the tabs hand the paths to a gr.File) and anything kept after the session closes.
"""
from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path


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
