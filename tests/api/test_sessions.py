"""Which session a request belongs to (api/session_hint.py): each naming source, their order, the TTL asked, a
malformed TTL refused in each route's own shape, and the session carried through the engine loop to the request's
record (the Watch view's), on every route."""
from __future__ import annotations

import json

import httpx
import pytest

from playground.api import ApiConfig
from playground.api.errors import ApiError
from playground.api.responses import ResponseStore, read_responses
from playground.api.session_hint import read_session
from playground.serve.agent_trace import sessions_jsonl
from playground.serve.sessions import SessionSource
from tests.api.test_openai_api import KEY, Served

AUTH = {"Authorization": f"Bearer {KEY}"}
HI = [{"role": "user", "content": "Hi"}]


def anthropic(ttl=None, where="message") -> dict:
    mark = {"type": "ephemeral", **({"ttl": ttl} if ttl is not None else {})}
    body = {"model": "m", "max_tokens": 4, "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}
    if where == "message":
        body["messages"][0]["content"][0]["cache_control"] = mark
    elif where == "system":
        body["system"][0]["cache_control"] = mark
    else:
        body["cache_control"] = mark
    return body


# --- each source alone

@pytest.mark.parametrize("where", ["message", "system", "top"])
def test_an_anthropic_mark_names_the_session_by_the_opening_with_its_ttl(where):
    one, later = read_session(anthropic("1h", where), None), read_session(anthropic("1h", where), None)
    assert one.source == SessionSource.CACHE_CONTROL and one.ttl_s == 3600.0
    assert one.id == later.id and one.id.startswith("opening-")
    assert read_session(anthropic(None, where), None).ttl_s == 300.0   # Anthropic's default: 5 minutes


def test_the_marks_move_from_turn_to_turn_and_the_session_stays():
    first = anthropic("5m")
    second = anthropic(None, "system")   # the next turn: the mark elsewhere, more messages after the opening
    second["messages"] += [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "More"}]
    other = anthropic("5m")
    other["messages"][0]["content"][0]["text"] = "Something else"
    assert read_session(first, None).id == read_session(second, None).id != read_session(other, None).id


def test_prompt_cache_key_names_the_session_on_every_shape_of_body():
    for body in ({"messages": HI}, {"prompt": "Hi"}, {"input": "Hi"}):
        session = read_session({**body, "prompt_cache_key": "codex-conv-1"}, None)
        assert (session.id, session.source, session.ttl_s) == ("codex-conv-1", SessionSource.PROMPT_CACHE_KEY, None)


def test_the_header_and_agent_hint_name_a_session():
    assert read_session({"messages": HI}, "sess-9").source == SessionSource.HEADER
    hinted = read_session({"messages": HI, "agent_hint": {"session_id": "worker-7", "parent_session_id": "o-1",
                                                          "cache_control": {"type": "ephemeral", "ttl": 120}}}, None)
    assert (hinted.id, hinted.source, hinted.ttl_s) == ("worker-7", SessionSource.AGENT_HINT, 120.0)
    assert read_session({"messages": HI, "agent_hint": {"session_id": "w", "cache_control": {}}}, None).ttl_s == 300.0
    assert read_session({"messages": HI, "agent_hint": {}}, None) is None


def test_a_request_that_names_nothing_has_no_session():
    assert read_session({"messages": HI}, None) is None
    assert read_session({"messages": HI, "prompt_cache_key": ""}, "") is None


def test_the_responses_chain_continues_the_session_of_the_response_it_names():
    store = ResponseStore(responses=8, size=100_000)
    item = ({"type": "message", "role": "user", "content": "hi"},)
    store.put("resp_1", item)                      # it named no session: the chain starts here
    store.put("resp_2", item, "codex-conv-1")      # it was a turn of a named one
    for previous, expected in (("resp_1", "resp_1"), ("resp_2", "codex-conv-1")):
        turn = read_responses({"input": "next", "previous_response_id": previous}, store)
        session = read_session({"input": "next", "previous_response_id": previous}, None, turn.chained)
        assert (session.id, session.source) == (expected, SessionSource.RESPONSES_CHAIN)


# --- the order

def test_the_sources_are_asked_in_order():
    hint = {"session_id": "worker-7"}
    everything = {"messages": HI, "prompt_cache_key": "key-1", "agent_hint": hint}
    assert read_session(everything, "header-1", "resp_1").id == "key-1"
    assert read_session({"messages": HI, "agent_hint": hint}, "header-1", "resp_1").id == "resp_1"
    assert read_session({"messages": HI, "agent_hint": hint}, "header-1").id == "header-1"
    assert read_session({"messages": HI, "agent_hint": hint}, None).id == "worker-7"
    marked = {**anthropic("1h"), "prompt_cache_key": "key-1", "agent_hint": hint}
    assert read_session(marked, "header-1", "resp_1").source == SessionSource.CACHE_CONTROL


def test_the_ttl_asked_is_the_marks_else_the_agent_hints_whoever_names_the_session():
    hint = {"session_id": "w", "cache_control": {"ttl": 90}}
    assert read_session({"messages": HI, "prompt_cache_key": "k", "agent_hint": hint}, None).ttl_s == 90.0
    assert read_session({**anthropic("1h"), "agent_hint": hint}, None).ttl_s == 3600.0
    two = anthropic("1h", "system")
    two["messages"][0]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "5m"}
    assert read_session(two, None).ttl_s == 3600.0   # the longest asked


# --- malformed: a 400 naming the field

@pytest.mark.parametrize("body, param", [
    (anthropic("10m"), "messages[0].content[0].cache_control.ttl"),
    (anthropic(300, "system"), "system[0].cache_control.ttl"),
    ({**anthropic(), "cache_control": "ephemeral"}, "body.cache_control"),
    ({"messages": HI, "agent_hint": {"session_id": "w", "cache_control": {"ttl": 7200}}},
     "agent_hint.cache_control.ttl"),
    ({"messages": HI, "agent_hint": {"session_id": "w", "cache_control": {"ttl": "5m"}}},
     "agent_hint.cache_control.ttl"),
    ({"messages": HI, "agent_hint": "worker-7"}, "agent_hint"),
    ({"messages": HI, "prompt_cache_key": 7}, "prompt_cache_key"),
    ({"messages": HI, "agent_hint": {"session_id": "x" * 300}}, "agent_hint.session_id"),
])
def test_a_malformed_session_field_is_a_400_naming_it(body, param):
    with pytest.raises(ApiError) as caught:
        read_session(body, None)
    assert caught.value.status == 400 and caught.value.param == param and param.split(".")[-1] in caught.value.message


# --- through the routes to the record

@pytest.fixture(scope="module")
def served(tiny_onnx_engine):
    s = Served(tiny_onnx_engine, ApiConfig(keys=(KEY,), slots=4, capacity=512))
    yield s
    s.stop()


def last_record(served):
    return served.traffic.snapshot().records[-1]


@pytest.mark.parametrize("path, body, headers, expected", [
    ("/v1/chat/completions", {"messages": HI, "max_tokens": 2, "prompt_cache_key": "conv-1"}, {},
     ("conv-1", "prompt_cache_key", None)),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 2}, {"X-Session-Id": "sess-2"}, ("sess-2", "x-session-id", None)),
    ("/v1/chat/completions", {"messages": HI, "max_tokens": 2, "agent_hint": {
        "session_id": "worker-7", "cache_control": {"type": "ephemeral", "ttl": 600}}}, {},
     ("worker-7", "agent_hint", 600.0)),
    ("/v1/responses", {"input": "Hi", "max_output_tokens": 2, "store": False, "prompt_cache_key": "codex-3"}, {},
     ("codex-3", "prompt_cache_key", None)),
    ("/v1/messages", {**anthropic("1h"), "max_tokens": 2}, {"x-api-key": KEY}, (None, "cache_control", 3600.0)),
])
def test_every_route_carries_the_session_to_the_requests_record(served, path, body, headers, expected):
    r = httpx.post(served.url + path, json=body, headers={**AUTH, **headers}, timeout=60)
    assert r.status_code == 200, r.text
    session = last_record(served).session
    assert (session.source.value, session.ttl_s) == expected[1:]
    if expected[0] is not None:
        assert session.id == expected[0]
    assert last_record(served).to_dict()["session"]["source"] == expected[1]


def test_a_request_that_names_no_session_has_none_on_its_record(served):
    r = httpx.post(served.url + "/v1/chat/completions", json={"messages": HI, "max_tokens": 2}, headers=AUTH,
                   timeout=60)
    assert r.status_code == 200 and last_record(served).session is None


def test_a_chained_response_is_a_turn_of_the_first_ones_session(served):
    first = httpx.post(served.url + "/v1/responses", json={"input": "Hi", "max_output_tokens": 2}, headers=AUTH,
                       timeout=60).json()
    assert last_record(served).session is None
    second = httpx.post(served.url + "/v1/responses", json={"input": "More", "max_output_tokens": 2,
                                                            "previous_response_id": first["id"]}, headers=AUTH,
                        timeout=60).json()
    assert (last_record(served).session.id, last_record(served).session.source) == (
        first["id"], SessionSource.RESPONSES_CHAIN)
    httpx.post(served.url + "/v1/responses", json={"input": "Again", "max_output_tokens": 2,
                                                   "previous_response_id": second["id"]}, headers=AUTH, timeout=60)
    assert last_record(served).session.id == first["id"]


@pytest.mark.parametrize("path, body, shape", [
    ("/v1/messages", {**anthropic("2h"), "max_tokens": 2}, "anthropic"),
    ("/v1/chat/completions", {"messages": HI, "max_tokens": 2, "agent_hint": {"session_id": "w",
                                                                              "cache_control": {"ttl": -1}}}, "openai"),
    ("/v1/responses", {"input": "Hi", "agent_hint": {"session_id": "w", "cache_control": {"ttl": 4000}}}, "openai"),
])
def test_a_malformed_ttl_is_a_400_in_the_routes_own_shape(served, path, body, shape):
    r = httpx.post(served.url + path, json=body, headers={**AUTH, "x-api-key": KEY}, timeout=60)
    assert r.status_code == 400
    error = r.json()["error"]
    if shape == "anthropic":
        assert r.json()["type"] == "error" and error["type"] == "invalid_request_error"
        assert "cache_control.ttl" in error["message"] and '"5m" or "1h"' in error["message"]
    else:
        assert error["param"] == "agent_hint.cache_control.ttl" and "0 to 3600" in error["message"]


def test_the_endpoints_sessions_export_as_session_lines_with_the_gap_from_each_turns_predecessor(served):
    t0 = served.traffic.now()
    for text in ("Hi", "Hi again"):
        r = httpx.post(served.url + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": text}], "max_tokens": 2, "prompt_cache_key": "export-1"},
            headers=AUTH, timeout=60)
        assert r.status_code == 200
    watched = served.traffic.since(t0)
    rows = [json.loads(line) for line in sessions_jsonl(watched).splitlines()]
    first, second = [row for row in rows if row.get("session_id") == "export-1"]
    records = [r for r in watched.records if r.session is not None and r.session.id == "export-1"]
    assert "timestamp" in first and "delay" not in first and "timestamp" not in second
    assert second["delay"] == pytest.approx((records[1].arrival - records[0].finished) * 1000, abs=0.001)
    assert [first["input_length"], second["input_length"]] == [len(r.trace.prompt_ids) for r in records]


def test_a_sessions_blocks_are_held_after_its_turn_and_metrics_show_them(served):
    text = "Tell me about trains and the stations they stop at on the way to the sea. " * 3
    r = httpx.post(served.url + "/v1/completions", json={"prompt": text, "max_tokens": 4},
                   headers={**AUTH, "X-Session-Id": "held-1"}, timeout=60)
    assert r.status_code == 200, r.text
    cache = served.service.engine_loop.batcher.cache
    held = {b.hold.session for b in cache.holds.values()}
    assert "held-1" in held and ApiConfig().session_ttl == 300.0   # no TTL asked: the operator's default
    metrics = httpx.get(served.url + "/metrics", headers=AUTH).text
    line = next(x for x in metrics.splitlines() if x.startswith("playground:prefix_cache_session_held_positions{"))
    assert float(line.split()[-1]) == cache.held_positions() >= 16
    reasons = {x.split('reason="')[1].split('"')[0] for x in metrics.splitlines()
               if x.startswith("playground:prefix_cache_evictions_by_reason_total{")}
    assert reasons == {"least recently used", "TTL expired", "over the held share", "pressure"}


def test_the_operators_session_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_API_SESSION_SHARE", "0.25")
    monkeypatch.setenv("PLAYGROUND_API_SESSION_TTL", "60")
    config = ApiConfig.from_env()
    assert (config.loop_size.session_share, config.loop_size.session_ttl) == (0.25, 60.0)
    monkeypatch.setenv("PLAYGROUND_API_SESSION_SHARE", "2")
    with pytest.raises(ValueError, match="PLAYGROUND_API_SESSION_SHARE: '2' is not a number from 0 to 1"):
        ApiConfig.from_env()
    monkeypatch.setenv("PLAYGROUND_API_SESSION_SHARE", "half")
    with pytest.raises(ValueError, match="PLAYGROUND_API_SESSION_SHARE"):
        ApiConfig.from_env()
