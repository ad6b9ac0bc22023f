"""`make llama`: one build with run-time CPU dispatch, keyed by its CMake arguments (dry runs of make only)."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.subprocess,
              pytest.mark.skipif(shutil.which("make") is None or shutil.which("sha256sum") is None,
                                 reason="needs make and sha256sum")]


def dry_run(tmp_path, *overrides: str) -> str:
    """`make -n llama` on a venv of its own (a copy of nothing: only its stamps matter), with overrides."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "python").touch()
    out = subprocess.run(["make", "-n", "-f", str(ROOT / "Makefile"), f"VENV={venv}", "llama", *overrides],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout


def build_key(text: str) -> str:
    return re.search(r"llama-wheels/([0-9a-f]{12})", text).group(1)


def test_the_build_dispatches_at_run_time_with_every_cpu_variant(tmp_path):
    text = dry_run(tmp_path)
    assert "-DGGML_BACKEND_DL=ON" in text and "-DGGML_CPU_ALL_VARIANTS=ON" in text and "-DGGML_NATIVE=OFF" in text
    assert "pip --disable-pip-version-check wheel" in text and "--no-cache-dir" in text   # not pip's sdist-keyed cache


def test_other_cmake_arguments_make_another_wheel_folder_and_remake_the_stamp(tmp_path):
    first = dry_run(tmp_path)
    other = dry_run(tmp_path, "LLAMA_CMAKE_ARGS=-DGGML_NATIVE=ON")
    assert build_key(first) != build_key(other)
    venv = tmp_path / "venv"
    (venv / f".llama-build-{build_key(first)}").touch()   # built once with the default arguments
    (venv / ".installed-llama").touch()
    assert "Nothing to be done" in dry_run(tmp_path)     # the same arguments: nothing to rebuild
    assert "pip --disable-pip-version-check install" in dry_run(tmp_path, "LLAMA_CMAKE_ARGS=-DGGML_NATIVE=ON")
