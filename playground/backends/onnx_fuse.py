"""Replace each layer's exported attention with ONNX Runtime's fused GroupQueryAttention (CPU contrib op).

The torch.onnx export spells attention out as ~200 nodes a layer: rotary embedding, repeat_kv expands,
a causal mask rebuilt per layer, Softmax, then `Where(IsNaN(probs), 0, probs)`. On a 1024-token prompt
the mask and NaN passes alone stream (9 heads x 1024 x 1024) floats several times per layer. One
`com.microsoft.GroupQueryAttention` node per layer does rotary, the causal mask, softmax and the KV
concat in one kernel, reading the grouped K/V heads without expanding them:

    q_proj, k_proj, v_proj outputs [B, S, heads*D], past [B, kv_heads, P, D], seqlens_k, total, cos, sin
        -> attention output [B, S, heads*D] (into o_proj), present [B, kv_heads, P+S, D]

The present tensors keep the exported names and layout, so the backend binds and measures them as
before (their length is total_sequence_length: the past buffer is not shared with the present).
Positions come from the cache length (seqlens_k = sum(attention_mask) - 1), which equals the
`position_ids` the engine feeds for one unpadded sequence; `position_ids` is left unused.

Left out: graphs that are not a Llama-style export (node names differ), rope scaling, padding,
batches of more than one sequence; such graphs are left as exported.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

log = logging.getLogger(__name__)
GQA_DOMAIN = "com.microsoft"


# --- the rotary tables GroupQueryAttention reads

def rotary_tables(head_dim: int, positions: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each [positions, head_dim / 2] float32, as Llama's default rope computes them."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim)
    angles = np.outer(np.arange(positions, dtype=np.float32), inv_freq)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rope_of(config) -> tuple[str, float]:
    """(rope type, theta): transformers 5 keeps both in `rope_parameters` ("default": no scaling).

    >>> from types import SimpleNamespace
    >>> rope_of(SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 1e5}))
    ('default', 100000.0)
    >>> rope_of(SimpleNamespace(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}))
    ('llama3', 500000.0)
    """
    params = getattr(config, "rope_parameters", None) or {}
    return str(params.get("rope_type", "default")), float(params.get("rope_theta", 10000.0))


# --- the edit

def fuse_attention(path: Path, config) -> bool:
    """Rewrite the graph at `path` in place; False (graph untouched) when it is not a plain Llama export."""
    heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    rope, theta = rope_of(config)
    if getattr(config, "model_type", "") != "llama" or rope != "default":
        log.warning("fuse_attention: %s is not a plain Llama model; attention left as exported", path)
        return False
    model = onnx.load(str(path), load_external_data=True)
    graph = model.graph
    names = {n.name: n for n in graph.node}
    producer = {o: n for n in graph.node for o in n.output}
    layers = range(config.num_hidden_layers)
    projections = [[names.get(f"/model/layers.{i}/self_attn/{p}_proj/MatMul") for p in "qkvo"] for i in layers]
    presents = [[producer.get(f"present.{i}.{kv}") for kv in ("key", "value")] for i in layers]
    if any(n is None for nodes in projections + presents for n in nodes) or any(n.op_type == "GroupQueryAttention" for n in graph.node):
        log.warning("fuse_attention: %s does not have the expected node names; attention left as exported", path)
        return False

    cos, sin = rotary_tables(head_dim, int(config.max_position_embeddings), theta)
    graph.initializer.extend([numpy_helper.from_array(cos, "gqa_cos"), numpy_helper.from_array(sin, "gqa_sin"),
                              numpy_helper.from_array(np.array(1, np.int64), "gqa_one"),
                              numpy_helper.from_array(np.array([1], np.int64), "gqa_axis1")])
    graph.node.extend([  # seqlens_k = sum(mask) - 1, int32 [B]; total_sequence_length = mask.shape[1], int32 scalar
        helper.make_node("ReduceSum", ["attention_mask", "gqa_axis1"], ["gqa_sum"], keepdims=0, name="gqa_sum"),
        helper.make_node("Sub", ["gqa_sum", "gqa_one"], ["gqa_seqlens_k64"], name="gqa_sub"),
        helper.make_node("Cast", ["gqa_seqlens_k64"], ["gqa_seqlens_k"], to=TensorProto.INT32, name="gqa_seqlens_k"),
        helper.make_node("Shape", ["attention_mask"], ["gqa_shape"], start=1, end=2, name="gqa_shape"),
        helper.make_node("Squeeze", ["gqa_shape"], ["gqa_total64"], name="gqa_squeeze"),
        helper.make_node("Cast", ["gqa_total64"], ["gqa_total"], to=TensorProto.INT32, name="gqa_total"),
    ])
    for i, ((q, k, v, o), (key, value)) in enumerate(zip(projections, presents)):
        out = f"/model/layers.{i}/self_attn/gqa_output"
        graph.node.remove(key)
        graph.node.remove(value)
        graph.node.append(helper.make_node(
            "GroupQueryAttention",
            [q.output[0], k.output[0], v.output[0], f"past_key_values.{i}.key", f"past_key_values.{i}.value",
             "gqa_seqlens_k", "gqa_total", "gqa_cos", "gqa_sin"],
            [out, f"present.{i}.key", f"present.{i}.value"], name=f"/model/layers.{i}/self_attn/GroupQueryAttention",
            domain=GQA_DOMAIN, num_heads=heads, kv_num_heads=kv_heads, do_rotary=1, rotary_interleaved=0,
            scale=float(head_dim) ** -0.5))
        o.input[0] = out
        # ONNX shape inference does not know contrib ops: declare the output, so quantizers can type o_proj
        graph.value_info.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", "sequence", heads * head_dim]))
    if not any(op.domain == GQA_DOMAIN for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid(GQA_DOMAIN, 1))
    _prune_and_sort(model)
    onnx.save(model, str(path))
    return True


def _prune_and_sort(model) -> None:
    """Drop the nodes (the old attention) no graph output depends on any more; keep topological order."""
    from onnxruntime.transformers.onnx_model import OnnxModel

    om = OnnxModel(model)
    om.prune_graph()
    om.topological_sort()
