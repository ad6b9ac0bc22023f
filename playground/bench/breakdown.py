"""Where a decode step's time goes: ONNX Runtime's own profiler by op type, and the Python around the calls.

    python -m playground.bench breakdown                  # the default backend: one stream, then 1, 8, 16 rows
    step_breakdown(engine)                                # the same dict, for the batch row's `step`

Each phase runs on a copy of the backend's decode graph opened with ONNX Runtime's profiler on (the
backend's own session options otherwise), swapped in for the backend's decode session while it runs:

  - one stream: the engine generating NEW_TOKENS greedy tokens after the chat prompt (the path a chat
    takes: backend.decode, sampling, the Steps); `python_ms` is the engine's time a token (1 / its decode
    tok/s) less ONNX Runtime's time a run
  - rows 1, 8, 16: the batch path's decode call (onnx_batch.decode_rows) at that many rows, every row at
    context 64, timed call by call; `python_ms` is the call's wall time less ONNX Runtime's time a run

Per phase, medians over the timed steps (the first WARM_UP are left out), ms a step: `step_ms` (wall),
`ort_run_ms` (the profiler's model_run), `kernels_ms` (its MatMulNBits nodes, summed), `other_nodes_ms` (every
other node), `ort_between_nodes_ms` (the run less its nodes: the executor's own work), `python_ms`, and
`by_op_ms` (each op type's mean, largest first). The profiler adds a little to every node; the figures
say where the time goes, they are not the backend's speed (the backend rows are).

Left out: the prefill graph (its own row, prefill.py) and a profile of llama.cpp (it has none to compare).
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .rows import Row, parser, say


@dataclass(frozen=True, kw_only=True)
class BreakdownRow(Row):
    """Where a decode step's time goes (breakdown.step_breakdown): one stream, then 1, 8, 16 rows, each phase's
    step_ms, ort_run_ms, kernels_ms, other_nodes_ms, ort_between_nodes_ms, python_ms and by_op_ms."""

    bench: str = field(default="breakdown", init=False)
    backend: str
    phases: dict                          # "one_stream", "rows_1", "rows_8", "rows_16" -> figures (or "error")


WARM_UP, STEPS, ROWS, CONTEXT, NEW_TOKENS = 5, 20, (1, 8, 16), 64, 64
KERNEL_OP = "MatMulNBits"
KERNEL_TIME = "_kernel_time"   # the suffix of a node's own event in the profile (its fences have others)


def profile_events(path: Path) -> tuple[list[dict], list[dict]]:
    """(model_run events, node events) of an ONNX Runtime profile, each {"ts", "dur"} in µs, nodes with "op" and
    "node" (the node's name in the graph).

    >>> import json, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "p.json"
    >>> _ = f.write_text(json.dumps([{"cat": "Session", "name": "model_run", "ts": 10, "dur": 50},
    ...     {"cat": "Node", "name": "mm_kernel_time", "ts": 12, "dur": 30, "args": {"op_name": "MatMulNBits"}},
    ...     {"cat": "Node", "name": "mm_fence_before", "ts": 11, "dur": 0, "args": {"op_name": "MatMulNBits"}}]))
    >>> profile_events(f)
    ([{'ts': 10, 'dur': 50}], [{'ts': 12, 'dur': 30, 'op': 'MatMulNBits', 'node': 'mm'}])
    """
    events = json.loads(Path(path).read_text())
    runs = [{"ts": e["ts"], "dur": e["dur"]} for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    nodes = [{"ts": e["ts"], "dur": e["dur"], "op": e.get("args", {}).get("op_name", "?"),
              "node": e["name"][:-len(KERNEL_TIME)]} for e in events
             if e.get("cat") == "Node" and str(e.get("name", "")).endswith(KERNEL_TIME)]
    return sorted(runs, key=lambda e: e["ts"]), sorted(nodes, key=lambda e: e["ts"])


def per_run(runs: list[dict], nodes: list[dict], skip: int = 0) -> list[dict]:
    """For each run after the first `skip`: its ms, its MatMulNBits ms, other nodes' ms, and ms by op type.

    >>> per_run([{"ts": 0, "dur": 1000}, {"ts": 2000, "dur": 900}],
    ...         [{"ts": 10, "dur": 600, "op": "MatMulNBits"}, {"ts": 700, "dur": 200, "op": "Add"},
    ...          {"ts": 2010, "dur": 500, "op": "MatMulNBits"}, {"ts": 2600, "dur": 100, "op": "Add"}], skip=1)
    [{'run_ms': 0.9, 'kernels_ms': 0.5, 'other_nodes_ms': 0.1, 'by_op': {'MatMulNBits': 0.5, 'Add': 0.1}}]
    """
    out, i = [], 0
    for k, run in enumerate(runs):
        end = run["ts"] + run["dur"]
        by_op: dict[str, float] = {}
        while i < len(nodes) and nodes[i]["ts"] < run["ts"]:
            i += 1
        while i < len(nodes) and nodes[i]["ts"] <= end:
            by_op[nodes[i]["op"]] = by_op.get(nodes[i]["op"], 0.0) + nodes[i]["dur"] / 1e3
            i += 1
        if k < skip:
            continue
        kernels = by_op.get(KERNEL_OP, 0.0)
        out.append({"run_ms": run["dur"] / 1e3, "kernels_ms": round(kernels, 6),
                    "other_nodes_ms": round(sum(by_op.values()) - kernels, 6),
                    "by_op": {op: round(ms, 6) for op, ms in by_op.items()}})
    return out


def summarize(runs: list[dict], step_ms: float) -> dict:
    """A phase's figures (see the module doc) from per_run()'s list and the wall ms a step.

    >>> summarize([{"run_ms": 10.0, "kernels_ms": 6.0, "other_nodes_ms": 3.0, "by_op": {"MatMulNBits": 6.0,
    ...            "Add": 3.0}}], 12.5)   # doctest: +NORMALIZE_WHITESPACE
    {'step_ms': 12.5, 'ort_run_ms': 10.0, 'kernels_ms': 6.0, 'other_nodes_ms': 3.0, 'ort_between_nodes_ms': 1.0,
     'python_ms': 2.5, 'by_op_ms': {'MatMulNBits': 6.0, 'Add': 3.0}}
    """
    if not runs:
        return {"error": "the profile holds no timed run"}
    med = {key: statistics.median(r[key] for r in runs) for key in ("run_ms", "kernels_ms", "other_nodes_ms")}
    ops: dict[str, float] = {}
    for r in runs:
        for op, ms in r["by_op"].items():
            ops[op] = ops.get(op, 0.0) + ms / len(runs)
    return {"step_ms": round(step_ms, 3), "ort_run_ms": round(med["run_ms"], 3), "kernels_ms": round(med["kernels_ms"], 3),
            "other_nodes_ms": round(med["other_nodes_ms"], 3),
            "ort_between_nodes_ms": round(max(0.0, med["run_ms"] - med["kernels_ms"] - med["other_nodes_ms"]), 3),
            "python_ms": round(max(0.0, step_ms - med["run_ms"]), 3),
            "by_op_ms": {op: round(ms, 3) for op, ms in sorted(ops.items(), key=lambda kv: -kv[1])[:10]}}


class _Profiled:
    """The backend's decode session swapped for a profiled copy of the same graph while inside; the profile's
    events on exit (`self.runs`, `self.nodes`)."""

    def __init__(self, backend, folder: Path):
        self.backend, self.folder = backend, folder

    def __enter__(self):
        import onnxruntime as ort

        from ..backends.onnx_backend import session_options
        from ..backends.onnx_cache import MODEL_FILE

        options = session_options(spin=True)   # the decode session's options
        options.enable_profiling = True
        options.profile_file_prefix = str(self.folder / "decode")
        self.session = ort.InferenceSession(str(Path(self.backend.folder) / MODEL_FILE), options,
                                            providers=["CPUExecutionProvider"])
        self.original, self.backend.session = self.backend.session, self.session
        return self

    def __exit__(self, *exc):
        self.backend.session = self.original
        self.runs, self.nodes = profile_events(Path(self.session.end_profiling()))
        return False


def one_stream(engine, folder: Path, new_tokens: int = NEW_TOKENS) -> dict:
    """The engine's single-stream decode, profiled (see the module doc)."""
    from ..config import GenerationSettings
    from .backends import PROMPT

    settings = GenerationSettings(max_new_tokens=new_tokens, temperature=0.0)
    ids = engine.prompt_ids(PROMPT, settings)[1]
    with _Profiled(engine.backend, folder) as p:
        engine.run_ids(ids, settings.with_(max_new_tokens=WARM_UP + 1)).wait()   # warm-up: the first calls
        metrics = engine.run_ids(ids, settings).wait().metrics()
    skip = WARM_UP   # the warm-up run's decode steps
    out = summarize(per_run(p.runs, p.nodes, skip), 1e3 / metrics.decode_tps)
    out["path"] = "engine: backend.decode, sampling, Steps (python_ms: 1 / decode tok/s less the run)"
    return out


def rows_step(backend, rows: int, folder: Path, steps: int = STEPS) -> dict:
    """The batch path's decode call at `rows` rows, profiled (see the module doc)."""
    from ..backends.onnx_batch import KVSlots, decode_rows

    kv = KVSlots(backend, rows, CONTEXT + 1)
    tokens, lengths = [(100 + r) % 256 for r in range(rows)], [CONTEXT] * rows
    times = []
    with _Profiled(backend, folder) as p:
        for _ in range(WARM_UP + steps):
            start = time.perf_counter()
            decode_rows(backend, kv, tokens, lengths)
            times.append(time.perf_counter() - start)
    out = summarize(per_run(p.runs, p.nodes, WARM_UP), statistics.median(times[WARM_UP:]) * 1e3)
    out["path"] = f"onnx_batch.decode_rows, {rows} rows at context {CONTEXT}"
    return out


def step_breakdown(engine, rows=ROWS) -> dict:
    """{"one_stream": ..., "rows_1": ..., "rows_8": ..., "rows_16": ...}: each phase's figures, or why none."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="playground-profile-") as tmp:
        try:
            out["one_stream"] = one_stream(engine, Path(tmp))
            for n in rows:
                out[f"rows_{n}"] = rows_step(engine.backend, n, Path(tmp))
        except (AttributeError, ValueError, OSError) as exc:   # not an ONNX backend with a decode graph
            out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def breakdown_row(model: str | None = None, backend: str | None = None) -> BreakdownRow:
    from ..backends import create_backend, default_backend_name
    from ..engine import Engine

    name = backend or default_backend_name("cpu", model)
    engine = Engine(create_backend(name, model, device="cpu"))
    engine.warm_up()
    return BreakdownRow(backend=name, phases=step_breakdown(engine))


def main(argv: list[str]) -> None:
    p = parser("breakdown", __doc__)
    p.add_argument("--backend", default=None, help="an ONNX backend (default: onnx-gguf4 for a GGUF, else onnx)")
    args = p.parse_args(argv)
    say(breakdown_row(args.model, args.backend))
