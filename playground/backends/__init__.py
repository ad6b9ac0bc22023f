"""Runtimes the engine can drive, one registry entry each: torch (CPU/CUDA), onnx, onnx-int8, onnx-int4, and
onnx-gguf4 (the GGUF's own blocks) with its three comparison variants.

    BACKENDS["onnx-int8"].runtime, BACKENDS["onnx-int8"].variant   # "onnx", "int8"
    available_backends()             # the names whose runtime is installed, in registry order
    create_backend("onnx-int8")      # load the model and wrap it in that runtime

To add a backend: one `BackendSpec` in `BACKENDS` below plus its own module. The CLI, the UI's
dropdowns, the bench and the experiments all read this registry.

>>> [spec.name for spec in BACKENDS.values()][4:]   # after torch, onnx, onnx-int8, onnx-int4
['onnx-gguf4', 'onnx-gguf4-int8x2', 'onnx-gguf4-int8', 'onnx-gguf4-fp32']
>>> BACKENDS["onnx-int4"].label
'ONNX Runtime, 4-bit weights (re-quantized)'
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

import logging

from .base import Backend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackendSpec:
    name: str                    # what users type and dropdowns show: "onnx-int8"
    runtime: str                 # "torch" | "onnx"
    variant: str | None          # the runtime's variant: None (float) | "int8" | "int4" | …
    label: str                   # one line for people
    create: Callable[..., Backend]   # (model spec, device, dtype, progress) -> Backend
    requires: str = "torch"      # the module that must be importable for it to be offered

    def available(self) -> bool:
        return importlib.util.find_spec(self.requires) is not None


def _torch(model, device, dtype, progress):
    from ..models import load_model
    from .torch_backend import TorchBackend
    dtype = dtype or ("float16" if device.startswith("cuda") else "float32")
    return TorchBackend(load_model(model, device=device, dtype=dtype), device, dtype)


def _onnx(quant: str | None):
    def create(model, device, dtype, progress):
        from .onnx_backend import OnnxBackend
        return OnnxBackend.load(model, quant=quant, progress=progress)
    return create


def _onnx_gguf(variant: str):
    def create(model, device, dtype, progress):
        from .onnx_gguf_backend import OnnxGgufBackend
        return OnnxGgufBackend.load(model, variant=variant, progress=progress)
    return create


BACKENDS: dict[str, BackendSpec] = {spec.name: spec for spec in (
    BackendSpec("torch", "torch", None, "PyTorch (CUDA fp16 when present, else CPU fp32)", _torch),
    BackendSpec("onnx", "onnx", None, "ONNX Runtime, fp32 (torch.onnx export)", _onnx(None), "onnxruntime"),
    BackendSpec("onnx-int8", "onnx", "int8", "ONNX Runtime, int8 dynamic quantization", _onnx("int8"),
                "onnxruntime"),
    BackendSpec("onnx-int4", "onnx", "int4", "ONNX Runtime, 4-bit weights (re-quantized)", _onnx("int4"),
                "onnxruntime"),
    BackendSpec("onnx-gguf4", "onnx", "gguf4", "ONNX Runtime on the GGUF's own 4-bit blocks (as faithful as llama.cpp)",
                _onnx_gguf(""), "onnxruntime"),
    BackendSpec("onnx-gguf4-int8x2", "onnx", "gguf4-int8x2", "GGUF blocks, int8x2 activations throughout (fp32's choices)",
                _onnx_gguf("int8x2"), "onnxruntime"),
    BackendSpec("onnx-gguf4-int8", "onnx", "gguf4-int8", "GGUF blocks, int8 activations (llama.cpp's arithmetic)",
                _onnx_gguf("int8"), "onnxruntime"),
    BackendSpec("onnx-gguf4-fp32", "onnx", "gguf4-fp32", "GGUF blocks, fp32 activations throughout (slow decode)",
                _onnx_gguf("fp32"), "onnxruntime"),
)}


def default_device() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_backend_name(device: str | None = None, model: str | None = None) -> str:
    """torch on CUDA when a GPU is present; on CPU, ONNX Runtime (when installed): onnx-gguf4 for a GGUF model
    (the bundled one by default: its own 4-bit blocks, fp32's next token at >= 99% of positions in `make bench`,
    see README) and for a llama's float weights (a folder, a hub id: quantized to the same blocks once, see
    gguf_quantize.py), else onnx (fp32). The tiny test model stays on onnx."""
    if (device or default_device()).startswith("cuda"):
        return "torch"
    if "onnx" not in available_backends():
        return "torch"
    from ..models import ModelLoadError, resolve_model_spec
    from .gguf_quantize import float_config, quantizable
    try:
        source = resolve_model_spec(model)
    except ModelLoadError:
        return "onnx"
    if source.kind == "gguf" or (source.kind in ("dir", "hub") and quantizable(float_config(source)) is None):
        return "onnx-gguf4"
    return "onnx"


def available_backends() -> list[str]:
    return [name for name, spec in BACKENDS.items() if spec.available()]


def create_backend(name: str | None = None, model: str | None = None, device: str | None = None,
                   dtype: str | None = None, progress=None) -> Backend:
    """Load the model for `model` (a spec, see models.py) and wrap it in the named runtime.

    `progress(fraction, message)` is called during long work (conversion, export), when given.
    `dtype` applies to runtimes that take one (torch); the others are named by their variant.
    """
    device = device or default_device()
    if name is None and default_backend_name(device, model) == "onnx-gguf4":
        try:
            return BACKENDS["onnx-gguf4"].create(model, device, dtype, progress)
        except ValueError as exc:   # a GGUF of other block types (Q4_K, ...), not a llama: fp32 runs it
            log.warning("onnx-gguf4 cannot run %s (%s); using onnx", model or "the bundled model", exc)
            name = "onnx"
    name = name or default_backend_name(device, model)
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {name!r}")
    return BACKENDS[name].create(model, device, dtype, progress)
