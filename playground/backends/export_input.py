"""What torch.onnx exports for a model spec: a transformers folder or a hub id, found without loading torch weights.

    export_input(None)          # the bundled GGUF's converted folder (converted once, see models.py)
    export_input("/my/model")   # a saved transformers folder, as is
    export_input("owner/name")  # a hub id (needs internet or a local HF cache)
    export_input("tiny")        # the tiny random model, saved once under <cache>/onnx/tiny-source

Left out: exporting a GGUF without converting it to a transformers folder first.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..config import default_cache_dir
from ..models import gguf_as_hf_dir, resolve_model_spec


def export_input(spec: str | None, cache_dir: Path | None = None) -> tuple[Path | str, str]:
    """(folder or hub id to export, display name of the model)."""
    source = resolve_model_spec(spec)
    if source.kind == "gguf":
        return gguf_as_hf_dir(source.location, cache_dir), source.name
    if source.kind == "tiny":
        return tiny_input_dir(Path(cache_dir or default_cache_dir()) / "onnx" / "tiny-source"), source.name
    return source.location, source.name


def tiny_input_dir(folder: Path) -> Path:
    """Save the tiny model once (its files' mtimes are part of the export key, so never re-save it)."""
    if (folder / "config.json").is_file():
        return folder
    from ..tiny import build_tiny_model

    staging = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    model, tokenizer = build_tiny_model()
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if not (folder / "config.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
    return folder
