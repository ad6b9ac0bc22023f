"""The bench's rows as types: the stamp (commit, machine, date) and the per-backend rows, each to one JSON line.

    say(Stamp.now("python -m playground.bench"))   # {"row": "stamp", "commit": "1a2b3c4d5e6f", "machine": {...}, ...}
    say(PrefillRow("onnx", 1024, 0.812, 1261.1))   # {"backend": "onnx", "prefill_tokens": 1024, ...}
    say({"row": "batch", ...})                     # a row not typed here: printed as it is

`to_json()` gives the keys the bench has always printed (results.py and the tests read them); a None
field of a row that has it only sometimes (the ONNX variants' agreement with fp32) is left out, as the
rows leave it out. The stamp is what `make bench-results` writes before the rows; results.py renders
the dated page from both. Typed here: the stamp, the backend, prefill, fidelity and error rows.
Left out: types for the rows with nested figures (batch, serve, aiperf, roofline, speculative, ui,
remote, the summary): they stay dicts, printed as built.
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
    """A typed row: its fields as the JSON object the bench prints, None fields of OPTIONAL left out."""

    OPTIONAL: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if not (v is None and k in self.OPTIONAL)}


@dataclass(frozen=True)
class Machine(Row):
    cpu: str
    cores: int | None
    memory_gb: float | None
    os: str
    python: str

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
        return cls(cpu, cores, memory_gb, platform.platform(), platform.python_version())


@dataclass(frozen=True)
class Stamp(Row):
    """What a run of the bench was measured on: commit (None outside a git checkout), machine, UTC date, load."""

    commit: str | None
    uncommitted_changes: bool
    machine: Machine
    date: str
    load_average: list[float]
    command: str | None = None
    row: str = field(default=STAMP)

    @classmethod
    def now(cls, command: str | None = None) -> "Stamp":
        return cls(git("rev-parse", "--short=12", "HEAD") or None,
                   bool(git("status", "--porcelain", "--untracked-files=no")), Machine.here(),
                   datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                   [round(x, 2) for x in os.getloadavg()], command)

    def to_json(self) -> dict:
        """The stamp's line, `row` first.

        >>> Stamp("abc", False, Machine("CPU", 2, 8.0, "Linux", "3.11"), "2026-12-04 02:00 UTC", [0.5]).to_json()
        {'row': 'stamp', 'commit': 'abc', 'uncommitted_changes': False, 'machine': {'cpu': 'CPU', 'cores': 2, \
'memory_gb': 8.0, 'os': 'Linux', 'python': '3.11'}, 'date': '2026-12-04 02:00 UTC', 'load_average': [0.5], 'command': None}
        """
        out = super().to_json()
        return {"row": out.pop("row"), **out}


@dataclass(frozen=True)
class ErrorRow(Row):
    """A row that could not be measured, and why (`backend` names what was being measured)."""

    backend: str
    error: str


@dataclass(frozen=True)
class PrefillRow(Row):
    """Median TTFT of a one-token Run from exactly `prefill_tokens` prompt ids (measure_prefill).

    >>> PrefillRow("onnx", 1024, 0.8, 1280.0).to_json()
    {'backend': 'onnx', 'prefill_tokens': 1024, 'prefill_s': 0.8, 'prefill_tps': 1280.0}
    """

    backend: str
    prefill_tokens: int
    prefill_s: float
    prefill_tps: float


@dataclass(frozen=True)
class BackendRow(Row):
    """The engine's step loop against the runtime's plain generate() on one backend (backends.bench_backend)."""

    OPTIONAL = ("agreement_with_fp32", "first_divergence_from_fp32")   # the ONNX variants only

    backend: str
    device: str
    dtype: str
    model: str
    prompt_tokens: int
    new_tokens: int
    generate_new_tokens: int
    repeats: int
    engine_ttft_s: float | None
    engine_decode_tps: float | None
    generate_ttft_s: float | None
    generate_decode_tps: float | None
    engine_matches_generate: float
    load_s: float
    peak_rss_mb: float
    rss_mb: float
    decode_ratio_engine_vs_generate: float | None
    ttft_ratio_engine_vs_generate: float | None
    agreement_with_fp32: float | None = None      # the share of greedy tokens identical to fp32's
    first_divergence_from_fp32: int | None = None


@dataclass(frozen=True)
class FidelityRow(Row):
    """Teacher-forced agreement with onnx fp32 on the bench text (fidelity.fidelity_row); the reference's own
    row (fidelity.write_reference) has no first-copy figures.

    >>> FidelityRow("onnx", 24, 1.0, 0.0, 3.2, seconds=0.5).to_json()
    {'backend': 'onnx', 'fidelity_tokens': 24, 'top1_agreement_with_fp32': 1.0, 'mean_kl_from_fp32_nats': 0.0, \
'perplexity': 3.2, 'seconds': 0.5}
    """

    OPTIONAL = ("first_copy_tokens", "first_copy_top1_agreement", "first_copy_mean_kl_nats")

    backend: str
    fidelity_tokens: int
    top1_agreement_with_fp32: float
    mean_kl_from_fp32_nats: float
    perplexity: float
    first_copy_tokens: int | None = None
    first_copy_top1_agreement: float | None = None
    first_copy_mean_kl_nats: float | None = None
    seconds: float = 0.0


def as_json(row: Row | dict) -> dict:
    """A typed row's JSON object, or a dict row as it is.

    >>> as_json(ErrorRow("onnx", "boom")), as_json({"row": "batch"})
    ({'backend': 'onnx', 'error': 'boom'}, {'row': 'batch'})
    """
    return row.to_json() if isinstance(row, Row) else row


def say(row: Row | dict) -> dict:
    """Print the row as one JSON line (flushed: a long bench shows each row as it comes); returns its object."""
    out = as_json(row)
    print(json.dumps(out), flush=True)
    return out


def say_timed(make_row) -> dict:
    """Print the row `make_row()` builds with `bench_s`, the seconds it took, added; returns its object."""
    start = time.perf_counter()
    row = as_json(make_row())
    row["bench_s"] = round(time.perf_counter() - start, 1)
    return say(row)


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
