"""Export a model to ONNX once (torch.onnx), optionally quantize it to int8, and keep both on disk.

    folder = exported_dir(source_dir)              # fp32: <cache>/onnx/<name>-<hash>/model.onnx
    folder = exported_dir(source_dir, quant="int8")   # int8: <cache>/onnx/<name>-<hash>-int8-pc/model.onnx

The key (onnx_cache.py) hashes the source (a folder's file names, sizes and mtimes, or a hub id), the versions of
transformers, torch, onnx and onnxruntime, and GRAPH_EDITS (what this module does to the exported graph:
last-position logits, fused attention), so an upgrade or a new edit re-exports instead of reusing a
stale graph.
Work happens in a staging folder sealed into place by onnx_cache.py, so a crash mid-export leaves no
folder that looks finished; a truncated file is rebuilt, and a garbled one of the right size is caught
when ONNX Runtime fails to load it (see onnx_backend.py).

Left out: pruning old exports; delete <cache>/onnx to clear them all.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from ..config import default_cache_dir
from .onnx_cache import MARKER, MODEL_FILE, cache_key, is_complete, say, seal, staging  # noqa: F401 - re-exported
from .onnx_quantize import QUANT_SUFFIX, quantize_int4, quantize_int8


# --- export (quantization: onnx_quantize.py)

def exported_dir(source: Path | str, quant: str | None = None, cache_dir: Path | None = None, progress=None,
                 rebuild: bool = False) -> Path:
    """The cached ONNX folder for `source` (a transformers folder or hub id), built if missing or broken.

    `quant`: None (float32), "int8" (dynamic int8 MatMuls) or "int4" (4-bit block-quantized weights).
    """
    root = Path(cache_dir or default_cache_dir()) / "onnx"
    fp32 = root / cache_key(source)
    target = fp32.with_name(fp32.name + QUANT_SUFFIX[quant])
    if rebuild:  # a folder that looks complete but did not load: remove it, or seal() would keep it
        shutil.rmtree(target, ignore_errors=True)
    if quant:
        if not is_complete(target):
            make = quantize_int8 if quant == "int8" else quantize_int4
            make(exported_dir(source, cache_dir=cache_dir, progress=progress), target, progress)
        return target
    if not is_complete(fp32):
        _export(source, fp32, progress)
    return fp32


def _export(source: Path | str, target: Path, progress=None) -> None:
    from transformers import AutoConfig, AutoTokenizer

    from .onnx_fuse import fuse_attention
    from .onnx_graph import keep_last_logits, tie_lm_head

    say(progress, 0.1, "exporting to ONNX (about 35 s for a 135M model, once)",
         f"exporting {source} to {target}; delete {target.parent} to clear the ONNX cache")
    work = staging(target)
    work.mkdir(parents=True)
    export_decoder(source, work / MODEL_FILE)
    AutoTokenizer.from_pretrained(source).save_pretrained(work)
    tied = tie_lm_head(work / MODEL_FILE)
    say(progress, 0.6, "keeping only the last position's logits in the graph")
    keep_last_logits(work / MODEL_FILE)
    say(progress, 0.65, "fusing attention into GroupQueryAttention nodes")
    fused = fuse_attention(work / MODEL_FILE, AutoConfig.from_pretrained(work))
    seal(work, target, {"source": str(source), "kind": "float32", "exporter": EXPORTER, "tied_lm_head": tied,
                           "fused_attention": fused})
    say(progress, 0.7, f"ONNX export cached in {target}")


# --- the decoder graph and its cache inputs and outputs

EXPORTER = "torch.onnx (TorchScript), opset 18"
OPSET = 18


def cache_names(layers: int) -> tuple[list[str], list[str]]:
    """(past inputs, present outputs) in the order the graph takes and gives them: layer by layer, key then value.

    >>> cache_names(2)[0], cache_names(1)[1]
    (['past_key_values.0.key', 'past_key_values.0.value', 'past_key_values.1.key', 'past_key_values.1.value'], ['present.0.key', 'present.0.value'])
    """
    past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    return past, [n.replace("past_key_values.", "present.") for n in past]


def export_decoder(source: Path | str, path: Path) -> None:
    """Write the model at `source` as one decoder graph with its config and generation config beside it.

    Inputs: input_ids and position_ids [batch, sequence], attention_mask [batch, past + sequence], and per layer
    past_key_values.<i>.key/.value [batch, kv_heads, past, head_dim]; outputs: logits [batch, sequence, vocab] and
    present.<i>.key/.value [batch, kv_heads, past + sequence, head_dim] (past and new positions concatenated).
    The model's forward is wrapped so these flat tensors go in and out of a DynamicCache; the trace runs with a
    non-empty past and two rows, so no size is fixed at 0 or 1 in the graph. Node names are the module paths
    ('/model/layers.3/mlp/up_proj/MatMul'), which onnx_fuse.py and the GGUF rewrite (onnx_gguf.py) find them by.
    """
    import warnings

    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    config, forward = model.config, model.forward
    with torch.no_grad():   # the cache's shapes from a real forward pass: kv heads and head size per layer
        probe = forward(input_ids=torch.zeros((2, 5), dtype=torch.int64), use_cache=True).cache
    past = [t for layer in probe.layers for t in (layer.keys, layer.values)]
    past_names, present_names = cache_names(len(probe.layers))

    def flat_forward(input_ids, attention_mask, position_ids, *past):
        cache = DynamicCache(config=config)
        for i in range(len(past) // 2):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                      use_cache=True)
        return (out.logits, *[t for layer in out.cache.layers for t in (layer.keys, layer.values)])

    batch, seq, done = 2, 3, past[0].shape[2]
    args = (torch.zeros((batch, seq), dtype=torch.int64), torch.ones((batch, done + seq), dtype=torch.int64),
            torch.arange(done, done + seq).expand(batch, seq).contiguous(), *[torch.randn_like(t) for t in past])
    total = "past_sequence_length + sequence_length"
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"}, "attention_mask": {0: "batch_size", 1: total},
            "position_ids": {0: "batch_size", 1: "sequence_length"}, "logits": {0: "batch_size", 1: "sequence_length"},
            **{n: {0: "batch_size", 2: "past_sequence_length"} for n in past_names},
            **{n: {0: "batch_size", 2: total} for n in present_names}}
    model.forward = flat_forward
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")   # the tracer's notes on Python values it records as constants
            torch.onnx.export(model, args, str(path), input_names=["input_ids", "attention_mask", "position_ids",
                                                                   *past_names],
                              output_names=["logits", *present_names], dynamic_axes=axes, opset_version=OPSET,
                              dynamo=False)
    finally:
        model.forward = forward
    config.save_pretrained(path.parent)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(path.parent)
