"""The app with endpoints beside a local backend, driven as a client would (gradio_client): every tab takes a
remote source, labels what it does not give, and names a failing server without falling over."""
from __future__ import annotations

import json

import pytest
from gradio_client import Client

from playground.step_stream import read_stream
from playground.ui.generate_handlers import OUTPUTS as GENERATE_OUTPUTS
from playground.registry import SourceRegistry
from playground.ports import free_port
from playground.remote.endpoints import add_endpoints, endpoint_name
from playground.ui import build_demo
from playground.ui.compare_tab import OUTPUTS as COMPARE
from tests.helpers import compare_args, generate_args

FRANCE = "What is the capital of France?"


@pytest.fixture(scope="module")
def app(fake_server, tiny_engine):
    registry = SourceRegistry.fixed(tiny_engine)
    add_endpoints(registry, [fake_server.url(mode) for mode in ("ok", "cut", "models-500")], read_timeout=5)
    demo = build_demo(registry)
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1",
                                    quiet=True)
    yield Client(url, verbose=False), {mode: endpoint_name(fake_server.url(mode)) for mode in ("ok", "cut", "models-500")}
    demo.close()


def generate(client, backend, max_new_tokens=4) -> dict:
    """/generate's outputs by name (stream, status, text, metrics, files)."""
    return dict(zip(GENERATE_OUTPUTS, client.predict(*generate_args(max_new_tokens=max_new_tokens, backend=backend),
                                                     api_name="/generate")))


@pytest.mark.slow
def test_generate_streams_from_a_server_and_exports_what_it_reported(app):
    client, names = app
    out = generate(client, names["ok"])
    assert out["text"] == "Hello world!" and "finished (end-of-sequence token)" in out["status"]
    assert "Server-reported" in out["metrics"] and "not measured by this source" in out["metrics"]
    with open(next(f for f in out["files"] if str(f).endswith(".json")), encoding="utf-8") as fh:
        trace = json.load(fh)
    assert trace["server"]["kind"] == "openai-compatible" and trace["backend"].startswith("openai-compatible @")
    assert [s["kv_bytes"] for s in trace["steps"]] == [None] * 3
    _, steps, end = read_stream(out["stream"])   # the page's stream: every step, then the final figures
    assert [s["kv_bytes"] for s in steps] == [None] * 3 and steps[0]["top"][0]["shown"] == "Hello"
    assert "missing" in json.dumps(end["figures"]["kv"])   # the KV chart says what it lacks, draws no zero


@pytest.mark.slow
def test_a_cut_stream_shows_its_partial_answer_and_the_error(app):
    client, names = app
    out = generate(client, names["cut"])
    assert out["text"] == "Hello world" and "failed" in out["status"]
    assert "the stream was cut" in out["status"]


@pytest.mark.slow
def test_a_server_that_fails_to_connect_is_named_and_the_local_backend_still_works(app):
    client, names = app
    out = generate(client, names["models-500"])
    assert "models are on fire" in out["status"]
    assert "finished" in generate(client, "torch")["status"]


@pytest.mark.slow
def test_model_info_and_tokens_describe_a_remote_source(app):
    client, names = app
    info = client.predict(backend=names["ok"], api_name="/model_info")
    assert "times measured at this client" in info and "measured KV-cache bytes" in info
    assert "KV formula** missing" in info and "context** not given by the source" in info
    summary, chips, _ = client.predict(text=FRANCE, chat_on=True, name=names["ok"], api_name="/tokens")
    assert "its tokenizer is not here" in summary and "cl100k_base" in summary


@pytest.mark.slow
def test_compare_runs_a_local_backend_against_a_server_and_says_why_they_differ(app):
    client, names = app
    out = dict(zip(COMPARE, client.predict(*compare_args("torch", names["ok"], max_new_tokens=4), api_name="/compare")))
    assert [row[0] for row in out["table"]["data"]][1].startswith("openai-compatible @")
    assert "They read different prompts" in out["agreement"]
