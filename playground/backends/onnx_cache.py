"""The ONNX cache's mechanics: a key per source and library versions, sealed folders, progress lines.

A folder is built in a staging folder (`staging(target)`) and moved into place by `seal` only after a
marker file listing every file's size is written, so a crash mid-build leaves nothing that looks
finished; `is_complete` checks the marker and the sizes (a truncated model.onnx is rebuilt).
Used by onnx_export.py (the fp32 export) and onnx_quantize.py (its quantized siblings).

Left out: pruning old entries; delete <cache>/onnx to clear them all.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from pathlib import Path

log = logging.getLogger(__name__)
MARKER = "playground-complete.json"
MODEL_FILE = "model.onnx"
GRAPH_EDITS = "torch-onnx-ts18,tied-head,last-logits,gqa"  # part of the cache key: change it when the edits to the export change


# --- the cache key and the completeness check

LIBRARIES = ("transformers", "torch", "onnx", "onnxruntime")   # what makes and reads the graph: in the key


def versions() -> dict[str, str]:
    """{library: installed version} for LIBRARIES, read from the installed packages' metadata (nothing imported).

    >>> sorted(versions()) == sorted(LIBRARIES)
    True
    """
    from importlib.metadata import version
    return {name: version(name) for name in LIBRARIES}


def cache_key(source: Path | str, salt: str = "") -> str:
    """'<name>-<12 hex>' from the source's identity and the library versions; `salt` names what else makes the
    graph (another builder and its version), so that its output has a key of its own."""
    if isinstance(source, Path):
        files = sorted(p for p in source.iterdir() if p.is_file())
        ident = [str(source.resolve())] + [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files]
        name = source.name
    else:
        ident, name = [source], source.replace("/", "--")
    parts = [ident, versions(), GRAPH_EDITS] + ([salt] if salt else [])   # no salt: the keys exports always had
    digest = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]
    return f"{name}-{digest}"


def is_complete(folder: Path, required: str = MODEL_FILE) -> bool:
    """True when the marker exists, lists `required`, and every file it lists has the size it had when written."""
    try:
        sizes = json.loads((folder / MARKER).read_text())["sizes"]
    except (OSError, ValueError, KeyError):
        return False
    return required in sizes and all(
        (folder / n).is_file() and (folder / n).stat().st_size == s for n, s in sizes.items())


def seal(staging: Path, target: Path, info: dict, required: str = MODEL_FILE) -> Path:
    """Write the marker, then move the staging folder into place (another process may have won)."""
    sizes = {p.name: p.stat().st_size for p in staging.iterdir() if p.is_file()}
    (staging / MARKER).write_text(json.dumps({**info, **versions(), "sizes": sizes}, indent=1))
    if is_complete(target, required):
        shutil.rmtree(staging, ignore_errors=True)
    else:
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    return target


def staging(target: Path) -> Path:
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(staging, ignore_errors=True)
    return staging


def say(progress, fraction: float, message: str, detail: str | None = None) -> None:
    log.warning(detail or message)
    if progress is not None:
        progress(fraction, message)
