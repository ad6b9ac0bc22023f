"""Entry point (and the Hugging Face Space's): `python app.py [--model SPEC] [--backend NAME] [--port N]
[--endpoint URL]... [--api-key-env NAME]`.

The module-level `demo` loads nothing at import: each backend's engine is created on first use and
cached (playground/registry.py), so `import app` is fast and a Space starts serving its page while the
model loads, even when the default backend then fails to load (the UI names it and offers the others).
Settings come from the command line, else PLAYGROUND_MODEL / PLAYGROUND_BACKEND / PLAYGROUND_DEVICE /
PLAYGROUND_DTYPE, else the defaults (bundled SmolLM2; ONNX on CPU, torch on CUDA).
Servers to watch (OpenAI-compatible: llama.cpp, vLLM, Ollama, …) come from --endpoint (repeatable) and
PLAYGROUND_ENDPOINTS (comma-separated); a key, if they need one, from the environment variable that
--api-key-env (or PLAYGROUND_API_KEY_ENV) names. They join the backend dropdowns; a page visitor cannot add one.
Host is 127.0.0.1, or 0.0.0.0 when running on a Space (SPACE_ID is set).
"""
from __future__ import annotations

import argparse
import os

from playground.config import AppConfig
from playground.registry import SourceRegistry
from playground.remote.endpoints import add_endpoints, endpoint_urls
from playground.ui import GENERATE_CONCURRENCY, app_kwargs, build_demo


def make_demo(model: str | None = None, backend: str | None = None, endpoints: list[str] | None = None,
              api_key_env: str | None = None):
    config = AppConfig.from_env(model=model, backend=backend)
    registry = SourceRegistry.for_model(config.model, config.backend, device=config.device, dtype=config.dtype)
    add_endpoints(registry, endpoint_urls(endpoints, os.environ.get("PLAYGROUND_ENDPOINTS")),
                  api_key_env or os.environ.get("PLAYGROUND_API_KEY_ENV"))
    demo = build_demo(registry)
    demo.queue(default_concurrency_limit=GENERATE_CONCURRENCY, max_size=64)
    return demo


demo = make_demo()

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="LLM Serving Playground")
    parser.add_argument("--model", help="model spec: a hub id, a local folder, a .gguf file, or 'tiny'")
    parser.add_argument("--backend", help="torch | onnx | onnx-int8 | onnx-int4 | onnx-gguf4 (default: torch on CUDA; "
                                          "else onnx-gguf4 for a GGUF model, onnx for others)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 7860)))
    parser.add_argument("--endpoint", action="append", default=[], metavar="URL",
                        help="an OpenAI-compatible server to watch, e.g. http://127.0.0.1:8080/v1 (repeatable)")
    parser.add_argument("--api-key-env", metavar="NAME",
                        help="the environment variable holding the endpoints' API key (the key itself is never shown)")
    args = parser.parse_args()
    if args.model or args.backend or args.endpoint or args.api_key_env:
        demo = make_demo(args.model, args.backend, args.endpoint, args.api_key_env)
    host = "0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1"
    demo.launch(server_name=host, server_port=args.port, app_kwargs=app_kwargs())
