"""Where the default's decode step spends the time ONNX Runtime GenAI's does not: both decode graphs profiled
the same way, their nodes grouped by what they do, the gap put on each group (`make bench`'s gap row).

    python -m playground.bench gap                    # the default against GenAI's int4 graph, 5 rounds
    python -m playground.bench gap onnx-gguf4-int8    # a lever's graph instead of the default's
    python -m playground.bench as-cpu avx2 gap        # the same with the kernels an AVX2-only CPU runs

Each graph runs as a plain ONNX Runtime session with the decode session's options (the physical cores as
intra-op threads, spinning as the engine sets it): one token after a 64-position KV cache, the same for both.
A round times `STEPS` steps of each graph without the profiler (`step_ms`: the median), then the same steps
with ONNX Runtime's profiler on, whose node times are summed by group. The profiler adds to every node, so a
group's share of the profiled run is put on the unprofiled step (`groups_ms`: the share times `step_ms`);
what the profiled run spends outside the nodes is `between nodes` (ONNX Runtime's own walk of the graph).
Rounds alternate the graphs; each figure is the median over the rounds, and the ratio GenAI's step / ours
(`x_genai`, the speed ratio) is taken within each round.

The groups, read from each graph's structure (`classify`):
- `4-bit layer matmuls`: the MatMulNBits of the layers, bits 4;
- `Q4_1 minimum terms`: ours only — the AveragePool of the activations' block sums, the 8-bit MatMulNBits of
  the minimums' remainders on them, and the Add that puts the term on the layer's product (what the GGUF's
  Q4_1 blocks w = d·q + m need beyond 4-bit zero points; docs/backends.md); with the term inside the layer's
  MatMulNBits (cat4), the AveragePool and the Concat of the means onto the layer's input;
- `LM head`: the MatMulNBits with the vocabulary's outputs (ours 8-bit in two passes, GenAI's 4-bit);
- `attention`: GroupQueryAttention;
- `norms, activations, the rest`: every other node;
- `between nodes`.

`gap_pct` puts ours − GenAI's of each group over GenAI's step: the gap's attribution, in % of GenAI's step
(summing to ours / GenAI's − 1 over the groups).

Left out: prefill; batched decode (the batch rows); the engine's Python around a step (the breakdown row).
"""
from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .breakdown import profile_events
from .peer import run_times
from .rows import Row, say

DEFAULT = "onnx-gguf4"
ROUNDS, STEPS, WARM_UP, CONTEXT = 5, 30, 5, 64
GROUPS = ("4-bit layer matmuls", "Q4_1 minimum terms", "LM head", "attention", "norms, activations, the rest",
          "between nodes")


def classify(graph) -> dict[str, str]:
    """Each node's group (GROUPS) by name, from an ONNX graph's structure.

    >>> from onnx import helper
    >>> def mm(name, x, bits, n): return helper.make_node("MatMulNBits", [x, "w", "s"], [name], name=name, bits=bits,
    ...                                                  N=n, K=64, block_size=32)
    >>> g = helper.make_graph([helper.make_node("AveragePool", ["x"], ["p"], name="pool"), mm("mm", "x", 4, 8),
    ...     mm("term", "p", 8, 8), helper.make_node("Add", ["mm", "term"], ["y"], name="add"),
    ...     helper.make_node("GroupQueryAttention", ["y"], ["a"], name="gqa"), mm("head", "a", 8, 100),
    ...     helper.make_node("Add", ["head", "head"], ["z"], name="other")], "g", [], [])
    >>> classify(g)   # doctest: +NORMALIZE_WHITESPACE
    {'pool': 'Q4_1 minimum terms', 'mm': '4-bit layer matmuls', 'term': 'Q4_1 minimum terms',
     'add': 'Q4_1 minimum terms', 'gqa': 'attention', 'head': 'LM head', 'other': 'norms, activations, the rest'}
    """
    import onnx

    def attrs(node):
        return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    matmuls = {n.name: attrs(n) for n in graph.node if n.op_type == "MatMulNBits"}
    vocab = max((a.get("N", 0) for a in matmuls.values()), default=0)
    producer = {out: n for n in graph.node for out in n.output}
    out: dict[str, str] = {}
    for n in graph.node:
        if n.op_type == "MatMulNBits":
            a = matmuls[n.name]
            source = producer.get(n.input[0])
            while source is not None and source.op_type in ("Reshape", "Squeeze", "Unsqueeze", "Transpose"):
                source = producer.get(source.input[0])
            if a.get("N") == vocab:
                out[n.name] = "LM head"
            elif source is not None and source.op_type == "AveragePool":
                out[n.name] = "Q4_1 minimum terms"
            else:
                out[n.name] = "4-bit layer matmuls" if a.get("bits") == 4 else "norms, activations, the rest"
        elif n.op_type == "AveragePool" or (n.op_type == "Concat" and any(
                getattr(producer.get(i), "op_type", None) == "AveragePool" for i in n.input)):
            out[n.name] = "Q4_1 minimum terms"   # the block means, and their Concat onto a layer's input (cat4)
        elif n.op_type == "GroupQueryAttention":
            out[n.name] = "attention"
        else:
            out[n.name] = "norms, activations, the rest"
    for n in graph.node:   # the Adds that put a minimum term on its layer's product
        if n.op_type == "Add" and any(out.get(getattr(producer.get(i), "name", None)) == "Q4_1 minimum terms"
                                      and producer[i].op_type == "MatMulNBits" for i in n.input):
            out[n.name] = "Q4_1 minimum terms"
    return out


def feeds(session, context: int = CONTEXT) -> dict:
    """One decode step's inputs for a decode graph: one token after `context` zero positions of KV cache."""
    import numpy as np

    out = {}
    for i in session.get_inputs():
        if i.name == "input_ids":
            out[i.name] = np.array([[100]], dtype=np.int64)
        elif i.name == "attention_mask":
            out[i.name] = np.ones((1, context + 1), dtype=np.int64)
        elif i.name == "position_ids":
            out[i.name] = np.array([[context]], dtype=np.int64)
        elif i.name.startswith("past"):
            heads, dim = i.shape[1], i.shape[3]
            out[i.name] = np.zeros((1, heads, context, dim if isinstance(dim, int) else 64), dtype=np.float32)
        else:
            raise ValueError(f"a decode graph input this row does not know: {i.name}")
    return out


def node_ms(profile: Path, groups: dict[str, str], runs: int) -> tuple[dict[str, float], float]:
    """(ms a run by group, ms a run in model_run) from an ONNX Runtime profile of `runs` runs (breakdown's reader)."""
    model_runs, nodes = profile_events(profile)
    by: dict[str, float] = {}
    for e in nodes:
        group = groups.get(e["node"], "norms, activations, the rest")
        by[group] = by.get(group, 0.0) + e["dur"] / 1e3 / runs
    return by, sum(e["dur"] for e in model_runs) / 1e3 / runs


def apportion(step_ms: float, by: dict[str, float], run_ms: float) -> dict[str, float]:
    """The unprofiled step's ms by group: each group's share of the profiled run, `between nodes` the rest.

    >>> {k: round(v, 3) for k, v in apportion(5.0, {"attention": 2.0, "LM head": 6.0}, 10.0).items() if v}
    {'LM head': 3.0, 'attention': 1.0, 'between nodes': 1.0}
    """
    share = {g: by.get(g, 0.0) / run_ms for g in GROUPS[:-1]}
    share["between nodes"] = max(0.0, 1.0 - sum(share.values()))
    return {g: step_ms * share[g] for g in GROUPS}


class Graph:
    """One decode graph as a plain session, timed with and without the profiler."""

    def __init__(self, label: str, path: Path, folder: Path):
        import onnx

        self.label, self.path, self.folder = label, path, folder
        graph = onnx.load(str(path), load_external_data=False).graph
        self.nodes, self.groups = len(graph.node), classify(graph)

    def session(self, profiled: bool):
        import onnxruntime as ort

        from ..backends.onnx_backend import session_options
        options = session_options(spin=True)
        if profiled:
            options.enable_profiling = True
            options.profile_file_prefix = str(self.folder / self.label)
        return ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])

    def round(self) -> dict:
        plain = self.session(False)
        f = feeds(plain)
        step_ms = statistics.median(run_times(plain, f, STEPS, WARM_UP)) * 1e3
        profiled = self.session(True)
        for _ in range(STEPS):
            profiled.run(None, f)
        by, run_ms = node_ms(Path(profiled.end_profiling()), self.groups, STEPS)
        return {"step_ms": step_ms, "groups_ms": apportion(step_ms, by, run_ms)}


@dataclass(frozen=True, kw_only=True)
class GapRow(Row):
    """The gap row: ours and GenAI's decode step, by group, and the gap's attribution (see the module doc).

    >>> GapRow(ours="onnx-gguf4", skipped="onnxruntime-genai does not import here").to_json()
    {'bench': 'gap', 'ours': 'onnx-gguf4', 'skipped': 'onnxruntime-genai does not import here'}
    """

    OPTIONAL = ("skipped",)
    ON_ERROR = ("bench", "ours")

    bench: str = field(default="gap", init=False)
    ours: str
    peer: str = "onnxruntime-genai"
    rounds: int | None = None
    context: int = CONTEXT
    nodes: dict[str, int] | None = None         # label -> decode graph's nodes
    step_ms: dict[str, float] | None = None     # label -> median unprofiled step
    x_genai: float | None = None                # GenAI's step / ours (ours' speed as a multiple of GenAI's), median
    groups_ms: dict[str, dict[str, float]] | None = None   # label -> group -> ms of the step
    gap_pct: dict[str, float] | None = None     # group -> (ours - GenAI's) / GenAI's step, in %
    skipped: str | None = None


def gap_pct(ours: dict[str, float], peer: dict[str, float], peer_step: float) -> dict[str, float]:
    """Each group's ours − peer's in % of the peer's step, largest first.

    >>> gap_pct({"LM head": 3.0, "attention": 1.0}, {"LM head": 1.0, "attention": 1.5}, 5.0)
    {'LM head': 40.0, 'attention': -10.0}
    """
    pct = {g: round(100 * (ours.get(g, 0.0) - peer.get(g, 0.0)) / peer_step, 1) for g in {*ours, *peer}}
    return dict(sorted(pct.items(), key=lambda kv: -kv[1]))


def gap_row(ours: str = DEFAULT, rounds: int = ROUNDS) -> GapRow:
    from ..backends.onnx_cache import MODEL_FILE
    from .levers import open_lever
    from .genai import GRAPH_FILE, GenaiSkipped, graph_dir, require

    try:
        require()
        peer_folder = graph_dir()
    except GenaiSkipped as exc:
        return GapRow(ours=ours, skipped=str(exc))
    backend = open_lever(ours)
    with tempfile.TemporaryDirectory(prefix="playground-gap-") as tmp:
        graphs = [Graph(ours, Path(backend.folder) / MODEL_FILE, Path(tmp)),
                  Graph("onnxruntime-genai", peer_folder / GRAPH_FILE, Path(tmp))]
        results = [[g.round() for g in graphs] for _ in range(rounds)]
    labels = [g.label for g in graphs]
    step = {lab: statistics.median(r[i]["step_ms"] for r in results) for i, lab in enumerate(labels)}
    groups = {lab: {grp: statistics.median(r[i]["groups_ms"][grp] for r in results) for grp in GROUPS}
              for i, lab in enumerate(labels)}
    x = statistics.median(r[1]["step_ms"] / r[0]["step_ms"] for r in results)
    return GapRow(ours=ours, rounds=rounds, nodes={g.label: g.nodes for g in graphs},
                  step_ms={k: round(v, 3) for k, v in step.items()}, x_genai=round(x, 3),
                  groups_ms={k: {g: round(v, 3) for g, v in gs.items()} for k, gs in groups.items()},
                  gap_pct=gap_pct(groups[labels[0]], groups[labels[1]], step[labels[1]]))


def main(argv: list[str]) -> None:
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench gap", description=__doc__.splitlines()[0])
    p.add_argument("ours", nargs="?", default=DEFAULT, help=f"our backend's decode graph, or a lever's (onnx-gguf4-<lever>; "
                                                            f"default {DEFAULT})")
    p.add_argument("--rounds", type=int, default=ROUNDS)
    args = p.parse_args(argv)
    say(gap_row(args.ours, args.rounds))
