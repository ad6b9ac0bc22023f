"""The bench's rows as types, each printed as one JSON line: the stamp (commit, machine, date), then the rows.

    say(Stamp.now("python -m playground.bench"))   # {"row": "stamp", "commit": "1a2b3c4d5e6f", "machine": {...}, ...}
    say(PrefillRow("onnx", 1024, 0.812, 1261.1))   # {"backend": "onnx", "prefill_tokens": 1024, ...} (prefill.py)
    say({"row": "batch", ...})                     # TypeError: every row printed is a Row

`to_json()` gives the keys the bench has always printed, in their order (results.py and the tests read
them); a field a row has only sometimes is left out when None (Row.OPTIONAL). Every command of
`python -m playground.bench` that prints rows prints the stamp first (__main__.main; not in a child
process the bench started, whose rows the parent prints again as `Relayed`); results.py renders the dated
page from the stamp and the rows. Typed here: the base `Row`, the stamp, the error row and a child's row
relayed. Each family's rows are typed beside the code that measures them, one module a family: backends.py,
prefill.py, fidelity.py, kld.py, peer.py (llama-bench, the matmul peak, the kernel floor, the summary of
ratios), interleaved.py (the rounds and their medians), genai.py (ONNX Runtime GenAI's graph), batch.py,
breakdown.py, serve.py, kvmem.py (prefix cache, preemption, the chunk sweep), aiperf.py, clients.py, loop.py,
attendees.py (the room row), conversations.py,
roofline.py, speculative.py, ui.py (ui and ui-flat) and remote.py. Left out: types for the figures
nested in a row (a sweep's points, a scheduler's figures, the bounds): they stay dicts, their keys named in the
row's comments and its module.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..trace import Phase

ROOT = Path(__file__).resolve().parents[2]
STAMP = "stamp"
PREFILL = Phase.PREFILL.value   # the prefill row's kind: the prefill phase's figure alone


class Row:
    """A typed row: its fields as the JSON object the bench prints, in their order. OPTIONAL: fields left out
    when None (keys a row has only sometimes). FLAT: dict fields whose items stand at the top level in the
    field's place (keys named by what was measured: a backend, a preset). ON_ERROR: where set, a row with an
    `error`, or `skipped` (a peer that cannot run here, and why), prints only these fields and that one (the
    others were never measured).

    >>> ErrorRow("onnx", "boom").to_json()
    {'backend': 'onnx', 'error': 'boom'}
    """

    OPTIONAL: tuple[str, ...] = ()
    FLAT: tuple[str, ...] = ()
    ON_ERROR: tuple[str, ...] | None = None

    def to_json(self) -> dict:
        out: dict = {}
        for key, value in asdict(self).items():
            if value is None and key in self.OPTIONAL:
                continue
            if key in self.FLAT:
                out.update(value)
            else:
                out[key] = value
        for why in ("error", "skipped"):
            if self.ON_ERROR is not None and out.get(why) is not None:
                return {key: out[key] for key in (*self.ON_ERROR, why)}
        return out


@dataclass(frozen=True)
class Machine(Row):
    cpu: str
    cores: int | None
    memory_gb: float | None
    os: str
    python: str
    cpu_flags: dict[str, bool] | None = None   # avx2, avx512f, avx512_vnni, avx_vnni (quiet.cpu_flags)

    @classmethod
    def here(cls) -> "Machine":
        """This machine, as far as the platform says (the CPU model from /proc/cpuinfo on Linux)."""
        cpu = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        memory_gb = None
        try:
            memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)
        except (ValueError, OSError, AttributeError):
            pass
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        from .quiet import cpu_flags
        return cls(cpu, cores, memory_gb, platform.platform(), platform.python_version(), cpu_flags())


@dataclass(frozen=True)
class Stamp(Row):
    """What a run of the bench was measured on: commit (None outside a git checkout), machine (with its CPU
    flags), UTC date, load, the llama.cpp CPU variant that loads here; the first line every
    `python -m playground.bench` command that prints rows prints.

    >>> Stamp("abc", False, Machine("CPU", 2, 8.0, "Linux", "3.11", {"avx2": True}), "2026-12-04 02:00 UTC",
    ...       [0.5], llama_cpu_variant="zen4").to_json()   # doctest: +NORMALIZE_WHITESPACE
    {'row': 'stamp', 'commit': 'abc', 'uncommitted_changes': False, 'machine': {'cpu': 'CPU', 'cores': 2,
    'memory_gb': 8.0, 'os': 'Linux', 'python': '3.11', 'cpu_flags': {'avx2': True}}, 'date': '2026-12-04 02:00 UTC',
    'load_average': [0.5], 'command': None, 'llama_cpu_variant': 'zen4'}
    """

    OPTIONAL = ("cpu_view",)

    row: str = field(default=STAMP, init=False)
    commit: str | None                   # 12 hex digits of HEAD; None outside a git checkout (or without git)
    uncommitted_changes: bool            # tracked files differ from HEAD
    machine: Machine
    date: str                            # UTC, to the minute
    load_average: list[float]            # 1, 5 and 15 minutes
    command: str | None = None           # the command line that printed the rows
    llama_cpu_variant: str | None = None    # the libggml-cpu-<variant> llama.cpp loads here (quiet.llama_cpu_variant):
                                            # "built-in" (no run-time dispatch), or why none ("missing: ...")
    cpu_view: str | None = None             # the CPU kind the process was shown (cpuview.describe); left out: none

    @classmethod
    def now(cls, command: str | None = None) -> "Stamp":
        """This checkout, this machine, now (the commit None outside a git checkout)."""
        from .cpuview import describe
        from .quiet import llama_cpu_variant
        return cls(git("rev-parse", "--short=12", "HEAD") or None,
                   bool(git("status", "--porcelain", "--untracked-files=no")), Machine.here(),
                   datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                   [round(x, 2) for x in os.getloadavg()], command, llama_cpu_variant(), describe())


@dataclass(frozen=True)
class ErrorRow(Row):
    """A row that could not be measured, and why (`backend` names what was being measured)."""

    backend: str
    error: str


@dataclass(frozen=True)
class Relayed(Row):
    """A row a child process printed (typed there: process.row_in_subprocess runs `python -m playground.bench
    COMMAND`), read back from its JSON line and printed again as it came.

    >>> Relayed({"backend": "onnx", "prefill_s": 0.8}).to_json()
    {'backend': 'onnx', 'prefill_s': 0.8}
    """

    line: dict

    def to_json(self) -> dict:
        return dict(self.line)



def say(row: Row) -> dict:
    """Print a typed row as one JSON line (flushed: a long bench shows each row as it comes); returns its
    object. A dict is refused: every row the bench prints is a Row, typed beside its family's code.

    >>> say({"row": "batch"})
    Traceback (most recent call last):
    ...
    TypeError: say() prints a Row (playground/bench/rows.py), not a dict
    """
    return _print(_typed(row).to_json())


def say_timed(make_row) -> dict:
    """Print the typed row `make_row()` builds with `bench_s`, the seconds it took, added; returns its object."""
    start = time.perf_counter()
    out = _typed(make_row()).to_json()
    out["bench_s"] = round(time.perf_counter() - start, 1)
    return _print(out)


def _typed(row) -> Row:
    if not isinstance(row, Row):
        raise TypeError(f"say() prints a Row (playground/bench/rows.py), not a {type(row).__name__}")
    return row


def _print(out: dict) -> dict:
    print(json.dumps(out), flush=True)
    return out

def parser(command: str, doc: str):
    """The argument parser of `python -m playground.bench COMMAND`, with --model (the first line of `doc` its
    description).

    >>> parser("serve", "The serve row.").parse_args(["--model", "tiny"])
    Namespace(model='tiny')
    """
    import argparse
    p = argparse.ArgumentParser(prog=f"python -m playground.bench {command}", description=doc.splitlines()[0])
    p.add_argument("--model", default=None, help="model spec (default: the bundled SmolLM2; 'tiny' for tests)")
    return p


def git(*args: str) -> str:
    """git's output in this checkout, or "" where git or the checkout is missing."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
