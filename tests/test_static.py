"""The static check: ruff (pyflakes rules and pycodestyle's error classes, see pyproject.toml) finds nothing.

An undefined name (the kind of slip that once crashed `make bench` after its per-backend rows) or an
unused import fails the suite here, before any code path has to reach it.
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", str(ROOT)],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_would_catch_an_undefined_name(tmp_path):
    """The check itself works: a module calling a name it never defines is reported (F821)."""
    bad = tmp_path / "bad.py"
    bad.write_text("def main():\n    return row_in_subprocess('x')\n")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F", str(bad)],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "F821" in out.stdout
