"""Export a model to ONNX once (optimum), optionally quantize it to int8, and keep both on disk.

    folder = exported_dir(source_dir)              # fp32: <cache>/onnx/<name>-<hash>/model.onnx
    folder = exported_dir(source_dir, quant="int8")   # int8: <cache>/onnx/<name>-<hash>-int8-pc/model.onnx

The key (onnx_cache.py) hashes the source (a folder's file names, sizes and mtimes, or a hub id), the versions of
transformers, optimum and onnxruntime, and GRAPH_EDITS (what this module does to the exported graph:
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
    from optimum.onnxruntime import ORTModelForCausalLM
    from transformers import AutoConfig, AutoTokenizer

    from .onnx_fuse import fuse_attention
    from .onnx_graph import keep_last_logits

    say(progress, 0.1, "exporting to ONNX (about 35 s for a 135M model, once)",
         f"exporting {source} to {target}; delete {target.parent} to clear the ONNX cache")
    work = staging(target)
    model = ORTModelForCausalLM.from_pretrained(source, export=True, use_cache=True)
    model.save_pretrained(work)
    AutoTokenizer.from_pretrained(source).save_pretrained(work)
    del model
    say(progress, 0.6, "keeping only the last position's logits in the graph")
    keep_last_logits(work / MODEL_FILE)
    say(progress, 0.65, "fusing attention into GroupQueryAttention nodes")
    fused = fuse_attention(work / MODEL_FILE, AutoConfig.from_pretrained(work))
    seal(work, target, {"source": str(source), "kind": "float32", "fused_attention": fused})
    say(progress, 0.7, f"ONNX export cached in {target}")
