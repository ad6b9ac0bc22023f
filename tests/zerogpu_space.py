"""`python app.py` as a ZeroGPU Space runs it, with tests/zerogpu_double.py standing in for `spaces` (a forked worker
per GPU call, arguments and yields pickled): the simulated Space's ZeroGPU start (tests/space/test_space.py runs it
with the Space's interpreter, in its venv of requirements.txt alone). That venv has no pytest, and this process is
the Space's for its whole life, so the double's patches are made for good.

    SPACES_ZERO_GPU=true .../space-venv-<key>/bin/python tests/zerogpu_space.py [app.py's arguments]
"""
from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class ForGood:
    """What ZeroGpuDouble.install asks of pytest's monkeypatch, with nothing to undo."""

    def setitem(self, mapping, key, value) -> None:
        mapping[key] = value

    def setenv(self, name: str, value: str) -> None:
        os.environ[name] = value

    def setattr(self, target, name: str, value) -> None:
        setattr(target, name, value)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from tests.zerogpu_double import ZeroGpuDouble

    ZeroGpuDouble().install(ForGood())
    sys.argv = [str(ROOT / "app.py"), *sys.argv[1:]]
    runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
