"""The fp32 export rewritten to run the GGUF's own 4-bit blocks: every linear layer a `MatMulNBits`.

    folder = gguf4_dir(fp32_folder, gguf_path)   # <fp32 folder>-gguf4-<plans>-<hash>/, built once:
    #   model.onnx (+ .data)     the decode graph (one new token a step)
    #   prefill.onnx (+ .data)   the prefill graph (the prompt), same inputs, outputs and weights

Each layer matrix of the bundled GGUF is Q4_1 (w = d*q + m per block of 32, see gguf_blocks.py); it
becomes MatMulNBits plus a 1/32-size term for the minimums (onnx_nbits.py; with int8 activations the
kernel's own zero points carry most of each minimum, and the term only the remainder). q|k|v
become one MatMulNBits feeding GroupQueryAttention its packed-QKV input, gate|up one MatMulNBits and a
Split, the Q8_0 LM head an 8-bit MatMulNBits and the Q8_0 embedding a GatherBlockQuantized (both
exact: d*q), and each residual Add with the RMSNorm after it one SkipSimplifiedLayerNormalization.
Before anything is written every block is dequantized and compared with the export's
initializer for that layer: they must be equal bit for bit, or the build refuses (wrong row order,
another file).

A plan says how each group (onnx_nbits.GROUPS) treats its activations (onnx_nbits.py): "fp32" (accuracy level 0),
"int8" (level 4, as llama.cpp) or "int8x2" (level 4 on hi + lo rows). Decode and prefill get separate
graphs because the best mode differs (measured on this 2-core AVX2 machine, one 576x1536 layer):
at one row int8x2 takes 0.09 ms against fp32's 0.25 ms; at 46 or 1024 rows fp32 is 2-3x faster than
int8x2 (whose rows double). VARIANTS name the combinations `make bench` measures; "" is the default,
chosen by the kld rows (llama.cpp's own scoring, bench/kld.py) and decode speed: every layer in one int8
pass, as llama.cpp, and the LM head in int8x2. The head is the largest matrix (49,152 x 576) and the one whose
rounding shows most in the next token's probabilities. The figures that chose it, and the levers measured
against it: docs/backends.md ("Levers on the default's decode graph").

Weights are saved as external data (`<graph>.onnx.data`), which ONNX Runtime maps instead of copying
into the protobuf and again into tensors: ~150 MB less resident memory per session here.

Left out: GGUF types other than Q4_1/Q8_0 (refused); a non-Q8_0 embedding stays the export's fp32 Gather.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .gguf_blocks import EMBEDDING, NBitsWeight, read_gguf_blocks
from .onnx_cache import MODEL_FILE, is_complete, say, seal, staging
from .onnx_nbits import MS, embedding_nodes, nbits_nodes, plan_of, plan_tag

GGUF_EDITS = ("q4_1-zp8-minpool-transb,q4_1-int8-zp-remainder,qkv-packed,gate-up,head-q8,embed-q8,skip-norm,"
              "prefill-graph,external-data")  # in the cache key
PREFILL_FILE = "prefill.onnx"
LAYERS = ("qkv", "o", "gate_up", "down")
LAYERS_FP32 = dict.fromkeys(LAYERS, "fp32")
HEAD_INT8X2 = {**dict.fromkeys(LAYERS, "int8"), "head": "int8x2"}   # the default's decode plan
VARIANTS = {   # name suffix -> (decode plan, prefill plan); chosen by the kld and speed rows of `make bench`
    "": (HEAD_INT8X2, LAYERS_FP32),      # the default (see above); fp32 prefill
    "int8x2": ({}, LAYERS_FP32),         # int8x2 decode throughout: fp32's top token but at near-ties
    "int8": ("int8", "int8"),            # llama.cpp's arithmetic (int8 activations per block of 32)
    "fp32": ("fp32", "fp32"),            # accuracy level 0 throughout, fp32 head: the exact reference
    "head8": ({**HEAD_INT8X2, "head": "int8"}, LAYERS_FP32),   # the levers below: the default, one thing changed
    **{lever: ({**HEAD_INT8X2, **dict.fromkeys(LAYERS, lever)}, LAYERS_FP32)
       for lever in ("fzp", "q8zp", "int8nr", "cat4")},
}

LEVERS = {   # variants measured against the default by `make bench`'s levers row (bench/levers.py); not backends
    "fzp": "the Q4_1 minimums in MatMulNBits' float zero points, -m/d (no term beside)",
    "q8zp": "8-bit blocks 16q + o with integer zero points (no term; up to d/32 dropped)",
    "int8nr": "the minimums' term dropped (4-bit zero points alone; up to d/2 dropped)",
    "cat4": "the minimums' term inside the layer's MatMulNBits: block means appended, remainders as 4-bit blocks",
    "head8": "the LM head in one int8 pass",
}


def variant_plans(variant: str = "") -> tuple[dict[str, str], dict[str, str]]:
    """(decode plan, prefill plan) of a VARIANTS name; ValueError naming the known ones."""
    if variant not in VARIANTS:
        raise ValueError(f"onnx-gguf4 variants are {sorted(v for v in VARIANTS if v)} (or none); got {variant!r}")
    return tuple(plan_of(modes) for modes in VARIANTS[variant])


def gguf4_dir(fp32: Path, gguf_path: Path, variant: str = "", progress=None, rebuild: bool = False) -> Path:
    """The cached rewritten graphs next to the fp32 export `fp32`, built if missing or broken."""
    from importlib.metadata import version

    from ..models import gguf_content_key

    plans = variant_plans(variant)
    salt = json.dumps([GGUF_EDITS, plans, version("gguf")])
    key = hashlib.sha256(f"{gguf_content_key(Path(gguf_path))}|{salt}".encode()).hexdigest()[:12]
    target = fp32.with_name(f"{fp32.name}-gguf4-{'-'.join(map(plan_tag, plans))}-{key}")
    if rebuild or not is_complete(target):
        import shutil

        from .onnx_quantize import _copy_side_files
        shutil.rmtree(target, ignore_errors=True)
        say(progress, 0.75, "rewriting the ONNX graph with the GGUF's own 4-bit blocks (once, ~30 s)",
             f"MatMulNBits from {gguf_path} into {target}")
        work = staging(target)
        work.mkdir(parents=True)
        info = rewrite_with_gguf_blocks(fp32 / MODEL_FILE, Path(gguf_path),
                                        {work / MODEL_FILE: plans[0], work / PREFILL_FILE: plans[1]})
        _copy_side_files(fp32, work)
        seal(work, target, {"source": str(fp32), "gguf": str(gguf_path), "kind": "gguf4", **info})
    return target


def rewrite_with_gguf_blocks(fp32_model: Path, gguf_path: Path, outputs: dict[Path, dict[str, str]]) -> dict:
    """Write one rewritten graph per (path, plan) in `outputs`; the blocks are read and checked once."""
    blocks, _ = read_gguf_blocks(gguf_path)
    for i, (out, plan) in enumerate(outputs.items()):
        model = onnx.load(str(fp32_model))
        if i == 0:
            check_blocks_match_export(blocks, model.graph)
        layers = _rewrite(model, blocks, plan)
        _drop_unused(model)
        onnx.save_model(model, str(out), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=out.name + ".data", size_threshold=1024)
    return {"plans": {p.name: plan for p, plan in outputs.items()}, "layers": layers,
            "embedding": "q8_0" if EMBEDDING in blocks else "fp32"}


def _rewrite(model, blocks: dict[str, NBitsWeight], plan: dict[str, str]) -> int:
    graph = model.graph
    nodes = {n.name: n for n in graph.node}
    nodes["lm_head"] = next(n for n in graph.node if "logits" in n.output)
    new_nodes, new_inits = [], []

    def replace(names: list[str], stem: str, outputs: list[str], group: str) -> str:
        weight = NBitsWeight.stack([blocks[n] for n in names])
        y = outputs[0] if len(outputs) == 1 else f"{stem}/output"
        ns, ins = nbits_nodes(stem, nodes[names[0]].input[0], weight, y, plan[group])
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
    if EMBEDDING in blocks and EMBEDDING in nodes:
        gather = nodes[EMBEDDING]
        ns, ins = embedding_nodes("/model/embed_tokens", gather.input[1], blocks[EMBEDDING], gather.output[0])
        graph.node.remove(gather)
        new_nodes.extend(ns)
        new_inits.extend(ins)
    graph.node.extend(new_nodes)
    graph.initializer.extend(new_inits)
    fuse_residual_norms(graph)
    return len(layers)


NORM_OPS = ("Cast", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Cast_1", "Mul_1")   # the export's RMSNorm


def fuse_residual_norms(graph) -> int:
    """Each residual Add that only feeds an RMSNorm becomes, with it, one SkipSimplifiedLayerNormalization
    (normalized output, and the sum as its 4th output); the norm's other nodes are left unused (pruned
    later). A norm of another shape than the export's (NORM_OPS, exponent 2, 1/sqrt) stays as it is.
    Two nodes of ~8 us each fewer per norm: 60 norms, ~1 ms of a 9 ms decode step. Returns how many."""
    nodes = {n.name: n for n in graph.node}
    producer = {o: n for n in graph.node for o in n.output}
    readers = Counter(i for n in graph.node for i in n.input)
    inits = {i.name for i in graph.initializer}

    def constant(name: str):
        node = producer.get(name)
        if node is None or node.op_type != "Constant" or node.attribute[0].name != "value":
            return None
        return numpy_helper.to_array(node.attribute[0].t)

    fused = []
    for name, cast in nodes.items():
        scope = name.rsplit("/", 1)[0]
        if not name.endswith("/Cast") or cast.op_type != "Cast":
            continue
        ops = [nodes.get(f"{scope}/{op}") for op in NORM_OPS]
        add = producer.get(cast.input[0])
        if (any(o is None or o.op_type != op.split("_")[0] for o, op in zip(ops, NORM_OPS))
                or add is None or add.op_type != "Add" or readers.get(add.output[0]) != 1):
            continue
        _, power, mean, plus_eps, _, div, _, cast_1, scale = ops
        weight = [i for i in scale.input if i != cast_1.output[0]]
        eps, exponent, one = (constant(plus_eps.input[1]), constant(power.input[1]), constant(div.input[0]))
        axes = ([a.ints for a in mean.attribute if a.name == "axes"] or
                [constant(mean.input[1]) if len(mean.input) > 1 else None])[0]
        if (len(weight) != 1 or weight[0] not in inits or eps is None or exponent is None or one is None
                or axes is None or list(np.atleast_1d(axes)) != [-1]
                or float(exponent) != 2 or float(one) != 1 or power.input[0] != cast.output[0]
                or helper.get_attribute_value(cast.attribute[0]) != onnx.TensorProto.FLOAT):
            continue
        fused.append((add, cast, scale, helper.make_node(
            "SkipSimplifiedLayerNormalization", [add.input[1], add.input[0], weight[0]],
            [scale.output[0], "", "", cast.output[0]], name=f"{scope}/SkipSimplifiedLayerNormalization",
            domain=MS, epsilon=float(eps))))
    for add, cast, scale, node in fused:
        for old in (add, cast, scale):
            graph.node.remove(old)
        graph.node.append(node)
    return len(fused)


def check_blocks_match_export(blocks: dict, graph) -> None:
    """Raise ValueError unless every block matrix dequantizes to exactly the export's weight for it."""
    nodes = {n.name: n for n in graph.node}
    nodes["lm_head"] = next(n for n in graph.node if "logits" in n.output)
    inits = {i.name: i for i in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    for name, weight in blocks.items():
        if name not in nodes:
            raise ValueError(f"the export has no node {name} for a GGUF matrix")
        source = nodes[name].input[0 if name == EMBEDDING else 1]
        if name == EMBEDDING:
            exported = numpy_helper.to_array(inits[source])
        elif source not in inits and producers.get(source) is not None and producers[source].op_type == "Transpose":
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
