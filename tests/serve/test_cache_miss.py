"""Why a turn missed the prefix cache (serve/cache_miss.py), on token sequences built here: one test per cause, each
with where the prompt parts from what the cache held, the tokens computed again and the ribbon; then the eviction
log the cause "evicted" reads (serve/prefix_cache.py)."""
from __future__ import annotations

import pytest

from playground.serve.cache_miss import AROUND, Cause, Previous, common_prefix, explain
from playground.serve.prefix_cache import Eviction, PrefixCache, block_hashes
from playground.tokens.chat import MessageSpan


def chat(*parts):
    """(ids, spans) of a chat built from (message, role, part, ids) pieces, in order."""
    ids, spans = [], []
    for message, role, part, piece in parts:
        spans.append(MessageSpan(len(ids), len(ids) + len(piece), message, role, part))
        ids += list(piece)
    return ids, tuple(spans)


def block(role: int, message: int, content: list[int], name: str = "") -> list[tuple]:
    """One ChatML block: a header, the content, the end marker."""
    kind = {1: "system", 2: "user", 3: "assistant"}[role]
    return [(message, kind, "template", [900 + role, 950]), (message, kind, "content", content),
            (message, kind, "template", [999, 950])]


SYSTEM = list(range(100, 130))                    # 30 tokens
QUESTION, ANSWER, NEXT = list(range(200, 220)), list(range(300, 325)), list(range(400, 415))
GEN = [(None, "assistant", "generation prompt", [903, 950])]
M1 = ({"role": "system", "content": "sys"}, {"role": "user", "content": "q1"})
M2 = M1 + ({"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"})


def first_turn(gen=GEN, system=SYSTEM, messages=M1, answer="a1", tools=()):
    ids, spans = chat(*block(1, 0, system), *block(2, 1, QUESTION), *gen)
    return Previous(tuple(ids + ANSWER + [999]), len(ids), messages, spans, answer, tools)


def second_turn(system=SYSTEM, answer=ANSWER, question=NEXT):
    return chat(*block(1, 0, system), *block(2, 1, QUESTION), *block(3, 2, answer), *block(2, 3, question), *GEN)


def test_a_turn_that_continues_the_cached_sequence_misses_nothing_but_the_last_partial_block():
    prev = first_turn()
    ids, spans = second_turn()
    assert ids[:len(prev.ids)] == list(prev.ids)          # the history, then the new question
    ideal = 16 * ((len(prev.ids) - 1) // 16)
    r = explain(ids, ideal, prev, spans=spans, messages=M2)
    assert r.cause is Cause.NONE and r.first_difference is None and r.turn == 2
    assert r.common_prefix == len(prev.ids) and r.ideal == ideal
    assert r.recomputed == len(ids) - 16 * (r.common_prefix // 16)
    assert r.ribbon == {"cached": ideal, "recomputed": len(prev.ids) - ideal, "new": len(ids) - len(prev.ids)}


def test_a_first_turn_is_a_new_conversation_and_a_short_prompt_below_one_block():
    ids, spans = chat(*block(2, 0, QUESTION))
    r = explain(ids, 0, None, spans=spans, messages=M1[1:])
    assert r.cause is Cause.NEW and r.turn == 1 and r.recomputed == len(ids) and r.ribbon["new"] == len(ids)
    short = explain(list(range(16)), 0, None)           # 16 tokens: the last is always computed, no block is whole
    assert short.cause is Cause.BELOW and short.ideal == 0


def test_a_history_shorter_than_one_block_is_below_one_block():
    prev = Previous((1, 2, 3, 4, 5, 6), 4)
    r = explain([1, 2, 3, 4, 5, 6] + list(range(50, 70)), 0, prev)
    assert r.cause is Cause.BELOW and r.ideal == 0 and r.common_prefix == 6 and r.first_difference is None


def test_blocks_found_evicted_name_when_and_what_took_the_room():
    prev = first_turn()
    ids, spans = second_turn()
    gone = Eviction(hash=7, at=1000.0, by="chatcmpl-9 · client 2", block=41)
    r = explain(ids, 16, prev, spans=spans, messages=M2, eviction=gone, now=1012.5)
    assert r.cause is Cause.EVICTED and r.ideal > 16
    assert r.evicted["by"] == "chatcmpl-9 · client 2" and r.evicted["seconds_before"] == 12.5
    assert r.evicted["log_bound"] > 0 and "client 2" in r.detail
    assert r.ribbon["cached"] == 16 and r.ribbon["recomputed"] == len(prev.ids) - 16


def test_blocks_missing_with_no_eviction_on_record_are_unknown_never_zero():
    prev = first_turn()
    ids, spans = second_turn()
    r = explain(ids, 0, prev, spans=spans, messages=M2)
    assert r.cause is Cause.UNKNOWN and r.cause.value == "unknown" and r.evicted is None
    assert r.as_dict()["cause"] == "unknown"


def test_a_template_that_drops_the_generation_prompt_from_the_history_is_a_template_rewrite():
    think = [(None, "assistant", "generation prompt", [903, 950, 700, 701, 702, 703, 950])]   # an empty <think>
    prev = first_turn(gen=think)
    ids, spans = second_turn()          # the history shows the answer without it
    r = explain(ids, 48, prev, spans=spans, messages=M2, decode=lambda t: f"<{t[0]}>")
    rewritten = prev.spans[-1]
    assert r.cause is Cause.TEMPLATE
    assert rewritten.start <= r.first_difference < rewritten.end                  # inside the rewritten span
    assert r.was.part == "generation prompt" and r.message.message == 2 and r.message.role == "assistant"
    assert r.recomputed == len(ids) - 16 * (r.common_prefix // 16)
    assert r.now[0] == f"<{ANSWER[0]}>" and r.then[0] == "<700>"
    assert len(r.before) == AROUND and len(r.now) == AROUND + 1


def test_an_earlier_message_changed_is_an_edited_turn():
    prev = Previous(*_two_turns())
    edited_q = QUESTION[:5] + [777] + QUESTION[6:]
    ids, spans = chat(*block(1, 0, SYSTEM), *block(2, 1, edited_q), *block(3, 2, ANSWER), *block(2, 3, NEXT),
                      *block(3, 4, ANSWER), *block(2, 5, NEXT), *GEN)
    messages = (M2[0], {"role": "user", "content": "q1 edited"}, *M2[2:], {"role": "assistant", "content": "a2"},
                {"role": "user", "content": "q3"})
    r = explain(ids, 32, prev, spans=spans, messages=messages)
    assert r.cause is Cause.EDITED and r.message.message == 1 and r.message.part == "content"
    assert r.first_difference == 2 + len(SYSTEM) + 2 + 2 + 5


def _two_turns():
    ids, spans = second_turn()
    return tuple(ids + ANSWER + [999]), len(ids), M2, spans, "a2"


def test_the_answer_sent_back_as_the_same_text_but_other_ids_is_re_tokenized():
    prev = first_turn(answer="a1")
    retokenized = ANSWER[:20] + [888] + ANSWER[22:]      # two ids read back as one
    ids, spans = second_turn(answer=retokenized)
    r = explain(ids, 80, prev, spans=spans, messages=M2)
    assert r.cause is Cause.RETOKENIZED and r.was.part == "answer" and r.message.message == 2
    assert r.first_difference == prev.prompt + 20


def test_an_answer_whose_text_lacks_its_last_ids_is_re_tokenized():
    """An answer cut inside a multi-byte character: its text has no bytes for the last ids generated, so the prompt
    parts from the cached sequence right after the answer's text, where the template closes the message."""
    prev = first_turn(answer="a1")
    ids, spans = second_turn(answer=ANSWER[:23])
    r = explain(ids, 80, prev, spans=spans, messages=M2)
    assert r.cause is Cause.RETOKENIZED and r.first_difference == prev.prompt + 23
    assert (r.message.message, r.message.part, r.was.part) == (2, "template", "answer")


def test_an_answer_rendered_after_a_header_the_generation_prompt_lacked_is_a_template_rewrite():
    prev = first_turn(answer="a1")
    ids, spans = chat(*block(1, 0, SYSTEM), *block(2, 1, QUESTION), (2, "assistant", "template", [903, 950, 777]),
                      (2, "assistant", "content", ANSWER), (2, "assistant", "template", [999, 950]),
                      *block(2, 3, NEXT), *GEN)
    r = explain(ids, 48, prev, spans=spans, messages=M2)
    assert r.cause is Cause.TEMPLATE and r.first_difference == prev.prompt and r.message.part == "template"


def test_the_answer_sent_back_changed_is_an_edited_turn():
    prev = first_turn(answer="something else")
    ids, spans = second_turn(answer=ANSWER[:20] + [888])
    assert explain(ids, 80, prev, spans=spans, messages=M2).cause is Cause.EDITED


def test_a_system_prompt_that_changed_while_the_turns_did_not_is_volatile():
    prev = first_turn()
    dated = SYSTEM[:3] + [555] + SYSTEM[4:]              # the time, early in the system prompt
    ids, spans = second_turn(system=dated)
    r = explain(ids, 0, prev, spans=spans, messages=M2)
    assert r.cause is Cause.SYSTEM and r.message.role == "system" and r.message.message == 0
    assert r.first_difference == 5 and r.ideal == 0 and r.recomputed == len(ids)


def test_tools_in_another_order_are_named_at_the_tools_block():
    lines = ([600, 601, 602], [610, 611, 612])
    def with_tools(order):
        return chat((None, "system", "template", [901, 950]),
                    *[(None, "system", "tools", list(lines[i])) for i in order],
                    (None, "system", "template", [999, 950]), *block(2, 0, QUESTION), *GEN)
    ids, spans = with_tools((0, 1))
    prev = Previous(tuple(ids + ANSWER), len(ids), M1[1:], spans, "a1", ("t0", "t1"))
    ids2, spans2 = with_tools((1, 0))
    r = explain(ids2, 0, prev, spans=spans2, messages=M1[1:], tools=("t1", "t0"))
    assert r.cause is Cause.TOOLS and r.message.part == "tools" and "reordered" in r.detail
    assert r.first_difference == 2
    changed = explain(ids2, 0, prev, spans=spans2, messages=M1[1:], tools=("t1", "t2"))
    assert changed.cause is Cause.TOOLS and "changed" in changed.detail


def test_a_raw_prompt_that_parts_from_its_history_is_placed_nowhere_known():
    prev = Previous(tuple(range(60)), 40)
    r = explain(list(range(30)) + [5] * 20, 16, prev)
    assert r.cause is Cause.UNKNOWN and r.first_difference == 30 and r.message is None


@pytest.mark.parametrize("a, b, n", [([1, 2, 3], [1, 2, 3], 3), ([1], [2], 0), ([], [], 0), ([4, 5], [4, 5, 6], 2)])
def test_common_prefix(a, b, n):
    assert common_prefix(a, b) == n


def test_the_eviction_log_is_keyed_by_block_hash_and_bounded():
    cache = PrefixCache(capacity=2, block_size=4)
    cache.log_bound = 3
    ids = list(range(4 * 6))
    hashes = block_hashes(ids, 4)
    for i, h in enumerate(hashes):
        cache.insert(h, ids[4 * i:4 * i + 4], lambda: [], by=f"req {i}")
    assert cache.evicted == 4 and len(cache.evictions) == 3          # the oldest eviction was dropped
    assert hashes[0] not in cache.evictions and cache.evictions[hashes[1]].by == "req 3"
    cache.insert(hashes[1], ids[4:8], lambda: [], by="again")        # cached again: no longer evicted
    assert hashes[1] not in cache.evictions

