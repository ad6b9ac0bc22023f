"""The batcher's plan (serve/plan.py) built from a state made here, without a model: admission under the slots and
the KV budget, the turn among clients, the prefix cache's lookup, chunks within the token budget, the decode rows,
preemption and its reason, and why each request waits; then, on the tiny model, that an iteration does what its
plan says and that a request's wait is accounted by reason."""
from __future__ import annotations

from types import SimpleNamespace as S

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playground.config import GenerationSettings
from playground.serve.batcher import BatchConfig, Batcher, Sequence
from playground.serve.plan import PreemptReason, WaitReason, make_plan
from playground.serve.prefix_cache import BLOCK_SIZE, PrefixCache, block_hashes
from playground.serve.slots import KVBudget, SlotTable


def request(name, prompt: int, *, client="", arrived=0.0, start=100, made=(), cache=False) -> Sequence:
    """A request as the batcher holds it, with `prompt` token ids from `start` on (no model behind it)."""
    ids = list(range(start, start + prompt))
    return Sequence(name, ids, GenerationSettings(), S(steps=[S(token_id=t) for t in made]), None, None, frozenset(),
                    arrived=arrived, prefill_ids=list(ids), hashes=block_hashes(ids) if cache else [], client=client)


def table_of(slots, decoding=(), prefilling=()) -> SlotTable:
    """A slot table over no memory, holding the decoding requests then the prefilling ones."""
    table = SlotTable(S(slots=slots, move=lambda *a: None, swap=lambda *a: None))
    table.decoding, table.prefilling = list(decoding), list(prefilling)
    return table


def decoding(name, prompt, blocks=0, made=(1,), **kw) -> Sequence:
    """A request whose prompt is read and which made `made`: its cache holds all but the last token."""
    seq = request(name, prompt, made=made, **kw)
    seq.read, seq.length, seq.blocks = prompt, prompt + len(made) - 1, blocks
    return seq


def plan_of(waiting=(), running=(), table=None, budget=None, cache=None, chunk=128, now=10.0):
    running = list(running)
    table = table or table_of(4, [s for s in running if s.read == len(s.prefill_ids)],
                              [s for s in running if s.read < len(s.prefill_ids)])
    return make_plan(list(waiting), running, table, budget, cache, chunk, now)


def ids(seqs) -> list:
    return [s.id for s in seqs]


# --- admission: slots, the turn among clients, the KV budget

def test_the_free_slots_are_taken_in_arrival_order_and_the_rest_wait_for_a_slot():
    busy = decoding("busy", 20)
    waiting = [request(n, 10, arrived=t) for n, t in (("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0))]
    plan = plan_of(waiting, [busy], table_of(3, [busy]))
    assert ids(a.seq for a in plan.admitted) == ["a", "b"]
    assert [(w.seq.id, w.reason) for w in plan.waits] == [("c", WaitReason.NO_SLOT), ("d", WaitReason.NO_SLOT)]
    assert plan.reason(waiting[0]) is None and plan.decode == (busy,)


def test_a_slot_that_came_free_goes_to_the_client_holding_fewer_and_the_one_passed_over_waits_its_turn():
    mine = decoding("a-0", 20, client="a")
    waiting = [request("a-1", 10, client="a", arrived=1.0), request("b-0", 10, client="b", arrived=2.0),
               request("a-2", 10, client="a", arrived=3.0)]
    plan = plan_of(waiting, [mine], table_of(2, [mine]))
    assert ids(a.seq for a in plan.admitted) == ["b-0"]   # client b holds none of the slots, client a one
    assert plan.reason(waiting[0]) is WaitReason.TURN     # it came first, and a later request took the slot
    assert plan.reason(waiting[2]) is WaitReason.NO_SLOT  # it came after the one admitted
    assert WaitReason.TURN == "its turn among clients"


def test_with_slots_free_every_waiting_request_is_admitted_and_none_waits():
    waiting = [request(n, 10, client=c) for n, c in (("a", "x"), ("b", "x"), ("c", "y"))]
    plan = plan_of(waiting, table=table_of(8))
    assert ids(a.seq for a in plan.admitted) == ["a", "c", "b"] and plan.waits == ()   # turns: x, y, then x


def test_under_the_kv_budget_the_request_whose_turn_it_is_waits_and_no_one_overtakes_it():
    def plan_with(held_blocks):
        budget = KVBudget(8 * BLOCK_SIZE)
        old = decoding("old", held_blocks * BLOCK_SIZE - 4, blocks=held_blocks)
        budget.take(held_blocks)
        return plan_of(waiting, [old], table_of(4, [old]), budget=budget)
    waiting = [request("long", 4 * BLOCK_SIZE + 1, arrived=1.0), request("short", 8, arrived=2.0)]
    plan = plan_with(4)   # three slots free; 4 blocks left, the long prompt writes 5
    assert plan.admitted == () and plan.growth == ()
    assert [(w.seq.id, w.reason) for w in plan.waits] == [("long", WaitReason.KV_BUDGET), ("short", WaitReason.BEHIND)]
    plan = plan_with(3)   # now its 5 blocks fit, and none is left for the short one
    assert [(a.seq.id, a.blocks) for a in plan.admitted] == [("long", 5)]
    assert plan.reason(waiting[1]) is WaitReason.KV_BUDGET


def test_a_cancelled_request_ends_and_its_slot_is_taken_in_the_same_plan():
    gone, stays = decoding("gone", 20), decoding("stays", 20)
    gone.cancelled = True
    dropped, waiting = request("dropped", 5), request("next", 5)
    dropped.cancelled = True
    plan = plan_of([dropped, waiting], [gone, stays], table_of(2, [gone, stays]))
    assert ids(plan.cancelled) == ["dropped", "gone"]
    assert ids(a.seq for a in plan.admitted) == ["next"] and plan.decode == (stays,)


# --- the prefix cache's lookup at admission

def cache_holding(ids_, blocks: int) -> PrefixCache:
    cache = PrefixCache(capacity=64)
    for i, h in enumerate(block_hashes(ids_)[:blocks]):
        cache.insert(h, ids_[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE], lambda: [])
    return cache


def test_an_admission_carries_what_the_prefix_cache_held_of_its_prompt():
    seq = request("q", 3 * BLOCK_SIZE + 5, cache=True)
    cache = cache_holding(seq.ids, 2)
    (admission,) = plan_of([seq], cache=cache).admitted
    assert (admission.lookup.tokens, admission.lookup.limit, admission.lookup.found, admission.lookup.computed) == \
        (53, 48, 32, 21)
    (chunk,) = plan_of([seq], cache=cache).prefill
    assert (chunk.start, chunk.tokens, chunk.copied) == (32, 21, 0)   # the copy is the admission's
    other = request("other", 3 * BLOCK_SIZE + 5, start=900, cache=True)
    assert plan_of([other], cache=cache).admitted[0].lookup.found == 0
    whole = request("whole", 2 * BLOCK_SIZE, cache=True)   # its every block cached: one token is still computed
    assert plan_of([whole], cache=cache_holding(whole.ids, 2)).admitted[0].lookup.found == BLOCK_SIZE


def test_requests_admitted_together_copy_the_blocks_an_earlier_chunk_completes():
    first = request("first", 2 * BLOCK_SIZE + 3, cache=True)
    second = request("second", 2 * BLOCK_SIZE + 9, cache=True)
    second.ids[-9:] = second.prefill_ids[-9:] = [7] * 9
    second.hashes = block_hashes(second.prefill_ids)
    plan = plan_of([first, second], cache=PrefixCache(capacity=64))
    assert [a.lookup.found for a in plan.admitted] == [0, 0]   # nothing cached as they are admitted
    assert [(c.seq.id, c.start, c.tokens, c.copied) for c in plan.prefill] == [
        ("first", 0, 35, 0), ("second", 2 * BLOCK_SIZE, 9, 2 * BLOCK_SIZE)]


# --- prefill: chunks within the token budget; decode rows

@given(st.lists(st.integers(1, 400), min_size=1, max_size=6), st.integers(1, 300))
def test_chunks_read_the_fewest_left_first_within_the_token_budget(prompts, chunk):
    seqs = [request(i, n) for i, n in enumerate(prompts)]
    plan = plan_of(running=seqs, table=table_of(8, [], seqs), chunk=chunk)
    tokens = [c.tokens for c in plan.prefill]
    assert sum(tokens) == min(chunk, sum(prompts))
    assert all(c.start == 0 and 1 <= c.tokens <= prompts[c.seq.id] for c in plan.prefill)
    assert [prompts[c.seq.id] for c in plan.prefill] == sorted(prompts)[:len(plan.prefill)]
    assert all(c.tokens == prompts[c.seq.id] for c in plan.prefill[:-1])    # only the last may be cut
    assert sorted(ids(w.seq for w in plan.waits)) == sorted(set(range(len(prompts))) - set(ids(c.seq for c in
                                                                                             plan.prefill)))
    assert {w.reason for w in plan.waits} <= {WaitReason.PREFILL_BUDGET}
    assert all(w.reason.holds_slot for w in plan.waits)


def test_a_prompt_partly_read_continues_where_it_stopped_and_decoding_requests_are_the_rows():
    a, b = decoding("a", 30), decoding("b", 12)
    doc = request("doc", 500)
    doc.read = doc.length = 256
    plan = plan_of(running=[a, doc, b], table=table_of(4, [a, b], [doc]), chunk=128)
    assert plan.decode == (a, b)
    assert [(c.seq.id, c.start, c.end) for c in plan.prefill] == [("doc", 256, 384)]


# --- preemption under the KV budget

def test_short_of_blocks_the_most_recently_admitted_is_preempted_for_the_older_one():
    budget = KVBudget(3 * BLOCK_SIZE)
    old, young = decoding("old", 2 * BLOCK_SIZE, blocks=2), decoding("young", 9, blocks=1, made=[5, 6])
    budget.take(3)   # every block held; old's next position opens a third block
    plan = plan_of(running=[old, young], table=table_of(4, [old, young]), budget=budget)
    (victim,) = plan.preempted
    assert (victim.seq, victim.reason, victim.needed_by, victim.positions) == (young, PreemptReason.KV_BUDGET, old, 10)
    assert victim.context == tuple(young.ids) + (5, 6)   # read again: its prompt and the tokens it made
    assert [(g.seq.id, g.blocks) for g in plan.growth] == [("old", 1)] and plan.decode == (old,)
    assert plan.admitted == () and plan.reason(young) is WaitReason.KV_BUDGET   # its 11 positions need a block
    assert plan.lines()[0] == "preempt young (no KV block for the next position: old's), 10 positions dropped"


def test_a_request_alone_short_of_a_block_is_preempted_for_itself():
    budget = KVBudget(2 * BLOCK_SIZE)
    alone = decoding("alone", 2 * BLOCK_SIZE, blocks=2)
    budget.take(2)
    plan = plan_of(running=[alone], table=table_of(2, [alone]), budget=budget)
    assert [(v.seq, v.needed_by) for v in plan.preempted] == [(alone, alone)] and plan.growth == ()
    assert plan.decode == () and plan.reason(alone) is WaitReason.KV_BUDGET   # 33 positions: 3 blocks of 2


def test_making_a_plan_changes_nothing():
    budget, cache = KVBudget(4 * BLOCK_SIZE), PrefixCache(capacity=8)
    old, young = decoding("old", 2 * BLOCK_SIZE, blocks=2, cache=True), decoding("young", 20, blocks=2, cache=True)
    budget.take(4)
    waiting = [request("w", 40, cache=True)]
    table = table_of(3, [old, young])
    before = (list(waiting), list(table.decoding), list(table.prefilling), budget.used, len(cache),
              [(s.read, s.length, s.blocks, s.preemptions, list(s.prefill_ids)) for s in (old, young, *waiting)])
    plan = plan_of(waiting, [old, young], table, budget=budget, cache=cache)
    assert plan.preempted and plan.growth
    assert before == (list(waiting), list(table.decoding), list(table.prefilling), budget.used, len(cache),
                      [(s.read, s.length, s.blocks, s.preemptions, list(s.prefill_ids)) for s in (old, young, *waiting)])


# --- on the tiny model: an iteration does what its plan says; each wait is accounted by reason

GREEDY = GenerationSettings(max_new_tokens=6, top_candidates=1)


def test_each_iteration_carries_out_its_plan(tiny_onnx_engine):
    e = tiny_onnx_engine
    batcher = Batcher(e, BatchConfig(slots=2, prefill_chunk=16, prefix_cache=1024, kv_budget=12 * BLOCK_SIZE),
                      capacity=256)
    prompts = ["What is the capital of France?", "Hi", "List three colours, one per line. " * 3, "Name a planet."]
    for i, p in enumerate(prompts):
        batcher.add(e.prompt_ids(p, GREEDY)[1], GREEDY, i, client=f"c{i % 2}")
    iterations = []
    while batcher.busy():
        iterations.append(batcher.step())
        assert len(iterations) < 1000
    for it in iterations:
        plan = it.plan
        assert it.start == plan.at and it.admitted == [a.seq for a in plan.admitted]
        assert it.decoded == len(plan.decode)
        assert [(s, n) for s, _, _, n in it.chunks] == [(c.seq, c.tokens) for c in plan.prefill]
        assert sum(n for *_, n in it.chunks) <= 16
        assert [(s, n) for s, _, n in it.preempted] == [(v.seq, v.positions) for v in plan.preempted]
    assert any(it.plan.waits for it in iterations) and any(len(it.plan.prefill) > 1 for it in iterations)


def test_a_requests_wait_for_a_slot_is_accounted_by_the_reason_each_plan_gave(tiny_onnx_engine):
    """Two slots; client a sends three requests, then client b one, all before the first iteration: the first plan
    admits a-0 and b-0 (b holds no slot) and says a-1 and a-2 wait their turn (a later request took the slot);
    later plans say they wait for a slot. A request's waits add up to its queue time."""
    e = tiny_onnx_engine
    batcher = Batcher(e, BatchConfig(slots=2), capacity=128)
    ids_ = e.prompt_ids("Hi", GREEDY)[1]
    seqs = [batcher.add(ids_, GREEDY, f"{c}-{i}", client=c) for c, i in (("a", 0), ("a", 1), ("a", 2), ("b", 0))]
    assert all(s.wait is WaitReason.IN_PROGRESS for s in seqs)   # no plan has seen them yet
    first = batcher.step()
    assert [s.id for s in first.admitted] == ["a-0", "b-0"]
    assert [first.plan.reason(s) for s in seqs[1:3]] == [WaitReason.TURN, WaitReason.TURN]
    while batcher.busy():
        batcher.step()
    for s in seqs:
        assert sum(s.waited.values()) == pytest.approx(s.trace.queued, abs=1e-9) and s.wait_since is None
    assert set(seqs[0].waited) == {WaitReason.IN_PROGRESS} and set(seqs[3].waited) == {WaitReason.IN_PROGRESS}
    assert {WaitReason.IN_PROGRESS, WaitReason.TURN} <= set(seqs[1].waited) <= {WaitReason.IN_PROGRESS,
                                                                                  WaitReason.TURN, WaitReason.NO_SLOT}
    late = batcher.add(ids_, GREEDY, "late")   # slots free, but it came after the last plan: the next one takes it
    assert late.wait is WaitReason.IN_PROGRESS and batcher.plan().admitted[0].seq is late
    batcher.step()
    assert set(late.waited) == {WaitReason.IN_PROGRESS} and late.waited[WaitReason.IN_PROGRESS] == \
        pytest.approx(late.trace.queued, abs=1e-9)
