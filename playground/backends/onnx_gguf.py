"""The fp32 export rewritten to run the GGUF's own 4-bit blocks: every linear layer a `MatMulNBits`.

    folder = gguf4_dir(fp32_folder, gguf_path)    # <fp32 folder>-gguf4-a4-<hash>/model.onnx, built once

Each layer matrix of the bundled GGUF is Q4_1 (w = d*q + m per block of 32, see gguf_blocks.py), so
x.w splits exactly into what `MatMulNBits` computes with zero point 0 and a 1/32-size dense term:

    x.w = sum_b d_b (q_b . x_b)  +  sum_b m_b sum(x_b)
          MatMulNBits(x)            MatMul(ReduceSum(Reshape(x, [.., K/32, 32])), M)

At accuracy level 0 (fp32 activations) that is the fp32 export's arithmetic up to summation order; at
level 4 ONNX Runtime quantizes x to int8 per block, as llama.cpp's own Q4_1 kernels do (faster, not
exact: see the fidelity rows of `make bench`). q|k|v become one MatMulNBits feeding GroupQueryAttention
its packed-QKV input, gate|up one MatMulNBits and a Split, and the Q8_0 LM head an 8-bit MatMulNBits
(at level 4; at level 0 the head stays the export's fp32 MatMul, as ONNX Runtime's 8-bit kernel then
dequantizes the whole head on every call).
Before anything is written every block is dequantized and compared with the export's initializer for
that layer: they must be equal bit for bit, or the build refuses (wrong row order, another file).

Left out: the embedding lookup stays the export's fp32 Gather; GGUF types other than Q4_1/Q8_0.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .gguf_blocks import NBitsWeight, read_gguf_blocks
from .onnx_export import MODEL_FILE, _say, _seal, _staging, is_complete
from .onnx_nbits import MS, nbits_nodes

GGUF_EDITS = "q4_1-zp0-minsum,qkv-packed,gate-up,head-q8"  # part of the cache key: change it with the rewrite
GROUPS = ("qkv", "o", "gate_up", "down", "head")   # the MatMulNBits of a layer, and the LM head
MODE_CODES = {"fp32": "f", "int8": "i", "int8x2": "d"}
DEFAULT_MODE = "int8x2"   # chosen by measurement: see the module doc and `make bench`'s fidelity rows


def plan_of(modes: str | dict | None = None) -> dict[str, str]:
    """{group: activation mode} from one mode for all groups, or a partial mapping (the rest: DEFAULT_MODE).

    >>> plan_tag(plan_of("fp32")), plan_tag(plan_of({"head": "int8"}))
    ('fffff', 'ddddi')
    """
    if modes is None or isinstance(modes, str):
        modes = dict.fromkeys(GROUPS, modes or DEFAULT_MODE)
    plan = {g: modes.get(g, DEFAULT_MODE) for g in GROUPS}
    if unknown := {m for m in plan.values() if m not in MODE_CODES}:
        raise ValueError(f"activation modes must be among {sorted(MODE_CODES)}; got {sorted(unknown)}")
    return plan


def plan_tag(plan: dict[str, str]) -> str:
    return "".join(MODE_CODES[plan[g]] for g in GROUPS)


def gguf4_dir(fp32: Path, gguf_path: Path, modes: str | dict | None = None, progress=None,
              rebuild: bool = False) -> Path:
    """The cached rewritten graph next to the fp32 export `fp32`, built if missing or broken."""
    import gguf

    from ..models import gguf_content_key

    plan = plan_of(modes)
    salt = json.dumps([GGUF_EDITS, plan, getattr(gguf, "__version__", "")])
    key = hashlib.sha256(f"{gguf_content_key(Path(gguf_path))}|{salt}".encode()).hexdigest()[:12]
    target = fp32.with_name(f"{fp32.name}-gguf4-{plan_tag(plan)}-{key}")
    if rebuild or not is_complete(target):
        import shutil
        shutil.rmtree(target, ignore_errors=True)
        _say(progress, 0.75, "rewriting the ONNX graph with the GGUF's own 4-bit blocks (once, ~20 s)",
             f"MatMulNBits from {gguf_path} into {target}")
        staging = _staging(target)
        staging.mkdir(parents=True)
        info = rewrite_with_gguf_blocks(fp32 / MODEL_FILE, Path(gguf_path), staging / MODEL_FILE, plan)
        from .onnx_quantize import _copy_side_files
        _copy_side_files(fp32, staging)
        _seal(staging, target, {"source": str(fp32), "gguf": str(gguf_path), "kind": "gguf4", **info})
    return target


def rewrite_with_gguf_blocks(fp32_model: Path, gguf_path: Path, out: Path, plan: dict[str, str]) -> dict:
    model = onnx.load(str(fp32_model))
    graph = model.graph
    blocks, _ = read_gguf_blocks(gguf_path)
    nodes = {n.name: n for n in graph.node}
    inits = {i.name: i for i in graph.initializer}
    head = next(n for n in graph.node if "logits" in n.output)
    nodes["lm_head"] = head
    check_blocks_match_export(blocks, nodes, inits, graph)
    new_nodes, new_inits = [], []

    def replace(names: list[str], stem: str, outputs: list[str], group: str) -> str:
        weight = NBitsWeight.stack([blocks[n] for n in names])
        x = nodes[names[0]].input[0]
        y = outputs[0] if len(outputs) == 1 else f"{stem}/output"
        ns, ins = nbits_nodes(stem, x, weight, y, plan[group])
        if len(outputs) > 1:   # fused gate|up: split back into the names the rest of the graph reads
            sizes = [blocks[n].shape[0] for n in names]
            ins.append(numpy_helper.from_array(np.array(sizes, np.int64), f"{stem}/split_sizes"))
            ns.append(helper.make_node("Split", [y, f"{stem}/split_sizes"], outputs, axis=-1, name=f"{stem}/Split"))
        new_nodes.extend(ns)
        new_inits.extend(ins)
        for n in names:
            graph.node.remove(nodes[n])
        return y

    layers = sorted({int(n.split("/")[2].split(".")[1]) for n in blocks if n.startswith("/model/layers.")})
    for i in layers:
        p = f"/model/layers.{i}"
        qkv = replace([f"{p}/self_attn/{x}_proj/MatMul" for x in "qkv"], f"{p}/self_attn/qkv_proj",
                      [f"{p}/self_attn/qkv_proj/output"], "qkv")
        gqa = nodes[f"{p}/self_attn/GroupQueryAttention"]
        gqa.input[0], gqa.input[1], gqa.input[2] = qkv, "", ""
        for name, group in ((f"{p}/self_attn/o_proj/MatMul", "o"), (f"{p}/mlp/down_proj/MatMul", "down")):
            replace([name], name.rsplit("/", 1)[0], [nodes[name].output[0]], group)
        gate, up = f"{p}/mlp/gate_proj/MatMul", f"{p}/mlp/up_proj/MatMul"
        replace([gate, up], f"{p}/mlp/gate_up_proj", [nodes[gate].output[0], nodes[up].output[0]], "gate_up")
    if plan["head"] != "fp32":   # the 8-bit kernel at level 0 dequantizes the whole head every call (~0.3 s)
        replace(["lm_head"], "/lm_head", ["logits"], "head")
    graph.node.extend(new_nodes)
    graph.initializer.extend(new_inits)
    _drop_unused(model)
    onnx.save(model, str(out))
    return {"activation_modes": plan, "layers": len(layers), "head_bits": 32 if plan["head"] == "fp32" else 8}


def check_blocks_match_export(blocks: dict, nodes: dict, inits: dict, graph) -> None:
    """Raise ValueError unless every block matrix dequantizes to exactly the export's weight for it."""
    producers = {o: n for n in graph.node for o in n.output}
    for name, weight in blocks.items():
        if name not in nodes:
            raise ValueError(f"the export has no node {name} for a GGUF matrix")
        source = nodes[name].input[1]
        if source not in inits and producers.get(source) is not None and producers[source].op_type == "Transpose":
            exported = numpy_helper.to_array(inits[producers[source].input[0]])     # tied head: embedding
        else:
            exported = numpy_helper.to_array(inits[source]).T
        if not np.array_equal(weight.dequantize(), exported):
            raise ValueError(f"GGUF blocks for {name} do not dequantize to the exported weights "
                             "(another file, or the row order is wrong)")


def _drop_unused(model) -> None:
    """Remove nodes no output depends on (the head's Transpose), unused initializers and stale shapes."""
    from onnxruntime.transformers.onnx_model import OnnxModel

    om = OnnxModel(model)
    om.prune_graph()
    om.topological_sort()
    produced = {o for n in model.graph.node for o in n.output}
    used = {i for n in model.graph.node for i in n.input}
    inits = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    keep = [v for v in model.graph.value_info if v.name in produced]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)
    if not any(op.domain == MS for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS, 1))
