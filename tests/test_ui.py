"""The app's endpoints driven through gradio_client against the demo launched in-process (tiny model)."""
from __future__ import annotations

import csv
import json
import socket
import time

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from playground.ui import build_demo

FRANCE = "What is the capital of France?"
DEFAULTS = dict(temperature=0, top_k=0, top_p=1, seed="", max_new_tokens=16, chat=True,
                price_in=0.15, price_out=0.6)
OUT = dict(chips=0, text=1, status=2, metrics=3, timeline=4, latency=5, kv=6, topk=7, step=8, files=9)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url(tiny_engine):
    demo = build_demo(tiny_engine)
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(),
                                    server_name="127.0.0.1", quiet=True)
    yield url
    demo.close()


def generate_args(prompt=FRANCE, **changes):
    a = {**DEFAULTS, **changes}
    return (prompt, a["temperature"], a["top_k"], a["top_p"], a["seed"], a["max_new_tokens"], a["chat"],
            a["price_in"], a["price_out"])


def trace_from(files) -> dict:
    path = next(f for f in files if str(f).endswith(".json"))
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# --- streaming

def test_streamed_outputs_grow_and_end_with_an_exportable_trace(app_url):
    client = Client(app_url, verbose=False)
    job = client.submit(*generate_args(max_new_tokens=12), api_name="/generate")
    final = job.result(timeout=120)
    outputs = job.outputs()
    chip_counts = [o[OUT["chips"]].count('class="tok ') for o in outputs if isinstance(o[OUT["chips"]], str)]
    assert chip_counts[0] >= 1 and chip_counts[-1] == 12
    assert chip_counts == sorted(chip_counts)          # grows step by step, never shrinks
    assert len(outputs) >= 12                          # an update per token plus the final one
    trace = trace_from(final[OUT["files"]])
    assert len(trace["steps"]) == 12 and trace["stop_reason"] == "length" and trace["prompt"] == FRANCE
    assert "finished" in final[OUT["status"]] and "TTFT" in final[OUT["metrics"]]
    assert final[OUT["text"]] == trace["text"]
    csv_path = next(f for f in final[OUT["files"]] if str(f).endswith(".csv"))
    with open(csv_path, encoding="utf-8", newline="") as fh:
        assert len(list(csv.reader(fh))) == 13   # header + one row per token


def test_top_k_and_metrics_endpoints_read_the_session_trace(app_url):
    client = Client(app_url, verbose=False)
    client.predict(*generate_args(max_new_tokens=5), api_name="/generate")
    figure = client.predict(2, api_name="/top_k")
    assert "Top-k at step 2" in json.dumps(figure)
    assert "cost (estimate)" in client.predict(100.0, 100.0, api_name="/metrics")


def test_stop_keeps_the_partial_trace(app_url):
    client = Client(app_url, verbose=False)
    job = client.submit(*generate_args(max_new_tokens=450), api_name="/generate")
    wait_for(lambda: len(job.outputs()) >= 5)
    stopped = client.predict(0.15, 0.6, api_name="/stop")
    trace = trace_from(stopped[OUT["files"]])
    assert trace["stop_reason"] == "cancelled"
    assert 5 <= len(trace["steps"]) < 450
    assert "stopped by you" in stopped[OUT["status"]]
    job.result(timeout=60)   # the generate stream ends too, within a step
    assert job.done()


# --- bad input

@pytest.mark.parametrize("prompt, changes, message", [
    ("   ", {}, "prompt is empty"),
    (FRANCE, {"seed": "-1"}, "seed must be between"),
    (FRANCE, {"seed": "abc"}, "seed must be a whole number"),
    (FRANCE, {"top_k": 2.5}, "top_k must be a whole number"),
    ("x" * 5000, {}, "context window"),
])
def test_bad_input_shows_a_message_and_the_app_keeps_serving(app_url, prompt, changes, message):
    client = Client(app_url, verbose=False)
    result = client.predict(*generate_args(prompt, **changes), api_name="/generate")
    assert message in result[OUT["status"]]
    ok = client.predict(*generate_args(max_new_tokens=3), api_name="/generate")
    assert len(trace_from(ok[OUT["files"]])["steps"]) == 3


def test_values_outside_a_slider_are_refused_readably(app_url):
    client = Client(app_url, verbose=False)   # gradio checks slider bounds before the handler runs
    with pytest.raises(AppError, match="greater than maximum"):
        client.predict(*generate_args(temperature=9.0), api_name="/generate")
    ok = client.predict(*generate_args(max_new_tokens=2), api_name="/generate")
    assert len(trace_from(ok[OUT["files"]])["steps"]) == 2


def test_two_sessions_at_once_never_mix(app_url):
    a, b = Client(app_url, verbose=False), Client(app_url, verbose=False)
    job_a = a.submit(*generate_args("Prefill reads the whole prompt once.", max_new_tokens=20), api_name="/generate")
    job_b = b.submit(*generate_args(FRANCE, max_new_tokens=7), api_name="/generate")
    trace_a, trace_b = (trace_from(j.result(timeout=120)[OUT["files"]]) for j in (job_a, job_b))
    assert trace_a["prompt"].startswith("Prefill") and len(trace_a["steps"]) == 20
    assert trace_b["prompt"] == FRANCE and len(trace_b["steps"]) == 7


def test_tokens_and_model_info_endpoints(app_url):
    client = Client(app_url, verbose=False)
    summary, chips, _ = client.predict(FRANCE + " <b>", True, api_name="/tokens")
    assert "cl100k_base" in summary and "match" in summary
    assert "&lt;" in chips and "<b>" not in chips
    assert "tiny-random-llama" in client.predict(api_name="/model_info")


def test_a_seed_makes_a_sampled_run_repeatable(app_url):
    client = Client(app_url, verbose=False)
    runs = [trace_from(client.predict(*generate_args(temperature=1.0, seed="7", max_new_tokens=8),
                                      api_name="/generate")[OUT["files"]]) for _ in range(2)]
    ids = [[s["token_id"] for s in run["steps"]] for run in runs]
    assert ids[0] == ids[1] and runs[0]["settings"]["seed"] == 7
