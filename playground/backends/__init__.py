"""Runtimes the engine can drive, chosen by name: torch (CPU/CUDA), onnx, onnx-int8, onnx-int4, onnx-gguf4."""
from __future__ import annotations

import logging

from .base import Backend

log = logging.getLogger(__name__)


def default_device() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_backend_name(device: str | None = None, model: str | None = None) -> str:
    """torch on CUDA when a GPU is present; on CPU, ONNX Runtime (when installed): onnx-gguf4 for a GGUF model
    (the bundled one by default: its own 4-bit blocks, fidelity to fp32 measured in `make bench`, see README),
    else onnx (fp32)."""
    if (device or default_device()).startswith("cuda"):
        return "torch"
    if not available_backends().count("onnx"):
        return "torch"
    from ..models import ModelLoadError, resolve_model_spec
    try:
        return "onnx-gguf4" if resolve_model_spec(model).kind == "gguf" else "onnx"
    except ModelLoadError:
        return "onnx"


def available_backends() -> list[str]:
    names = ["torch"]
    try:
        from . import onnx_backend  # noqa: F401
        names += ["onnx", "onnx-int8", "onnx-int4", "onnx-gguf4"]
    except ImportError:
        pass
    return names


def create_backend(name: str | None = None, model: str | None = None, device: str | None = None,
                   dtype: str | None = None, progress=None) -> Backend:
    """Load the model for `model` (a spec, see models.py) and wrap it in the named runtime.

    `progress(fraction, message)` is called during long work (conversion, export), when given.
    """
    from ..models import load_model

    device = device or default_device()
    if name is None and default_backend_name(device, model) == "onnx-gguf4":
        try:
            return create_backend("onnx-gguf4", model, device, dtype, progress)
        except ValueError as exc:   # a GGUF of other block types (Q4_K, ...): fp32 runs it
            log.warning("onnx-gguf4 cannot run %s (%s); using onnx", model or "the bundled model", exc)
            name = "onnx"
    name = name or default_backend_name(device, model)
    if name == "torch":
        from .torch_backend import TorchBackend
        dtype = dtype or ("float16" if device.startswith("cuda") else "float32")
        return TorchBackend(load_model(model, device=device, dtype=dtype), device, dtype)
    if name == "onnx-gguf4" or name.startswith("onnx-gguf4-"):   # -int8 | -fp32: see onnx_gguf.VARIANTS
        from .onnx_gguf_backend import OnnxGgufBackend
        return OnnxGgufBackend.load(model, variant=name.partition("onnx-gguf4-")[2], progress=progress)
    if name in ("onnx", "onnx-int8", "onnx-int4"):
        from .onnx_backend import OnnxBackend
        return OnnxBackend.load(model, quant=name.partition("-")[2] or None, progress=progress)
    raise ValueError(f"backend must be one of torch, onnx, onnx-int8, onnx-int4, onnx-gguf4; got {name!r}")
