"""One bench command in a fresh process, read back as its row: so one backend's memory never counts in another's.

    row_in_subprocess("backends", "onnx", "--one", label="onnx", model="tiny")
    # runs `python -m playground.bench backends onnx --one --model tiny`; its last JSON line as a dict

A command that prints no JSON line gives an error row (`backend` the label, `error` the end of its stderr).
"""
from __future__ import annotations

import json
import subprocess
import sys

from .rows import ErrorRow


def row_in_subprocess(command: str, *args: str, label: str | None = None, model: str | None = None) -> dict:
    """`python -m playground.bench COMMAND ARGS... [--model M]` in a fresh process: its last JSON line, or an
    error row labelled `label` (default: the command) that carries the end of its stderr."""
    cmd = [sys.executable, "-m", "playground.bench", command, *args] + (["--model", model] if model else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else ErrorRow(label or command, out.stderr.strip()[-500:]).to_json()
