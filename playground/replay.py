"""What a replay of a run must match, recorded in every export: runtime, threads, CPU, library versions.

    replay_info(backend)   # {"backend": "onnx", "dtype": "float32", "threads": 2, "cpu": {...}, "versions": {...}}

The same seed on the same backend, dtype, thread count, CPU features and library versions gives the same
tokens; a difference in any of them may change a near-tie (and so the text from there on).

Left out: GPU driver and CUDA versions beyond torch's own `torch.version.cuda`.
"""
from __future__ import annotations

import platform
from functools import lru_cache
from importlib import metadata
from pathlib import Path

LIBRARIES = ("torch", "transformers", "onnx", "onnxruntime", "tokenizers", "gguf")
CPU_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


@lru_cache(maxsize=1)
def cpu_features() -> dict:
    """{"model": "AMD EPYC", "flags": ["avx", "avx2", …], "logical_cores": 2} (what Linux reports)."""
    import os
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    return {"model": model, "flags": [f for f in CPU_FLAGS if f in flags], "logical_cores": os.cpu_count()}


@lru_cache(maxsize=1)
def library_versions() -> dict:
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def replay_info(backend) -> dict:
    threads = getattr(backend, "threads", None)
    if threads is None:
        import torch
        threads = torch.get_num_threads()
    return {"backend": backend.name, "model": backend.model_name, "device": backend.device, "dtype": backend.dtype,
            "threads": threads, "cpu": cpu_features(), "versions": library_versions()}
