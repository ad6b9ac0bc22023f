"""The endpoint's per-request figures (playground/api/timings.py): llama-server's `timings` in every response,
vLLM's `metrics` when asked, both on a stream's last chunk; computed from the request's Trace, null where the
Trace cannot give a figure; and read back by the remote source watching the endpoint, the client's TTFT set
beside the server's with the difference (delivery) named."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace as NS

import httpx
import pytest

from playground.api import ApiConfig
from playground.api.timings import llama_timings, server_times, vllm_metrics
from playground.config import GenerationSettings
from playground.remote.report import delivery_line, server_lines
from playground.remote.source import RemoteSource
from tests import recorded
from tests.api.test_openai_api import KEY, QUESTION, Served

TIMINGS = ["cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
           "predicted_ms", "predicted_per_token_ms", "predicted_per_second"]   # llama-server's, in its order
METRICS = {"time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second"}
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def served(tiny_onnx_engine):
    s = Served(tiny_onnx_engine, ApiConfig(keys=(KEY,), slots=2, capacity=512))
    yield s
    s.stop()


def post(served, path: str, **body) -> dict:
    r = httpx.post(served.url + path, json=body, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def events(served, path: str, **body) -> list[dict]:
    with httpx.stream("POST", served.url + path, json={**body, "stream": True}, headers=AUTH, timeout=60) as r:
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


# --- from a Trace

def step(t: float, wall_ns: int) -> NS:
    return NS(time=t, wall_ns=wall_ns, tokens=1)


def test_a_figure_the_trace_cannot_give_is_null_never_zero():
    one = NS(steps=[step(0.25, 2_000_000_000)], prompt_ids=[1] * 10, cached_tokens=0, server={})
    t, m = llama_timings(one), vllm_metrics(one)
    assert list(t) == TIMINGS and set(m) == METRICS
    assert t["prompt_ms"] == 250.0 and t["prompt_per_second"] == 40.0 and t["predicted_n"] == 1
    # one token: llama-server's 1 µs floor (tests/remote/test_server_formats.py holds it against its source)
    assert t["predicted_ms"] == 0.001 and t["predicted_per_second"] == 1e6 and t["predicted_per_token_ms"] == 0.001
    assert m["queue_time_ms"] is None and m["mean_itl_ms"] is None and m["tokens_per_second"] == 4.0
    none = NS(steps=[], prompt_ids=[1] * 10, cached_tokens=0, server={"received_ns": 1})
    assert {k: v for k, v in vllm_metrics(none).items() if v is not None} == {}
    assert llama_timings(none)["prompt_n"] == 10 and llama_timings(none)["prompt_ms"] is None


def test_the_figures_count_only_the_steps_answered_and_split_the_prompt_into_computed_and_cached():
    received = 5_000_000_000
    steps = [step(0.5, received + 600_000_000), step(0.6, received + 700_000_000), step(0.9, received + 1_000_000_000)]
    trace = NS(steps=steps, prompt_ids=[1] * 64, cached_tokens=48, queued=0.06, server={"received_ns": received})
    times = server_times(trace, steps=2)
    assert times.output_tokens == 2 and times.computed_tokens == 16 and times.cached_tokens == 48
    assert times.queued == pytest.approx(0.06) and times.prepared == pytest.approx(0.04)
    assert times.server_ttft == pytest.approx(0.6)
    t = llama_timings(trace, steps=2)
    assert (t["cache_n"], t["prompt_n"], t["predicted_n"]) == (48, 16, 2)
    assert t["predicted_ms"] == pytest.approx(100.0) and t["predicted_per_second"] == pytest.approx(20.0)
    assert vllm_metrics(trace)["tokens_per_second"] == pytest.approx(3 / 0.9)


# --- in the endpoint's responses

def test_a_whole_response_carries_llama_cpps_timings_and_vllms_metrics_only_when_asked(served):
    reply = post(served, "/v1/chat/completions", messages=QUESTION, max_tokens=6, temperature=0)
    t, usage = reply["timings"], reply["usage"]
    assert list(t) == TIMINGS and "metrics" not in reply
    assert t["cache_n"] + t["prompt_n"] == usage["prompt_tokens"] and t["cache_n"] == usage[
        "prompt_tokens_details"]["cached_tokens"]
    assert t["predicted_n"] == usage["completion_tokens"] == 6 and t["prompt_ms"] > 0 and t["predicted_ms"] > 0
    asked = post(served, "/v1/completions", prompt="The sea", max_tokens=4, temperature=0, per_request_metrics=True)
    m = asked["metrics"]
    assert set(m) == METRICS and all(isinstance(m[k], float) for k in METRICS)
    assert m["queue_time_ms"] >= 0 and m["time_to_first_token_ms"] == asked["timings"]["prompt_ms"]
    assert m["generation_time_ms"] == asked["timings"]["predicted_ms"]
    assert m["mean_itl_ms"] == pytest.approx(m["generation_time_ms"] / 3)


@pytest.mark.parametrize("include_usage", [True, False])
def test_a_stream_carries_the_figures_on_its_last_chunk_only(served, include_usage):
    """llama-server's `timings` on the last chunk; vLLM's `metrics` on the final usage chunk, shaped as vLLM's
    (tests/recorded.py), and none without `stream_options.include_usage`, as vLLM sends none."""
    chunks = events(served, "/v1/chat/completions", messages=QUESTION, max_tokens=5, temperature=0,
                    per_request_metrics=True, stream_options={"include_usage": include_usage})
    last = chunks[-1]
    assert [i for i, c in enumerate(chunks) if "timings" in c or "metrics" in c] == [len(chunks) - 1]
    assert last["timings"]["predicted_n"] == 5
    if include_usage:
        vllms = recorded.VLLM_USAGE_CHUNK_WITH_METRICS
        assert last["choices"] == vllms["choices"] == [] and set(vllms["usage"]) <= set(last["usage"])
        assert set(last["metrics"]) == set(vllms["metrics"]) == METRICS
    else:
        assert last["choices"][0]["finish_reason"] == "length" and "usage" not in last
        assert not any("metrics" in c for c in chunks)


def test_a_stop_string_counts_the_tokens_answered_not_those_made_after_it(served, tiny_onnx_engine):
    alone = tiny_onnx_engine.generate(QUESTION[0]["content"], GenerationSettings(max_new_tokens=12))
    stop = alone.steps[3].text
    assert stop, "the greedy answer's fourth token has text of its own"
    reply = post(served, "/v1/chat/completions", messages=QUESTION, max_tokens=12, temperature=0, stop=stop)
    assert reply["timings"]["predicted_n"] == reply["usage"]["completion_tokens"] < 12


def test_a_repeated_prompt_reports_its_cached_tokens_in_the_timings(served):
    prompt = "A long shared beginning for the prefix cache. " * 6 + "Then a question?"
    post(served, "/v1/completions", prompt=prompt, max_tokens=2, temperature=0)
    again = post(served, "/v1/completions", prompt=prompt, max_tokens=2, temperature=0)
    t = again["timings"]
    assert t["cache_n"] >= 16 and t["cache_n"] % 16 == 0 and t["prompt_n"] >= 1
    assert t["cache_n"] == again["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_the_endpoint_can_send_the_metrics_in_every_response_as_vllms_flag_does(tiny_onnx_engine, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_API_PER_REQUEST_METRICS", "1")
    assert ApiConfig.from_env().per_request_metrics
    monkeypatch.delenv("PLAYGROUND_API_PER_REQUEST_METRICS")
    assert not ApiConfig.from_env().per_request_metrics
    s = Served(tiny_onnx_engine, ApiConfig(keys=(KEY,), slots=1, capacity=256, per_request_metrics=True))
    try:
        assert set(post(s, "/v1/completions", prompt="Hi", max_tokens=2)["metrics"]) == METRICS
    finally:
        s.stop()


def test_per_request_metrics_must_be_true_or_false(served):
    r = httpx.post(served.url + "/v1/completions", json={"prompt": "Hi", "per_request_metrics": "yes"}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["param"] == "per_request_metrics"


# --- read back by the remote source

def test_the_remote_source_watching_the_endpoint_names_the_delivery_between_server_and_client(served):
    source = RemoteSource(served.url + "/v1", api_key=KEY, figure_interval=0)
    trace = source.run(QUESTION[0]["content"], GenerationSettings(max_new_tokens=4, temperature=0)).wait()
    m, t = trace.server["metrics"], trace.server["timings"]
    assert t["predicted_n"] == 4 and set(m) == METRICS
    client_ms = trace.steps[0].time * 1e3
    server_ms = m["queue_time_ms"] + m["time_to_first_token_ms"]
    # an order of events (the server's span lies inside the client's), not a speed bound; 1 ms for two clocks
    assert server_ms <= client_ms + 1.0
    line = delivery_line(trace)
    assert line in server_lines(trace)
    numbers = [int(x) for x in re.findall(r"(\d+) ms", line)]
    assert numbers[:2] == [round(client_ms), round(server_ms)] or "clocks disagree" in line
    if "delivery" in line:
        assert numbers[-1] == round(client_ms - server_ms)
