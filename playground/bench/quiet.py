"""What a peer figure was measured on: the CPU features that matter, the llama.cpp CPU variant that loaded, and
whether the machine was quiet enough for a ratio to llama.cpp to mean anything.

    cpu_flags()                       # {"avx2": True, "avx512f": True, "avx512_vnni": True} from /proc/cpuinfo
    loaded_cpu_variant(stderr)        # "zen4": the libggml-cpu-<variant>.so a llama.cpp program loaded
    window = LoadWindow.start(); ...; load = window.stop()   # load averages before/after, others' CPU
    validity([load, ...])             # {"valid": True} or {"valid": False, "reason": "..."}
    gated(0.87, check)                # the ratio when valid, else None

The quiet rule (QUIET_SHARE): a ratio to llama.cpp is valid only when, over every window it was measured in,
the CPU time that was not the bench's own (the machine's busy time from /proc/stat less this process's and
its waited-for children's CPU time, getrusage) stayed at or below 0.25 of the cores, i.e. half a core on
2 cores. The 1-minute load average is recorded before and after each window, but it cannot decide alone: it
counts the bench's own threads (llama-bench's 2 threads raise it to ~2 on an otherwise idle 2-core
machine), and it lags by a minute. A machine that is not Linux (no /proc/stat) gives no `others_cores`: its
ratios are printed as not valid, with that reason.

Measured on a machine shared with other work, llama.cpp's figures collapse (a 16-row run fell from 241.7 to
116.8 tok/s with one other app beside it), so a ratio from a busy machine is printed as null with the
reason, never as a figure.
"""
from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

from ..llamacpp import ISA, VARIANTS, loaded_cpu_variant  # noqa: F401 (re-exported: the stamp's words)

FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni")   # /proc/cpuinfo's names for what picks llama.cpp's kernels
QUIET_SHARE = 0.25   # others' CPU, as a share of the cores, above which a ratio is not valid


def cpu_flags(cpuinfo: str | None = None) -> dict[str, bool] | None:
    """The CPU features that decide llama.cpp's and ONNX Runtime's kernels, from /proc/cpuinfo's first `flags`
    line (None where there is none: not Linux).

    >>> cpu_flags("processor : 0\\nflags : fpu sse avx avx2 avx512f avx512_vnni\\n")
    {'avx2': True, 'avx512f': True, 'avx512_vnni': True, 'avx_vnni': False}
    >>> cpu_flags("processor : 0\\n") is None
    True
    """
    if cpuinfo is None:   # this machine's, as the process sees them (a cpuview's flags hidden)
        from .cpuview import shown_flags
        try:
            return shown_flags(cpu_flags(Path("/proc/cpuinfo").read_text()))
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return {flag: flag in have for flag in FLAGS}
    return None


# (program, its arguments): llama-bench loads its backends to list the devices, naming the variant it loaded;
# llama-server's and llama-perplexity's --version name it only on builds that log their system_info there
ASKED = (("llama-bench", "--list-devices"), ("llama-server", "--version"), ("llama-perplexity", "--version"))


def llama_cpu_variant(asked: tuple[tuple[str, str], ...] = ASKED) -> str:
    """The CPU variant llama.cpp's programs load on this machine: the first installed program's log (ASKED),
    parsed by loaded_cpu_variant; "built-in" for a build without run-time dispatch (no libggml-cpu-*.so beside
    the programs); "missing: ..." when none is installed or the log names none. The programs are those of the
    configuration llama.cpp runs with here (llamacpp.llama_choice), so this names the variant that runs."""
    import subprocess

    from ..llamacpp import LlamaCppMissing, llama_binary, llama_env
    for program, argument in asked:
        try:
            binary = llama_binary(program)
            out = subprocess.run([str(binary), argument], env=llama_env(), capture_output=True, text=True, timeout=60)
        except LlamaCppMissing:
            continue
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"missing: {program} {argument} failed ({type(exc).__name__})"
        if out.returncode == 0 and not any(binary.parent.glob("libggml-cpu-*")):
            return "built-in"
        variant = loaded_cpu_variant(out.stdout + out.stderr)
        if variant:
            return variant
        return f"missing: {program} {argument} named no CPU backend"
    return "missing: llama.cpp is not installed (make llama)"


def _busy_seconds() -> float | None:
    """The machine's busy CPU seconds since boot (all cores), from /proc/stat; None where unreadable."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_seconds(servers: tuple = ()) -> float:
    """CPU seconds of this process and of its children it has waited for, and of `servers` (psutil.Process: the
    bench's own servers still running, whose time getrusage cannot count yet)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + sum(_cpu(p) for p in servers)


def _cpu(process) -> float:
    """A running process's user + system CPU seconds, its threads' included; 0 once it is gone."""
    try:
        times = process.cpu_times()
    except Exception:   # noqa: BLE001 - psutil.NoSuchProcess and its kin: a server that ended counts nothing more
        return 0.0
    return times.user + times.system


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass
class LoadWindow:
    """Load averages at the start, and the machine's and this process tree's CPU seconds, until `stop()`;
    `servers`: processes the bench started that run through the window (an app, a llama-server), counted as its own."""

    load_before: list[float]
    busy: float | None
    own: float
    wall: float
    servers: tuple = ()

    @classmethod
    def start(cls, servers: tuple = ()) -> "LoadWindow":
        return cls([round(x, 2) for x in os.getloadavg()], _busy_seconds(), _own_seconds(servers), time.monotonic(),
                   servers)

    def stop(self) -> dict:
        """{"load_average_before", "load_average_after" (1, 5, 15 min), "others_cores" (others' CPU seconds a
        second, in cores; None without /proc/stat), "cores", "seconds"}."""
        wall = time.monotonic() - self.wall
        busy = _busy_seconds()
        others = None
        if busy is not None and self.busy is not None and wall > 0:
            others = round(max(0.0, (busy - self.busy) - (_own_seconds(self.servers) - self.own)) / wall, 3)
        return {"load_average_before": self.load_before, "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "others_cores": others, "cores": cores(), "seconds": round(wall, 1)}


def validity(loads: list[dict], share: float = QUIET_SHARE) -> dict:
    """Whether a ratio measured over these windows (LoadWindow.stop()'s dicts) is valid: others' CPU at or
    below `share` x cores in each; else `valid` False and the reason.

    >>> validity([{"others_cores": 0.1, "cores": 2}, {"others_cores": 0.5, "cores": 2}])
    {'valid': True, 'rule': "others' CPU <= 0.25 x cores in every window"}
    >>> validity([{"others_cores": 0.9, "cores": 2}])["reason"]
    "others' CPU 0.90 cores > 0.25 x 2 cores: the machine was not quiet"
    >>> validity([{"others_cores": None, "cores": 2}])["reason"]
    "others' CPU not measured (no /proc/stat): a ratio cannot be shown valid"
    """
    rule = f"others' CPU <= {share:g} x cores in every window"
    if not loads:
        return {"valid": False, "rule": rule, "reason": "no load measured"}
    for load in loads:
        if load.get("others_cores") is None:
            return {"valid": False, "rule": rule,
                    "reason": "others' CPU not measured (no /proc/stat): a ratio cannot be shown valid"}
        if load["others_cores"] > share * load["cores"]:
            return {"valid": False, "rule": rule,
                    "reason": f"others' CPU {load['others_cores']:.2f} cores > {share:g} x {load['cores']} cores: "
                              "the machine was not quiet"}
    return {"valid": True, "rule": rule}


def gated(ratio: float | None, check: dict) -> float | None:
    """The ratio where `check` (validity()) says valid, else None (the reason stands beside it in the row).

    >>> gated(0.87, {"valid": True}), gated(0.87, {"valid": False, "reason": "busy"})
    (0.87, None)
    """
    return ratio if check.get("valid") else None
