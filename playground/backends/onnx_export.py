"""Export a model to ONNX once (optimum), optionally quantize it to int8, and keep both on disk.

    folder = exported_dir(source_dir)              # fp32: <cache>/onnx/<name>-<hash>/model.onnx
    folder = exported_dir(source_dir, int8=True)   # int8: <cache>/onnx/<name>-<hash>-int8-pc/model.onnx

The key hashes the source (a folder's file names, sizes and mtimes, or a hub id) and the versions of
transformers, optimum and onnxruntime, so an upgrade re-exports instead of reusing a stale graph.
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
PER_CHANNEL = True  # one int8 scale per output channel: same speed here, text closer to fp32's than per-tensor


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
    digest = hashlib.sha256(json.dumps([ident, versions()]).encode()).hexdigest()[:12]
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


# --- export and quantization

def exported_dir(source: Path | str, int8: bool = False, cache_dir: Path | None = None, progress=None,
                 rebuild: bool = False) -> Path:
    """The cached ONNX folder for `source` (a transformers folder or hub id), built if missing or broken."""
    root = Path(cache_dir or default_cache_dir()) / "onnx"
    fp32 = root / cache_key(source)
    target = fp32.with_name(fp32.name + ("-int8-pc" if PER_CHANNEL else "-int8")) if int8 else fp32
    if rebuild:  # a folder that looks complete but did not load: remove it, or _seal would keep it
        shutil.rmtree(target, ignore_errors=True)
    if int8:
        if not is_complete(target):
            _quantize(exported_dir(source, cache_dir=cache_dir, progress=progress), target, progress)
        return target
    if not is_complete(fp32):
        _export(source, fp32, progress)
    return fp32


def _export(source: Path | str, target: Path, progress=None) -> None:
    from optimum.onnxruntime import ORTModelForCausalLM
    from transformers import AutoTokenizer

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
    _seal(staging, target, {"source": str(source), "kind": "float32"})
    _say(progress, 0.7, f"ONNX export cached in {target}")


def _quantize(fp32: Path, target: Path, progress=None) -> None:
    from optimum.onnxruntime import ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    vnni = has_avx512_vnni()
    make = AutoQuantizationConfig.avx512_vnni if vnni else AutoQuantizationConfig.avx2
    _say(progress, 0.75, "quantizing to int8 (about 20 s, once)",
         f"int8 dynamic quantization ({'avx512_vnni' if vnni else 'avx2'}) of {fp32} into {target}")
    staging = _staging(target)
    quantizer = ORTQuantizer.from_pretrained(fp32, file_name=MODEL_FILE)
    quantizer.quantize(save_dir=staging, quantization_config=make(is_static=False, per_channel=PER_CHANNEL))
    os.replace(staging / "model_quantized.onnx", staging / MODEL_FILE)
    for p in fp32.iterdir():  # config, generation config, tokenizer
        if p.is_file() and not p.name.startswith(("model", MARKER)) and not (staging / p.name).exists():
            shutil.copy2(p, staging / p.name)
    _seal(staging, target, {"source": str(fp32), "kind": "int8", "vnni": vnni,
                                     "per_channel": PER_CHANNEL})


def has_avx512_vnni() -> bool:
    try:
        return "avx512_vnni" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _say(progress, fraction: float, message: str, detail: str | None = None) -> None:
    log.warning(detail or message)
    if progress is not None:
        progress(fraction, message)
