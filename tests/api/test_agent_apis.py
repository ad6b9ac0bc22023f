"""The agent APIs (/v1/responses, /v1/messages) driven by the clients users have -- the OpenAI SDK's Responses calls
and its stream helper, the OpenAI Agents SDK, the Anthropic SDK -- and by raw HTTP, against the routes served by
uvicorn over the tiny model (a 2048-position copy: a tools block alone is ~450 of its byte-level tokens) on ONNX
Runtime. The model's answers are scripted where a test needs a tool call (tests/fakes.py: ScriptedAnswers picks
the tokens; the forward passes, the Steps and the route's reading of them are the real ones)."""
from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from playground.api import ApiConfig, ApiLimits
from playground.api.messages import MessageWriter, read_messages
from playground.api.response_body import Answer
from playground.api.responses import ResponseStore, ResponseWriter, read_responses
from playground.serve import batcher
from playground.trace import StopReason
from tests.api.test_openai_api import KEY, Served
from tests.fakes import ScriptedAnswers
from tests.helpers import long_tiny_folder

AUTH = {"Authorization": f"Bearer {KEY}"}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
LIMITS = ApiLimits(prompt_tokens=1900, max_tokens=256, tokens_per_minute=10**9, in_flight_per_client=8)


@pytest.fixture(scope="session")
def long_tiny_engine():
    """The tiny model with 2048 positions on ONNX Runtime (saved and exported once, cached like the tiny one)."""
    from playground.backends import create_backend
    from playground.engine import Engine
    return Engine(create_backend("onnx", str(long_tiny_folder())))


@pytest.fixture(scope="module")
def served(long_tiny_engine):
    s = Served(long_tiny_engine, ApiConfig(keys=(KEY,), slots=4, capacity=2048, limits=LIMITS))
    yield s
    s.stop()


@pytest.fixture
def script(long_tiny_engine, monkeypatch):
    scripted = ScriptedAnswers(long_tiny_engine.tokenizer)
    monkeypatch.setattr(batcher, "Sampler", scripted.sampler)
    return scripted


def events_of(url: str, path: str, body: dict, headers: dict) -> list[dict]:
    """A streamed answer's events, each its data's JSON with the SSE `event:` name beside it."""
    out, name = [], None
    with httpx.stream("POST", url + path, json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                event = json.loads(line[len("data: "):])
                assert event["type"] == name
                out.append(event)
    return out


# --- /v1/responses

def test_a_streamed_response_sends_its_events_in_order_with_rising_sequence_numbers(served, script):
    script.add("Let me look.\n" + CALL)
    events = events_of(served.url, "/v1/responses", {"input": "Weather in Paris?", "tools": [WEATHER],
                                                     "stream": True, "max_output_tokens": 120}, AUTH)
    kinds = [e["type"] for e in events]
    deltas = kinds.count("response.output_text.delta")
    assert deltas >= 1
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"] + ["response.output_text.delta"] * deltas + [
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    message, call = events[2]["item"], events[-5]["item"]
    for e in events[3:-6]:   # the message's content events
        assert (e["item_id"], e["output_index"], e["content_index"]) == (message["id"], 0, 0)
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Let me look."
    assert {(e["item_id"], e["output_index"]) for e in events[-4:-2]} == {(call["id"], 1)}
    assert events[-2]["item"]["id"] == call["id"] and events[-2]["output_index"] == 1
    final = events[-1]["response"]
    assert final["status"] == "completed" and [i["type"] for i in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["name"] == "get_weather" and json.loads(final["output"][1]["arguments"]) == {
        "city": "Paris"}
    assert final["usage"]["input_tokens"] > 0 and "cached_tokens" in final["usage"]["input_tokens_details"]


def test_a_scripted_call_comes_back_as_a_function_call_and_its_output_is_the_next_turn(served, script):
    sdk = served.sdk()
    script.add(CALL, "It is 18 C in Paris.")
    first = sdk.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER], max_output_tokens=120)
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather" and json.loads(call.arguments) == {
        "city": "Paris"}
    history = [{"role": "user", "content": "Weather in Paris?"}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}]
    second = sdk.responses.create(model="m", input=history, tools=[WEATHER], max_output_tokens=60, store=False)
    assert second.status == "completed" and second.output_text == "It is 18 C in Paris."
    assert second.usage.input_tokens > first.usage.input_tokens


def test_the_model_reads_a_call_and_its_output_in_the_hermes_form():
    turn = read_responses({"input": [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "18 C"}], "tools": [WEATHER]}, None)
    system, user, assistant, result = turn.asked.messages
    assert system["role"] == "system" and '"name": "get_weather"' in system["content"]
    assert assistant == {"role": "assistant", "content": CALL}
    assert result == {"role": "user", "content": "<tool_response>\n18 C\n</tool_response>"}


def test_codex_fields_are_read_and_ignored_never_a_400():
    body = {"model": "gpt-5-codex", "instructions": "You are Codex.", "store": False, "stream": True,
            "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
                      {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}],
            "tools": [WEATHER, {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
                      {"type": "web_search"}, {"type": "local_shell"}],
            "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "high", "summary": "auto"},
            "include": ["reasoning.encrypted_content"], "text": {"verbosity": "low"}, "truncation": "auto",
            "metadata": {"a": "b"}, "service_tier": "priority", "prompt_cache_key": "conversation-1"}
    turn = read_responses(body, None)
    assert [m["role"] for m in turn.asked.messages] == ["system", "system", "user"]
    assert [t["function"]["name"] for t in turn.tools] == ["get_weather"] and not turn.parallel and not turn.store


@pytest.mark.parametrize("body, param", [
    ({"input": []}, "input"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content"),
    ({"input": "Hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "Hi", "temperature": 9}, "temperature"),
    ({"input": "Hi", "store": "yes"}, "store"),
    ({"input": "Hi", "tools": [{"type": "function"}]}, "tools[0].name"),
])
def test_bad_responses_input_is_400_naming_the_field(served, body, param):
    r = httpx.post(served.url + "/v1/responses", json=body, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_codex_style_six_turns_each_reach_a_terminal_event_and_the_cache_grows(served, script):
    """List input, store false, a function and a custom tool, reasoning and include, prompt_cache_key, the whole
    history each turn (as Codex sends it)."""
    sdk = served.sdk()
    tools = [WEATHER, {"type": "custom", "name": "apply_patch", "description": "Edit files"}]
    history: list = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox."}]}]
    cached, prompts = [], []
    for turn in range(6):
        history.append({"type": "message", "role": "user", "content": [{"type": "input_text",
                                                                          "text": f"Step {turn}: go on."}]})
        script.add(CALL if turn % 2 == 0 else f"Done with step {turn}.")
        stream = sdk.responses.create(
            model="codex", instructions="You are a coding agent.", input=history, tools=tools, store=False,
            stream=True, reasoning={"effort": "medium", "summary": "auto"}, include=["reasoning.encrypted_content"],
            prompt_cache_key="codex-conversation", parallel_tool_calls=False, max_output_tokens=120)
        events = list(stream)
        terminal = [e for e in events if e.type in ("response.completed", "response.incomplete", "response.failed")]
        assert len(terminal) == 1 and events[-1] is terminal[0] and terminal[0].type == "response.completed"
        response = terminal[0].response
        cached.append(response.usage.input_tokens_details.cached_tokens)
        prompts.append(response.usage.input_tokens)
        history.append({"type": "reasoning", "id": f"rs_{turn}", "summary": [], "encrypted_content": "opaque"})
        for item in response.output:
            history.append(item.model_dump(exclude_none=True))
            if item.type == "function_call":
                history.append({"type": "function_call_output", "call_id": item.call_id, "output": "sunny"})
    assert prompts == sorted(prompts) and len(set(prompts)) == 6   # the whole history each turn
    assert all(c <= p for c, p in zip(cached, prompts))
    assert cached[1:] == sorted(cached[1:]) and cached[-1] > cached[1] > 0   # each turn reads the last one's prefix


def test_the_sdk_stream_helper_builds_the_response_from_the_events(served, script):
    script.add("Paris is sunny.")
    with served.sdk().responses.stream(model="m", input="Weather?", max_output_tokens=40) as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == final.output_text == "Paris is sunny." and final.status == "completed"


def test_max_output_tokens_ends_incomplete_with_its_reason(served, script):
    script.add("word " * 40, cut=True)
    events = events_of(served.url, "/v1/responses", {"input": "Talk.", "max_output_tokens": 5, "stream": True}, AUTH)
    assert events[-1]["type"] == "response.incomplete"
    final = events[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"]["output_tokens"] == 5
    assert sum(e["type"].startswith("response.completed") for e in events) == 0


@pytest.fixture(scope="module")
def small_store(long_tiny_engine):
    limits = ApiLimits(prompt_tokens=1900, tokens_per_minute=10**9, stored_responses=3)
    s = Served(long_tiny_engine, ApiConfig(keys=(KEY,), slots=2, capacity=2048, limits=limits))
    yield s
    s.stop()


def test_previous_response_id_chains_five_turns_and_an_evicted_id_is_a_400_that_says_so(small_store, script):
    sdk = small_store.sdk()
    ids, prompts, previous = [], [], None
    for turn in range(5):
        script.add(f"Answer {turn}.")
        r = sdk.responses.create(model="m", input=f"Question {turn}?", previous_response_id=previous,
                                 max_output_tokens=20)
        assert r.status == "completed" and r.output_text == f"Answer {turn}." and r.previous_response_id == previous
        ids.append(r.id)
        prompts.append(r.usage.input_tokens)
        previous = r.id
    assert prompts == sorted(prompts) and len(set(prompts)) == 5   # each turn reads every one before it
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model="m", input="Again?", previous_response_id=ids[0], max_output_tokens=5)
    error = caught.value.body
    assert error["code"] == "previous_response_not_found" and error["param"] == "previous_response_id"
    assert "evicted" in error["message"] and ids[0] in error["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model="m", input="Again?", previous_response_id="resp_never", max_output_tokens=5)
    assert "not known" in caught.value.body["message"]
    metrics = httpx.get(small_store.url + "/metrics", headers=AUTH).text
    assert "playground:responses_stored 3.0" in metrics and "playground:responses_evicted_total 2.0" in metrics


def test_the_store_evicts_the_oldest_first_by_count_and_by_bytes():
    store = ResponseStore(responses=10, size=300)
    item = ({"type": "message", "role": "user", "content": "x" * 80},)
    for i in range(4):
        store.put(f"r{i}", item)
    assert len(store) == 2 and store.bytes <= 300 and store.evicted == 2
    store.get("r3")
    with pytest.raises(Exception, match="300 bytes"):
        store.get("r0")
    store.put("huge", ({"content": "y" * 1000},))
    with pytest.raises(Exception, match="was not stored"):
        store.get("huge")


def test_the_openai_agents_sdk_runs_an_agent_with_one_function_tool(served, script):
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    set_tracing_disabled(True)
    asked = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"18 C in {city}"
    script.add(CALL, "It is 18 C in Paris.")
    model = OpenAIResponsesModel(model="m", openai_client=openai.AsyncOpenAI(
        base_url=served.url + "/v1", api_key=KEY, max_retries=0))
    agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather], model=model)
    result = Runner.run_sync(agent, "Weather in Paris?")
    assert asked == ["Paris"] and result.final_output == "It is 18 C in Paris."


# --- /v1/messages

def anthropic_sdk(served, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=served.url, api_key=key, max_retries=0, timeout=60)


def prompt_tokens(served, count: int) -> list[int]:
    """The prompt tokens of the last `count` requests, from the engine's own record (the Watch view's)."""
    records = served.traffic.snapshot().records
    return [r.prompt_tokens for r in records[-count:]]


def test_the_anthropic_sdk_streams_three_turns_and_the_usage_terms_sum_to_the_prompt(served, script):
    client = anthropic_sdk(served)
    messages: list = []
    reads, starts = [], []
    for turn in range(3):
        messages.append({"role": "user", "content": f"Turn {turn}: tell me more."})
        script.add(f"Here is more, part {turn}.")
        with client.messages.stream(model="m", max_tokens=40, system="Be brief.", messages=messages) as stream:
            for event in stream:
                if event.type == "message_start":
                    starts.append(event.message.usage)
            final = stream.get_final_message()
        (prompt,) = prompt_tokens(served, 1)
        usage = final.usage
        assert usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens == prompt
        start = starts[-1]
        assert start.input_tokens + start.cache_creation_input_tokens + start.cache_read_input_tokens == prompt
        assert final.stop_reason == "end_turn" and final.content[0].text == f"Here is more, part {turn}."
        reads.append(usage.cache_read_input_tokens)
        messages.append({"role": "assistant", "content": final.content[0].text})
    assert reads[2] > reads[1] > 0   # each turn finds the one before it in the prefix cache


def test_a_scripted_call_is_a_tool_use_block_and_its_result_is_the_next_turn(served, script):
    client = anthropic_sdk(served)
    tools = [{"name": "get_weather", "description": "The weather", "input_schema": WEATHER["parameters"]}]
    script.add("Checking.\n" + CALL, "It is 18 C.")
    asked = [{"role": "user", "content": "Weather in Paris?"}]
    with client.messages.stream(model="m", max_tokens=120, messages=asked, tools=tools) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use" and [b.type for b in first.content] == ["text", "tool_use"]
    use = first.content[1]
    assert use.name == "get_weather" and use.input == {"city": "Paris"} and use.id.startswith("toolu_")
    asked += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18 C"}]}]
    second = client.messages.create(model="m", max_tokens=40, messages=asked, tools=tools)
    assert second.stop_reason == "end_turn" and second.content[0].text == "It is 18 C."


def test_anthropic_endings_stop_sequence_and_max_tokens(served, script):
    client = anthropic_sdk(served)
    script.add("one two END three")
    stopped = client.messages.create(model="m", max_tokens=40, stop_sequences=["END"],
                                     messages=[{"role": "user", "content": "Count."}])
    assert (stopped.stop_reason, stopped.stop_sequence, stopped.content[0].text) == ("stop_sequence", "END",
                                                                                      "one two")
    script.add("word " * 30, cut=True)
    cut = client.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": "Talk."}])
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 4


def test_anthropic_errors_come_in_anthropics_shape(served):
    with pytest.raises(anthropic.AuthenticationError) as caught:
        anthropic_sdk(served, "wrong").messages.create(model="m", max_tokens=4,
                                                       messages=[{"role": "user", "content": "Hi"}])
    assert caught.value.body["error"]["type"] == "authentication_error" and "x-api-key" in str(caught.value)
    assert "not one of this server's" in str(caught.value)   # a wrong key, told from none
    r = httpx.post(served.url + "/v1/messages", json={"max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 401 and r.json()["error"]["message"].startswith("no API key was sent")
    headers = {"x-api-key": KEY, "anthropic-version": "1999-01-01", "anthropic-beta": "anything"}
    for body, field in [({"messages": [{"role": "user", "content": "Hi"}]}, "max_tokens"),
                        ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
                         "messages[0].content[0].type")]:
        r = httpx.post(served.url + "/v1/messages", json=body, headers=headers)
        assert r.status_code == 400 and r.json()["type"] == "error", r.text
        assert r.json()["error"]["type"] == "invalid_request_error" and field.split(".")[0] in r.text


def test_anthropics_ignored_fields_are_no_400():
    turn = read_messages({"max_tokens": 8, "system": [{"type": "text", "text": "Be brief.",
                                                       "cache_control": {"type": "ephemeral", "ttl": "5m"}}],
                          "metadata": {"user_id": "u"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
                          "tools": [{"type": "web_search_20250305", "name": "web_search"}],
                          "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi",
                                                                      "cache_control": {"type": "ephemeral"}}]},
                                       {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm",
                                                                          "signature": "s"},
                                                                         {"type": "text", "text": "Hello"}]}]})
    assert [m["role"] for m in turn.asked.messages] == ["system", "user", "assistant"] and turn.tools == ()


# --- endings the engine decides: an error is not a cancellation

class _Trace:
    def __init__(self, reason, error=None):
        self.stop_reason, self.error, self.cached_tokens, self.steps = reason, error, 0, []
        self.cache = None   # no record of a cache lookup


@pytest.mark.parametrize("reason, kind, status", [
    (StopReason.ERROR, "response.failed", "failed"),
    (StopReason.CANCELLED, "response.incomplete", "incomplete"),
])
def test_a_failed_response_is_failed_and_a_cancelled_one_is_not(reason, kind, status):
    turn = read_responses({"input": "Hi"}, None)
    writer = ResponseWriter(turn, Answer(turn.asked, "id", "m", 3, str), "resp_x", "m")
    events = [json.loads(e.split("data: ", 1)[1]) for e in writer.opening() + writer.close(
        _Trace(reason, "the engine loop stopped"))]
    assert events[-1]["type"] == kind and events[-1]["response"]["status"] == status
    if reason == StopReason.ERROR:
        assert events[-1]["response"]["error"]["code"] == "server_error"
    else:
        assert events[-1]["response"]["incomplete_details"] == {"reason": "cancelled"}
    message = read_messages({"max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
    writer = MessageWriter(message, Answer(message.asked, "id", "m", 3, str), "msg_x", "m")
    last = json.loads(writer.close(_Trace(reason, "boom"))[-1].split("data: ", 1)[1])
    assert last["type"] == "error" and last["error"]["type"] == ("api_error" if reason == StopReason.ERROR
                                                                  else "cancelled")


# --- the same guard and record as a chat request

def test_both_routes_are_in_the_watch_views_record_refusals_too(served, script):
    before = len(served.traffic.snapshot().records)
    script.add("One.", "Two.")
    served.sdk().responses.create(model="m", input="Hi", max_output_tokens=8)
    anthropic_sdk(served).messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    records = served.traffic.snapshot().records[before:]
    assert len(records) == 2 and len({r.client for r in records}) == 1 and records[0].client.startswith("client ")
    assert [r.trace.stop_reason for r in records] == [StopReason.EOS, StopReason.EOS]
    for path, body in [("/v1/responses", {"input": []}), ("/v1/messages", {"messages": []})]:
        assert httpx.post(served.url + path, json=body, headers=AUTH).status_code == 400
    refused = served.traffic.refusals[-2:]
    assert [(r.status, r.client) for r in refused] == [(400, records[0].client)] * 2
    assert "input" in refused[0].reason and "max_tokens" in refused[1].reason


def test_parallel_tool_calls_false_ends_the_turn_at_the_first_call_and_tool_choice_none_reads_no_call(served, script):
    sdk = served.sdk()
    two = CALL + "\n" + CALL.replace("Paris", "Rome")
    script.add(two, two, CALL)
    both = sdk.responses.create(model="m", input="Paris and Rome?", tools=[WEATHER], max_output_tokens=200)
    assert [json.loads(i.arguments)["city"] for i in both.output] == ["Paris", "Rome"]
    one = sdk.responses.create(model="m", input="Paris and Rome?", tools=[WEATHER], parallel_tool_calls=False,
                               max_output_tokens=200)
    assert [(i.type, json.loads(i.arguments)["city"]) for i in one.output] == [("function_call", "Paris")]
    plain = sdk.responses.create(model="m", input="Paris?", tools=[WEATHER], tool_choice="none", max_output_tokens=100)
    assert [i.type for i in plain.output] == ["message"] and plain.output_text == CALL   # no tools: text as written
    turn = read_responses({"input": "Paris?", "tools": [WEATHER], "tool_choice": "none"}, None)
    assert [m["role"] for m in turn.asked.messages] == ["user"]   # no system block: no tools listed
    listed = read_responses({"input": "Paris?", "tools": [WEATHER]}, None)
    assert [m["role"] for m in listed.asked.messages] == ["system", "user"]


def test_a_chained_turn_and_the_same_history_sent_whole_read_the_same_prompt(served, script):
    sdk = served.sdk()
    script.add(CALL, "Sunny.", "Sunny.")
    first = sdk.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER], max_output_tokens=120)
    (call,) = first.output
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}
    chained = sdk.responses.create(model="m", input=[output], previous_response_id=first.id, tools=[WEATHER],
                                   max_output_tokens=20)
    whole = sdk.responses.create(model="m", input=[{"role": "user", "content": "Weather in Paris?"},
                                                   call.model_dump(exclude_none=True), output],
                                 tools=[WEATHER], store=False, max_output_tokens=20)
    assert chained.usage.input_tokens == whole.usage.input_tokens > first.usage.input_tokens
    assert whole.usage.input_tokens_details.cached_tokens > 0   # the chained turn's prompt, found in the cache
