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
ONNX Runtime then gets one intra-op thread, backends.onnx_backend.physical_cores) with spinning off, and
measures each lever in a pair with the default, the two alone in the process, their order swapped every round:
each decodes TOKENS greedy tokens after the same prompt ids, timed with the process's CPU clock
(time.process_time: one thread that never spins, so CPU seconds are the work done). `cpu_tps` is tokens per CPU
second, `cpu_x` its ratio to the default's, taken within each round; the medians over the rounds are printed, with each round's figures and the wall-clock tok/s
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
    """One row a lever, then the default's (printed as they come), measured as the module doc says, in a process
    that one_core() pinned: each lever in a pair with the default, the two alone in the process, their order
    swapped every round (pairs()), the ratio taken within each round."""
    from ..backends.onnx_gguf import LEVERS
    from .genai import graph_nodes

    if unknown := [v for v in levers if v not in LEVERS]:
        raise ValueError(f"levers are {sorted(LEVERS)}; got {unknown}")
    rows, default_runs, default_path = [], [], None
    for v in levers:
        name = f"{DEFAULT}-{v}"
        runs, path = pairs(open_lever(DEFAULT), open_lever(name), rounds, tokens)
        default_runs += runs[0]
        default_path = default_path or path[0]
        cpu, wall = [c for c, _ in runs[1]], [w for _, w in runs[1]]
        ratios = within_round_ratios(cpu, [c for c, _ in runs[0]])
        rows.append(say(LeverRow(
            lever=v, backend=name, changes=LEVERS[v], nodes=graph_nodes(path[1])["nodes"] if path[1] else None,
            tokens=tokens, cpu_tps=round(median(cpu), 2), cpu_x=median(ratios), wall_tps=round(median(wall), 2),
            rounds=[{"cpu_tps": round(c, 2), "cpu_x": x, "wall_tps": round(w, 2)} for c, w, x in zip(cpu, wall, ratios)])))
    if not default_runs:   # no lever asked: the default alone
        runs, path = pairs(open_lever(DEFAULT), None, rounds, tokens)
        default_runs, default_path = runs[0], path[0]
    cpu, wall = [c for c, _ in default_runs], [w for _, w in default_runs]
    rows.append(say(LeverRow(
        lever="", backend=DEFAULT, changes="the default", tokens=tokens,
        nodes=graph_nodes(default_path)["nodes"] if default_path else None, cpu_tps=round(median(cpu), 2), cpu_x=1.0,
        wall_tps=round(median(wall), 2), rounds=[{"cpu_tps": round(c, 2), "cpu_x": 1.0, "wall_tps": round(w, 2)}
                                                 for c, w in zip(cpu, wall)])))
    return rows


def pairs(default, lever, rounds: int, tokens: int) -> tuple[tuple[list, list], tuple]:
    """(the default's and the lever's (CPU, wall) tok/s a round; their decode graphs): the two warmed up, then
    `rounds` rounds, the default first in even rounds and second in odd ones. Measured with every lever loaded at
    once and the default always first, each lever came out up to ~15 % ahead of the same graph measured as the
    default: the pair alone, its order swapped, leaves neither side that place."""
    from .interleaved import decode_graph

    engines = [e for e in (default, lever) if e is not None]
    for backend in engines:   # warm-up: first-call allocations, outside the rounds
        decode_speed(backend, 2)
    runs: tuple[list, list] = ([], [])
    for r in range(rounds):
        order = range(len(engines)) if r % 2 == 0 else reversed(range(len(engines)))
        for i in order:
            runs[i].append(decode_speed(engines[i], tokens))
    return runs, tuple(decode_graph(e) if e is not None else None for e in (default, lever))


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
