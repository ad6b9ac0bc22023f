"""One bench command in a fresh process, read back as its row: so one backend's memory never counts in another's.

    row_in_subprocess("backends", "onnx", "--one", label="onnx", model="tiny")
    # runs `python -m playground.bench backends onnx --one --model tiny`; its last JSON line, Relayed

The child runs with CHILD set in its environment, so it prints no stamp (the parent's run has one). A
command that prints no JSON line gives an error row (`backend` the label, `error` the end of its stderr).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from .rows import ErrorRow, Relayed, Row

CHILD = "PLAYGROUND_BENCH_CHILD"   # set in a child bench's environment: its parent prints the stamp


def child_env() -> dict:
    """This environment, marked as a child bench's (no stamp of its own)."""
    return {**os.environ, CHILD: "1"}


def row_in_subprocess(command: str, *args: str, label: str | None = None, model: str | None = None) -> Row:
    """`python -m playground.bench COMMAND ARGS... [--model M]` in a fresh process: its last JSON line, or an
    error row labelled `label` (default: the command) that carries the end of its stderr."""
    cmd = [sys.executable, "-m", "playground.bench", command, *args] + (["--model", model] if model else [])
    out = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return Relayed(json.loads(lines[-1])) if lines else ErrorRow(label or command, out.stderr.strip()[-500:])
