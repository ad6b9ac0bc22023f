"""Tabs as forms: no UI function takes a long positional list, a form's fields are its endpoint's order, the
handlers the CPU gate and ZeroGPU wrap take dict inputs, a background job stops when its page does, and a source
that cannot be had raises a typed error."""
from __future__ import annotations

import ast
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

from playground.registry import SourceRegistry
from playground.ui import build_demo
from playground.ui.common import SourceUnavailable, source
from playground.ui.forms import api_args, form_inputs, read_form
from playground.ui.generate_handlers import GenerateForm
from playground.jobs import BackgroundJob
from playground.ui.machine_gate import MachineGate, gate_cpu_events
from playground.ui.serve_layout import ServeForm, SweepForm
from tests.helpers import generate_form

UI = Path(__file__).resolve().parents[2] / "playground" / "ui"
MAX_POSITIONAL = 6


def positional(node) -> float:
    """How many positional parameters a def or lambda takes (inf with *args)."""
    a = node.args
    return float("inf") if a.vararg else len(a.posonlyargs) + len(a.args)


def long_signatures(source_text: str, name: str) -> list[str]:
    """`name:line function` for every def or lambda in `source_text` taking more than MAX_POSITIONAL positionals
    (a method's self counts: Gradio never calls one)."""
    tree = ast.parse(source_text)
    return [f"{name}:{node.lineno} {getattr(node, 'name', 'lambda')}" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            and positional(node) > MAX_POSITIONAL]


def test_no_function_in_ui_takes_more_than_six_positional_parameters():
    found = [hit for path in sorted(UI.rglob("*.py")) for hit in long_signatures(path.read_text(), path.name)]
    assert found == []


def test_the_count_sees_long_lists_and_star_args():
    assert long_signatures("def f(a, b, c, d, e, f, g): pass", "x.py") == ["x.py:1 f"]
    assert long_signatures("def f(a, *args, **kw): pass\ng = lambda *a: a", "x.py") == ["x.py:1 f", "x.py:2 lambda"]
    assert long_signatures("def f(a, b, c, d, e, f, *, g, h): pass", "x.py") == []   # keyword-only: named


@dataclass
class Pair:
    first: str
    second: str


def test_a_form_is_read_by_field_and_its_fields_must_follow_the_components_order():
    with gr.Blocks():
        c = SimpleNamespace(first=gr.Textbox(label="first"), second=gr.Textbox(label="second"))
        assert form_inputs(Pair, c) == {c.first, c.second}
        swapped = SimpleNamespace(first=c.second, second=c.first)
        with pytest.raises(ValueError, match=r"\['second', 'first'\]"):
            form_inputs(Pair, swapped)
    assert read_form(Pair, c, {c.second: "b", c.first: "a"}) == Pair("a", "b")
    assert api_args(Pair("a", "b")) == ("a", "b")


@pytest.fixture(scope="module")
def demo():
    return build_demo(SourceRegistry(lambda name, progress: None, ["torch", "onnx"], default="torch"))


def endpoint(demo, name):
    [block_fn] = [b for b in demo.fns.values() if b.api_name == name]
    return block_fn


@pytest.mark.parametrize("api_name, form_cls, labels", [
    ("generate", GenerateForm, {"prompt": "Prompt", "backend": "Backend", "price_out": "USD per 1M output tokens "
                                "(for the estimate)", "spec_ngram": "n-gram size matched"}),
    ("serve", ServeForm, {"n": "Requests", "long_share": "Long: share", "source_b": "Source of B",
                          "manager": "The manager's scheduler"}),
    ("serve_sweep", SweepForm, {"kind": "Sweep", "requests": "Requests per rate", "tpot": "SLO: TPOT ≤ (s; 0: no limit)"}),
])
def test_an_endpoint_takes_its_form_fields_in_their_order(demo, api_name, form_cls, labels):
    """What api_args relies on: the API's inputs (States aside) are the form's fields, in the fields' order."""
    from dataclasses import fields
    block_fn = endpoint(demo, api_name)
    assert block_fn.inputs_as_dict
    shown = [b.label for b in block_fn.inputs if not isinstance(b, gr.State)]
    names = [f.name for f in fields(form_cls)]
    assert len(shown) == len(names)
    for name, label in labels.items():
        assert shown[names.index(name)] == label


def test_the_api_order_of_generate_is_the_one_clients_have_used():
    """Clients outside the tests (the bench, the soak script) pass /generate's first ten inputs by position."""
    args = api_args(generate_form("Hi", temperature=0.5, backend="onnx", max_new_tokens=9))
    assert args[:10] == ("Hi", 0.5, 0, 1, "", 9, True, 0.15, 0.6, "onnx")


def test_every_handler_of_the_cpu_queue_takes_dict_inputs(demo):
    gated = [b for b in demo.fns.values() if b.concurrency_id == "generate"]
    assert gated and all(b.inputs_as_dict for b in gated)
    with gr.Blocks() as other:
        box = gr.Textbox()
        gr.Button().click(lambda text: text, [box], box, concurrency_id="generate")   # a list: positional
    with pytest.raises(TypeError, match="dict inputs"):
        gate_cpu_events(other, "generate", MachineGate())


def test_the_gate_wrapper_holds_a_slot_while_the_handler_runs_and_passes_the_request_on():
    gate, seen = MachineGate(slots=1), []
    with gr.Blocks() as demo:
        box = gr.Textbox()

        def with_request(values: dict, request: gr.Request):
            seen.append((values[box], request, gate.sharing))
            yield values[box]
        gr.Button().click(with_request, {box}, box, concurrency_id="generate")
    assert gate_cpu_events(demo, "generate", gate) == 1
    [block_fn] = demo.fns.values()
    assert list(block_fn.fn({box: "x"}, "the request")) == ["x"]
    assert seen == [("x", "the request", 1)] and gate.sharing == 0


@pytest.mark.slow   # a launched page
def test_through_a_client_a_form_is_its_fields_in_order_and_a_gated_handler_holds_a_slot():
    """What forms.py and machine_gate.py take from Gradio's internals (a component's _id, Blocks.fns), checked
    through its public side, a client of the launched page: a set of inputs comes in the fields' order, and the
    handler Gradio calls is gate_cpu_events's wrapper."""
    from gradio_client import Client

    from tests.browser import launch

    gate = MachineGate(slots=1)
    with gr.Blocks() as demo:
        c = SimpleNamespace(first=gr.Textbox(label="first"), second=gr.Textbox(label="second"))
        out = gr.Textbox()

        def pair(values: dict):
            form = read_form(Pair, c, values)
            return f"{form.first}{form.second}, {gate.sharing} slot taken"
        gr.Button().click(pair, form_inputs(Pair, c), out, api_name="pair", concurrency_id="generate")
    assert gate_cpu_events(demo, "generate", gate) == 1
    try:
        client = Client(launch(demo), verbose=False)
        endpoint = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/pair"]
        assert [p["label"] for p in endpoint["parameters"]] == ["first", "second"]
        assert client.predict("a", "b", api_name="/pair") == "ab, 1 slot taken"
    finally:
        demo.close()
    assert gate.sharing == 0


def test_a_followed_job_reports_progress_and_stops_when_its_handler_is_closed():
    job, started = BackgroundJob(), threading.Event()

    def work(job):
        job.report(0.5, "halfway")
        started.set()
        job.cancel.wait(10)
        return "partial" if job.cancel.is_set() else "whole"
    job.start(work)
    started.wait(5)
    follow = job.follow(lambda final, tick: (final, job.message), every=0.05)
    assert next(follow) == (False, "halfway")
    follow.close()   # Gradio closes the handler (Stop, the page went away)
    job.thread.join(5)
    assert not job.running() and job.result == "partial"


def test_a_job_that_nobody_follows_cancels_itself_and_an_error_becomes_a_line():
    job, go = BackgroundJob(), threading.Event()
    job.start(lambda job: go.wait(5) and (job.report(0.1, "still here?") or job.cancel.is_set()))
    job.asked = time.monotonic() - 3600   # the page stopped asking long ago
    go.set()
    job.thread.join(5)
    assert job.result is True and job.message == "still here?"
    failing = BackgroundJob()
    failing.start(lambda job: 1 / 0)
    assert list(failing.follow(lambda final, tick: final, every=0.01))[-1] is True
    assert failing.error == "ZeroDivisionError: division by zero"


def test_a_source_that_cannot_be_had_raises_a_typed_error_naming_what_is_left():
    def factory(name, progress):
        raise RuntimeError("no such runtime here")
    registry = SourceRegistry(factory, ["torch", "onnx"], default="torch")
    with pytest.raises(SourceUnavailable, match="torch failed to load.*no such runtime here.*another backend: onnx"):
        source(registry, "torch")
    with pytest.raises(SourceUnavailable, match="must be one of torch, onnx"):
        source(registry, "nothing-by-this-name")
