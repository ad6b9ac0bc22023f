"""Export a model to ONNX once (optimum), optionally quantize it to int8, and keep both on disk.

    folder = exported_dir(source_dir)              # fp32: <cache>/onnx/<name>-<hash>/model.onnx
    folder = exported_dir(source_dir, int8=True)   # int8: <cache>/onnx/<name>-<hash>-int8-pc/model.onnx

The key hashes the source (a folder's file names, sizes and mtimes, or a hub id), the versions of
transformers, optimum and onnxruntime, and GRAPH_EDITS (what this module does to the exported graph:
last-position logits, fused attention), so an upgrade or a new edit re-exports instead of reusing a
stale graph.
Work happens in a staging folder that is renamed into place only after a marker file is written, so
a crash mid-export leaves no folder that looks finished. A folder whose marker is missing, or whose
files differ in size from what the marker recorded (a truncated model.onnx), is rebuilt; a file that
is garbled but the right size is caught when ONNX Runtime fails to load it (see onnx_backend.py).

Left out: pruning old exports; delete <cache>/onnx to clear them all.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from pathlib import Path

from ..config import default_cache_dir

log = logging.getLogger(__name__)
MARKER = "playground-complete.json"
MODEL_FILE = "model.onnx"
GRAPH_EDITS = "last-logits,gqa"  # part of the cache key: change it when the edits to the export change
PER_CHANNEL = True  # int8: one scale per output channel: same speed here, text closer to fp32's than per-tensor
INT4_BLOCK = 32     # int4: weights per block, each with its own fp32 scale (symmetric; llama.cpp's Q4_0 uses 32)
QUANT_SUFFIX = {None: "", "int8": "-int8-pc" if PER_CHANNEL else "-int8", "int4": f"-int4-b{INT4_BLOCK}-h8"}


# --- the cache key and the completeness check

def versions() -> dict[str, str]:
    import onnxruntime
    import optimum.version
    import transformers
    return {"transformers": transformers.__version__, "optimum": optimum.version.__version__,
            "onnxruntime": onnxruntime.__version__}


def cache_key(source: Path | str) -> str:
    """'<name>-<12 hex>' from the source's identity and the library versions."""
    if isinstance(source, Path):
        files = sorted(p for p in source.iterdir() if p.is_file())
        ident = [str(source.resolve())] + [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files]
        name = source.name
    else:
        ident, name = [source], source.replace("/", "--")
    digest = hashlib.sha256(json.dumps([ident, versions(), GRAPH_EDITS]).encode()).hexdigest()[:12]
    return f"{name}-{digest}"


def is_complete(folder: Path) -> bool:
    """True when the marker exists and every file it lists has the size it had when written."""
    try:
        sizes = json.loads((folder / MARKER).read_text())["sizes"]
    except (OSError, ValueError, KeyError):
        return False
    return MODEL_FILE in sizes and all(
        (folder / n).is_file() and (folder / n).stat().st_size == s for n, s in sizes.items())


def _seal(staging: Path, target: Path, info: dict) -> Path:
    """Write the marker, then move the staging folder into place (another process may have won)."""
    sizes = {p.name: p.stat().st_size for p in staging.iterdir() if p.is_file()}
    (staging / MARKER).write_text(json.dumps({**info, **versions(), "sizes": sizes}, indent=1))
    if is_complete(target):
        shutil.rmtree(staging, ignore_errors=True)
    else:
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    return target


def _staging(target: Path) -> Path:
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(staging, ignore_errors=True)
    return staging


# --- export (quantization: onnx_quantize.py)

def exported_dir(source: Path | str, quant: str | None = None, cache_dir: Path | None = None, progress=None,
                 rebuild: bool = False) -> Path:
    """The cached ONNX folder for `source` (a transformers folder or hub id), built if missing or broken.

    `quant`: None (float32), "int8" (dynamic int8 MatMuls) or "int4" (4-bit block-quantized weights).
    """
    root = Path(cache_dir or default_cache_dir()) / "onnx"
    fp32 = root / cache_key(source)
    target = fp32.with_name(fp32.name + QUANT_SUFFIX[quant])
    if rebuild:  # a folder that looks complete but did not load: remove it, or _seal would keep it
        shutil.rmtree(target, ignore_errors=True)
    if quant:
        if not is_complete(target):
            from .onnx_quantize import quantize_int4, quantize_int8
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

    _say(progress, 0.1, "exporting to ONNX (about 35 s for a 135M model, once)",
         f"exporting {source} to {target}; delete {target.parent} to clear the ONNX cache")
    staging = _staging(target)
    model = ORTModelForCausalLM.from_pretrained(source, export=True, use_cache=True)
    model.save_pretrained(staging)
    AutoTokenizer.from_pretrained(source).save_pretrained(staging)
    del model
    _say(progress, 0.6, "keeping only the last position's logits in the graph")
    keep_last_logits(staging / MODEL_FILE)
    _say(progress, 0.65, "fusing attention into GroupQueryAttention nodes")
    fused = fuse_attention(staging / MODEL_FILE, AutoConfig.from_pretrained(staging))
    _seal(staging, target, {"source": str(source), "kind": "float32", "fused_attention": fused})
    _say(progress, 0.7, f"ONNX export cached in {target}")


def _say(progress, fraction: float, message: str, detail: str | None = None) -> None:
    log.warning(detail or message)
    if progress is not None:
        progress(fraction, message)
