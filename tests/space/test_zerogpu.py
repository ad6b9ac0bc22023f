"""ZeroGPU as it behaves, without a GPU: tests/zerogpu_double.py stands in for `spaces` (a forked worker per call,
pickled arguments and yields, state lost to the caller, a duration that ends the call, models moved to the device
only in the main thread before launch). First the double catches each way a handler breaks on a real ZeroGPU Space;
then every tab's GPU path (the torch backend, a GpuEngine whose runs are spaces.GPU calls) works under it, and the
page says which backend ran and what the GPU call asked of the visitor's quota."""
from __future__ import annotations

import os
import pickle
import threading
import time

import gradio as gr
import pytest

from playground.config import GenerationSettings
from playground.registry import SourceRegistry
from playground.ui import build_demo, zerogpu
from tests.helpers import (EXPERIMENT, compare_args, experiment_args, free_port, generate_args, generated,
                           tab_by_name, trace_from)
from tests.zerogpu_double import ZeroGpuDouble


@pytest.fixture
def double(monkeypatch):
    return ZeroGpuDouble().install(monkeypatch)


# --- what the double catches (each a handler that would break on a real ZeroGPU Space)

WORKER_CACHE: dict = {}


def test_the_call_runs_in_a_forked_child_whose_changes_are_lost(double):
    import spaces

    @spaces.GPU(duration=30)
    def remember(value):
        WORKER_CACHE["value"] = value
        yield os.getpid()
        yield WORKER_CACHE["value"]

    assert list(remember(7))[1] == 7 and next(iter(remember(8))) != os.getpid()
    assert WORKER_CACHE == {}   # set in the worker: the caller never sees it
    assert [c.seconds for c in double.calls] == [30, 30]


def test_a_handler_relying_on_state_set_inside_the_worker_fails(double):
    import spaces

    @spaces.GPU(duration=30)
    def load():
        WORKER_CACHE["engine"] = "loaded"   # e.g. a model loaded on first use, inside the worker
        return "ok"

    @spaces.GPU(duration=30)
    def use():
        return WORKER_CACHE["engine"]

    assert load() == "ok"
    with pytest.raises(gr.Error, match="KeyError"):
        use()   # the next call's worker is forked from the caller, which never loaded it


def test_an_unpicklable_yield_ends_the_call_with_zerogpus_error(double):
    import spaces

    @spaces.GPU(duration=30)
    def stream():
        yield "first"
        yield threading.Lock()   # e.g. a session or a job holding a lock, yielded to the page

    seen = []
    with pytest.raises(gr.Error, match="PicklingError"):
        for value in stream():
            seen.append(value)
    assert seen == ["first"]


def test_an_unpicklable_argument_never_reaches_the_worker(double):
    import spaces

    @spaces.GPU(duration=30)
    def handler(values):
        return len(values)

    with pytest.raises((pickle.PicklingError, TypeError), match="pickle"):
        handler({"session": threading.Event()})   # gr.State holding an Event, passed in whole
    assert handler({"prompt": "hi"}) == 1


@pytest.mark.slow   # waits out a duration
def test_a_stream_that_outlives_its_duration_is_aborted(double):
    import spaces

    @spaces.GPU(duration=0.5)
    def endless():
        while True:
            yield "token"
            time.sleep(0.05)

    seen, start = [], time.monotonic()
    with pytest.raises(gr.Error, match="GPU task aborted"):
        for value in endless():
            seen.append(value)
    assert seen and time.monotonic() - start < 60   # timing: a hang detector; the stream is endless unless aborted


def test_a_model_moved_outside_the_main_thread_or_used_after_launch_fails(double):
    import torch

    errors = []

    def load_in_a_thread():   # what a registry's background load does
        try:
            torch.nn.Linear(2, 2).to("cpu")
        except RuntimeError as exc:
            errors.append(str(exc))
    worker = threading.Thread(target=load_in_a_thread)
    worker.start()
    worker.join()
    assert errors and "did not intercept" in errors[0]

    model = torch.nn.Linear(2, 2).to("cpu")   # the main thread, before launch: as ZeroGPU expects
    model(torch.ones(1, 2))                    # a warm-up before launch still computes here
    double.startup()
    with pytest.raises(RuntimeError, match="offloaded"):
        model(torch.ones(1, 2))                # after launch only a worker has the weights
    assert [(m.main_process, m.main_thread, m.after_startup) for m in double.moves] == [
        (True, False, False), (True, True, False)]


@pytest.mark.slow   # loads the tiny model twice
def test_a_load_on_first_use_fails_on_zerogpu_where_start_up_succeeds(double):
    lazy = SourceRegistry.for_model("tiny", "torch", device="cpu", dtype="float32")
    list(lazy.loading("torch"))   # the app's usual path: load in a worker thread on first use
    assert "did not intercept" in lazy.error("torch")

    registry = SourceRegistry.for_model("tiny", "torch", device="cpu", dtype="float32")
    assert zerogpu.start_up(registry) == ["torch"]
    assert isinstance(registry.get("torch"), zerogpu.GpuEngine)
    assert all(m.main_thread and not m.after_startup for m in double.moves[1:])


def test_a_whole_handler_in_spaces_gpu_would_send_its_session_to_the_worker(double, tiny_engine):
    """Why only a run's step loop is a GPU call: Generate's handler takes the browser's Session (gr.State), which
    holds locks, so a handler-sized GPU call fails before it starts, and its changes to the session would stay in
    the worker anyway."""
    import spaces
    from playground.ui.session import Session
    from playground.ui.generate_handlers import generate as on_generate
    from tests.helpers import generate_values

    tab = tab_by_name(SourceRegistry.fixed(tiny_engine))

    def generate(values):   # the handler as Gradio is given it (spaces.GPU names a function by its __name__)
        yield from on_generate(tab, values)
    with pytest.raises((pickle.PicklingError, TypeError), match="pickle"):
        next(spaces.GPU(duration=60)(generate)(generate_values(Session(), max_new_tokens=2)))


class StallingBackend:
    """The tiny backend, decoding at its own pace for STALL_AFTER steps, then two seconds a step: a run that outlives
    any short duration whatever the machine's speed, with steps made before it stalls."""
    STALL_AFTER = 3

    def __init__(self, backend):
        self._backend, self.decodes = backend, 0

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def decode(self, token, state):
        self.decodes += 1
        if self.decodes > self.STALL_AFTER:
            time.sleep(2)   # timing: the stall under test, past the run's duration
        return self._backend.decode(token, state)


@pytest.mark.slow   # waits out a duration of several seconds in a forked worker
def test_a_run_past_its_gpu_duration_ends_with_zerogpus_error_and_keeps_its_steps(double, tiny_backend, monkeypatch):
    from playground.engine import Engine

    registry = SourceRegistry(lambda name, progress: Engine(StallingBackend(tiny_backend)), ["torch"])
    zerogpu.start_up(registry)
    monkeypatch.setattr(zerogpu, "RUN_SECONDS", 8)   # 9 s asked for 20 tokens: the stalled steps need 34 s more
    run = registry.get("torch").run("Hi", GenerationSettings(max_new_tokens=20, chat=False))
    with pytest.raises(gr.Error, match="GPU task aborted"):
        run.wait()
    assert StallingBackend.STALL_AFTER < len(run.trace.steps) < 20 and run.trace.stop_reason == "error"
    assert "GPU task aborted" in run.trace.error


@pytest.mark.slow   # loads the tiny model
def test_app_loads_the_gpu_backend_at_import_in_the_main_thread(double):
    import app

    registry = app.make_registry("tiny", "torch")   # what `import app` does on ZeroGPU
    assert isinstance(registry.engines["torch"], zerogpu.GpuEngine)
    assert "spaces.GPU call" in registry.labels["torch"]
    assert double.moves and all(m.main_process and m.main_thread and not m.after_startup for m in double.moves)


# --- the app on ZeroGPU

@pytest.mark.parametrize("value, on", [("true", True), ("1", True), ("True", True), ("", False), ("false", False)])
def test_zero_gpu_is_read_as_spaces_reads_it(value, on, monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", value)
    assert zerogpu.zero_gpu() is on


def test_elsewhere_the_page_has_no_zero_gpu_note(tiny_engine, monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    demo = build_demo(tiny_engine)
    assert not any(getattr(b, "elem_id", None) == "zero-gpu-note" for b in demo.blocks.values())


def test_the_page_states_the_quota_and_what_a_gpu_call_costs():
    assert "2 minutes without a Hugging Face account" in zerogpu.WAITING and "daily GPU quota" in zerogpu.WAITING
    assert "ONNX backends run on this Space's CPU and cost none" in zerogpu.WAITING
    assert zerogpu.seconds_for(GenerationSettings(max_new_tokens=64)) == 13   # 10 s + 0.05 s a token


def test_a_run_on_the_cpu_says_it_cost_no_gpu_quota(tiny_engine):
    line = zerogpu.cost_line(tiny_engine, GenerationSettings())   # a plain Engine: outside spaces.GPU
    assert line == "ran on torch on this Space's CPU, outside spaces.GPU: no GPU quota"


@pytest.fixture(scope="module")
def zero_app(tmp_path_factory):
    """The app on ZeroGPU under the double: tiny torch (the GPU backend, loaded at start-up) and a launched page."""
    from gradio_client import Client

    monkeypatch = pytest.MonkeyPatch()
    double = ZeroGpuDouble().install(monkeypatch)
    registry = SourceRegistry.for_model("tiny", "torch", device="cpu", dtype="float32")
    zerogpu.start_up(registry)
    demo = build_demo(registry)
    demo.queue()
    _, url, _ = demo.launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1", quiet=True)
    try:
        yield double, Client(url, verbose=False), demo
    finally:
        demo.close()
        monkeypatch.undo()


@pytest.mark.slow   # forks a worker per run of the tiny model, through a launched page
def test_generate_streams_from_the_worker_and_says_what_it_cost(zero_app):
    double, client, demo = zero_app
    assert any(getattr(b, "elem_id", None) == "zero-gpu-note" for b in demo.blocks.values())
    before = len(double.calls)
    job = client.submit(*generate_args(max_new_tokens=6, backend="torch"), api_name="/generate")
    final = generated(job.result(timeout=120))
    trace = trace_from(final["files"])
    assert len(trace["steps"]) == 6 and trace["backend"] == "torch"
    assert len(job.outputs()) >= 3   # the head, steps as they came, the end
    [call] = double.calls[before:]
    assert call.seconds == zerogpu.seconds_for(GenerationSettings(max_new_tokens=6)) and call.visitor
    assert f"ran on torch inside spaces.GPU: asked ZeroGPU for {int(call.seconds)} s" in final["status"]
    assert not any(not m.main_process or m.after_startup for m in double.moves)   # only at start-up


@pytest.mark.slow
def test_compare_experiments_lesson_and_serve_run_their_gpu_path(zero_app):
    from tests.serve.test_serve_ui import serve_args

    double, client, _ = zero_app
    before = len(double.calls)
    result = client.predict(*compare_args("torch", "torch", max_new_tokens=4), api_name="/compare")
    assert "agree" in str(result).lower()
    assert len(double.calls) == before + 2   # one GPU call a run
    seconds = zerogpu.seconds_for(GenerationSettings(max_new_tokens=4))
    assert result[-1].count(f"ran on torch inside spaces.GPU: asked ZeroGPU for {seconds} s") == 2   # the status
    before = len(double.calls)
    result = client.predict(*experiment_args("cache", **EXPERIMENT["cache"]), api_name="/experiment")
    assert "Error" not in str(result[1]) and len(double.calls) > before
    before = len(double.calls)
    client.predict("torch", api_name="/lesson_next")
    client.predict("torch", api_name="/lesson_next")   # step 2: a run
    assert len(double.calls) > before
    before = len(double.calls)
    result = client.predict(*serve_args(n=2, a="one-at-a-time", src_a="torch", b="one-at-a-time", src_b="torch"),
                            api_name="/serve")
    assert "done" in str(result) and len(double.calls) == before + 4
    assert all(call.visitor for call in double.calls)   # each counted against the visitor's quota
    assert not any(not m.main_process or m.after_startup for m in double.moves)
