"""A session's blocks held across its gap (serve/prefix_cache.py's retain, serve/session_gaps.py): evicted last,
released when the TTL runs out or past the held share, evicted anyway under pressure; each eviction's reason in the
log and in the next turn's cache record. Time is a fake clock (nothing sleeps), except in the replay of the agents'
preset on the engine, whose gaps are real seconds and whose block states our batching measures."""
from __future__ import annotations

from dataclasses import replace

import pytest

from playground.config import GenerationSettings
from playground.serve.agent_trace import read_rows
from playground.serve.batcher import BatchConfig
from playground.serve.cache_miss import Previous, explain
from playground.serve.cli import parse_args, picks
from playground.serve.conversations import Turn
from playground.serve.engine_loop import EngineLoop, LoopRun
from playground.serve import SCHEDULERS
from playground.serve.prefix_cache import PrefixCache, Reason
from playground.serve.presets import PRESETS
from playground.serve.session_gaps import first_eviction, replay_gaps
from playground.serve.session_preset import NAME, after_gap_turns
from playground.serve.sessions import Session, SessionSource
from playground.tokens.chat import render_chat


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def cache_of(capacity: int, share: float, clock=None) -> PrefixCache:
    return PrefixCache(capacity, block_size=1, clock=clock or Clock(), held_share=share)


def put(cache, hashes, by=""):
    return [cache.insert(h, (h,), lambda: [], by=by) for h in hashes]


def test_held_blocks_survive_pressure_that_evicts_the_unheld():
    cache = cache_of(4, 0.5)
    put(cache, [1, 2])
    assert cache.retain([1, 2], "agent", 300.0) == 2
    put(cache, [10, 11], by="other")
    put(cache, [12, 13, 14], by="third")        # three more: the unheld go, least recently used first
    assert 1 in cache.blocks and 2 in cache.blocks
    assert [h for h in (10, 11, 12) if h not in cache.blocks] == [10, 11, 12]
    assert {cache.evictions[h].reason for h in (10, 11, 12)} == {Reason.LRU}
    assert cache.evictions[12].by == "third" and cache.held_positions() == 2


def test_without_a_hold_the_same_traffic_evicts_the_sessions_blocks():
    cache = cache_of(4, 0.5)
    put(cache, [1, 2])
    put(cache, [10, 11, 12, 13, 14])
    assert 1 not in cache.blocks and cache.evictions[1].reason is Reason.LRU


def test_a_hold_whose_ttl_ran_out_is_evictable_and_its_eviction_says_ttl_expired():
    clock = Clock()
    cache = cache_of(3, 1.0, clock)
    put(cache, [1, 2])
    cache.retain([1, 2], "agent", 60.0)
    clock.t += 59.0
    put(cache, [10, 11], by="before")           # within the TTL: only 10 could go (then nothing is kept past it)
    assert 1 in cache.blocks and 2 in cache.blocks and cache.evictions[10].reason is Reason.LRU
    clock.t += 2.0                              # 61 s after the hold
    assert cache.held_positions() == 0
    put(cache, [20], by="after · b")
    gone = [h for h in (1, 2) if h not in cache.blocks]
    assert len(gone) == 1 and cache.evictions[gone[0]].reason is Reason.EXPIRED
    assert cache.evictions[gone[0]].by == "after · b" and cache.evictions[gone[0]].at == clock.t
    assert cache.by_reason[Reason.EXPIRED] == 1

    # the next turn's record names the reason
    prompt = list(range(40))
    record = explain(prompt + [99], cached=16, previous=Previous(ids=tuple(prompt) + (7, 8), prompt=40),
                     eviction=cache.evictions[gone[0]], now=clock.t + 5.0)
    assert record.cause.value == "evicted" and record.evicted["reason"] == "TTL expired"
    assert "TTL expired" in record.detail and record.evicted["seconds_before"] == 5.0


def test_over_the_held_share_the_oldest_holds_are_released():
    clock = Clock()
    cache = cache_of(8, 0.5, clock)             # 4 blocks may be held
    put(cache, [1, 2])
    cache.retain([1, 2], "old", 300.0)
    clock.t += 1
    put(cache, [3, 4, 5])
    assert cache.retain([3, 4, 5], "new", 300.0) == 3
    assert cache.held_positions() == 4
    assert cache.chain_state([1, 2])["held"] == 1 and cache.chain_state([3, 4, 5])["held"] == 3
    # the released block is evictable before any still held, and its eviction says why it was released
    released = [h for h in (1, 2) if cache.blocks[h].hold is None]
    assert released == [2]                      # a chain is released from its tail: its beginning is held longest
    put(cache, [6, 7, 8])                       # the budget is full
    put(cache, [9], by="x")                     # one more: 2 goes first, older unheld 6, 7, 8 are more recent
    assert 2 not in cache.blocks and cache.evictions[2].reason is Reason.SHARE and cache.evictions[2].by == "x"
    assert all(h in cache.blocks for h in (1, 3, 4, 5, 6, 7, 8))


def test_under_pressure_with_only_held_blocks_a_held_one_is_evicted_for_pressure():
    cache = cache_of(2, 1.0)
    put(cache, [1, 2])
    cache.retain([1, 2], "agent", 3600.0)
    assert put(cache, [3], by="newcomer")[0] is not None
    gone = [h for h in (1, 2) if h not in cache.blocks]
    assert len(gone) == 1 and cache.evictions[gone[0]].reason is Reason.PRESSURE
    assert cache.evictions[gone[0]].session == "agent" and cache.evictions[gone[0]].by == "newcomer"
    assert cache.by_reason[Reason.PRESSURE] == 1


def test_a_block_a_running_request_holds_is_never_evicted_even_under_pressure():
    cache = cache_of(1, 1.0)
    block = put(cache, [1])[0]
    cache.retain([1], "agent", 300.0)
    cache.hold([block])
    assert cache.insert(2, (2,), lambda: []) is None and 1 in cache.blocks


def test_no_share_or_no_ttl_holds_nothing():
    cache = cache_of(4, 0.0)
    put(cache, [1])
    assert cache.retain([1], "s", 300.0) == 0 and cache.held_positions() == 0
    cache = cache_of(4, 0.5)
    put(cache, [1])
    assert cache.retain([1], "s", None) == 0 and cache.retain([1], "s", 0.0) == 0
    with pytest.raises(ValueError, match="share"):
        PrefixCache(4, held_share=1.5)


ROWS = [  # two agents and a stream of one-off requests between their turns; gaps of 30 s and 200 s
    '{"session_id": "a", "timestamp": 0, "input_length": 64, "output_length": 8, "hash_ids": [1, 2, 3, 4]}',
    '{"session_id": "b", "timestamp": 1000, "input_length": 64, "output_length": 8, "hash_ids": [21, 22, 23, 24]}',
    '{"timestamp": 5000, "input_length": 48, "output_length": 8, "hash_ids": [41, 42, 43]}',
    '{"timestamp": 10000, "input_length": 48, "output_length": 8, "hash_ids": [51, 52, 53]}',
    '{"session_id": "a", "delay": 30000, "input_length": 96, "output_length": 8, "hash_ids": [1, 2, 3, 4, 5, 6]}',
    '{"timestamp": 60000, "input_length": 48, "output_length": 8, "hash_ids": [61, 62, 63]}',
    '{"timestamp": 70000, "input_length": 48, "output_length": 8, "hash_ids": [71, 72, 73]}',
    '{"session_id": "b", "delay": 200000, "input_length": 96, "output_length": 8, "hash_ids": [21, 22, 23, 24, 25]}',
]


def test_a_trace_with_gaps_shows_held_evicted_and_expired_blocks_per_gap():
    rows = read_rows(ROWS)
    gaps, cache = replay_gaps(rows, capacity=12, held_share=0.7, ttl_s=60.0)
    by = {(g.session, g.turn): g for g in gaps}
    a, b = by["a", 1], by["b", 1]
    assert a.seconds == 30.0 and b.seconds == 200.0
    assert a.state == {"held": 4, "evictable": 0, "evicted": {}, "missing": 0}   # held through its 30 s gap
    # b asked 60 s and waited 200 s: its hold ran out, and the one-off requests took the room
    # (a's longer chain took the held share first: two of b's were released early)
    assert b.state == {"held": 0, "evictable": 0, "evicted": {"TTL expired": 2, "over the held share": 2},
                       "missing": 0}
    assert cache.by_reason[Reason.EXPIRED] >= 2 and cache.by_reason[Reason.PRESSURE] == 0

    unheld, _ = replay_gaps(rows, capacity=12, held_share=0.0, ttl_s=60.0)   # the same budget, nothing held
    assert unheld[0].session == "a" and unheld[0].state["evicted"] == {"least recently used": 2}


def test_shrinking_the_budget_moves_the_first_eviction_earlier():
    rows = read_rows(ROWS)
    firsts = {}
    for capacity in (24, 14, 10):
        gaps, cache = replay_gaps(rows, capacity=capacity, held_share=0.5, ttl_s=60.0)
        firsts[capacity] = first_eviction(gaps)
    assert firsts[24] is None                    # everything fits
    assert firsts[10] is not None and firsts[14] is not None and firsts[10] < firsts[14]


# --- on the tiny model, through the engine loop

SETTINGS = GenerationSettings(max_new_tokens=20, top_candidates=1)
SYSTEM = {"role": "system", "content": "You answer in one short sentence about travel by train."}


def run(loop, ids, request_id, client, turn=None, session=None):
    ticket = loop.submit(ids, SETTINGS, request_id=request_id, client=client, turn=turn, session=session)
    for _ in LoopRun(loop, ticket):
        pass
    return ticket


def gap_with_traffic(engine, session):
    """A turn of one agent, three other clients' requests in its gap, then its next turn: that turn's record."""
    clock = Clock()
    loop = EngineLoop(engine, BatchConfig(slots=1, prefill_chunk=64, prefix_cache=10 * 16, session_share=0.5),
                      capacity=512)
    loop.batcher.cache.clock = clock
    try:
        messages = [SYSTEM, {"role": "user", "content": "Which train goes to Paris?"}]
        chat = render_chat(engine.tokenizer, messages)
        first = run(loop, chat.ids, "turn-1", "agent", Turn("k", chat.messages, chat.spans), session)
        for k in range(3):   # the tool runs; others' requests take the cache's room
            clock.t += 10.0
            run(loop, list(range(100 + 60 * k, 150 + 60 * k)), f"other-{k}", f"client {k}")
        clock.t += 10.0
        messages += [{"role": "assistant", "content": first.trace.text},
                     {"role": "user", "content": "How long does it take?"}]
        chat2 = render_chat(engine.tokenizer, messages)
        second = run(loop, chat2.ids, "turn-2", "agent", Turn("k", chat2.messages, chat2.spans), session)
        return second.trace.cache, loop.batcher.cache
    finally:
        loop.close()


def test_a_sessions_history_is_held_through_its_gap_on_the_engine_loop(tiny_onnx_engine):
    record, cache = gap_with_traffic(tiny_onnx_engine, Session("agent-7", SessionSource.HEADER, ttl_s=300.0))
    assert record["cause"] == "no miss" and record["cached"] == record["ideal"] > 0
    assert cache.by_reason[Reason.LRU] > 0 and cache.by_reason[Reason.PRESSURE] == 0

    record, _ = gap_with_traffic(tiny_onnx_engine, None)   # the same traffic, no session: its history was evicted
    assert record["cause"] == "evicted" and record["cached"] < record["ideal"]
    assert record["evicted"]["reason"] == "least recently used" and record["evicted"]["by"].startswith("other-")


def test_a_session_that_asked_a_short_ttl_finds_it_expired(tiny_onnx_engine):
    record, cache = gap_with_traffic(tiny_onnx_engine, Session("agent-8", SessionSource.AGENT_HINT, ttl_s=15.0))
    assert record["cause"] == "evicted" and record["evicted"]["reason"] == "TTL expired"
    assert record["evicted"]["by"].startswith("other-") and record["evicted"]["seconds_before"] >= 0
    assert "TTL expired" in record["detail"]


def test_the_cli_holds_a_replayed_traces_sessions_when_asked():
    args = parse_args(["--out", "x", "--scheduler", "batching", "--prefix-cache", "1024", "--session-share", "0.5",
                       "--session-ttl", "30"])
    batch = picks(args)[0].batch
    assert (batch.session_share, batch.session_ttl) == (0.5, 30.0)
    assert picks(parse_args(["--out", "x"]))[0].batch.session_share == 0.0   # off unless asked
    with pytest.raises(ValueError, match="share of the prefix cache"):
        BatchConfig(prefix_cache=1024, session_share=1.5).validate()


def first_measured_eviction(result) -> int | None:
    """The index, in the order the turns were released, of the first gap whose session found a block of its chain
    evicted, as our batching measured it (RequestRecord.gap_blocks); None: none did."""
    turns = sorted(after_gap_turns(result.records), key=lambda r: r.released)
    return next((k for k, r in enumerate(turns) if r.gap_blocks["evicted"]), None)


@pytest.mark.slow
def test_on_the_engine_shrinking_the_budget_moves_the_first_measured_eviction_earlier(tiny_onnx_engine):
    """The agents' preset trace replayed in real time on the tiny model, sessions held for 30 s, under a prefix cache
    of 40, 24 and 16 blocks: 40 keeps every gap's blocks; 24 holds the first gap's and then releases the oldest holds
    past its share; 16 loses blocks from the first gap on. Each state is measured in the engine's own cache."""
    preset = PRESETS[NAME]
    workload = preset.build(tiny_onnx_engine, preset.requests, None, 0)
    held, _ = preset.configs(workload, len, BatchConfig())
    firsts, results = {}, {}
    for blocks in (40, 24, 16):
        config = replace(held, prefix_cache=blocks * 16)
        results[blocks] = SCHEDULERS["batching"].create(tiny_onnx_engine, batch=config).run(workload)
        firsts[blocks] = first_measured_eviction(results[blocks])
    assert firsts[40] is None
    assert firsts[24] is not None and firsts[16] is not None and firsts[16] < firsts[24], firsts
    states = [r.gap_blocks for r in results[24].records if r.gap_blocks is not None]
    assert any(s["held"] and s["evicted"] for s in states), states   # retained and evicted blocks in one gap
