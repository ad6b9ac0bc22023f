"""The bench with another CPU kind's kernels: a process that sees an AVX2-only CPU on a CPU with AVX-512.

    python -m playground.bench as-cpu avx2 interleaved onnx-gguf4 onnx-gguf4-int8 --rounds 3
    env = view_env("avx2")        # the environment of such a process: LD_PRELOAD of the built library
    current()                     # "avx2" inside such a process, else None
    unavailable()                 # why no view can be made here, or None

ONNX Runtime (MLAS), llama.cpp (its CPU variant) and PyTorch choose their kernels from the `cpuid` instruction.
cpuid_view.c, loaded with LD_PRELOAD, makes `cpuid` fault (Linux's ARCH_SET_CPUID, on CPUs whose /proc/cpuinfo
has `cpuid_fault`) and answers it with AVX-512, AVX-VNNI and AMX cleared: every library in the process, and in
the programs it starts (llama-bench), runs the kernels it runs on an AVX2-only CPU. glibc's own string functions,
chosen before the library loads, are told the same through GLIBC_TUNABLES.

What it is not: an AVX2 CPU. The cores, caches, clocks and memory stay this machine's, so a figure measured in
the view says what the AVX2 kernels do here (their ratio to each other, and where the time goes), not what an
AVX2-only CPU does. The stamp says so (`cpu_view`), and `cpu_flags` are the ones the view shows.

Left out: other views (an AVX-512 view on an AVX2 CPU cannot be made: the instructions are not there).
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VIEW_ENV = "PLAYGROUND_CPU_VIEW"
SOURCE = Path(__file__).with_name("cpuid_view.c")
VIEWS = {"avx2": "AVX-512, AVX-VNNI and AMX hidden from cpuid: the kernels an AVX2-only CPU runs"}
HIDDEN = {"avx2": ("avx512f", "avx512_vnni", "avx_vnni")}   # quiet.FLAGS's names the view clears
GLIBC_HIDDEN = {"avx2": "glibc.cpu.hwcaps=-AVX512F,-AVX512CD,-AVX512BW,-AVX512DQ,-AVX512VL,-AVX512ER,-AVX512PF"}


class ViewUnavailable(RuntimeError):
    """No view can be made here; the message says why."""


def unavailable(cpuinfo: str | None = None, machine: str | None = None, compiler: str | None = "") -> str | None:
    """Why the view cannot be made here, or None.

    >>> unavailable("flags : fpu avx2 cpuid_fault\\n", "x86_64", "/usr/bin/cc") is None
    True
    >>> unavailable("flags : fpu avx2\\n", "x86_64", "/usr/bin/cc")
    "this CPU cannot make cpuid fault (no 'cpuid_fault' in /proc/cpuinfo's flags)"
    >>> unavailable("flags : fpu\\n", "aarch64", "/usr/bin/cc")
    'not an x86-64 CPU (aarch64)'
    >>> unavailable("flags : cpuid_fault\\n", "x86_64", None)
    'no C compiler (cc) to build cpuid_view.c'
    """
    machine = machine or platform.machine()
    if machine not in ("x86_64", "AMD64"):
        return f"not an x86-64 CPU ({machine})"
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "not Linux (no /proc/cpuinfo)"
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    if "cpuid_fault" not in flags:
        return "this CPU cannot make cpuid fault (no 'cpuid_fault' in /proc/cpuinfo's flags)"
    if compiler == "":
        compiler = shutil.which(os.environ.get("CC", "cc"))
    if not compiler:
        return "no C compiler (cc) to build cpuid_view.c"
    return None


def library(cache_dir: Path | None = None) -> Path:
    """cpuid_view.c built as a shared library, once per source (<cache>/cpu-view/cpuid_view-<hash>.so)."""
    why = unavailable()
    if why:
        raise ViewUnavailable(why)
    from ..config import default_cache_dir
    source = SOURCE.read_bytes()
    folder = Path(cache_dir or default_cache_dir()) / "cpu-view"
    built = folder / f"cpuid_view-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if built.is_file():
        return built
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=built.name + ".", dir=folder)
    os.close(fd)
    cmd = [os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", tmp, str(SOURCE), "-ldl"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise ViewUnavailable(f"cc failed building cpuid_view.c: {done.stderr.strip()[-300:]}")
    os.replace(tmp, built)
    return built


def view_env(view: str, env: dict[str, str] | None = None, cache_dir: Path | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the view on: the library preloaded, VIEW_ENV set, glibc told."""
    if view not in VIEWS:
        raise ViewUnavailable(f"no view {view!r}: the views are {', '.join(VIEWS)}")
    out = dict(os.environ if env is None else env)
    preload = [str(library(cache_dir)), *filter(None, out.get("LD_PRELOAD", "").split(":"))]
    out["LD_PRELOAD"] = ":".join(preload)
    out[VIEW_ENV] = view
    out["GLIBC_TUNABLES"] = ":".join(filter(None, [out.get("GLIBC_TUNABLES"), GLIBC_HIDDEN[view]]))
    return out


def current() -> str | None:
    """The view this process runs in (VIEW_ENV, where its library is preloaded), else None."""
    view = os.environ.get(VIEW_ENV)
    return view if view in VIEWS and "cpuid_view" in os.environ.get("LD_PRELOAD", "") else None


def describe(view: str | None = None) -> str | None:
    """The stamp's words for the view this process runs in (None: none).

    >>> describe("avx2")
    'avx2: AVX-512, AVX-VNNI and AMX hidden from cpuid: the kernels an AVX2-only CPU runs, on this CPU'
    """
    view = view or current()
    return f"{view}: {VIEWS[view]}, on this CPU" if view else None


def shown_flags(flags: dict[str, bool] | None, view: str | None = None) -> dict[str, bool] | None:
    """`flags` (quiet.cpu_flags) as the view shows them.

    >>> shown_flags({"avx2": True, "avx512f": True, "avx512_vnni": True, "avx_vnni": False}, "avx2")
    {'avx2': True, 'avx512f': False, 'avx512_vnni': False, 'avx_vnni': False}
    >>> shown_flags({"avx512f": True}, None)
    {'avx512f': True}
    """
    view = view if view is not None else current()
    if flags is None or view is None:
        return flags
    return {flag: have and flag not in HIDDEN[view] for flag, have in flags.items()}


def main(argv: list[str]) -> int:
    """`as-cpu VIEW COMMAND ...`: the bench's COMMAND in a process that sees VIEW's CPU."""
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        print(f"views: {', '.join(f'{k} ({v})' for k, v in VIEWS.items())}")
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    try:
        env = view_env(argv[0])
    except ViewUnavailable as exc:
        print(f"as-cpu {argv[0]}: {exc}", file=sys.stderr)
        return 2
    return subprocess.run([sys.executable, "-m", "playground.bench", *argv[1:]], env=env).returncode
