"""Conversations through the endpoint with the OpenAI SDK: each turn sends the whole history, `cached_tokens` grows
from 0, and `x_playground.cache` (whole and on a stream's last chunk) says what the cache held and why a turn
missed; a template by name (`x_playground.template`), the conversation by `prompt_cache_key` or `X-Session-Id`."""
from __future__ import annotations

import httpx
import openai
import pytest

from playground.api import ApiConfig
from playground.serve import batcher
from tests.api.test_openai_api import KEY, Served
from tests.fakes import ScriptedAnswers

SYSTEM = {"role": "system", "content": "You answer in one short sentence about travel by train."}
QUESTIONS = ["Which train goes to Paris?", "How long does it take?", "Is there a dining car?", "Can I bring a bicycle?",
             "Where do I buy a ticket?", "Is it cheaper at night?"]


@pytest.fixture(scope="module")
def served(tiny_onnx_engine):
    s = Served(tiny_onnx_engine, ApiConfig(keys=(KEY,), slots=2, capacity=512))
    yield s
    s.stop()


def opening(label: str) -> dict:
    """A system message of a test's own: its blocks are in no other test's prompt (the cache is the module's)."""
    return {"role": "system", "content": f"({label}) {SYSTEM['content']}"}


@pytest.fixture
def script(tiny_onnx_engine, monkeypatch):
    scripted = ScriptedAnswers(tiny_onnx_engine.tokenizer)
    monkeypatch.setattr(batcher, "Sampler", scripted.sampler)
    return scripted


def chat(served, turns: int, stream: bool = False, max_tokens: int = 12, system: dict = SYSTEM, **extra):
    """[(usage, x_playground.cache)] of `turns` turns, each answer sent back as text as the next turn's history."""
    sdk, messages, out = served.sdk(), [system], []
    for question in QUESTIONS[:turns]:
        messages.append({"role": "user", "content": question})
        kwargs = dict(model="m", messages=messages, max_tokens=max_tokens, temperature=0, **extra)
        if stream:
            chunks = list(sdk.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
            last, text = chunks[-1], "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert all("x_playground" not in (c.model_extra or {}) for c in chunks[:-1])   # on the last chunk only
            usage, record = last.usage, last.model_extra["x_playground"]["cache"]
        else:
            reply = sdk.chat.completions.create(**kwargs)
            text, usage, record = reply.choices[0].message.content, reply.usage, reply.model_extra["x_playground"]["cache"]
        out.append((usage, record))
        messages.append({"role": "assistant", "content": text})
    return out


def test_a_conversation_keyed_by_prompt_cache_key_finds_its_history_and_says_so(served):
    """Six turns with the model's own template, each answer sent back as its text (which reads as the ids generated):
    from turn 2 on, each finds at least 16·⌊(previous prompt + previous answer − 1)/16⌋ tokens."""
    turns = chat(served, 6, extra_body={"prompt_cache_key": "trip-1"})
    (usage, record), rest = turns[0], turns[1:]
    assert usage.prompt_tokens_details.cached_tokens == 0 and record["cause"] == "new conversation"
    assert record["cached"] == 0 and record["ribbon"]["new"] == usage.prompt_tokens
    for (usage, record), (before, _) in zip(rest, turns):
        bound = 16 * ((before.prompt_tokens + before.completion_tokens - 1) // 16)
        assert usage.prompt_tokens_details.cached_tokens == record["cached"] >= bound > 0
        assert record["matched_by"] == "key" and record["conversation"] == "trip-1"
        assert record["cause"] == "no miss" and record["prompt_tokens"] == usage.prompt_tokens
    assert [r["turn"] for _, r in turns] == [1, 2, 3, 4, 5, 6]


def test_six_scripted_answers_sent_back_as_text_find_their_history(served, script):
    """The same bound with answers of words (the plain tiny model repeats one token), each the ids its text reads as."""
    script.add("Eurostar goes there.", "About two hours.", "Yes, one.", "Yes, folded.", "At the station.", "Often.")
    turns = chat(served, 6, system=opening("words"), extra_body={"prompt_cache_key": "trip-words"})
    for (usage, record), (before, _) in zip(turns[1:], turns):
        bound = 16 * ((before.prompt_tokens + before.completion_tokens - 1) // 16)
        assert usage.prompt_tokens_details.cached_tokens == record["cached"] >= bound > 0
        assert record["cause"] == "no miss" and record["first_difference"] is None


@pytest.mark.parametrize("answer", ["ids", "cut"])
def test_an_answer_whose_text_reads_as_other_ids_is_named_as_re_tokenized(served, script, tiny_onnx_engine, answer):
    """Turn 1's answer as ids its text does not tokenize to ("Yes, one." with the space and "one." byte by byte), or
    cut by max tokens inside an emoji (its text has no bytes for the last two ids): the client sends the text back,
    and turn 2's record says so at the answer, the tokens computed again the prompt less the common prefix's blocks."""
    tok = tiny_onnx_engine.tokenizer
    if answer == "ids":
        generated = tok.convert_tokens_to_ids([*"Yes,", "Ġ", *"one."])
        assert generated != tok("Yes, one.", add_special_tokens=False)["input_ids"]
        script.add_ids(generated)
    else:
        script.add("Two hours 🚄", cut=True)   # 13 byte-level tokens, the emoji's 4 last: cut at 11
    turns = chat(served, 2, max_tokens=11, system=opening(answer), extra_body={"prompt_cache_key": f"trip-{answer}"})
    (before, _), (usage, record) = turns
    assert record["cause"] == "answer re-tokenized differently", record
    assert record["message"]["message"] == 2 and record["message"]["role"] == "assistant"
    assert record["was"]["part"] == "answer"
    assert before.prompt_tokens <= record["first_difference"] < before.prompt_tokens + before.completion_tokens
    assert record["recomputed"] == usage.prompt_tokens - 16 * (record["common_prefix"] // 16)
    assert usage.prompt_tokens_details.cached_tokens == 16 * (record["first_difference"] // 16)


def test_a_streamed_turn_carries_the_record_on_its_last_chunk(served):
    turns = chat(served, 2, stream=True, extra_body={"prompt_cache_key": "trip-streamed"})
    assert turns[1][1]["cause"] == "no miss" and turns[1][0].prompt_tokens_details.cached_tokens > 0


def test_the_reasoning_template_names_a_template_rewrite_at_the_think_block(served, tiny_onnx_engine):
    from playground.tokens.chat import render_chat
    turns = chat(served, 2, extra_body={"prompt_cache_key": "trip-thinking", "x_playground": {"template": "thinking"}})
    usage, record = turns[1]
    assert record["cause"] == "template rewrite" and record["was"]["part"] == "generation prompt"
    think = render_chat(tiny_onnx_engine.tokenizer, [SYSTEM, {"role": "user", "content": QUESTIONS[0]}],
                        template="thinking").spans[-1]   # turn 1's generation prompt: its empty <think> block last
    assert think.part == "generation prompt" and think.start <= record["first_difference"] < think.end
    assert "".join(record["then"]).startswith("<think>")
    assert record["recomputed"] == usage.prompt_tokens - 16 * (record["common_prefix"] // 16)
    spans = record["spans"]   # every prompt token in a message's part: the ribbon's hover
    assert spans[0]["start"] == 0 and spans[-1]["end"] == usage.prompt_tokens
    assert all(a["end"] == b["start"] for a, b in zip(spans, spans[1:]))
    assert [s["message"] for s in spans if s["part"] == "content" and s["role"] == "user"] == [1, 3]


def test_a_session_header_names_the_conversation(served):
    sdk = served.sdk(default_headers={"X-Session-Id": "desk-4"})
    messages = [SYSTEM, {"role": "user", "content": QUESTIONS[0]}]
    first = sdk.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": QUESTIONS[1]}]
    second = sdk.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0)
    record = second.model_extra["x_playground"]["cache"]
    assert record["matched_by"] == "key" and record["conversation"] == "desk-4" and record["turn"] == 2


def test_an_unknown_template_or_a_bad_key_is_400_naming_the_field(served):
    sdk = served.sdk()
    for extra, param in [({"x_playground": {"template": "nope"}}, "x_playground.template"),
                         ({"prompt_cache_key": 7}, "prompt_cache_key"), ({"tools": "all"}, "tools")]:
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.chat.completions.create(model="m", messages=[SYSTEM], max_tokens=2, extra_body=extra)
        assert caught.value.body["param"] == param


def test_metrics_say_the_prefix_caches_budget(served):
    text = httpx.get(served.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    budget = served.service.engine_loop.batcher.cache.capacity * 16
    line = next(x for x in text.splitlines() if x.startswith("playground:prefix_cache_capacity_positions{"))
    assert float(line.split()[-1]) == budget > 4096   # sized from the memory available at load
    assert "playground:prefix_cache_evictions_total" in text and "playground:prefix_cache_positions" in text


def test_a_dated_system_prompt_is_named_at_the_system_message(served, monkeypatch):
    from playground.tokens import chat as chat_module
    times = iter(["2026-12-06 21:00:01", "2026-12-06 21:00:09"])
    monkeypatch.setattr(chat_module, "clock_text", lambda: next(times))
    usage, record = chat(served, 2, extra_body={"prompt_cache_key": "trip-clock", "x_playground": {"template": "clock"}})[1]
    assert record["cause"] == "volatile system prompt" and record["message"]["message"] == 0
    assert record["now"][0] == "9" and record["then"][0] == "1"
    assert usage.prompt_tokens_details.cached_tokens == 16 * (record["first_difference"] // 16)   # only before it


def test_tools_sent_in_another_order_are_named_at_the_tools_block(served):
    tools = [{"type": "function", "function": {"name": "timetable"}}, {"type": "function", "function": {"name": "fares"}}]
    sdk, messages = served.sdk(), [{"role": "user", "content": QUESTIONS[0]}]
    extra = {"prompt_cache_key": "trip-tools", "x_playground": {"template": "tools"}}
    first = sdk.chat.completions.create(model="m", messages=messages, max_tokens=4, temperature=0, tools=tools,
                                        extra_body=extra)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": QUESTIONS[1]}]
    second = sdk.chat.completions.create(model="m", messages=messages, max_tokens=4, temperature=0,
                                         tools=tools[::-1], extra_body=extra)
    record = second.model_extra["x_playground"]["cache"]
    assert record["cause"] == "tools reordered or changed" and "reordered" in record["detail"]
    assert record["message"]["part"] == "tools" and record["message"]["name"] == "fares"


# --- the agent routes: a Responses chain and a Messages conversation, each turn with its pick and record

ANSWERS = ["The Eurostar.", "About two hours.", "Yes, a bar.", "Yes, folded."]


def check_turns(turns, conversation, matched_by) -> None:
    """[(prompt tokens, answer tokens, cached tokens, x_playground.cache)] of one conversation's turns: the first new,
    each later one continuing it, found as `matched_by` says (one per later turn), up to the previous sequence's
    last full block."""
    (_, _, cached, record), rest = turns[0], turns[1:]
    assert record["cause"] == "new conversation" and record["turn"] == 1 and cached == record["cached"] == 0
    assert len(matched_by) == len(rest)
    for k, ((prompt, answer, _, _), (_, _, cached, record), how) in enumerate(zip(turns, rest, matched_by), 2):
        bound = 16 * ((prompt + answer - 1) // 16)
        assert record["turn"] == k and record["cause"] == "no miss", record
        assert (record["conversation"], record["matched_by"]) == (conversation, how)
        assert cached == record["cached"] >= bound > 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_chain_is_one_conversation_and_each_response_says_its_record(served, script, stream):
    """Each turn sends only its question and the previous response's id: the chain's first response names the
    conversation (api/session_hint.py), and every response carries x_playground.cache (a stream's on its terminal
    event's response), the turn's record beside usage.input_tokens_details.cached_tokens. The answers are scripted
    words: the plain tiny model writes only whitespace, which these APIs send as no text."""
    script.add(*ANSWERS)
    sdk, previous, turns, first = served.sdk(), None, [], None
    instructions = opening(f"{'streamed' if stream else 'whole'} chain")["content"]
    for question in QUESTIONS[:4]:
        kwargs = dict(model="m", input=question, instructions=instructions, previous_response_id=previous,
                      max_output_tokens=12, temperature=0)
        if stream:
            events = list(sdk.responses.create(stream=True, **kwargs))
            response = events[-1].response   # the terminal event's (max_output_tokens reached: incomplete)
            assert events[-1].type in ("response.completed", "response.incomplete")
            assert all("x_playground" not in e.response.model_extra for e in events[:-1] if hasattr(e, "response"))
        else:
            response = sdk.responses.create(**kwargs)
        usage = response.usage
        turns.append((usage.input_tokens, usage.output_tokens, usage.input_tokens_details.cached_tokens,
                      response.model_extra["x_playground"]["cache"]))
        previous, first = response.id, first or response.id
    check_turns(turns, first, ["prefix", "key", "key"])   # the first response named no key: found by its prefix


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_conversation_is_picked_by_its_prefix_and_each_message_says_its_record(served, script, stream):
    """Anthropic's Messages API, the whole history sent each turn and no key: each turn continues the client's
    sequence its prompt begins with (the longest common prefix), and every message carries x_playground.cache (a
    stream's on its message_delta, beside the final usage). The answers are scripted words, as above."""
    import anthropic
    script.add(*ANSWERS)
    client = anthropic.Anthropic(base_url=served.url, api_key=KEY, max_retries=0, timeout=60)
    messages, turns = [], []
    system = opening(f"{'streamed' if stream else 'whole'} messages")["content"]
    for question in QUESTIONS[:4]:
        messages.append({"role": "user", "content": question})
        kwargs = dict(model="m", max_tokens=12, system=system, messages=messages, extra_body={"temperature": 0})
        if stream:
            with client.messages.stream(**kwargs) as events:
                delta = next(e for e in events if e.type == "message_delta")
                message = events.get_final_message()
            record = delta.model_extra["x_playground"]["cache"]
        else:
            message = client.messages.create(**kwargs)
            record = message.model_extra["x_playground"]["cache"]
        usage = message.usage
        prompt = usage.input_tokens + usage.cache_read_input_tokens
        turns.append((prompt, usage.output_tokens, usage.cache_read_input_tokens, record))
        messages.append({"role": "assistant", "content": "".join(b.text for b in message.content)})
    check_turns(turns, turns[1][3]["conversation"], ["prefix"] * 3)
    assert turns[1][3]["conversation"].startswith("conversation ")
