"""ZeroGPU without a GPU: the page's GPU work is wrapped in spaces.GPU exactly when the environment says ZeroGPU,
with durations fitted to each request, and a wrapped handler still streams. A stand-in `spaces` module is
installed only so that the wrapping can happen off a Space; every assertion is on our code's choices."""
from __future__ import annotations

import sys
import time
import types

import gradio as gr
import pytest

from playground.ui import build_demo, zerogpu
from tests.helpers import free_port, generate_args, generated, trace_from


@pytest.fixture
def spaces_module(monkeypatch):
    """A `spaces` whose GPU decorator runs the function as is (what the real one does off ZeroGPU)."""
    module = types.ModuleType("spaces")
    module.GPU = lambda task=None, *, duration=None, size=None: (lambda fn: fn)
    monkeypatch.setitem(sys.modules, "spaces", module)
    return module


def wrapped_names(demo) -> set[str]:
    return {b.api_name for b in demo.fns.values() if hasattr(b.fn, "zero_gpu_seconds")}


def has_note(demo) -> bool:
    return any(getattr(block, "elem_id", None) == "zero-gpu-note" for block in demo.blocks.values())


@pytest.mark.parametrize("value", ["true", "1", "True"])
def test_on_zero_gpu_exactly_the_gpu_work_is_wrapped_and_the_page_says_it_waits(value, tiny_engine, spaces_module,
                                                                                monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", value)
    demo = build_demo(tiny_engine)
    assert wrapped_names(demo) == set(zerogpu.GPU_WORK)
    assert "tokens" not in wrapped_names(demo) and "model_info" not in wrapped_names(demo)   # no GPU work there
    assert has_note(demo)


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_elsewhere_nothing_is_wrapped(value, tiny_engine, spaces_module, monkeypatch):
    if value is None:
        monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    else:
        monkeypatch.setenv("SPACES_ZERO_GPU", value)
    demo = build_demo(tiny_engine)
    assert wrapped_names(demo) == set() and not has_note(demo)


def test_the_duration_grows_with_the_requested_tokens(tiny_engine, spaces_module, monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    [generate] = [b for b in build_demo(tiny_engine).fns.values() if b.api_name == "generate"]
    seconds = generate.fn.zero_gpu_seconds
    form = [b for b in generate.inputs if not isinstance(b, gr.State)]   # GenerateForm's fields, in order (forms.py)

    def values(**changes) -> dict:   # the handler's dict input, keyed by component
        return dict(zip(form, generate_args(**changes)))
    short, long = seconds(values(max_new_tokens=16)), seconds(values(max_new_tokens=2000))
    assert (short, long) == (30, 130)   # 30 s base, 0.05 s a token
    assert seconds(values(max_new_tokens="not a number")) == zerogpu.GPU_WORK["generate"]


@pytest.mark.slow   # the whole path end to end: seconds on the tiny model
def test_a_wrapped_generate_still_streams(tiny_engine, spaces_module, monkeypatch):
    from gradio_client import Client

    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    demo = build_demo(tiny_engine)
    demo.queue()
    _, url, _ = demo.launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1", quiet=True)
    try:
        job = Client(url, verbose=False).submit(*generate_args(max_new_tokens=6), api_name="/generate")
        deadline = time.monotonic() + 120
        while not job.done():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        trace = trace_from(generated(job.result())["files"])
        assert len(trace["steps"]) == 6 and len(job.outputs()) >= 2
    finally:
        demo.close()
