"""Running llama.cpp's benchmark programs: `llama-bench` (one prompt batch and one-token decode steps, as JSON) and
`llama-batched-bench` (B sequences decoded in lockstep, as a markdown table).

    trial = run_probe(folder, gguf, repack=False)   # Trial: the variant it loaded, prompt and decode tok/s, or why not
    llama_bench_command(binary, gguf, 2, "46,1024", 64, 3)           # llama-bench's command line
    batched_bench_command(binary, gguf, 1792, 32, 64, (1, 2, 4), 2)  # llama-batched-bench's
    parse_batched_bench(stdout)                     # its table: [{column header: number}, ...]

The probe (run_probe) is one configuration of llama.cpp's programs (a folder, repacking or not) through a
PROBE_TOKENS-token prompt and as many decode steps: choice.py runs it to find the configuration that works here.
`make bench`'s yardstick rows (bench/peer.py) run the same programs through these command lines.

Left out: the rows' own fields and their load windows (bench/peer.py).
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .programs import library_env, loaded_cpu_variant

PROBE_TOKENS = 32       # the probe's prompt and decode lengths: a batch of 32 tokens, then 32 one-token steps
PROBE_THREADS = 2       # worker threads too: the AMX fault is theirs
PROBE_TIMEOUT = 180.0   # seconds for one probe run (a busy 2-core machine loads and runs it in a few)


def llama_bench_command(binary: Path, gguf: Path, threads: int, prompt: int | str, new: int, repeats: int,
                        *extra: str) -> list[str]:
    """`llama-bench` timing a `prompt`-token batch (or several: "46,1024") and `new` one-token decode steps, each
    the mean of `repeats` runs, its figures as JSON.

    >>> llama_bench_command(Path("/b/llama-bench"), Path("m.gguf"), 2, 32, 0, 1, "--repack", "0")
    ['/b/llama-bench', '-m', 'm.gguf', '-t', '2', '-p', '32', '-n', '0', '-r', '1', '-o', 'json', '--repack', '0']
    """
    return [str(binary), "-m", str(gguf), "-t", str(threads), "-p", str(prompt), "-n", str(new), "-r", str(repeats),
            "-o", "json", *extra]


def batched_bench_command(binary: Path, gguf: Path, context: int, prompt: int, new: int, sizes, threads: int
                          ) -> list[str]:
    """`llama-batched-bench`: for each B in `sizes`, B `prompt`-token prompts, then `new` tokens decoded for all B
    in lockstep, in a `context`-position cache.

    >>> batched_bench_command(Path("/b/llama-batched-bench"), Path("m.gguf"), 1792, 32, 64, (1, 2), 2)
    ['/b/llama-batched-bench', '-m', 'm.gguf', '-c', '1792', '-npp', '32', '-ntg', '64', '-npl', '1,2', '-t', '2']
    """
    return [str(binary), "-m", str(gguf), "-c", str(context), "-npp", str(prompt), "-ntg", str(new),
            "-npl", ",".join(map(str, sizes)), "-t", str(threads)]


def parse_batched_bench(text: str) -> list[dict]:
    """The rows of llama-batched-bench's markdown table, {column header: number}, in its order (the log around
    it is skipped).

    >>> parse_batched_bench("log line\\n|  PP |  TG |  B | S_TG t/s |\\n|-----|-----|----|----------|\\n"
    ...                     "|  32 |  64 |  8 |   512.50 |\\n\\nmore log")
    [{'PP': 32, 'TG': 64, 'B': 8, 'S_TG t/s': 512.5}]
    """
    rows, header = [], None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            if rows:   # the table has ended
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):   # not the |---|---| line
            rows.append({h: (int(c) if c.isdigit() else float(c)) for h, c in zip(header, cells)})
    return rows


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
    cmd = llama_bench_command(folder / "llama-bench", gguf, threads, prompt, decode, repeats,
                              "--repack", "1" if repack else "0")
    try:
        out = subprocess.run(cmd, env=library_env(), cwd=folder, capture_output=True, text=True, timeout=timeout)
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
