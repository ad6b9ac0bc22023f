"""Levers on the default's decode graph, each an onnx-gguf4 graph variant measured against the default: nodes a
token, and decode speed as tokens per CPU second on one core, rounds interleaved (`make bench`'s levers row).

    python -m playground.bench levers                  # every lever (onnx_gguf.LEVERS), 3 rounds
    python -m playground.bench levers q8zp head8 --rounds 5
    python -m playground.bench kld onnx-gguf4-q8zp     # a lever's fidelity, scored as the default is

A lever is a VARIANTS name of onnx_gguf.py that changes one thing of the default's decode graph (onnx_gguf.LEVERS
says what): the Q4_1 minimums in MatMulNBits' own float zero points (`fzp`), in 8-bit blocks' integer zero
points (`q8zp`), or dropped past the 4-bit zero points (`int8nr`: what the minimums' term is worth), their
remainders' term inside each layer's MatMulNBits instead of beside it (`cat4`), and the LM head in one int8
pass (`head8`). They are not backends of the app: none is kept as the default unless it is faster
at the fidelity the gate asks (docs/backends.md has the figures and the verdicts).

Speed on a shared machine. The neighbours' load moves wall-clock tok/s several-fold between runs minutes
apart; the work a token takes moves little. So this row pins its process to one core (os.sched_setaffinity:
ONNX Runtime then gets one intra-op thread, backends.onnx_backend.physical_cores) with spinning off, decodes
TOKENS greedy tokens after the same prompt ids on the default and on each lever in turn, round after round,
and times each with the process's CPU clock (time.process_time: one thread that never spins, so CPU seconds
are the work done). `cpu_tps` is tokens per CPU second, `cpu_x` its ratio to the default's, taken within
each round; the medians over the rounds are printed, with each round's figures and the wall-clock tok/s
beside them (labelled: they carry the load). The default's two-thread decode against llama.cpp and ONNX
Runtime GenAI is the interleaved rows'.

Left out: prefill (the levers change the decode graph; prefill keeps its fp32 graph), and the fidelity of a
lever (the kld rows': `kld onnx-gguf4-<lever>`).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .rows import Row, say
from .stats import median

DEFAULT = "onnx-gguf4"
TOKENS = 32     # decode tokens a lever a round
ROUNDS = 3
PROMPT_IDS = list(range(100, 140))   # any 40 ids: every graph reads the same ones


@dataclass(frozen=True, kw_only=True)
class LeverRow(Row):
    """One lever against the default, over interleaved rounds on one core (see the module doc).

    >>> LeverRow(lever="q8zp", backend="onnx-gguf4-q8zp", changes="8-bit zero points", nodes=365, cpu_tps=45.0,
    ...          cpu_x=0.9, wall_tps=40.0, rounds=[{"cpu_tps": 45.0, "cpu_x": 0.9, "wall_tps": 40.0}]).to_json()["cpu_x"]
    0.9
    """

    OPTIONAL = ("error",)
    ON_ERROR = ("bench", "lever", "backend")

    bench: str = field(default="levers", init=False)
    lever: str                     # onnx_gguf.LEVERS name, "" for the default
    backend: str
    changes: str | None = None     # what the lever changes in the default's decode graph
    nodes: int | None = None       # its decode graph's nodes as written (each runs once a token)
    threads: int = 1
    tokens: int = TOKENS
    cpu_tps: float | None = None   # median tokens per CPU second (one thread, no spinning)
    cpu_x: float | None = None     # median of the within-round ratios cpu_tps / the default's
    wall_tps: float | None = None  # median wall-clock tok/s of the same runs (the machine's load is in it)
    rounds: list[dict] | None = None
    error: str | None = None


def within_round_ratios(figures: list[float | None], default: list[float | None]) -> list[float | None]:
    """Each round's figure over the default's in the same round (None where either is missing).

    >>> within_round_ratios([45.0, 50.0, None], [50.0, 40.0, 50.0])
    [0.9, 1.25, None]
    """
    return [round(a / b, 3) if a and b else None for a, b in zip(figures, default)]


def decode_speed(backend, tokens: int = TOKENS) -> tuple[float, float]:
    """(tokens per CPU second, tokens per wall second) of `tokens` greedy decode steps after PROMPT_IDS."""
    logits, state = backend.prefill(PROMPT_IDS)
    token = int(logits.argmax())
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(tokens):
        logits, state = backend.decode(token, state)
        token = int(logits.argmax())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return tokens / cpu, tokens / wall


def open_lever(name: str, model: str | None = None):
    """onnx-gguf4 or one of its variants by backend name (`onnx-gguf4-<variant>`), registered or a lever."""
    from ..backends import BACKENDS, create_backend
    from ..backends.onnx_gguf import LEVERS
    from ..backends.onnx_gguf_backend import OnnxGgufBackend

    if name in BACKENDS:
        return create_backend(name, model, device="cpu")
    variant = name.removeprefix(f"{DEFAULT}-")
    if not name.startswith(f"{DEFAULT}-") or variant not in LEVERS:
        raise ValueError(f"{name!r} is neither a backend nor a lever ({', '.join(f'{DEFAULT}-{v}' for v in LEVERS)})")
    return OnnxGgufBackend.load(model, variant)


def lever_rows(levers: list[str], rounds: int = ROUNDS, tokens: int = TOKENS) -> list[LeverRow]:
    """The default's row and one a lever (printed as they come), measured as the module doc says, in a process
    that one_core() pinned."""
    from ..backends.onnx_gguf import LEVERS
    from .genai import graph_nodes
    from .interleaved import decode_graph

    if unknown := [v for v in levers if v not in LEVERS]:
        raise ValueError(f"levers are {sorted(LEVERS)}; got {unknown}")
    names = {"": DEFAULT, **{v: f"{DEFAULT}-{v}" for v in levers}}
    engines = {v: open_lever(name) for v, name in names.items()}
    for backend in engines.values():   # warm-up: first-call allocations, outside the rounds
        decode_speed(backend, 2)
    runs = {v: [] for v in engines}
    for _ in range(rounds):
        for v, backend in engines.items():
            runs[v].append(decode_speed(backend, tokens))
    base = [cpu for cpu, _ in runs[""]]
    rows = []
    for v, backend in engines.items():
        cpu, wall = [c for c, _ in runs[v]], [w for _, w in runs[v]]
        ratios = within_round_ratios(cpu, base)
        path = decode_graph(backend)
        rows.append(say(LeverRow(
            lever=v, backend=names[v], changes=LEVERS.get(v, "the default"),
            nodes=graph_nodes(path)["nodes"] if path else None, tokens=tokens,
            cpu_tps=round(median(cpu), 2), cpu_x=median(ratios), wall_tps=round(median(wall), 2),
            rounds=[{"cpu_tps": round(c, 2), "cpu_x": x, "wall_tps": round(w, 2)} for c, w, x in zip(cpu, wall, ratios)])))
    return rows


def one_core() -> None:
    """Pin this process to one core with spinning off: ONNX Runtime sessions opened after it get one intra-op thread
    (onnx_backend.physical_cores reads the affinity) that never spins, so CPU time is the work done."""
    from ..backends.onnx_backend import SPIN_ENV

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    os.environ[SPIN_ENV] = "0"


def main(argv: list[str]) -> None:
    import argparse

    from ..backends.onnx_gguf import LEVERS
    p = argparse.ArgumentParser(prog="python -m playground.bench levers", description=__doc__.splitlines()[0])
    p.add_argument("levers", nargs="*", default=list(LEVERS), help=f"levers (default: all of {', '.join(LEVERS)})")
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--tokens", type=int, default=TOKENS)
    args = p.parse_args(argv)
    one_core()
    lever_rows(args.levers, args.rounds, args.tokens)
