"""Shared fixtures: a tiny in-process model for unit tests, the bundled SmolLM2 for integration tests."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import settings as hypothesis_settings

from playground.backends import create_backend
from playground.engine import Engine

# CI explores the same fuzz examples on every run (a failure there reproduces); a developer's run draws
# new ones each time, so the fuzz tests keep finding what CI has not seen yet
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

# the tiers whose tests may start a Python subprocess; `make test-fast` deselects them all (pyproject.toml)
SUBPROCESS_TIERS = ("subprocess", "integration", "server", "browser", "space")


@pytest.fixture(autouse=True)
def _python_subprocesses_need_a_marker(request, monkeypatch):
    """A test that starts a Python subprocess (the bench CLI, app.py, a second interpreter) says so with the
    marker `subprocess`, so that `make test-fast` stays in this process; unmarked, it fails at the start."""
    if any(request.node.get_closest_marker(m) for m in SUBPROCESS_TIERS):
        yield
        return
    popen_init = subprocess.Popen.__init__

    def refuse_python(self, args, *rest, **kwargs):
        program = args if isinstance(args, (str, bytes, os.PathLike)) else args[0]
        program = os.fsdecode(program).split()[0] if isinstance(args, (str, bytes)) else os.fsdecode(program)
        launches_ruff = not isinstance(args, (str, bytes)) and list(args[1:3]) == ["-m", "ruff"]   # ruff's binary
        if (program == sys.executable or os.path.basename(program).startswith("python")) and not launches_ruff:
            raise RuntimeError(f"{request.node.nodeid} starts a Python subprocess ({args!r}): "
                               "mark it @pytest.mark.subprocess")
        popen_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_python)
    yield


@pytest.fixture(scope="session")
def tiny_backend():
    return create_backend("torch", "tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_engine(tiny_backend):
    return Engine(tiny_backend)


@pytest.fixture(scope="session")
def tiny_onnx_engine():
    """The tiny model on ONNX Runtime fp32 (exported once, cached): what continuous batching runs on."""
    return Engine(create_backend("onnx", "tiny"))


@pytest.fixture(scope="session")
def varied_engine():
    """The tiny model on torch with its weights scaled up: sharp, varied greedy picks (the plain tiny model repeats
    one token, which could not tell a misplaced logit row from a right one)."""
    import torch

    from playground.backends.torch_backend import TorchBackend
    from playground.models import LoadedModel, ModelSource
    from playground.tiny import build_tiny_model
    model, tok = build_tiny_model()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(30.0)
    return Engine(TorchBackend(LoadedModel(model, tok, ModelSource("tiny-varied", "tiny", None)), "cpu", "float32"))


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
    from playground.llamacpp import LlamaServer
    from tests.helpers import require_llama
    require_llama()
    server = LlamaServer(threads=2, parallel=2, ctx=4096).start()
    yield server
    server.stop()


# --- the app in-process, and in Chromium (module scope: each test module gets its own)

@pytest.fixture(scope="module")
def app_url(tiny_backend, tiny_engine):
    """The app over tests.helpers.tiny_registry on 127.0.0.1 (test_concurrency and test_serve_ui build their own)."""
    from playground.ui import build_demo
    from tests.helpers import free_port, tiny_registry
    demo = build_demo(tiny_registry(tiny_backend, tiny_engine))
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(),
                                    server_name="127.0.0.1", quiet=True)
    yield url
    demo.close()


@pytest.fixture(scope="module")
def browser_app(tiny_engine):
    """(page, url): a Chromium page on the app over the tiny engine, once the model has loaded."""
    from playground.ui import build_demo
    from tests.browser import launch, open_page
    from tests.helpers import require_browser
    sync_api = require_browser()
    demo = build_demo(tiny_engine)
    url = launch(demo)
    with sync_api.sync_playwright() as p:
        browser, page = open_page(p, url)
        yield page, url
        browser.close()
    demo.close()
