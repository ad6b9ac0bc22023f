"""Helpers the test modules share (fixtures live in tests/conftest.py, fake backends in tests/fakes.py):

- the app's endpoints: FRANCE, DEFAULTS, generate_form, generate_args, compare_args, generated, named, trace_from, EXPERIMENT,
  experiment_args, free_port, wait_for;
- tiny_registry (torch, onnx that fails, copy that swerves at SWERVE_AT, late, slow) and swerving_engine;
- compute_stopped (no forward pass in progress, every run ended), check_timelines (a serve result's stamps are consistent);
- require_browser (Chromium and playwright, or a one-line failure);
- require_llama (llama.cpp's llama-server: a failure naming `make llama` under CI, else a skip).

Left out: anything that starts or stops an app (the fixtures do that).
"""
from __future__ import annotations

import json
import os
import time

import pytest

from playground.chromium import chromium_path
from playground.engine import Engine
from playground.models import ModelLoadError
from playground.ports import free_port  # noqa: F401 - the tests take it from here with the other helpers
from playground.registry import SourceRegistry
from tests.fakes import SlowBackend, SwervingBackend

FRANCE = "What is the capital of France?"
DEFAULTS = dict(temperature=0, top_k=0, top_p=1, seed="", max_new_tokens=16, chat=True,
                price_in=0.15, price_out=0.6, backend="torch", speculate=False, spec_k=4, spec_ngram=3)
SWERVE_AT = 3   # the "copy" source's answer departs from torch's at this output token
EXPERIMENT = {"prefill": dict(max_length=64, points=3, repeats=1), "cache": dict(prompt_tokens=16, new_tokens=4),
              "depth": dict(prompt_tokens=16, new_tokens=4), "short-long": dict(max_new_tokens=4)}


# --- the app's endpoints

def named(result, outputs) -> dict:
    """An endpoint's outputs by name (gradio_client returns them in the order the app lists them)."""
    assert len(result) == len(outputs)
    return dict(zip(outputs, result))


def generated(result) -> dict:
    """/generate's and /stop's outputs by name (GENERATE_OUTPUTS: stream, status, text, metrics, files)."""
    from playground.ui.generate_handlers import OUTPUTS as GENERATE_OUTPUTS
    return named(result, GENERATE_OUTPUTS)


def generate_form(prompt=FRANCE, **changes):
    """The Generate tab's inputs by name (GenerateForm's fields): DEFAULTS with `changes`."""
    from playground.ui.generate_handlers import GenerateForm
    return GenerateForm(**{**DEFAULTS, "prompt": prompt, **changes})


def generate_args(prompt=FRANCE, **changes):
    """/generate's inputs, named as GenerateForm's fields, in the order a client passes them."""
    from playground.ui.forms import api_args
    return api_args(generate_form(prompt, **changes))


def generate_by_name():
    """Generate's components named by strings (GenerateForm's fields, `session`, OUTPUTS), for a GenerateTab: its
    handlers then take and give dicts keyed by those names, as Gradio's dict inputs are keyed by component."""
    from dataclasses import fields
    from types import SimpleNamespace

    from playground.ui.generate_handlers import OUTPUTS, GenerateForm
    return SimpleNamespace(**{n: n for n in (*OUTPUTS, *(f.name for f in fields(GenerateForm)), "session")})


def tab_by_name(registry, room=None, remote=None):
    """The Generate tab its handlers act on (generate_handlers.GenerateTab), components named by generate_by_name(), over
    `registry` and `room` (serve.room.Room; a room of its own, with no loop, when not given)."""
    from playground.serve.room import Room
    from playground.ui.generate_handlers import GenerateTab
    return GenerateTab(generate_by_name(), registry, room or Room(), remote)


def generate_values(session, prompt=FRANCE, **changes) -> dict:
    """A call of the generate handler made with generate_by_name(): the form's fields and the session, by name."""
    return {**vars(generate_form(prompt, **changes)), "session": session}


def compare_args(backend_a, backend_b, prompt=FRANCE, max_new_tokens=8, temperature=0, chat=True):
    """/compare's inputs, named as CompareForm's fields, in the order a client passes them."""
    from playground.ui.compare_tab import CompareForm
    from playground.ui.forms import api_args
    return api_args(CompareForm(backend_a, backend_b, prompt, max_new_tokens=max_new_tokens, temperature=temperature,
                                chat=chat))


def experiment_args(name, backend="torch", **changes):
    """/experiment's inputs: name, backend, then every registered parameter (the named one's changed)."""
    from playground.ui.experiments_tab import ExperimentForm
    return ExperimentForm(name, backend, {name: {**EXPERIMENT.get(name, {}), **changes}}).api_args()


def trace_from(files) -> dict:
    path = next(f for f in files if str(f).endswith(".json"))
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def wait_for(predicate, timeout=60.0, message=None):
    """Poll `predicate` until it holds; past `timeout` seconds fail with `message` (a hang, not a speed check:
    the bound is generous, and a fast machine only returns sooner)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, (   # timing: a hang detector with a generous bound
            f"timed out after {timeout:g} s waiting for {message or getattr(predicate, '__name__', 'a condition')}")
        time.sleep(0.05)


# --- sources for the app

def swerving_engine(tiny_backend, tiny_engine) -> Engine:
    """A source that agrees with the tiny engine up to output token SWERVE_AT, then picks another token."""
    from playground.config import GenerationSettings
    settings = GenerationSettings(max_new_tokens=SWERVE_AT + 1, chat=True)
    original = tiny_engine.generate(FRANCE, settings).output_ids[SWERVE_AT]
    return Engine(SwervingBackend(tiny_backend, SWERVE_AT, (original + 1) % len(tiny_backend.tokenizer)))


def doubtful_trace(tiny_engine):
    """A tiny run whose first step hesitates among ten named candidates, as SmolLM2's does (“The” 15%, “L”
    14%, …): lesson step 2's top-k chart and takeaway (the tiny model's own answer is newlines, which the
    step passes over)."""
    from dataclasses import replace

    from playground.config import GenerationSettings
    from playground.trace import Candidate
    trace = tiny_engine.generate(FRANCE, GenerationSettings(max_new_tokens=3))
    words = ["The", "L", "La", "Al", "Le", "In", "Paris", "France", "It", "A"]
    top = tuple(Candidate(100 + i, w, 0.15 - 0.01 * i) for i, w in enumerate(words))
    first = replace(trace.steps[0], token_id=100, text="The", prob=0.15, top=top)
    return replace(trace, steps=[first] + [replace(s, top=None) for s in trace.steps[1:]])


def tiny_registry(tiny_backend, tiny_engine) -> SourceRegistry:
    """torch: the tiny engine; onnx: fails to load; copy: the tiny model departing from torch's answer at
    output token SWERVE_AT; late: loads slowly with progress messages; slow: the tiny model with a pause
    per step."""
    def factory(name, progress):
        if name == "onnx":
            raise ModelLoadError("ONNX export impossible here (test)")
        if name == "late":
            for i in range(3):
                progress(i / 3, f"exporting part {i + 1} of 3 (test)")
                time.sleep(0.5)   # timing: the source's slow load, with progress, is what the tests watch
        if name == "copy":
            return swerving_engine(tiny_backend, tiny_engine)
        return {"torch": tiny_engine, "slow": Engine(SlowBackend(tiny_backend))}.get(name) or Engine(tiny_backend)
    return SourceRegistry(factory, ["torch", "onnx", "copy", "late", "slow"], default="torch")


# --- checks

def compute_stopped(backend, runs) -> bool:
    """Every run has ended and `backend` (a CountingBackend) has no forward pass in progress: an ended run
    makes no further call, so nothing more is computed for them."""
    return all(r.trace.finished for r in runs) and backend.active == 0


def check_timelines(result):
    """arrival <= admitted <= first token <= last token <= finished <= the run's end; the phases add up to E2E;
    every request ended. Orders of stamps on the run's clock only: no gap between them is bounded."""
    for r in result.records:
        assert r.stop_reason is not None, r
        if not r.steps:
            continue
        assert r.arrival <= r.admitted + 1e-9 <= r.first_token + 1e-9 <= r.last_token + 1e-9 <= r.finished + 1e-9
        assert r.waiting + r.prefill + r.decode == pytest.approx(r.e2e)
        assert not result.done or r.finished <= result.elapsed + 1e-9   # the scheduler's end stamp, on its clock
        times = [s.time for s in r.steps]
        assert times == sorted(times)


def require_browser():
    """Fail (never skip) with one line saying what to install: `make test` installs both itself."""
    if not os.path.exists(chromium := chromium_path()):
        pytest.fail(f"{chromium} is missing: run `make browser` (or apt-get install chromium, or set "
                    "PLAYGROUND_CHROMIUM)", pytrace=False)
    try:
        from playwright import sync_api
    except ImportError:
        pytest.fail("playwright is missing: run `make install-dev`", pytrace=False)
    return sync_api


def require_llama() -> None:
    """Fail under CI (`make test` runs `make llama` first), skip elsewhere, when llama-server is missing."""
    from playground.llamacpp import LlamaCppMissing, llama_binary
    try:
        llama_binary("llama-server")
    except LlamaCppMissing as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (CI must run `make llama` before the server tests; `make test` does)")
        pytest.skip(str(exc))


def long_tiny_folder():
    """The tiny model with 2048 positions, saved as a transformers folder once under the cache (a tools block alone is
    ~450 of its byte-level tokens: more than the plain tiny model's 512)."""
    from pathlib import Path

    from playground.config import default_cache_dir
    from playground.tiny import build_tiny_model
    folder = Path(default_cache_dir()) / "onnx" / "tiny-2048-source"
    if not (folder / "config.json").is_file():
        model, tokenizer = build_tiny_model(context=2048)
        staging = folder.with_name(folder.name + ".partial")
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.rename(folder)
    return folder
