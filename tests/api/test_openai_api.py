"""The OpenAI-compatible endpoint (playground/api/) driven by real clients: the official `openai` SDK, raw
HTTP (httpx) and this project's own RemoteSource, against the routes served by uvicorn on 127.0.0.1 over
the tiny model on ONNX Runtime -- failure cases first, then answers, batching, disconnects and the record."""
from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import uvicorn
from fastapi import FastAPI

from playground.api import ApiConfig, ApiLimits, ApiService, ClientTraffic, api_routes
from playground.serve.traffic import endpoint_text
from playground.config import GenerationSettings
from playground.remote.source import RemoteSource
from playground.serve.room import Room
from tests.helpers import free_port, wait_for

KEY = "test-key-7f3a"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


class Served:
    """An ApiService's routes served by uvicorn in a thread; `.url` is http://127.0.0.1:<port>."""

    def __init__(self, engine, config: ApiConfig):
        self.traffic = ClientTraffic()
        self.room = Room(lambda: engine, engine.info.name, config.loop_size, traffic=self.traffic)
        self.service = ApiService(self.room, config)
        self.room.start_loading()
        self.port = free_port()
        app = FastAPI(routes=api_routes(self.service), debug=True)   # as Gradio builds its app: tracebacks on
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1",
                                                    port=self.port, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not (self.server.started and self.service.engine_loop) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.service.engine_loop is not None, self.service.error
        self.url = f"http://127.0.0.1:{self.port}"

    def sdk(self, key: str = KEY, **kwargs) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=60, **kwargs)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.room.close()


@pytest.fixture(scope="module")
def served(tiny_onnx_engine):
    s = Served(tiny_onnx_engine, ApiConfig(keys=(KEY,), slots=4, capacity=512))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def strict(tiny_onnx_engine):
    """A second endpoint with small limits: one request in flight per client, 400 tokens a minute; no prefix cache."""
    limits = ApiLimits(in_flight_per_client=1, max_tokens=64, prompt_tokens=200, tokens_per_minute=400)
    s = Served(tiny_onnx_engine, ApiConfig(limits=limits, slots=2, capacity=512, prefix_cache=0))
    yield s
    s.stop()


def settle(loop, timeout: float = 10.0) -> None:
    """Wait until the engine loop holds no request (every slot free)."""
    deadline = time.monotonic() + timeout
    while (loop.in_flight() or loop.batcher.busy()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not loop.in_flight() and not loop.batcher.busy() and not loop.batcher.holders()


# --- errors, in OpenAI's shape

def test_a_missing_or_wrong_key_is_401_in_openais_shape_saying_which(served):
    """A wrong key was told, and recorded, as "no key"."""
    with pytest.raises(openai.AuthenticationError) as caught:
        served.sdk("wrong").chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
    assert caught.value.status_code == 401 and caught.value.body["code"] == "invalid_api_key"
    assert caught.value.body["message"].startswith("the API key sent is not one of this server's")
    r = httpx.post(served.url + "/v1/completions", json={"prompt": "Hi"})
    assert r.status_code == 401 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert r.json()["error"]["message"].startswith("no API key was sent")
    assert KEY not in r.text
    assert [x.words for x in served.traffic.refusals[-2:]] == ["wrong key", "no key"]   # the Watch view's words


def test_bad_input_is_400_naming_the_field(served):
    sdk = served.sdk()
    for kwargs, param in [(dict(temperature=9), "temperature"), (dict(messages=[]), "messages"),
                          (dict(n=2), "n"), (dict(stop=["a", "b", "c", "d", "e"]), "stop"),
                          (dict(top_logprobs=3), "top_logprobs"), (dict(extra_body={"priority": -1}), "priority"),
                          (dict(extra_body={"priority": True}), "priority"),
                          (dict(extra_body={"priority": 101}), "priority")]:
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.chat.completions.create(**{"model": "m", "messages": QUESTION, "max_tokens": 2, **kwargs})
        assert caught.value.body["param"] == param, kwargs
    r = httpx.post(served.url + "/v1/chat/completions", content=b"{not json", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_a_prompt_over_the_context_window_is_400_context_length_exceeded(served):
    with pytest.raises(openai.BadRequestError) as caught:
        served.sdk().completions.create(model="m", prompt="word " * 600, max_tokens=4)
    assert caught.value.body["code"] == "context_length_exceeded" and "512" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError) as caught:   # fits, but not with its max_tokens
        served.sdk().completions.create(model="m", prompt=[5] * 500, max_tokens=64)
    assert caught.value.body["code"] == "context_length_exceeded"


def test_over_the_limits_is_400_per_request_and_429_with_retry_after_per_client(strict):
    sdk = strict.sdk("no key needed here")
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.completions.create(model="m", prompt="Hi", max_tokens=65)
    assert caught.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError):
        sdk.completions.create(model="m", prompt=[7] * 201, max_tokens=4)
    # one request in flight per client: a second at the same time is refused
    first = sdk.completions.create(model="m", prompt="Hi", max_tokens=60, stream=True, extra_body={"ignore_eos": True})
    next(iter(first))
    with pytest.raises(openai.RateLimitError) as caught:
        sdk.completions.create(model="m", prompt="Hi", max_tokens=4)
    assert caught.value.response.headers["retry-after"] == "1"
    first.close()
    settle(strict.service.engine_loop)
    # tokens per minute: what is left of this minute's 400 cannot hold 60 more new tokens and a prompt
    sdk.completions.create(model="m", prompt=[7] * 100, max_tokens=60, extra_body={"ignore_eos": True})
    with pytest.raises(openai.RateLimitError) as caught:
        sdk.completions.create(model="m", prompt=[7] * 190, max_tokens=60)
    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 60
    assert "tokens per minute" in caught.value.body["message"]


def test_503_with_retry_after_while_the_model_loads():
    release = threading.Event()
    service = ApiService(Room(lambda: release.wait(30) and None, "onnx"))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(FastAPI(routes=api_routes(service)), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "Hi"})
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        release.set()   # the "engine" turns out to be None: the load fails, and says so
        service.room._loading.join(5)
        r = httpx.get(f"http://127.0.0.1:{port}/v1/models")
        assert r.status_code == 503 and "failed to load" in r.json()["error"]["message"]
    finally:
        server.should_exit = True
        thread.join(10)


# --- answers

def test_models_lists_the_engines_model(served):
    models = served.sdk().models.list().data
    assert [m.id for m in models] == ["tiny-random-llama"] and models[0].owned_by == "playground"


def test_chat_whole_and_streamed_give_the_engines_greedy_answer(served, tiny_onnx_engine):
    alone = tiny_onnx_engine.generate(QUESTION[0]["content"], GenerationSettings(max_new_tokens=8))
    sdk = served.sdk()
    whole = sdk.chat.completions.create(model="any", messages=QUESTION, max_tokens=8, temperature=0)
    assert whole.choices[0].message.content == alone.text and whole.choices[0].finish_reason == "length"
    assert whole.usage.prompt_tokens == len(alone.prompt_ids) and whole.usage.completion_tokens == 8
    chunks = list(sdk.chat.completions.create(model="any", messages=QUESTION, max_tokens=8, temperature=0,
                                              stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == alone.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8


# a system prompt of ~150 tokens on the tiny model: several blocks of 16, found by no other test of this module
SYSTEM = ("You answer for the harbour office of a small island. Ferries leave at seven, noon and five; the last "
          "one waits for the mail boat. Tickets are sold on board, cash or card. Bicycles travel free, dogs on a "
          "lead. In a storm the office posts a notice by the pier and on the radio at the hour. " * 2)


def ask_with_system(question: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def test_a_prompt_that_begins_as_an_earlier_one_reports_cached_tokens_and_answers_as_cold(served, tiny_onnx_engine):
    sdk, greedy = served.sdk(), dict(model="m", max_tokens=8, temperature=0)
    first = sdk.chat.completions.create(messages=ask_with_system("When is the first ferry?"), **greedy)
    assert first.usage.prompt_tokens_details.cached_tokens == 0   # nothing began this way before
    question = "Can I bring my dog?"
    cold = tiny_onnx_engine.generate(question, GenerationSettings(max_new_tokens=8, system_prompt=SYSTEM))
    chunks = list(sdk.chat.completions.create(messages=ask_with_system(question), stream=True,
                                              stream_options={"include_usage": True}, **greedy))
    usage = chunks[-1].usage
    cached = usage.prompt_tokens_details.cached_tokens
    assert usage.prompt_tokens == len(cold.prompt_ids) and 4 * 16 <= cached < usage.prompt_tokens and cached % 16 == 0
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == cold.text
    whole = sdk.chat.completions.create(messages=ask_with_system(question), **greedy)   # all of it now, but its tail
    assert whole.choices[0].message.content == cold.text
    assert cached < whole.usage.prompt_tokens_details.cached_tokens < whole.usage.prompt_tokens
    models = httpx.get(served.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()
    positions = served.service.engine_loop.batcher.cache.capacity * 16   # sized from the memory available at load
    assert models["data"][0]["meta"]["prefix_cache_positions"] == positions and positions > 4096
    assert f"Prefix caching on: {positions:,} positions" in endpoint_text(served.traffic.endpoint)


def test_without_a_prefix_cache_no_prompt_token_is_cached(strict):
    sdk = strict.sdk("no key needed here")
    for _ in range(2):
        reply = sdk.completions.create(model="m", prompt=[9] * 80, max_tokens=2, temperature=0)
        assert reply.usage.prompt_tokens_details.cached_tokens == 0
    assert "Prefix caching off" in endpoint_text(strict.traffic.endpoint)


def test_the_prefix_cache_setting_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("PLAYGROUND_API_PREFIX_CACHE", raising=False)
    assert ApiConfig.from_env().prefix_cache is None   # unset: sized from the memory available when the model loads
    monkeypatch.setenv("PLAYGROUND_API_PREFIX_CACHE", "4096")
    assert ApiConfig.from_env().prefix_cache == 4096
    monkeypatch.setenv("PLAYGROUND_API_PREFIX_CACHE", "0")
    assert ApiConfig.from_env().prefix_cache == 0
    monkeypatch.setenv("PLAYGROUND_API_PREFIX_CACHE", "lots")
    with pytest.raises(ValueError, match="PLAYGROUND_API_PREFIX_CACHE"):
        ApiConfig.from_env()


def test_an_unset_prefix_cache_is_sized_from_the_memory_the_kv_slots_leave(monkeypatch, tiny_onnx_engine):
    from types import SimpleNamespace

    from playground.backends.onnx_batch import position_bytes
    from playground.serve import room
    backend, each = tiny_onnx_engine.backend, position_bytes(tiny_onnx_engine.backend)
    monkeypatch.setattr(room.psutil, "virtual_memory", lambda: SimpleNamespace(available=64 * 2**20))
    sized = room.loop_cache(None, 4 * 512, backend)
    assert sized == room.cache_positions(each, 64 * 2**20, 4 * 512 * each) and sized % 16 == 0
    assert (64 * 2**20 - 4 * 512 * each) // 4 - 16 * each < sized * each <= (64 * 2**20 - 4 * 512 * each) // 4
    assert room.loop_cache(4096, 4 * 512, backend) == 4096 and room.loop_cache(0, 4 * 512, backend) == 0


def test_the_stream_ends_with_done_as_server_sent_events(served):
    with httpx.stream("POST", served.url + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                      json={"prompt": "Hi", "max_tokens": 3, "stream": True, "temperature": 0}) as r:
        lines = [line for line in r.iter_lines() if line]
    assert r.headers["content-type"].startswith("text/event-stream")
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][6:])["choices"][0]["finish_reason"] == "length"


def test_logprobs_are_the_steps_probabilities(served, tiny_onnx_engine):
    import math
    alone = tiny_onnx_engine.generate(QUESTION[0]["content"], GenerationSettings(max_new_tokens=4, top_candidates=3))
    reply = served.sdk().chat.completions.create(model="m", messages=QUESTION, max_tokens=4, temperature=0,
                                                 logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert len(content) == 4
    for entry, step in zip(content, alone.steps):
        assert entry.logprob == pytest.approx(math.log(step.prob), abs=1e-5)
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx([math.log(c.prob) for c in step.top], abs=1e-5)
        assert entry.model_extra["id"] == step.token_id
    legacy = served.sdk().completions.create(model="m", prompt="Hi", max_tokens=3, temperature=0, logprobs=2)
    lp = legacy.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == 3 and all(len(t) <= 2 for t in lp.top_logprobs)


def test_a_stop_string_ends_the_answer_before_it(served, tiny_onnx_engine):
    alone = tiny_onnx_engine.generate("Hi", GenerationSettings(max_new_tokens=12, chat=False)).text
    stop = alone[4:6] if len(alone) > 6 else alone[-1:]
    cut = alone[:alone.index(stop)]
    sdk = served.sdk()
    whole = sdk.completions.create(model="m", prompt="Hi", max_tokens=12, temperature=0, stop=stop)
    assert whole.choices[0].text == cut and whole.choices[0].finish_reason == "stop"
    streamed = sdk.completions.create(model="m", prompt="Hi", max_tokens=12, temperature=0, stop=[stop], stream=True)
    assert "".join(c.choices[0].text for c in streamed) == cut


def test_seeded_sampling_repeats(served):
    sdk = served.sdk()
    ask = dict(model="m", prompt="Once upon a time", max_tokens=10, temperature=1.0, top_p=0.9, seed=11)
    assert sdk.completions.create(**ask).choices[0].text == sdk.completions.create(**ask).choices[0].text


def test_tokenize_has_llama_cpps_shape(served, tiny_onnx_engine):
    r = httpx.post(served.url + "/tokenize", json={"content": "Hello world"}, headers={"Authorization": f"Bearer {KEY}"})
    assert r.json() == {"tokens": tiny_onnx_engine.encode("Hello world")}


# --- batching, disconnects, the playground watching itself

def test_concurrent_sdk_clients_are_batched_together(served, monkeypatch):
    """Four clients at once share the loop's passes. The loop takes its first pass once all four have arrived,
    as a busy server would: the test does not depend on how fast the machine sends them."""
    sdk = served.sdk()
    loop = served.service.engine_loop
    settle(loop)
    before = len(served.traffic.snapshot().records)
    step, arrived = loop.batcher.step, threading.Event()

    def step_once_all_four_are_in():
        if not arrived.is_set():
            wait_for(lambda: loop.in_flight() >= 4, timeout=60, message="the four requests to reach the loop")
            arrived.set()
        return step()
    monkeypatch.setattr(loop.batcher, "step", step_once_all_four_are_in)

    def ask(i):
        stream = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": f"Count to {i}"}],
                                             max_tokens=24, temperature=0, stream=True, extra_body={"ignore_eos": True})
        return sum(1 for c in stream if c.choices and c.choices[0].delta.content is not None)
    with ThreadPoolExecutor(4) as pool:
        assert all(n > 0 for n in pool.map(ask, range(4)))
    record = served.traffic.snapshot()
    mine = record.records[before:]
    assert len(mine) == 4 and all(r.output_tokens == 24 and r.stop_reason == "length" for r in mine)
    assert max(s.rows for r in mine for s in r.steps) > 1                    # a decode step carried several
    spans = [(r.first_token, r.last_token) for r in mine]
    assert sum(a < max(b for _, b in spans) and b > min(x for x, _ in spans) for a, b in spans) > 1   # they overlap
    assert max(b.decode_tokens for b in record.batches) > 1


def test_a_client_that_disconnects_mid_stream_frees_its_slot(served):
    loop = served.service.engine_loop
    settle(loop)
    before = len(served.traffic.snapshot().records)
    with httpx.stream("POST", served.url + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                      json={"prompt": "Hi", "max_tokens": 480, "stream": True, "ignore_eos": True}) as r:
        lines = r.iter_lines()
        for _ in range(3):
            next(lines)
    # the connection is closed here, mid-answer
    settle(loop, timeout=5)
    record = served.traffic.snapshot().records[before]
    assert record.stop_reason == "cancelled" and record.output_tokens < 480


def test_the_playgrounds_remote_source_watching_itself_gives_the_engines_tokens(served, tiny_onnx_engine):
    source = RemoteSource(served.url + "/v1", api_key=KEY, figure_interval=0)
    assert source.kind.name == "playground" and source.info.context_window == 512
    settings = GenerationSettings(max_new_tokens=10, temperature=0)
    remote = source.run(QUESTION[0]["content"], settings).wait()
    alone = tiny_onnx_engine.generate(QUESTION[0]["content"], settings)
    assert remote.output_ids == alone.output_ids and remote.prompt_ids == alone.prompt_ids
    assert remote.server.get("warnings") is None
    ids = tiny_onnx_engine.encode("The sea and the wind")
    exact = source.run_ids(ids, GenerationSettings(max_new_tokens=6), ignore_eos=True).wait()
    assert exact.output_ids == tiny_onnx_engine.run_ids(ids, GenerationSettings(max_new_tokens=6),
                                                        ignore_eos=True).wait().output_ids


def test_a_yielding_source_sends_its_priority_to_the_batcher_on_every_route(served):
    """RemoteSource.yielding(1) (an attendee's Serve run in a served room) sends vLLM's `priority: 1`; the endpoint
    queues the request with it (serve/plan.py then reads it after priority 0), on chat, completions, responses
    and messages alike; a plain request is queued with 0."""
    batcher = served.service.engine_loop.batcher
    add, seen = batcher.add, []

    def add_seeing(*args, **kwargs):
        seen.append(kwargs.get("priority"))
        return add(*args, **kwargs)

    batcher.add = add_seeing
    try:
        source = RemoteSource(served.url + "/v1", api_key=KEY, figure_interval=0)
        settings = GenerationSettings(max_new_tokens=3, temperature=0)
        source.yielding(1).run("Hi", settings).wait()
        source.run("Hi", settings).wait()
        assert source.priority == 0 and seen == [1, 0]
        headers = {"Authorization": f"Bearer {KEY}"}
        for path, body in [("/v1/completions", {"prompt": "Hi"}),
                           ("/v1/responses", {"input": "Hi", "max_output_tokens": 3}),
                           ("/v1/messages", {"messages": QUESTION, "max_tokens": 3})]:
            r = httpx.post(served.url + path, json={"model": "m", "max_tokens": 3, **body, "priority": 2},
                           headers=headers, timeout=60)
            assert r.status_code == 200, (path, r.text)
        assert seen == [1, 0, 2, 2, 2]
    finally:
        batcher.add = add
    with pytest.raises(ValueError, match="1 or more"):
        source.yielding(0)


def test_the_record_is_a_workload_the_serve_summary_reads_and_keeps_no_prompt(served):
    from playground.serve.summary import summarize
    record = served.traffic.snapshot()
    assert record.records and all(r.request.prompt == "" and (r.trace is None or r.trace.prompt == "")
                                  for r in record.records)
    stats = summarize(record)["classes"]["short"]
    assert stats["served"] >= 4 and stats["ttft_p50"] > 0
    assert record.pool["slots"] == 4 and record.slot_map and record.kv_unit == "bytes"


def test_the_record_keeps_the_clients_x_request_id_and_when_the_route_received_it(served, caplog):
    rid = "bench-7c1e-0042"
    caplog.set_level("DEBUG")
    before = time.time_ns()
    with httpx.stream("POST", served.url + "/v1/chat/completions", json={
            "messages": QUESTION, "max_tokens": 3, "stream": True, "temperature": 0},
            headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": rid}) as r:
        assert [line for line in r.iter_lines() if line][-1] == "data: [DONE]"
    traces = [x.trace for x in served.traffic.snapshot().records if x.trace and x.trace.server.get("x_request_id") == rid]
    assert len(traces) == 1
    trace = traces[0]
    # timing: an order of events (sent, received, first step, now), not a speed bound
    assert before <= trace.server["received_ns"] <= trace.steps[0].wall_ns <= time.time_ns()
    assert len(trace.steps) == 3 and rid not in caplog.text   # kept on the record, never logged
    anonymous = served.sdk().chat.completions.create(model="m", messages=QUESTION, max_tokens=1)
    assert anonymous.choices   # without the header the record just has no x_request_id
    last = served.traffic.snapshot().records[-1].trace
    assert "received_ns" in last.server and "x_request_id" not in last.server


class CountedWake(threading.Event):
    """The engine loop's wake-up event, counting the loop's waits: each follows a look that found no work."""

    def __init__(self):
        super().__init__()
        self.waits = 0

    def wait(self, timeout=None):
        self.waits += 1
        return super().wait(timeout)


def test_the_idle_loop_does_not_step(served):
    """Woken three times with nothing to do, the loop looks, finds no work and waits again: no iteration."""
    loop = served.service.engine_loop
    settle(loop)
    before, idle, wake = loop.iterations, loop._wake, CountedWake()
    loop._wake = wake
    try:
        idle.set()   # out of the wait it is in, onto the counted event
        for _ in range(3):
            waits = wake.waits
            wake.set()
            wait_for(lambda: wake.waits > waits, timeout=30, message="the idle loop to look for work again")
        assert loop.iterations == before and loop._thread.is_alive()
    finally:
        loop._wake = idle
        wake.set()


# --- the app itself: `python app.py --openai-api`, the endpoint on the page's own port

@pytest.mark.subprocess
def test_the_app_started_with_the_flag_serves_the_endpoint_beside_the_page(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path
    port, secret_prompt = free_port(), "my secret question about the harbour"
    env = {**os.environ, "PLAYGROUND_API_KEYS": f"other,{KEY}", "PLAYGROUND_API_LIMITS": "max_tokens=16"}
    env.pop("PLAYGROUND_OPENAI_API", None)
    log = tmp_path / "app.log"
    with open(log, "w") as out:
        app = subprocess.Popen([sys.executable, "app.py", "--model", "tiny", "--backend", "onnx", "--openai-api",
                                "--port", str(port)], cwd=Path(__file__).resolve().parents[2], env=env,
                               stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        status = None
        while time.monotonic() < deadline and status != 200:
            assert app.poll() is None, log.read_text()
            try:
                status = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        assert status == 200, log.read_text()
        sdk = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60)
        stream = sdk.chat.completions.create(model="tiny-random-llama", stream=True, max_tokens=6, temperature=0,
                                             messages=[{"role": "user", "content": secret_prompt}])
        assert sum(1 for c in stream if c.choices and c.choices[0].delta.content) == 6
        with pytest.raises(openai.BadRequestError):   # PLAYGROUND_API_LIMITS reached the endpoint
            sdk.completions.create(model="m", prompt="Hi", max_tokens=17)
        assert httpx.get(url + "/").status_code == 200   # the page, on the same port
    finally:
        app.terminate()
        app.wait(20)
    text = log.read_text()
    assert KEY not in text and secret_prompt not in text


def test_the_endpoint_is_off_unless_the_flag_or_the_env_var_asks_for_it(monkeypatch):
    import app
    monkeypatch.delenv("PLAYGROUND_OPENAI_API", raising=False)
    assert app.parse_args(["--openai-api"]).openai_api and not app.parse_args([]).openai_api
    registry = app.make_registry("tiny", "onnx")
    assert not app.openai_api_wanted() and app.openai_api_wanted(True)
    assert [r.path for r in app.launch_kwargs(registry)["app_kwargs"]["routes"]] == ["/playground/live/{run_id}"]
    monkeypatch.setenv("PLAYGROUND_OPENAI_API", "1")
    assert app.openai_api_wanted()
    paths = [r.path for r in app.launch_kwargs(registry, app.ClientTraffic())["app_kwargs"]["routes"]]
    assert paths[:3] == ["/v1/chat/completions", "/v1/completions", "/v1/models"]
    assert paths[-1] == "/playground/live/{run_id}"
    traffic, config = app.serve_the_endpoint(registry, 7999)
    assert app.SELF_SOURCE in registry.names and config.presenter_key and config.presenter_key not in repr(config)
    assert app.make_room(registry, traffic, config).loop_sources == {app.SELF_SOURCE}   # a Serve run on it joins
    assert app.make_room(app.make_registry("tiny", "onnx")).loop_sources == set()
    registry.close()


def watched_values(frames: list) -> list:
    """Each output's latest value over the Watch view's frames as Gradio's client gives them (an output a frame
    leaves out, unchanged or a chart between draws, comes as a bare update).

    >>> watched_values([["a", {"plot": "1"}, "c"], ["b", {"__type__": "update"}, {"props": {}, "__type__": "update"}]])
    ['b', {'plot': '1'}, 'c']
    """
    def left_out(value) -> bool:
        return isinstance(value, dict) and value.get("__type__") == "update" and "value" not in value
    latest = list(frames[0])
    for frame in frames[1:]:
        latest = [old if left_out(new) else new for old, new in zip(latest, frame)]
    return latest


@pytest.mark.slow
def test_the_serve_tab_draws_the_clients_requests_live(served):
    """Watching counts from its own start: a request from before it is left out, one sent after it is drawn
    from t = 0 (not from when the record started), and a refused one is listed with its status and reason."""
    from gradio_client import Client

    from playground.ui import build_demo
    served.sdk().chat.completions.create(model="any", messages=QUESTION, max_tokens=5)   # before watching
    demo = build_demo(served.service.engine_loop.engine, served.room)
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1",
                                    quiet=True)
    try:
        client = Client(url, verbose=False)
        watched_at = time.monotonic()
        job = client.submit(api_name="/serve_watch")
        wait_until = time.monotonic() + 60
        while not job.outputs() and time.monotonic() < wait_until:
            time.sleep(0.1)
        served.sdk().chat.completions.create(model="any", messages=QUESTION, max_tokens=5)
        with pytest.raises(openai.AuthenticationError):
            served.sdk(key="wrong").chat.completions.create(model="any", messages=QUESTION, max_tokens=5)
        def drawn():   # each output's latest value: a frame leaves out what has not changed, a chart between draws
            return watched_values(job.outputs())

        def whole(values) -> bool:   # the map and the table follow the timeline of their drawing by a frame each
            return ("1 admitted" in values[1] and '"decode"' in values[2]["plot"] and '"toself"' in values[3]["plot"]
                    and bool(values[4]["value"]["data"]))
        while not whole(drawn()) and time.monotonic() < wait_until:
            time.sleep(0.1)
        limits, status, gantt, kv_map, classes, refused, shares = drawn()[:7]
        job.cancel()
        watched_for = time.monotonic() - watched_at
    finally:
        demo.close()
    assert "in flight" in limits and "context 512 tokens" in limits
    assert "since you started watching" in status and "1 admitted" in status and "0 running" in status
    assert "1 refused: 401" in status
    figure = json.loads(gantt["plot"])
    decode = [trace for trace in figure["data"] if trace.get("name") == "decode"]
    # timing: an order of events: the watch started after watched_at, so what it drew began less than watched_for ago
    assert len(decode) == 1 and 0 <= decode[0]["base"][0] < watched_for   # from the watch's start, not the record's
    assert figure["layout"]["xaxis"]["title"]["text"] == "seconds since you started watching"
    assert any(trace.get("fill") == "toself" for trace in json.loads(kv_map["plot"])["data"])
    assert json.loads(kv_map["plot"])["layout"]["xaxis"]["range"] == figure["layout"]["xaxis"]["range"]   # one axis
    assert classes["value"]["data"][0][0] == "short"
    assert "<td>401</td>" in refused   # the refusals table (HTML: every row drawn)
    assert "refused 401 (wrong key)" in [trace.get("name") for trace in figure["data"]]   # not "(no key)"
    assert figure["layout"]["title"]["text"].endswith("(none running now)")   # 0 running: not "(running…)"
    assert "<td>1 done</td>" in shares and "<td>unnamed (API)</td><td>1 refused</td>" in shares   # a 401 names no one


def test_the_presenters_workload_joins_the_clients_batch_without_their_limits(tiny_onnx_engine):
    from playground.api import ApiLimits
    from playground.api.limits import PRESENTER, Guard
    from playground.serve import SCHEDULERS, RequestClass, Workload

    config = ApiConfig(keys=(KEY,), limits=ApiLimits(in_flight_per_client=1), slots=4, capacity=512,
                       presenter_key="presenter-key-9c1")
    guard = Guard(config)
    assert guard.client("Bearer presenter-key-9c1", "127.0.0.1") == PRESENTER
    assert guard.client(f"Bearer {KEY}", "127.0.0.1") == "client 1"
    held = [guard.admit(PRESENTER, 10) for _ in range(3)]   # over the per-client limit: still admitted
    held.append(guard.admit("client 1", 10))
    with pytest.raises(Exception, match="in flight from this client"):   # an ordinary client: its limit of 1
        guard.admit("client 1", 10)
    for admission in held:
        guard.release(admission)
    s = Served(tiny_onnx_engine, config)
    loop = s.service.engine_loop
    step = loop.batcher.step

    def step_once_all_are_in():   # the HTTP requests reach the loop one by one: the first step waits for the four
        wait_for(lambda: len(loop.tickets) == 4, message="the four requests in the loop")
        loop.batcher.step = step
        return step()

    loop.batcher.step = step_once_all_are_in
    try:
        source = RemoteSource(s.url + "/v1", api_key="presenter-key-9c1")
        w = Workload.build([RequestClass("short", "What is the capital of France?", 12, 1.0)], 4)
        result = SCHEDULERS["concurrent"].create(source).run(w)
        assert all(r.stop_reason in ("eos", "length") for r in result.records)   # none refused with a 429
        record = s.traffic.snapshot()
        assert len(record.records) == 4 and max(b.decode_tokens for b in record.batches) > 1   # one batch
    finally:
        s.stop()


def test_the_app_with_the_endpoint_on_or_beyond_loopback_lets_only_the_presenter_take_the_machine(monkeypatch):
    """The room the app serves (the endpoint on, or a host beyond loopback) refuses a Serve run without the key
    PLAYGROUND_PRESENTER_KEY names; on this machine alone, with no endpoint, anyone at it may run one."""
    import app
    monkeypatch.setenv("PLAYGROUND_PRESENTER_KEY", "presenter-key-1")
    registry = app.make_registry("tiny", "onnx")
    try:
        _, served = app.make_app(registry, app.ClientTraffic(), None)
        assert served.served == "the OpenAI-compatible endpoint is on"
        assert served.alone_refused("") and served.alone_refused("client-key") and not served.alone_refused(
            "presenter-key-1")
        _, lan = app.make_app(registry, None, None, host="0.0.0.0")
        assert lan.served == "the page listens on 0.0.0.0" and lan.alone_refused(None)
        _, alone = app.make_app(registry, None, None)
        assert alone.served == "" and alone.alone_refused(None) == ""
    finally:
        registry.close()


def test_a_client_is_told_at_once_while_a_serve_run_holds_the_machine_alone(served):
    """An API stream sent while a Serve workload held the machine got its first token 46.5 s later, with no sign of
    the wait: while the machine is held alone, each route answers 429 with Retry-After at once (a stream before
    its first event), the refusal recorded with its reason; the machine released, the same request is served."""
    gate = served.service.room.gate
    assert gate.acquire_alone(timeout=30)
    try:
        for path, body in (("/v1/chat/completions", {"messages": QUESTION, "stream": True}),
                           ("/v1/completions", {"prompt": "Hi"})):
            r = httpx.post(served.url + path, json={"model": "m", "max_tokens": 2, **body},
                           headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
            assert r.status_code == 429 and r.headers["Retry-After"] == "5", (path, r.status_code, r.text)
            assert r.json()["error"]["code"] == "machine_held_alone"
        assert [x.words for x in served.traffic.refusals[-2:]] == ["machine held alone"] * 2
    finally:
        gate.release_alone()
    reply = served.sdk().chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
    assert reply.choices[0].message.content is not None


@pytest.mark.slow
def test_the_watch_view_says_the_machine_is_held_alone_and_for_how_long(served):
    """The Watch view showed nothing of a Serve run holding the machine: while one does, its status says so, with
    the seconds so far, and that a new API request is told at once; released, the line goes."""
    from gradio_client import Client

    from playground.ui import build_demo
    demo = build_demo(served.service.engine_loop.engine, served.room)
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1",
                                    quiet=True)
    gate = served.room.gate
    try:
        job = Client(url, verbose=False).submit(api_name="/serve_watch")
        assert gate.acquire_alone(timeout=30)
        try:
            wait_for(lambda: job.outputs() and "holds the machine alone" in watched_values(job.outputs())[1],
                     timeout=30, message="the Watch view to say the machine is held")
            assert re.search(r"holds the machine alone \([\d.]+ (ms|s) so far\)", watched_values(job.outputs())[1])
        finally:
            gate.release_alone()
        wait_for(lambda: "holds the machine alone" not in watched_values(job.outputs())[1], timeout=30,
                 message="the line to go once the machine is released")
        job.cancel()
    finally:
        demo.close()


@pytest.mark.parametrize("path, body, code", [
    ("/v1/chat/completions", {"messages": QUESTION, "max_tokens": 64, "ignore_eos": True},
     lambda r: r.json()["error"]["code"]),
    ("/v1/messages", {"messages": QUESTION, "max_tokens": 64}, lambda r: r.json()["error"]["type"])])
def test_a_whole_answer_in_the_loop_when_the_machine_is_taken_alone_gets_a_429(served, path, body, code):
    """A non-streaming request already in the loop when a Serve run took the machine alone waited in silence until
    the run ended: it has no event to be told with, so it is answered at the next check with the 429 a request
    arriving then gets (Retry-After), its request cancelled and its place given back, the refusal listed. Both CPU
    slots are held first, so the request waits in the loop, unanswered, when the hold begins."""
    gate, loop = served.room.gate, served.service.engine_loop
    settle(loop)
    taken = [gate.enter_shared(timeout=30) for _ in range(gate.slots)]   # the loop cannot step: the request waits
    replies, held = [], threading.Event()
    asking = threading.Thread(target=lambda: replies.append(httpx.post(
        served.url + path, json={"model": "m", **body}, timeout=120,
        headers={"Authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"})))
    holding = threading.Thread(target=lambda: held.set() if gate.acquire_alone(timeout=60) else None)
    try:
        assert all(taken)
        asking.start()
        wait_for(lambda: loop.in_flight() == 1, timeout=60, message="the request to be in the loop")
        holding.start()
        wait_for(lambda: gate.wanting == 1, timeout=30, message="the Serve run to ask for the machine")
        for _ in taken:
            gate.leave_shared()
        taken = []
        assert held.wait(timeout=60)
        asking.join(timeout=60)
        assert replies, "no answer while the machine is held alone"
        r = replies[0]
        assert r.status_code == 429 and r.headers["Retry-After"] == "5", (r.status_code, r.text)
        assert code(r) in ("machine_held_alone", "rate_limit_error"), r.text
        assert "held alone" in r.text and served.traffic.refusals[-1].words == "machine held alone"
    finally:
        for _ in taken:
            gate.leave_shared()
        holding.join(timeout=60)
        if gate.alone:
            gate.release_alone()
    settle(loop)   # the request was cancelled: its place in the loop and its client's are free
    assert loop.in_flight() == 0 and not loop.batcher.busy()
    reply = served.sdk().chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
    assert reply.choices[0].message.content is not None


def test_a_stream_waiting_while_the_machine_is_held_alone_is_told_why(served):
    """A stream already in the loop when a Serve run took the machine alone went silent after its role chunk: it
    now gets the documented wait event (an SSE comment every SDK skips) at each poll while the machine is held,
    then its tokens once released. In process: the presenter's own request is the one let in while it is held."""
    import asyncio

    from playground.api.limits import PRESENTER
    from playground.api.request_body import CHAT, read_body
    from playground.api.routes import POLL_S, _stream

    class Connected:   # the stream's request, as starlette gives it: its client never leaves
        async def is_disconnected(self):
            return False

    gate = served.room.gate
    assert gate.acquire_alone(timeout=30)
    served_request = served.service.open(read_body({"model": "m", "messages": QUESTION, "max_tokens": 3,
                                                    "stream": True}, CHAT), PRESENTER)
    events = []

    async def read():
        async for event in _stream(served_request, Connected()):
            events.append(event)
            if sum(e.startswith(": waiting: the machine is held alone") for e in events) == 2:
                gate.release_alone()   # told twice, then the machine is let go: the tokens follow

    try:
        asyncio.run(asyncio.wait_for(read(), timeout=60))
    finally:
        if gate.alone:
            gate.release_alone()
    waits = [i for i, e in enumerate(events) if e.startswith(":")]
    assert len(waits) == 2 and waits[0] == 1, events[:4]   # at once after the role chunk, at each POLL_S
    assert events[-1] == "data: [DONE]\n\n" and any('"content"' in e for e in events[waits[-1]:])
    assert POLL_S <= 1.0   # so a waiting client hears within a second


def test_a_stream_and_a_new_request_are_told_while_a_serve_run_waits_to_take_the_machine(served):
    """A Serve run that waits for the runs in progress to end before it takes the machine alone pauses the engine
    loop from the moment it asks: a stream in the loop hears the wait event naming it ("taking") at once, a request
    arriving then gets the 429 with Retry-After, and once the run has held and let go the tokens follow."""
    import asyncio

    from playground.api.errors import ApiError
    from playground.api.limits import PRESENTER
    from playground.api.request_body import CHAT, read_body
    from playground.api.routes import _stream

    class Connected:
        async def is_disconnected(self):
            return False

    gate = served.room.gate
    assert gate.enter_shared(timeout=30)   # a run in progress: the Serve run must wait for it
    taker = threading.Thread(target=lambda: gate.acquire_alone(timeout=60) and gate.release_alone())
    taker.start()
    try:
        while gate.paused() is None:
            time.sleep(0.01)
        body = {"model": "m", "messages": QUESTION, "max_tokens": 3, "stream": True}
        with pytest.raises(ApiError) as refused:
            served.service.open(read_body(body, CHAT), "someone")
        assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "5"}
        assert "a Serve run is taking the machine alone" in refused.value.message
        served_request = served.service.open(read_body(body, CHAT), PRESENTER)
        events = []

        async def read():
            async for event in _stream(served_request, Connected()):
                events.append(event)
                if sum(e.startswith(": waiting: a Serve run is taking the machine alone") for e in events) == 2 \
                        and gate.sharing:
                    gate.leave_shared()   # the run in progress ends: the Serve run takes the machine, then lets go

        asyncio.run(asyncio.wait_for(read(), timeout=120))
    finally:
        if gate.sharing and taker.is_alive():
            gate.leave_shared()
        taker.join(timeout=60)
    waits = [i for i, e in enumerate(events) if e.startswith(":")]
    assert waits and waits[0] == 1, events[:4]   # at once after the role chunk
    assert events[-1] == "data: [DONE]\n\n" and any('"content"' in e for e in events[waits[-1]:])
