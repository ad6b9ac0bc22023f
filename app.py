"""Entry point (and the Hugging Face Space's): `python app.py [--model SPEC] [--backend NAME] [--port N]`.

The module-level `demo` loads nothing at import: the engine is created on first use and cached, so
`import app` is fast and a Space starts serving its page while the model loads. Settings come from
the command line, else PLAYGROUND_MODEL / PLAYGROUND_BACKEND, else the defaults (bundled SmolLM2).
Host is 127.0.0.1, or 0.0.0.0 when running on a Space (SPACE_ID is set).
"""
from __future__ import annotations

import argparse
import functools
import os

from playground.config import AppConfig
from playground.ui import GENERATE_CONCURRENCY, build_demo

OPTIONS = {"model": None, "backend": None}   # filled from the command line before launch


@functools.lru_cache(maxsize=1)
def get_engine():
    from playground.backends import create_backend
    from playground.engine import Engine
    config = AppConfig.from_env(**OPTIONS)
    return Engine(create_backend(config.backend, config.model, device=config.device, dtype=config.dtype))


demo = build_demo(get_engine)
demo.queue(default_concurrency_limit=GENERATE_CONCURRENCY, max_size=64)

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="LLM Serving Playground")
    parser.add_argument("--model", help="model spec: a hub id, a local folder, a .gguf file, or 'tiny'")
    parser.add_argument("--backend", help="torch | onnx | onnx-int8 (default: torch on CUDA, else onnx)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 7860)))
    args = parser.parse_args()
    OPTIONS.update(model=args.model, backend=args.backend)
    host = "0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1"
    demo.launch(server_name=host, server_port=args.port)
