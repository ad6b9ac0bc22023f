"""Shared fixtures: a tiny in-process model for unit tests, the bundled SmolLM2 for integration tests."""
from __future__ import annotations

import pytest

from playground.backends import create_backend
from playground.engine import Engine


@pytest.fixture(scope="session")
def tiny_backend():
    return create_backend("torch", "tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_engine(tiny_backend):
    return Engine(tiny_backend)


@pytest.fixture(scope="session")
def smol_backend():
    """The bundled SmolLM2-135M-Instruct on torch fp32 CPU (converted once, cached on disk)."""
    return create_backend("torch", None, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def smol_engine(smol_backend):
    return Engine(smol_backend)


# --- servers: a misbehaving fake (unit tests) and llama.cpp's real llama-server (marker `server`)

@pytest.fixture(scope="session")
def fake_server():
    """An OpenAI-compatible server on 127.0.0.1 whose URL path picks how it misbehaves (fake_openai_server.py)."""
    from fake_openai_server import FakeServer
    server = FakeServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def llama_server():
    """llama.cpp's llama-server on the bundled GGUF: 127.0.0.1, a free port, 2 threads, 2 parallel slots,
    --metrics --slots -c 4096. Missing binary: a failure naming `make llama` under CI, else a skip."""
    import os

    from playground.llamacpp import LlamaCppMissing, llama_binary
    from playground.remote.llama_server import LlamaServer
    try:
        llama_binary("llama-server")
    except LlamaCppMissing as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (CI must run `make llama` before the server tests; `make test` does)")
        pytest.skip(str(exc))
    server = LlamaServer(threads=2, parallel=2, ctx=4096).start()
    yield server
    server.stop()
