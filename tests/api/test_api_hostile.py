"""The endpoint against a hostile client, served as Gradio serves it (FastAPI with debug=True, uvicorn on
127.0.0.1, the tiny model): bodies nested too deep, text no tokenizer reads, bodies too large, a route made to
fail -- each answered with OpenAI's error JSON, never a traceback, and the same keep-alive connection still
answers the next request. Then /health, /metrics (read by the project's own RemoteSource), the proxy's
X-Forwarded-For, a Hypothesis run of generated bodies and a load of misbehaving clients."""
from __future__ import annotations

import http.client
import json
import logging
import socket

import httpx
import pytest

from playground.api import ApiConfig, ApiLimits, ApiService, api_routes
from playground.api.limits import Guard
from playground.api.routes import MAX_JSON_DEPTH
from playground.serve.room import Room
from tests.api.test_openai_api import KEY, QUESTION, Served, settle

AUTH = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
CHAT = "/v1/chat/completions"
OK_BODY = json.dumps({"messages": QUESTION, "max_tokens": 2, "temperature": 0})


@pytest.fixture(scope="module")
def served(tiny_onnx_engine):
    s = Served(tiny_onnx_engine, ApiConfig(keys=(KEY,), slots=2, capacity=256,
                                           limits=ApiLimits(body_bytes=300_000, in_flight_per_client=16)))
    yield s
    s.stop()


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and 'File "' not in text and ".py" not in text, text[:400]


def openai_error(response_body: bytes, status: int) -> dict:
    error = json.loads(response_body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == ("server_error" if status >= 500 else "invalid_request_error")
    return error


class Connection:
    """One keep-alive HTTP/1.1 connection (http.client): `port()` tells whether a request reused it."""

    def __init__(self, served: Served):
        self.conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)

    def send(self, path: str, body: bytes | str, headers: dict = AUTH) -> tuple[int, bytes]:
        self.conn.request("POST", path, body=body, headers=headers)
        r = self.conn.getresponse()
        return r.status, r.read()

    def port(self) -> int | None:
        return self.conn.sock.getsockname()[1] if self.conn.sock else None


@pytest.mark.parametrize("name, body, param", [
    ("100,000 arrays deep", "[" * 100_000 + "]" * 100_000, None),
    ("a message nested past the limit", json.dumps({"messages": QUESTION, "x": json.loads(
        "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)}), None),
    ("a lone surrogate in a message", json.dumps({"messages": [{"role": "user", "content": "\ud800abc"}]}),
     "messages[0].content"),
])
def test_a_hostile_body_is_400_and_the_connection_serves_the_next_request(served, name, body, param):
    conn = Connection(served)
    status, answer = conn.send(CHAT, body)
    port = conn.port()
    assert status == 400, (name, answer[:300])
    error = openai_error(answer, status)
    assert error["param"] == param and (param or "nested too deeply" in error["message"])
    no_traceback(answer.decode())
    status, answer = conn.send(CHAT, OK_BODY)
    assert status == 200 and json.loads(answer)["choices"], answer[:300]
    assert port is not None and conn.port() == port   # the same keep-alive connection


@pytest.mark.parametrize("path, body, param", [
    ("/v1/completions", {"prompt": "Hi \udfff", "max_tokens": 2}, "prompt"),
    ("/v1/completions", {"prompt": "Hi", "stop": ["ok", "\ud83d"], "max_tokens": 2}, "stop"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a\udc80"}]}]}, "messages[0].content"),
    ("/tokenize", {"content": "\ud800"}, "content"),
    ("/apply-template", {"messages": [{"role": "system", "content": "\udbff"}]}, "messages[0].content"),
])
def test_text_a_tokenizer_cannot_read_is_400_naming_its_field(served, path, body, param):
    r = httpx.post(served.url + path, content=json.dumps(body), headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert "lone surrogate" in r.json()["error"]["message"]
    no_traceback(r.text)


RESPONSES, MESSAGES = "/v1/responses", "/v1/messages"
OK_TURNS = {RESPONSES: json.dumps({"input": "Hi", "max_output_tokens": 2}),
            MESSAGES: json.dumps({"messages": QUESTION, "max_tokens": 2})}


def agent_error(path: str, response_body: bytes, status: int) -> dict:
    """The error in the route's own shape: OpenAI's for /v1/responses, Anthropic's for /v1/messages."""
    if path == MESSAGES:
        body = json.loads(response_body)
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
        return body["error"]
    return openai_error(response_body, status)


@pytest.mark.parametrize("path, body, said", [
    (RESPONSES, "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (MESSAGES, "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (RESPONSES, json.dumps({"input": "\ud800abc"}), "lone surrogate"),
    (RESPONSES, json.dumps({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a\udc80"}]}]}),
     "lone surrogate"),
    (RESPONSES, json.dumps({"input": "Hi", "instructions": "\udfff"}), "lone surrogate"),
    (RESPONSES, json.dumps({"input": [{"type": "function_call_output", "call_id": "c", "output": "\ud800"}]}),
     "lone surrogate"),
    (MESSAGES, json.dumps({"max_tokens": 2, "messages": [{"role": "user", "content": "\ud800"}]}), "lone surrogate"),
    (MESSAGES, json.dumps({"max_tokens": 2, "system": "\udbff", "messages": QUESTION}), "lone surrogate"),
    (MESSAGES, json.dumps({"max_tokens": 2, "messages": QUESTION, "tools": [{"name": "f\ud800"}]}),
     "lone surrogate"),
    (MESSAGES, json.dumps({"max_tokens": 2, "messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "name": "f", "input": {"x": "\udc00"}}]}]}), "lone surrogate"),
])
def test_a_hostile_body_to_an_agent_route_is_400_in_its_shape_and_the_connection_stays(served, path, body, said):
    conn = Connection(served)
    status, answer = conn.send(path, body)
    port = conn.port()
    assert status == 400, answer[:300]
    assert said in agent_error(path, answer, status)["message"]
    no_traceback(answer.decode())
    status, answer = conn.send(path, OK_TURNS[path])
    assert status == 200 and json.loads(answer)["usage"], answer[:300]
    assert port is not None and conn.port() == port


@pytest.mark.parametrize("path", [RESPONSES, MESSAGES])
def test_a_body_over_the_limit_is_413_on_the_agent_routes_too(served, path):
    r = httpx.post(served.url + path, content=b'{"input": "' + b"a" * 400_000 + b'"}', headers=AUTH)
    assert r.status_code == 413
    assert "300,000 bytes" in agent_error(path, r.content, 413)["message"]


@pytest.mark.parametrize("path", [RESPONSES, MESSAGES])
def test_an_agent_route_that_fails_answers_500_with_an_incident_id(served, monkeypatch, path):
    def fail(*args, **kwargs):
        raise RuntimeError("something broke")
    monkeypatch.setattr(served.service, "open", fail)
    r = httpx.post(served.url + path, content=OK_TURNS[path], headers=AUTH)
    assert r.status_code == 500 and "incident" in agent_error(path, r.content, 500)["message"]
    no_traceback(r.text)


@pytest.mark.parametrize("path, terminal", [(RESPONSES, "response.failed"), (MESSAGES, "error")])
def test_an_agent_stream_that_fails_midway_still_ends_with_one_terminal_event(served, monkeypatch, path, terminal):
    from playground.api.messages import MessageWriter
    from playground.api.responses import ResponseWriter

    def fail(self):
        raise KeyError("a bug in the writer")
    monkeypatch.setattr(ResponseWriter if path == RESPONSES else MessageWriter, "text_start", fail)
    body = {**json.loads(OK_TURNS[path]), "stream": True}
    with httpx.stream("POST", served.url + path, headers=AUTH, json=body) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line[len("data: "):]) for line in lines]
    assert r.status_code == 200 and events[-1]["type"] == terminal, events[-2:]
    assert sum(e["type"] in ("response.completed", "response.failed", "response.incomplete", "message_stop",
                             "error") for e in events) == 1
    assert "incident" in json.dumps(events[-1])
    no_traceback("\n".join(lines))
    settle(served.service.engine_loop)


def test_the_pages_prompts_follow_the_same_rule(tiny_engine):
    from playground.config import GenerationSettings, check_text
    with pytest.raises(ValueError, match="prompt is not valid Unicode"):
        tiny_engine.run("broken \ud800", GenerationSettings(max_new_tokens=1))
    with pytest.raises(ValueError, match="system_prompt is not valid Unicode"):
        GenerationSettings(system_prompt="\udfffsystem").validate()
    with pytest.raises(ValueError, match="messages\\[0\\].content is not valid Unicode"):
        check_text("\ud800", "messages[0].content")


def test_nul_and_control_characters_are_text(served):
    reply = served.sdk().chat.completions.create(model="m", max_tokens=2, messages=[
        {"role": "user", "content": "nul \x00 bell \x07 escape \x1b[31m"}])
    assert reply.choices[0].finish_reason in ("stop", "length")


def test_a_body_over_the_limit_is_413_before_it_is_read_whole(served):
    big = b'{"prompt": "' + b"a" * 400_000 + b'"}'
    r = httpx.post(served.url + "/v1/completions", content=big, headers=AUTH)   # Content-Length says it
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    # no Content-Length: the body comes in chunks; the answer comes before the body is over
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                     + b"\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n")
        piece = b"a" * 16_384
        for _ in range(20):   # 320 KiB, over the 300 kB limit; the final 0-length chunk is never sent
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        head = sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    no_traceback(head.decode("latin-1"))
    assert httpx.post(served.url + CHAT, content=OK_BODY, headers=AUTH).status_code == 200


def test_a_prompt_that_cannot_fit_is_refused_before_it_is_templated_or_tokenized(served, monkeypatch):
    """150,000 one-letter messages took 20 s of the event loop to template and tokenize (every client's stream
    stalled meanwhile); the count and the characters alone show they cannot fit."""
    import playground.api.service as service_module
    tokenized = []
    real = service_module.rendered
    monkeypatch.setattr(service_module, "rendered", lambda *a: tokenized.append(1) or real(*a))
    many = {"messages": [{"role": "user", "content": "H"}] * 5_000, "max_tokens": 2}
    long = {"prompt": "word " * 20_000, "max_tokens": 2}
    for path, body, param in [(CHAT, many, "messages"), ("/v1/completions", long, "prompt"),
                              ("/apply-template", many, "messages")]:
        r = httpx.post(served.url + path, content=json.dumps(body), headers=AUTH)
        assert r.status_code == 400 and r.json()["error"]["code"] == "prompt_too_long", r.text
        assert r.json()["error"]["param"] == param
    r = httpx.post(served.url + "/tokenize", content=json.dumps({"content": "word " * 20_000}), headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["param"] == "content"
    assert tokenized == []
    assert httpx.post(served.url + CHAT, content=OK_BODY, headers=AUTH).status_code == 200 and tokenized == [1]


def test_a_route_that_fails_answers_500_with_an_incident_id_and_logs_no_prompt(served, monkeypatch, caplog):
    secret = "my secret prompt about the harbour"

    def fail(*args, **kwargs):
        raise RuntimeError(f"something broke while reading {secret}")
    monkeypatch.setattr(served.service, "open", fail)
    caplog.set_level(logging.ERROR, logger="playground.api.routes")
    conn = Connection(served)
    status, answer = conn.send(CHAT, json.dumps({"messages": [{"role": "user", "content": secret}]}))
    port = conn.port()
    assert status == 500, answer[:300]
    error = openai_error(answer, status)
    assert error["code"] == "internal_error"
    no_traceback(answer.decode())
    incident = error["message"].split("incident ")[1].split(":")[0]
    assert f"incident {incident}" in caplog.text and "RuntimeError" in caplog.text and "routes.py" in caplog.text
    assert secret not in caplog.text and secret not in answer.decode()
    monkeypatch.undo()
    status, answer = conn.send(CHAT, OK_BODY)
    assert status == 200 and conn.port() == port


def test_a_stream_that_fails_midway_ends_with_the_error_event(served, monkeypatch, caplog):
    from playground.api.response_body import Answer

    def fail(self, steps):
        raise KeyError("a bug in the chunker")
    monkeypatch.setattr(Answer, "chunks", fail)
    with httpx.stream("POST", served.url + CHAT, headers=AUTH, content=json.dumps(
            {"messages": QUESTION, "max_tokens": 4, "stream": True})) as r:
        lines = [line for line in r.iter_lines() if line]
    assert r.status_code == 200
    last = json.loads(lines[-1][len("data: "):])
    assert last["error"]["type"] == "server_error" and "incident" in last["error"]["message"]
    no_traceback("\n".join(lines))
    settle(served.service.engine_loop)


def test_the_openai_sdk_reads_each_refusal_as_its_error(served, monkeypatch):
    import openai
    sdk = served.sdk()
    deep = json.loads("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)   # (the SDK cannot send a lone surrogate)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model="m", max_tokens=2, messages=QUESTION, extra_body={"x": deep})
    assert caught.value.body["code"] == "json_too_deep"
    with pytest.raises(openai.APIStatusError) as caught:
        sdk.completions.create(model="m", max_tokens=2, prompt="word " * 70_000)
    assert caught.value.status_code == 413 and caught.value.body["code"] == "request_too_large"
    monkeypatch.setattr(served.service, "loop", lambda: 1 / 0)   # /v1/models asks it first
    with pytest.raises(openai.InternalServerError) as caught:
        sdk.models.list()
    assert caught.value.body["code"] == "internal_error" and "incident" in caught.value.body["message"]


def test_health_is_503_while_loading_then_200_without_a_key(tiny_onnx_engine):
    import threading
    import time

    import uvicorn
    from fastapi import FastAPI

    from tests.helpers import free_port
    release = threading.Event()
    service = ApiService(Room(lambda: release.wait(30) and tiny_onnx_engine, "onnx"), ApiConfig(keys=(KEY,)))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(FastAPI(routes=api_routes(service), debug=True), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        r = httpx.get(f"http://127.0.0.1:{port}/health")
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        release.set()
        service.room._loading.join(30)
        r = httpx.get(f"http://127.0.0.1:{port}/health")
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 401   # the figures need the key
    finally:
        server.should_exit = True
        thread.join(10)
        service.room.close()


def test_metrics_are_prometheus_text_under_vllms_names(served):
    from prometheus_client.parser import text_string_to_metric_families
    sdk = served.sdk()
    sdk.chat.completions.create(model="m", messages=QUESTION, max_tokens=5, temperature=0,
                                extra_body={"ignore_eos": True})
    r = httpx.get(served.url + "/metrics", headers=AUTH)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, s.labels.get("le")): s.value for f in text_string_to_metric_families(r.text)
               for s in f.samples if s.labels.get("model_name") == "tiny-random-llama"}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert (name, None) in samples
    assert samples[("vllm:prompt_tokens_total", None)] > 0 and samples[("vllm:generation_tokens_total", None)] >= 5
    assert samples[("vllm:time_to_first_token_seconds_count", None)] >= 1
    assert samples[("vllm:inter_token_latency_seconds_count", None)] >= 4
    assert samples[("vllm:e2e_request_latency_seconds_count", None)] >= 1
    sdk.chat.completions.create(model="m", messages=QUESTION, max_tokens=2, temperature=0)   # the same prompt again
    r = httpx.get(served.url + "/metrics", headers=AUTH)
    again = {s.name: s.value for f in text_string_to_metric_families(r.text) for s in f.samples}
    assert 0 < again["vllm:prefix_cache_hits_total"] < again["vllm:prefix_cache_queries_total"]


def test_metrics_carry_opentelemetrys_genai_names_beside_vllms(served):
    from prometheus_client.parser import text_string_to_metric_families

    def scrape() -> tuple[dict, dict]:   # (families by name, sample values by name and labels, buckets left out)
        families = {f.name: f for f in text_string_to_metric_families(httpx.get(served.url + "/metrics",
                                                                                headers=AUTH).text)}
        return families, {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values()
                          for s in f.samples if "le" not in s.labels}
    sdk = served.sdk()
    _, before = scrape()   # the server is shared with the module's other tests: compare what these requests add
    sdk.chat.completions.create(model="m", messages=QUESTION, max_tokens=5, temperature=0,
                                extra_body={"ignore_eos": True})
    sdk.completions.create(model="m", prompt="The capital of France", max_tokens=3, temperature=0,
                           extra_body={"ignore_eos": True})
    families, after = scrape()
    added = lambda name, *labels: after[name, tuple(sorted(labels))] - before.get((name, tuple(sorted(labels))), 0)  # noqa: E731
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"
    for name in ("gen_ai_server_time_to_first_token_seconds", "gen_ai_server_time_per_output_token_seconds",
                 "gen_ai_server_request_duration_seconds", "gen_ai_client_token_usage"):
        assert families[name].type == "histogram", name
    model, vllm = ("gen_ai_response_model", "tiny-random-llama"), ("model_name", "tiny-random-llama")
    provider, no_error = ("gen_ai_provider_name", "playground"), ("error_type", "")
    chat = (("gen_ai_operation_name", "chat"), provider, model)
    completion = (("gen_ai_operation_name", "text_completion"), provider, model)
    for labels in (chat, completion):
        for name in ("gen_ai_server_time_to_first_token_seconds", "gen_ai_server_time_per_output_token_seconds"):
            assert added(f"{name}_count", *labels) == 1, name
        assert added("gen_ai_server_request_duration_seconds_count", *labels, no_error) == 1
    # the same requests under both names: the same TTFTs and durations
    assert added("gen_ai_server_time_to_first_token_seconds_sum", *chat) + added(
        "gen_ai_server_time_to_first_token_seconds_sum", *completion) == pytest.approx(
        added("vllm:time_to_first_token_seconds_sum", vllm))
    assert added("gen_ai_server_request_duration_seconds_sum", *chat, no_error) + added(
        "gen_ai_server_request_duration_seconds_sum", *completion, no_error) == pytest.approx(
        added("vllm:e2e_request_latency_seconds_sum", vllm))
    tokens = lambda labels, kind: added("gen_ai_client_token_usage_sum", *labels, ("gen_ai_token_type", kind))  # noqa: E731
    assert tokens(chat, "output") == 5 and tokens(completion, "output") == 3
    assert tokens(chat, "input") + tokens(completion, "input") == added("vllm:prompt_tokens_total", vllm) > 0


def test_the_projects_remote_source_reads_our_metrics_while_a_request_runs(served, monkeypatch):
    import dataclasses
    import threading

    from playground.config import GenerationSettings
    from playground.remote.source import RemoteSource
    source = RemoteSource(served.url + "/v1", api_key=KEY, figure_interval=0.05)
    assert source.kind.name == "playground"
    # the server's decode waits (at most 30 s) until the client has read its /metrics once: however fast or
    # busy the machine, a sample is taken while the request runs
    read_once = threading.Event()
    real_figures = source.kind.figures

    def figures(client, model):
        out = real_figures(client, model)
        read_once.set()
        return out
    source.kind = dataclasses.replace(source.kind, figures=figures)
    batcher = served.service.engine_loop.batcher
    real_decode = batcher._decode

    def decode(it):
        read_once.wait(30)
        return real_decode(it)
    monkeypatch.setattr(batcher, "_decode", decode)
    trace = source.run_ids(list(range(5, 40)), GenerationSettings(max_new_tokens=60, temperature=0),
                           ignore_eos=True).wait()
    samples = trace.server["samples"]
    assert samples and any(s.get("running", 0) >= 1 and s.get("kv_pool_used_share", 0) > 0 for s in samples), samples


def test_a_forged_x_forwarded_for_cannot_rename_the_client():
    guard = Guard(ApiConfig(trust_forwarded=True))
    real = guard.client(None, "10.0.0.2", "203.0.113.9")   # what the Space's proxy appends: the real address
    forged = [guard.client(None, "10.0.0.2", f"198.51.100.{i}, 203.0.113.9") for i in range(5)]
    assert forged == [real] * 5   # whatever the client wrote before it, the proxy's entry names it
    assert guard.client(None, "10.0.0.2", "203.0.113.10") != real
    untrusted = Guard(ApiConfig(trust_forwarded=False))   # not behind a known proxy: the header is ignored
    assert untrusted.client(None, "10.0.0.2", "1.1.1.1") == untrusted.client(None, "10.0.0.2", "2.2.2.2")


def test_a_forged_header_does_not_escape_the_per_client_limit(tiny_onnx_engine):
    config = ApiConfig(trust_forwarded=True, slots=2, capacity=256, limits=ApiLimits(tokens_per_minute=300))
    s = Served(tiny_onnx_engine, config)
    try:
        def ask(forwarded):
            return httpx.post(s.url + "/v1/completions", headers={"X-Forwarded-For": forwarded},
                              json={"prompt": [7] * 20, "max_tokens": 100, "ignore_eos": True}, timeout=30)
        assert ask("1.1.1.1, 203.0.113.9").status_code == 200
        assert ask("2.2.2.2, 203.0.113.9").status_code == 200   # 240 of the client's 300 tokens a minute
        forged = ask("3.3.3.3, 203.0.113.9")                     # a third name of its own choosing: still it
        assert forged.status_code == 429 and "tokens per minute" in forged.json()["error"]["message"]
        assert ask("203.0.113.10").status_code == 200            # another client (the proxy says so)
    finally:
        s.stop()


# --- generated bodies: whatever is sent, a 2xx or OpenAI's 4xx, never a 5xx or a traceback

FIELDS = ["messages", "prompt", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
          "seed", "stop", "logprobs", "top_logprobs", "stream", "stream_options", "ignore_eos", "n", "content",
          "add_special", "with_pieces", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
          "max_output_tokens", "previous_response_id", "store", "system", "stop_sequences", "reasoning", "text"]


def _strategies():
    from hypothesis import strategies as st
    chars = st.one_of(st.characters(exclude_categories=()),                          # every category, Cs too
                      st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),       # lone surrogates
                      st.sampled_from("\x00\x1b\u202e\ufeff\ufffd\U0010ffff"))
    text = st.text(chars, max_size=40)
    numbers = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                        st.sampled_from([0, -1, 1, 2**31, 2**63, 2**64, 1e308, -0.0, 0.5]))
    leaves = st.one_of(st.none(), st.booleans(), numbers, text)
    values = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(text, inner, max_size=4)), max_leaves=12)
    valid = st.sampled_from([
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        {"messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Hi"}],
         "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}, "logprobs": True,
         "top_logprobs": 2},
        {"prompt": "Once", "max_tokens": 2, "stop": ["\n"], "logprobs": 1, "seed": 3, "temperature": 0.7},
        {"prompt": [5, 6, 7], "max_tokens": 2, "stream": True, "ignore_eos": True},
        {"content": "Hello world", "with_pieces": True},
        {"input": "Hi", "max_output_tokens": 2, "stream": True, "instructions": "Be brief", "store": False},
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                   {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "c", "output": "ok"}], "max_output_tokens": 2},
        {"max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}], "system": "Be brief", "stream": True},
        {"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
         "stop_sequences": ["\n"]}])
    mutated = st.builds(lambda base, changes: {**base, **changes}, valid,
                        st.dictionaries(st.sampled_from(FIELDS), values, min_size=1, max_size=3))
    in_a_message = st.builds(lambda content, role: {"messages": [{"role": role, "content": content}],
                                                    "max_tokens": 2},
                             st.one_of(text, values), st.one_of(st.sampled_from(["user", "system"]), values))
    bodies = st.one_of(values.map(lambda v: json.dumps(v).encode()), mutated.map(lambda v: json.dumps(v).encode()),
                       in_a_message.map(lambda v: json.dumps(v).encode()), st.binary(max_size=64))
    paths = st.sampled_from([CHAT, "/v1/completions", "/tokenize", "/apply-template", RESPONSES, MESSAGES])
    return paths, bodies


@pytest.fixture(scope="module")
def lenient(tiny_onnx_engine):
    """An endpoint that answers quickly whatever is asked: at most 8 new tokens, no minute budget to run out."""
    limits = ApiLimits(max_tokens=8, tokens_per_minute=10**9, in_flight_per_client=16)
    s = Served(tiny_onnx_engine, ApiConfig(keys=(KEY,), slots=2, capacity=256, limits=limits))
    yield s
    s.stop()


@pytest.mark.slow
def test_generated_bodies_get_a_2xx_or_openais_4xx_never_a_5xx(lenient):
    from hypothesis import HealthCheck, example, given, settings as hsettings
    paths, bodies = _strategies()
    seen: dict[int, int] = {}
    client = httpx.Client(base_url=lenient.url, headers=AUTH, timeout=30)

    @hsettings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(path=paths, body=bodies)
    @example(path=CHAT, body=b'{"messages": [{"role": [], "content": "Hi"}]}')   # found: an unhashable role
    def answer(path, body):
        r = client.post(path, content=body)
        text = r.read().decode("utf-8", "replace")
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        assert r.status_code < 500, (path, body[:200], text[:300])
        no_traceback(text) if r.status_code >= 400 else None
        if r.status_code >= 400:
            assert agent_error(path, r.content, r.status_code)["message"]
        elif r.headers["content-type"].startswith("text/event-stream") and path in (RESPONSES, MESSAGES):
            last = text.rstrip().rsplit("\n", 1)[-1]   # one terminal event, the last
            assert last.startswith("data: ") and json.loads(last[6:])["type"] in (
                "response.completed", "response.incomplete", "message_stop"), text[-300:]
        elif r.headers["content-type"].startswith("text/event-stream"):
            assert text.rstrip().endswith("data: [DONE]") and "server_error" not in text, text[-300:]
    try:
        answer()
        assert seen.get(200) and seen.get(400), seen   # both kinds of answer were exercised
        r = client.post(CHAT, content=OK_BODY)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None
    finally:
        client.close()
    loop = lenient.service.engine_loop
    settle(loop)   # the KV pool is empty: no slot held, nothing waiting
    assert not any(lenient.service.guard._in_flight.values())


# --- many misbehaving clients at once, one behaving: it is served, the slots come back, memory too

@pytest.mark.slow
def test_misbehaving_clients_do_not_starve_a_well_behaved_one():
    from playground.bench.clients import clients_row
    row = clients_row("tiny", seconds=3.0)
    # each failure says its status (a 429: the bursts' refusals reached the well-behaved client's key)
    assert row.well_behaved_failures == 0, row.well_behaved_failure_statuses
    assert row.well_behaved_requests >= 3, row
    assert row.statuses.get("200") and row.statuses.get("429"), row.statuses   # the bursts went over the limit
    assert set(row.statuses) <= {"200", "429"}, row.statuses
    assert row.slots_back, row
    assert row.rss_within_margin, (row.rss_before_mb, row.rss_after_mb)
