"""Conversations in the engine loop (serve/conversations.py, serve/batching.py, tokens/chat.py) on the tiny model:
the blocks a turn generated are found again by the next, and each turn's record names why the rest was computed
(template rewrite, volatile system prompt, tools reordered, evicted), at the right message."""
from __future__ import annotations

import pytest

from playground.config import GenerationSettings
from playground.serve.batcher import BatchConfig, Batcher
from playground.serve.conversations import Turn
from playground.serve.engine_loop import EngineLoop, LoopRun
from playground.tokens.chat import TEMPLATES, render_chat

SETTINGS = GenerationSettings(max_new_tokens=20, top_candidates=1)
SYSTEM = {"role": "system", "content": "You answer in one short sentence about travel by train."}
QUESTIONS = ["Which train goes to Paris?", "How long does it take?", "Is there a dining car?",
             "Can I bring a bicycle?", "Where do I buy a ticket?", "Is it cheaper at night?"]
TOOLS = [{"function": {"name": "timetable"}}, {"function": {"name": "fares"}}]   # short: the tiny model's window


@pytest.fixture(scope="module")
def loop(tiny_onnx_engine):
    loop = EngineLoop(tiny_onnx_engine, BatchConfig(slots=2, prefill_chunk=64, prefix_cache=8192), capacity=512)
    yield loop
    loop.close()


def converse(loop, turns: int, key: str, template: str = "model", client: str = "c", tools=(), clock=None,
             ignore_eos: bool = False):
    """Run `turns` turns of one conversation; [(chat, trace, the whole record)] per turn, each answer sent back as
    its text (the Trace keeps the record without its decoded tokens)."""
    messages, out = [SYSTEM], []
    for t in range(turns):
        messages.append({"role": "user", "content": QUESTIONS[t]})
        chat = render_chat(loop.engine.tokenizer, messages, template=template,
                           tools=tools[t] if tools else (), now=clock[t] if clock else None)
        ticket = loop.submit(chat.ids, SETTINGS, client=client, ignore_eos=ignore_eos,
                             turn=Turn(key, chat.messages, chat.spans, chat.tools, template))
        for _ in LoopRun(loop, ticket):   # its Steps as the loop makes them, to its end
            pass
        out.append((chat, ticket.trace, ticket.seq.conversation.record.as_dict()))
        messages.append({"role": "assistant", "content": ticket.trace.text})
    return out


def test_six_turns_each_find_the_whole_history_up_to_its_last_full_block(loop):
    turns = converse(loop, 6, "six turns")
    for (chat, trace, _), (before, previous, _) in zip(turns[1:], turns):
        bound = 16 * ((len(before.ids) + len(previous.steps) - 1) // 16)
        assert trace.cached_tokens >= bound > 0
        record = trace.cache
        assert record["cause"] == "no miss" and record["turn"] == [t for _, t, _ in turns].index(trace) + 1
        assert record["matched_by"] == "key" and record["cached"] == trace.cached_tokens
        assert sum(record["ribbon"].values()) == len(chat.ids)
    assert turns[0][1].cache["cause"] == "new conversation"


def test_a_reasoning_template_rewrites_the_turn_before(loop):
    turns = converse(loop, 3, "thinking", template="thinking", ignore_eos=True)
    for (chat, trace, record), (before, *_) in zip(turns[1:], turns):
        assert {k: v for k, v in record.items() if k not in ("before", "now", "then")} == trace.cache
        think = before.spans[-1]   # the previous turn's generation prompt: its empty <think> block
        assert think.part == "generation prompt" and "<think>" in before.text
        assert record["cause"] == "template rewrite"
        first = record["first_difference"]
        assert think.start <= first < think.end                           # inside the rewritten span: at <think>
        assert loop.engine.tokenizer.decode(before.ids[first:think.end]) == "<think>\n\n</think>\n\n"
        assert record["recomputed"] == len(chat.ids) - 16 * (record["common_prefix"] // 16)
        assert "".join(record["then"]).startswith("<think>") and record["was"]["part"] == "generation prompt"
        assert record["message"]["role"] == "assistant"


def test_a_system_prompt_with_the_time_is_named_at_the_system_message(loop):
    turns = converse(loop, 2, "clock", template="clock", clock=["2026-12-06 21:00:01", "2026-12-06 21:00:09"])
    record = turns[1][2]
    assert record["cause"] == "volatile system prompt"
    assert record["message"]["message"] == 0 and record["message"]["role"] == "system"
    assert "".join(record["before"]).endswith("21:00:0") and record["now"][0] == "9" and record["then"][0] == "1"


def test_tools_in_another_order_are_named_at_the_tools_block(loop):
    turns = converse(loop, 2, "tools", template="tools", tools=[TOOLS, TOOLS[::-1]])
    record = turns[1][1].cache
    assert record["cause"] == "tools reordered or changed" and "reordered" in record["detail"]
    assert record["message"]["part"] == "tools" and record["message"]["name"] == "fares"


def test_without_a_key_a_turn_continues_its_clients_most_similar_sequence_and_never_another_clients(loop):
    first = converse(loop, 2, "", client="prefix a")
    assert first[1][1].cache["matched_by"] == "prefix" and first[1][1].cache["cause"] == "no miss"
    other = converse(loop, 1, "", client="prefix b")    # the same system prompt and question, another client
    assert other[0][1].cache["matched_by"] == "none" and other[0][1].cache["cause"] == "new conversation"


def test_a_turn_whose_history_was_evicted_says_when_and_by_whom(tiny_onnx_engine):
    batcher = Batcher(tiny_onnx_engine, BatchConfig(slots=1, prefix_cache=8 * 16), capacity=512)
    messages = [SYSTEM, {"role": "user", "content": QUESTIONS[0]}]
    chat = render_chat(tiny_onnx_engine.tokenizer, messages)
    seq = batcher.add(chat.ids, SETTINGS, "turn-1", client="a", turn=Turn("k", chat.messages, chat.spans))
    while batcher.busy():
        batcher.step()
    other = batcher.add(list(range(5, 5 + 200)), SETTINGS, "the-long-one", client="b")   # fills the cache
    while batcher.busy():
        batcher.step()
    messages += [{"role": "assistant", "content": seq.trace.text}, {"role": "user", "content": QUESTIONS[1]}]
    chat2 = render_chat(tiny_onnx_engine.tokenizer, messages)
    seq2 = batcher.add(chat2.ids, SETTINGS, "turn-2", client="a", turn=Turn("k", chat2.messages, chat2.spans))
    while batcher.busy():
        batcher.step()
    record = seq2.trace.cache
    assert other.trace.cache == {}                      # no turn: no record
    assert record["cause"] == "evicted" and record["cached"] < record["ideal"]
    assert record["evicted"]["by"] == "the-long-one · b" and record["evicted"]["seconds_before"] >= 0


def test_a_request_that_ends_keeps_the_blocks_it_generated(tiny_onnx_engine):
    batcher = Batcher(tiny_onnx_engine, BatchConfig(slots=1, prefix_cache=1024), capacity=512)
    prompt = list(range(5, 5 + 20))
    seq = batcher.add(prompt, GenerationSettings(max_new_tokens=30, top_candidates=1), 0, ignore_eos=True)
    while batcher.busy():
        batcher.step()
    whole = prompt + seq.trace.output_ids
    assert len(batcher.cache) == (len(whole) - 1) // 16 == 3      # the prompt had one full block; it made two more
    again = batcher.add(whole + [7], SETTINGS, 1)
    while batcher.busy():
        batcher.step()
    assert again.trace.cached_tokens == 48


def test_templates_are_named_and_an_unknown_one_is_refused(tiny_onnx_engine):
    assert {"model", "thinking", "clock", "tools"} <= set(TEMPLATES)
    with pytest.raises(ValueError, match="thinking"):
        render_chat(tiny_onnx_engine.tokenizer, [SYSTEM], template="nope")


def test_the_plans_admission_entry_carries_the_turns_record(tiny_onnx_engine):
    batcher = Batcher(tiny_onnx_engine, BatchConfig(slots=1, prefix_cache=1024), capacity=512)
    chat = render_chat(tiny_onnx_engine.tokenizer, [SYSTEM, {"role": "user", "content": QUESTIONS[0]}])
    seq = batcher.add(chat.ids, SETTINGS, "t1", client="a", turn=Turn("k", chat.messages, chat.spans))
    plan = batcher.plan()
    assert plan.admitted[0].turn.record.cause.value == "new conversation"
    assert plan.lines()[0] == "admit t1 (new conversation)" and seq.trace.cache == {}   # deciding changes nothing
    it = batcher.step()
    assert seq.trace.cache == it.plan.admitted[0].turn.record.as_dict(text=False) and seq.trace.cache["turn"] == 1


def test_a_tools_block_in_the_system_message_is_found_as_its_tools(tiny_onnx_engine):
    """The agent routes write the tools block into the system message (tokens/tools.py): its lines are still
    part "tools", each named, so a reordered list is named as such, not as a changed system prompt."""
    from playground.tokens.tools import with_tools
    chat = render_chat(tiny_onnx_engine.tokenizer, [{"role": "system", "content": with_tools("Be brief.", TOOLS)},
                                                    {"role": "user", "content": "Hi"}])
    assert [(s.message, s.name) for s in chat.spans if s.part == "tools"] == [(0, "timetable"), (0, "fares")]
    in_template = render_chat(tiny_onnx_engine.tokenizer, [{"role": "user", "content": "Hi"}], template="tools",
                              tools=TOOLS)
    assert with_tools("", TOOLS) in in_template.text   # the template writes the same block


def test_a_trace_keeps_the_record_without_any_decoded_text(loop):
    """A Trace is what the Watch view and its exports read: the record there has positions and causes, never a
    client's text; the decoded tokens go only to the request's own response."""
    (_, trace, record), = converse(loop, 1, "no text kept", client="private")
    assert record["now"] == () or record["first_difference"] is None
    assert not {"before", "now", "then"} & set(trace.cache) and {"before", "now", "then"} <= set(record)


@pytest.mark.integration
def test_the_bundled_model_finds_each_turns_history_and_names_the_reasoning_templates_rewrite():
    """Six turns with the bundled model's own template, each answer sent back as text: every turn finds its whole
    history up to the last full block. Then the reasoning template: each later turn is a template rewrite at the
    previous turn's empty <think> block."""
    from playground.backends import create_backend
    from playground.engine import Engine
    engine = Engine(create_backend("onnx-gguf4"))
    batcher = Batcher(engine, BatchConfig(slots=2, prefix_cache=8192), capacity=1024)
    settings = GenerationSettings(max_new_tokens=48, top_candidates=1)
    for template, turns in (("model", 6), ("thinking", 3)):
        messages, previous = [], None
        for t in range(turns):
            messages.append({"role": "user", "content": QUESTIONS[t]})
            chat = render_chat(engine.tokenizer, messages, template=template)
            seq = batcher.add(chat.ids, settings, f"{template} {t}", client="c",
                              turn=Turn(template, chat.messages, chat.spans))
            while batcher.busy():
                batcher.step()
            record = seq.conversation.record
            if previous is not None and template == "model":
                assert seq.trace.cached_tokens >= 16 * ((previous - 1) // 16) and record.cause.value == "no miss"
            if previous is not None and template == "thinking":
                assert record.cause.value == "template rewrite" and "".join(record.then).startswith("<think>")
                assert record.recomputed == len(chat.ids) - 16 * (record.common_prefix // 16)
            previous = len(chat.ids) + len(seq.trace.steps)
            messages.append({"role": "assistant", "content": seq.trace.text})
