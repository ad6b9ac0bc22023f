"""Edit an exported decoder graph so the LM head runs on the last position only.

Transformers' `logits_to_keep=1` does the same in PyTorch: prefill needs the next-token logits of the
last prompt position alone, yet the exported graph multiplies every position's hidden state by the
(hidden x vocab) head (for SmolLM2 and a 46-token prompt: 46 x 576 x 49152, ~1.3 GFLOP wasted).

Speculative decoding needs the opposite: a verify pass scores every position it reads. `all_logits_graph(path)`
writes, once, a sibling graph with that slice removed (weights shared through the same external data file).

Also here: `tie_lm_head(path)`, which makes a tied LM head read Transpose(embedding) again after the exporter
stored the transposed copy as a constant of its own, and `untie_lm_head(model)`, which gives such a head weights
of its own so a weight quantizer can see them; and `make_model`, how the code builds a graph of its own (probes, kernel
checks) so that every ONNX Runtime we run on can read it.

Left out: graphs whose `logits` output is not made by a plain MatMul (then the graph is left alone).
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

log = logging.getLogger(__name__)
SLICE_NODE = "playground_last_position"
# onnx's helper stamps a new graph with its own newest IR version (14 in onnx 1.23), which ONNX Runtime 1.23, the
# newest on Python 3.10, refuses (it reads up to 11): graphs built here declare IR 10 (ONNX 1.16, opsets <= 21)
GRAPH_IR_VERSION = 10


def make_model(graph, opsets: dict[str, int]):
    """An onnx.ModelProto of `graph` importing `opsets` ({domain: version}; "" is ONNX's own), at GRAPH_IR_VERSION.

    >>> from onnx import TensorProto
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    >>> g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [y], [y])
    >>> m = make_model(g, {"": 17, "com.microsoft": 1})
    >>> m.ir_version, [(o.domain, o.version) for o in m.opset_import]
    (10, [('', 17), ('com.microsoft', 1)])
    """
    return helper.make_model(graph, ir_version=GRAPH_IR_VERSION,
                             opset_imports=[helper.make_opsetid(domain, v) for domain, v in opsets.items()])


# --- the edit

def keep_last_logits(path: Path) -> None:
    """Slice the hidden states to the last position before the LM head, so prefill skips
    seq_len - 1 rows of the (hidden x vocab) matmul that only the last row of is ever used.

    The graph's `logits` output becomes [batch, 1, vocab] for any input length.
    """
    model = onnx.load(str(path), load_external_data=True)
    graph = model.graph
    head = next(n for n in graph.node if "logits" in n.output)
    if head.op_type != "MatMul" or any(n.name == SLICE_NODE for n in graph.node):
        log.warning("keep_last_logits: %s is %s, left as exported", path, head.op_type)
        return
    consts = [numpy_helper.from_array(np.array(v, dtype=np.int64), name=f"playground_slice_{k}")
              for k, v in (("starts", [-1]), ("ends", [2**62]), ("axes", [1]))]
    graph.initializer.extend(consts)
    sliced = head.input[0] + "_last"
    node = helper.make_node("Slice", [head.input[0]] + [c.name for c in consts], [sliced],
                            name=SLICE_NODE)
    head.input[0] = sliced
    graph.node.insert(list(graph.node).index(head), node)
    out = next(o for o in graph.output if o.name == "logits")
    out.type.tensor_type.shape.dim[1].ClearField("dim_param")
    out.type.tensor_type.shape.dim[1].dim_value = 1
    onnx.save(model, str(path))


def tie_lm_head(path: Path) -> bool:
    """Give a tied LM head its weight as Transpose(embedding) again; True when the graph was changed.

    The exporter folds the transpose of a tied embedding into a second constant, the same numbers stored twice
    (for SmolLM2, 113 MB). The head reads the transpose of the embedding's initializer instead, as the model
    does: one copy on disk, and the int8 quantizer sees the head as the MatMul of a computed weight, not a
    constant one (untie_lm_head undoes this where a weight quantizer needs the constant)."""
    model = onnx.load(str(path), load_external_data=True)
    graph = model.graph
    head = next((n for n in graph.node if "logits" in n.output and n.op_type == "MatMul"), None)
    gather = next((n for n in graph.node if n.op_type == "Gather" and n.input[1] == "input_ids"), None)
    inits = {i.name: i for i in graph.initializer}
    if head is None or gather is None or head.input[1] not in inits or gather.input[0] not in inits:
        return False
    weight = numpy_helper.to_array(inits[head.input[1]])
    embedding = numpy_helper.to_array(inits[gather.input[0]])
    if weight.shape != embedding.shape[::-1] or not np.array_equal(weight, embedding.T):
        return False
    graph.initializer.remove(inits[head.input[1]])
    tied = gather.input[0] + "_transposed"
    graph.node.insert(list(graph.node).index(head), helper.make_node("Transpose", [gather.input[0]], [tied],
                                                                     name="playground_tied_lm_head", perm=[1, 0]))
    head.input[1] = tied
    onnx.save(model, str(path))
    return True


ALL_LOGITS_SUFFIX = ".all-logits.onnx"


def all_logits_graph(path: Path) -> Path:
    """The graph at `path` with the last-position slice taken out (logits [batch, seq, vocab]), written once
    beside it as <stem>.all-logits.onnx; ValueError when `path` has no such slice (nothing to take out).

    Loaded without its weights, so the copy refers to the same external data file (no second copy on disk
    where the weights are external); written to a temporary name and renamed, so a crash leaves nothing half."""
    path = Path(path)
    target = path.with_name(path.stem + ALL_LOGITS_SUFFIX)
    if target.is_file():
        return target
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    node = next((n for n in graph.node if n.name == SLICE_NODE), None)
    if node is None:
        raise ValueError(f"{path} keeps every position's logits already (no {SLICE_NODE} node)")
    for other in graph.node:   # whatever read the sliced hidden states now reads them all
        other.input[:] = [node.input[0] if i == node.output[0] else i for i in other.input]
    graph.node.remove(node)
    unused = set(node.input[1:])
    kept = [i for i in graph.initializer if i.name not in unused]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    dim = next(o for o in graph.output if o.name == "logits").type.tensor_type.shape.dim[1]
    dim.ClearField("dim_value")
    dim.dim_param = "sequence_length"
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}-{threading.get_ident()}")
    onnx.save(model, str(partial))
    os.replace(partial, target)
    return target


def untie_lm_head(model) -> str | None:
    """Name of the LM head MatMul, after making its weight a constant if it was Transpose(embedding).

    With tied embeddings the export computes the head weight as Transpose(embed_tokens.weight) at run
    time, which weight quantizers skip (not an initializer), leaving a (hidden x vocab) fp32 matmul:
    for SmolLM2 113 MB read per decoded token, more than all the int4 layers together.
    """
    graph = model.graph
    head = next((n for n in graph.node if "logits" in n.output and n.op_type == "MatMul"), None)
    if head is None:
        return None
    inits = {i.name: i for i in graph.initializer}
    if head.input[1] not in inits:
        tr = next((n for n in graph.node if head.input[1] in n.output), None)
        if tr is None or tr.op_type != "Transpose" or tr.input[0] not in inits:
            return None
        weight = numpy_helper.to_array(inits[tr.input[0]]).T.copy()  # [hidden, vocab]
        graph.initializer.append(numpy_helper.from_array(weight, "playground_lm_head_weight"))
        head.input[1] = "playground_lm_head_weight"
    return head.name
