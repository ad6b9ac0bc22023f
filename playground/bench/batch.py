"""The batch row of `make bench`: our continuous batching's batch-size sweep, llama.cpp's, and the bound the kernels set.

    python -m playground.bench batch               # one JSON row: the bundled model on onnx-gguf4 (a few minutes)
    python -m playground.bench batch --model tiny  # the tiny model on onnx fp32, no llama.cpp (what the tests run)

Method, in one process (one session: the figures share the machine's state):
1. Our sweep (serve/sweeps.py) with our scheduler (serve/batching.py: as many KV slots as the largest
   size, 128-token prefill chunks) on the default CPU backend (onnx-gguf4 for the bundled GGUF): b = 1, 2,
   4, 8, 16 copies of the lesson's short question at once, 64 new tokens each, EOS ignored, after the same
   sweep at 4 tokens, untimed (warm-up). Per b: total decode tok/s (all b requests' tokens while all of
   them decoded, over that window), the median of the requests' TPOT, and the most rows a decode step carried.
2. llama.cpp's own sweep on the same GGUF (peer.llama_batched_bench_row): `llama-batched-bench
   -npp 32 -ntg 64 -npl 1,2,4,8,16 -t <cores>`; its S_TG column is the total decode tok/s of B sequences
   decoding in lockstep, so each one's TPOT is B / S_TG. Bundled model only.
3. The decode step alone: `decode_rows` (the scheduler's batched decode call) at 1 and 8 rows, every row at
   context 64, median of 20 calls after 5 untimed; and the decode graph's MatMulNBits alone
   (peer.kernels_only) at the rows they multiply for 1 and for 8 requests: n rows for a one-pass node,
   2n for an int8x2 node (it splits each activation row into hi and lo rows; `decode_plan` names the groups).

Ratios, each of two figures measured here, and the targets set on them (issue 21):
    total_x_8_vs_1      total decode tok/s at 8 / at 1        >= 3
    tpot_x_8_vs_1       median TPOT at 8 / at 1               <= 2.5
    total_x_8_vs_llama  our total at 8 / llama.cpp's at 8     >= 1
`targets_met` says for each whether the ratio meets it (None: a figure is missing, e.g. no llama.cpp).

The bound (labelled so; not a measurement): `total_x_8_vs_1_max` = 8 x step(1 row) / kernels(8 requests) --
the gain batching 8 requests could give if everything in the 8-row step but these kernels took no time
(attention, norms, the int8x2 split, sampling and the scheduler's own work all free). Beside it the
measured steps' own gain, 8 x step(1) / step(8): what the graph gives before the scheduler's work.

Left out: sizes past 16 (the slots' memory); sampling other than greedy; a GPU.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from .rows import Row, parser, say_timed
from .stats import ratio, rounded, targets_met, targets_text


@dataclass(frozen=True, kw_only=True)
class BatchRow(Row):
    """Our continuous batching's batch-size sweep, llama.cpp's, and the bound the kernels set (batch.batch_row)."""

    bench: str = field(default="batch", init=False)
    backend: str
    sizes: list[int]                      # the concurrencies swept
    new_tokens: int                       # per request
    ignore_eos: bool
    ours: dict                            # our sweep: scheduler, slots, prefill_chunk, prompt, points
    llama: dict                           # llama-batched-bench's sweep (peer.llama_batched_bench_row), or why not
    step: dict                            # the decode step and the kernels alone at 1 and 8 rows, and the bound
    total_x_8_vs_1: float | None          # total decode tok/s at 8 / at 1
    tpot_x_8_vs_1: float | None           # median TPOT at 8 / at 1
    total_x_8_vs_llama: float | None      # our total decode tok/s at 8 / llama.cpp's at 8 (None: not quiet)
    total_x_16_vs_llama: float | None     # the same at 16
    llama_total_x_8_vs_1: float | None
    total_x_8_vs_1_max: float | None      # the bound (step["bound"] says how): not a measurement
    validity: dict | None                 # quiet.validity of the ratios to llama.cpp; None without llama.cpp's sweep
    targets: dict[str, str]               # ratio -> its target, e.g. ">= 3"
    targets_met: dict[str, bool | None]   # None: a figure is missing


AT, SIZES, NEW_TOKENS, CONTEXT = 8, (1, 2, 4, 8, 16), 64, 64
TARGETS = {"total_x_8_vs_1": (">=", 3.0), "tpot_x_8_vs_1": ("<=", 2.5), "total_x_8_vs_llama": (">=", 1.0),
           "total_x_16_vs_llama": (">=", 1.0)}


def gain_ceiling(step_ms_1: float, kernels_ms_n: float, n: int) -> float:
    """The most batching n requests can multiply total decode tok/s by, if only the n requests' MatMulNBits took
    time: n tokens per kernels_ms_n against one per step_ms_1 (a bound: everything else counted free).

    >>> gain_ceiling(20.0, 40.0, 8)   # a 20 ms step at 1 row; the kernels alone take 40 ms at 8 rows
    4.0
    """
    return round(n * step_ms_1 / kernels_ms_n, 2)


def decode_step_ms(backend, rows: int, context: int = CONTEXT, repeats: int = 20, warm_up: int = 5) -> float:
    """Median ms of one `decode_rows` call with `rows` rows, each at `context` positions (a pool of its own)."""
    from ..backends.onnx_batch import KVSlots, decode_rows

    kv = KVSlots(backend, rows, context + 1)
    tokens, lengths = [(100 + r) % 256 for r in range(rows)], [context] * rows   # each step writes position `context`
    times = []
    for _ in range(warm_up + repeats):
        start = time.perf_counter()
        decode_rows(backend, kv, tokens, lengths)
        times.append(time.perf_counter() - start)
    return statistics.median(times[warm_up:]) * 1e3


def prefill_tps(backend, tokens: int, repeats: int = 3) -> float:
    """Prompt tokens/s of one `prefill_chunk` call reading `tokens` tokens into an empty slot (the prefill graph),
    median of `repeats` after one untimed call."""
    from ..backends.onnx_batch import KVSlots, prefill_chunk

    kv, ids = KVSlots(backend, 1, tokens + 1), [(100 + i) % 256 for i in range(tokens)]
    times = []
    for _ in range(1 + repeats):
        start = time.perf_counter()
        prefill_chunk(backend, kv, 0, ids, 0)
        times.append(time.perf_counter() - start)
    return tokens / statistics.median(times[1:])


def decode_kernels_ms(backend, requests: int, repeats: int = 30) -> dict:
    """The backend's decode graph's MatMulNBits alone at the rows `requests` requests make them multiply (int8x2
    nodes twice as many), median ms; or why not (a graph without MatMulNBits: fp32)."""
    import onnx

    from ..backends.onnx_cache import MODEL_FILE
    from ..backends.onnx_nbits import reads_hi_lo
    from .peer import kernels_ms, kernels_only

    try:
        model = onnx.load(str(Path(backend.folder) / MODEL_FILE))   # the decode graph (onnx-gguf4: model.onnx)
        kernels = kernels_only(model, requests, split_rows=2 * requests)
    except (OSError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    return {"ms": kernels_ms(kernels, repeats), "nodes": len(nodes), "int8x2_nodes": sum(map(reads_hi_lo, nodes))}


def our_sweep(engine, sizes=SIZES, new_tokens: int = NEW_TOKENS, prefill_chunk: int = 128) -> dict:
    """Our scheduler's batch-size sweep (after the same sweep at 4 tokens, untimed): the points, rounded."""
    from ..serve import SCHEDULERS
    from ..serve.batching import BatchConfig
    from ..serve.sweeps import run_batch_sweep

    scheduler = SCHEDULERS["batching"].create(engine, batch=BatchConfig(slots=max(sizes), prefill_chunk=prefill_chunk))
    run_batch_sweep(scheduler, sizes, new_tokens=4)   # warm-up: every size's first calls
    sweep = run_batch_sweep(scheduler, sizes, new_tokens)
    return {"scheduler": scheduler.name, "slots": max(sizes), "prefill_chunk": prefill_chunk,
            "prompt": sweep.settings["prompt"], "points": [
                {"concurrency": p.concurrency, "total_tps": rounded(p.total_tps, 1),
                 "per_request_tps": rounded(p.per_request_tps, 1),
                 "tpot_ms": rounded(p.tpot_s and p.tpot_s * 1e3, 2), "rows_max": p.rows_max,
                 "output_tokens": p.output_tokens} for p in sweep.points]}


def at(points: list[dict], size: int, key: str):
    """points' `key` at concurrency `size` (None when that size was not run)."""
    return next((p[key] for p in points if p["concurrency"] == size), None)


def step_bound(backend, n: int = AT) -> dict:
    """The decode step at 1 and n rows, the MatMulNBits alone for 1 and n requests, and the bound they set."""
    out = {"context": CONTEXT, "decode_plan": getattr(backend, "decode_plan", None),
           "step_ms_1": round(decode_step_ms(backend, 1), 3), f"step_ms_{n}": round(decode_step_ms(backend, n), 3)}
    out[f"step_gain_{n}_vs_1"] = ratio(n * out["step_ms_1"], out[f"step_ms_{n}"])
    kernels = {rows: decode_kernels_ms(backend, rows) for rows in (1, n)}
    if "error" in kernels[n]:
        return {**out, "bound_error": kernels[n]["error"]}
    out.update({"kernels_nodes": kernels[n]["nodes"], "kernels_int8x2_nodes": kernels[n]["int8x2_nodes"],
                "kernels_ms_1": round(kernels[1]["ms"], 3), f"kernels_ms_{n}": round(kernels[n]["ms"], 3),
                f"total_x_{n}_vs_1_max": gain_ceiling(out["step_ms_1"], kernels[n]["ms"], n),
                "bound": f"total_x_{n}_vs_1_max = {n} x step_ms_1 / kernels_ms_{n}: an upper bound (everything but "
                         f"the MatMulNBits free at {n} rows), not a measurement"})
    return out


def batch_row(model: str | None = None, backend: str | None = None, sizes=SIZES, new_tokens: int = NEW_TOKENS,
              llama: bool | None = None) -> BatchRow:
    """The row (see the module doc). `llama`: run llama-batched-bench (default: on the bundled model only)."""
    from ..backends import create_backend, default_backend_name
    from .breakdown import step_breakdown
    from .peer import llama_batched_bench_row
    from .quiet import LoadWindow, gated, validity
    from ..engine import Engine

    name = backend or default_backend_name("cpu", model)
    engine = Engine(create_backend(name, model, device="cpu"))
    engine.warm_up()
    window = LoadWindow.start()
    sweep = our_sweep(engine, sizes, new_tokens)
    sweep["load"] = window.stop()
    if llama if llama is not None else model is None:
        peer = llama_batched_bench_row(sizes, new_tokens=new_tokens)
    else:
        peer = {"skipped": "llama-batched-bench runs the bundled GGUF only"}
    step = step_bound(engine.backend)
    step["breakdown"] = step_breakdown(engine)   # kernels, other nodes, Python: one stream, 1, 8 and 16 rows
    ours, theirs = sweep["points"], peer.get("points", [])
    ratios = {"total_x_8_vs_1": ratio(at(ours, AT, "total_tps"), at(ours, 1, "total_tps")),
              "tpot_x_8_vs_1": ratio(at(ours, AT, "tpot_ms"), at(ours, 1, "tpot_ms")),
              "total_x_8_vs_llama": ratio(at(ours, AT, "total_tps"), at(theirs, AT, "total_tps")),
              "total_x_16_vs_llama": ratio(at(ours, 16, "total_tps"), at(theirs, 16, "total_tps")),
              "llama_total_x_8_vs_1": ratio(at(theirs, AT, "total_tps"), at(theirs, 1, "total_tps"))}
    check = validity([sweep["load"], *([peer["load"]] if peer.get("load") else [])]) if theirs else None
    for key in ("total_x_8_vs_llama", "total_x_16_vs_llama"):   # ratios to llama.cpp: a quiet machine's only
        ratios[key] = gated(ratios[key], check or {})
    return BatchRow(backend=engine.backend.name, sizes=list(sizes), new_tokens=new_tokens, ignore_eos=True,
                    ours=sweep, llama=peer, step=step, **ratios, validity=check,
                    total_x_8_vs_1_max=step.get(f"total_x_{AT}_vs_1_max"),   # the bound (see step["bound"])
                    targets=targets_text(TARGETS), targets_met=targets_met(ratios, TARGETS))


def main(argv: list[str]) -> None:
    p = parser("batch", __doc__)
    p.add_argument("--backend", default=None, help="an ONNX backend (default: onnx-gguf4 for a GGUF, else onnx)")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)))
    p.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    args = p.parse_args(argv)
    say_timed(lambda: batch_row(args.model, args.backend, tuple(int(s) for s in args.sizes.split(",")),
                                args.new_tokens))
