"""Every second from a request's arrival to its first token, in named parts that add up to its TTFT
(playground/wait_parts.py): measured on recorded iterations -- the batcher's own plans carried out over scripted
passes on a clock of its own, no model -- for each case a room shows (a long prompt read in chunks between other
requests' decode steps, cached tokens copied, waiting while slots are free, waiting for a slot when all are held,
the machine held by work that runs alone, a run alone); then on the tiny model through the engine loop.
"""
from __future__ import annotations

import time
from types import SimpleNamespace as S

import numpy as np
import pytest

from playground.api.timings import vllm_metrics
from playground.config import GenerationSettings
from playground.run_view import wait_line
from playground.serve import batcher as batcher_module
from playground.serve.batcher import BatchConfig, Batcher
from playground.serve.plan import WaitReason
from playground.tiny import build_tiny_tokenizer
from playground.wait_parts import DERIVED, SERVER, WAITING_WORDS, WaitParts, first_token_words
from tests.helpers import wait_for

DECODE_S = 0.1        # one decode pass, whatever its rows
TOKEN_S = 0.001       # one prompt token computed
BLOCK_COPY_S = 0.002  # one cached block copied into a slot
VOCAB = 400
TOKEN = 100           # what every pass's logits pick


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeKV:
    """The KV pool as the batcher uses it, holding nothing; copying a cached block in takes BLOCK_COPY_S."""

    def __init__(self, clock, slots, capacity):
        self.clock, self.slots, self.capacity, self.position_bytes = clock, slots, capacity, 1
        self.nbytes = slots * capacity   # one byte a position: what a record of the pool reads

    def move(self, *_):
        pass

    def swap(self, *_):
        pass

    def read(self, slot, start, n):
        return [np.zeros(1)]

    def write(self, slot, start, block):
        self.clock.advance(BLOCK_COPY_S)


def logits(rows=None):
    row = np.zeros(VOCAB, np.float32)
    row[TOKEN] = 1.0
    return row if rows is None else np.tile(row, (rows, 1))


@pytest.fixture
def scripted(monkeypatch):
    """make(config) -> (batcher, clock): a Batcher whose passes take scripted times on its own clock, no model."""
    clock = Clock()
    monkeypatch.setattr(batcher_module, "check_batchable", lambda backend: None)
    monkeypatch.setattr(batcher_module, "KVSlots", lambda backend, slots, capacity: FakeKV(clock, slots, capacity))

    def decode(backend, kv, tokens, lengths):
        clock.advance(DECODE_S)
        return logits(len(tokens))

    def prefill(backend, kv, slot, ids, length):
        clock.advance(TOKEN_S * len(ids))
        return logits()

    monkeypatch.setattr(batcher_module, "decode_rows", decode)
    monkeypatch.setattr(batcher_module, "prefill_chunk", prefill)
    backend = S(name="scripted", device="cpu", dtype="float32", model_name="scripted", kv_shape=None,
                context_window=4096, tokenizer=build_tiny_tokenizer(), eos_token_ids=frozenset())
    engine = S(backend=backend, replay={})
    return lambda config: (Batcher(engine, config, capacity=1024, clock=clock), clock)


def settings(new_tokens=20):
    return GenerationSettings(max_new_tokens=new_tokens, top_candidates=1)


def prompt(n, start=10):
    return [start + i % 200 for i in range(n)]


def run_until_first_token(batcher, seq, limit=100):
    for _ in range(limit):
        if seq.trace.steps:
            return
        batcher.step()
    raise AssertionError("no first token")


def assert_adds_up(trace):
    """The parts add up to the server's TTFT, which is the Trace's queue time and its first Step's time."""
    parts = trace.waits
    assert parts.total == pytest.approx(trace.queued + trace.steps[0].time, abs=1e-9)
    assert parts.queued == pytest.approx(trace.queued, abs=1e-9)
    assert all(p.seconds >= 0 and p.clock == SERVER for p in parts.named())


def test_a_long_prompt_read_in_chunks_between_others_decode_steps(scripted):
    batcher, clock = scripted(BatchConfig(slots=4, prefill_chunk=128))
    busy = [batcher.add(prompt(10), settings(50), f"busy-{i}") for i in range(2)]
    while not all(s.trace.steps for s in busy):
        batcher.step()
    doc = batcher.add(prompt(300), settings(), "doc")
    clock.advance(0.05)   # the iteration in progress ends 50 ms after it came: the next plan admits it
    run_until_first_token(batcher, doc)
    parts = doc.trace.waits
    assert parts.waited == (("the iteration in progress", pytest.approx(0.05)),)
    # three iterations: each a decode pass of the two others (0.1 s), then its chunk of 128, 128 and 44 tokens
    assert (parts.chunks, parts.chunk, parts.computed_tokens) == (3, 128, 300)
    assert parts.computed == pytest.approx(300 * TOKEN_S)
    assert parts.others == pytest.approx(3 * DECODE_S)
    assert parts.copied == 0 and parts.machine == 0
    assert_adds_up(doc.trace)
    words = first_token_words(parts)
    assert words == ("650 ms on the server: 50 ms waiting for the iteration in progress (it came after the batcher "
                     "had planned the iteration running), 300 ms computing its 300 prompt tokens (3 chunks of up to "
                     "128), 300 ms for other requests' steps run between its chunks")
    assert "reading" not in wait_line(doc.trace) and words in wait_line(doc.trace)


def test_a_short_prompt_with_cached_tokens_copied(scripted):
    batcher, clock = scripted(BatchConfig(slots=2, prefill_chunk=128, prefix_cache=1024))
    first = batcher.add(prompt(40), settings(2), "first")
    while batcher.busy():
        batcher.step()
    again = batcher.add(prompt(32) + [7] * 8, settings(2), "again")   # its first two blocks are cached
    run_until_first_token(batcher, again)
    parts = again.trace.waits
    assert first.trace.waits.copied == 0
    assert (parts.copied_tokens, again.trace.cached_tokens) == (32, 32)
    assert parts.copied == pytest.approx(2 * BLOCK_COPY_S)
    assert (parts.computed_tokens, parts.chunks) == (8, 1) and parts.computed == pytest.approx(8 * TOKEN_S)
    assert parts.others == pytest.approx(0.0, abs=1e-9)   # alone: nothing else ran
    assert_adds_up(again.trace)
    assert [p.key for p in parts.named()] == ["copied", "computed"]
    assert "4 ms copying 32 cached prompt tokens from the prefix cache, 8 ms computing its 8 prompt tokens" in \
        first_token_words(parts)


def test_waiting_while_slots_are_free_names_the_iteration_in_progress_and_the_turn_among_clients(scripted):
    """Slots free, a request that came during an iteration waits for it, not for a slot; a request passed over for
    another client's holds its turn; neither is said to wait for a slot."""
    batcher, clock = scripted(BatchConfig(slots=4, prefill_chunk=128))
    running = batcher.add(prompt(20), settings(30), "running")
    batcher.step()
    late = batcher.add(prompt(20), settings(), "late")
    clock.advance(0.2)
    run_until_first_token(batcher, late)
    assert late.trace.waits.waited == (("the iteration in progress", pytest.approx(0.2)),)
    assert_adds_up(late.trace)
    assert "waiting for a KV slot" not in wait_line(late.trace)
    assert running.trace.steps

    batcher, clock = scripted(BatchConfig(slots=2, prefill_chunk=128))
    seqs = []
    for c, i in (("a", 0), ("a", 1), ("b", 0)):
        seqs.append(batcher.add(prompt(20), settings(3), f"{c}-{i}", client=c))
        clock.advance(0.01)   # in this order
    first = batcher.step()
    assert first.plan.reason(seqs[1]) is WaitReason.TURN
    run_until_first_token(batcher, seqs[1])
    reasons = dict(seqs[1].trace.waits.waited)
    assert reasons["its turn among clients"] > 0 and set(reasons) <= {"its turn among clients", "no free slot",
                                                                          "the iteration in progress"}
    assert_adds_up(seqs[1].trace)
    assert WAITING_WORDS["its turn among clients"] in wait_line(seqs[1].trace)


def test_a_request_that_yields_waits_for_the_higher_priority_and_its_prompt_is_read_after_theirs(scripted):
    """A request sent with priority 1 (an attendee's Serve workload in a served room) that came first: a freed slot
    goes to a later request of priority 0, and the yielding one is said to wait for it; with slots free, its
    prompt is read after the people's though it has fewer tokens left."""
    batcher, clock = scripted(BatchConfig(slots=1, prefill_chunk=128))
    holder = batcher.add(prompt(20), settings(2), "holder", client="a")
    batcher.step()
    yielding = batcher.add(prompt(20), settings(2), "workload", client="attendee", priority=1)
    clock.advance(0.01)
    person = batcher.add(prompt(20), settings(2), "person", client="b")
    plans = []
    while not yielding.trace.steps:
        plans.append(batcher.step().plan)
    freed = next(p for p in plans if p.admitted)
    assert [a.seq for a in freed.admitted] == [person] and freed.reason(yielding) is WaitReason.PRIORITY
    assert person.trace.steps[0].time + person.trace.queued < yielding.trace.queued + yielding.trace.steps[0].time
    assert "a request of a higher priority" in dict(yielding.trace.waits.waited)
    assert_adds_up(yielding.trace)
    assert WAITING_WORDS["a request of a higher priority"] in wait_line(yielding.trace)
    assert holder.trace.steps

    batcher, clock = scripted(BatchConfig(slots=4, prefill_chunk=64))
    yielding = batcher.add(prompt(10), settings(2), "workload", client="attendee", priority=1)
    people = [batcher.add(prompt(40), settings(2), f"p{i}", client=f"p{i}") for i in range(2)]
    first = batcher.step().plan
    assert [(c.seq, c.tokens) for c in first.prefill] == [(people[0], 40), (people[1], 24)]
    assert first.reason(yielding) is WaitReason.PREFILL_BUDGET
    with pytest.raises(ValueError, match="priority must be a whole number of 0 or more"):
        batcher.add(prompt(10), settings(2), "ahead", priority=-1)


def test_waiting_for_a_slot_when_all_are_held(scripted):
    batcher, clock = scripted(BatchConfig(slots=1, prefill_chunk=128))
    holder = batcher.add(prompt(20), settings(3), "holder")
    queued = batcher.add(prompt(20), settings(3), "queued")
    run_until_first_token(batcher, queued)
    # the holder's iterations: its prompt (20 ms), then two decode passes; its last token frees the slot
    assert queued.trace.waits.waited == (("no free slot", pytest.approx(0.02 + 2 * DECODE_S)),)
    assert holder.trace.waits.waited == ()
    assert_adds_up(queued.trace)
    assert vllm_metrics(queued.trace)["queue_time_ms"] == round(queued.trace.waits.queued * 1e3, 3)


def test_the_machine_held_by_work_that_runs_alone_is_named_in_the_queue_and_in_a_slot(scripted):
    batcher, clock = scripted(BatchConfig(slots=1, prefill_chunk=16))
    reading = batcher.add(prompt(40), settings(3), "reading")
    queued = batcher.add(prompt(8), settings(3), "queued")
    batcher.step()   # reading takes the slot and reads its first chunk; queued waits for a slot
    batcher.pause()
    clock.advance(2.0)
    came = batcher.add(prompt(8), settings(3), "came while paused")
    clock.advance(1.0)
    batcher.resume()
    run_until_first_token(batcher, reading)
    assert reading.trace.waits.machine == pytest.approx(3.0)
    assert_adds_up(reading.trace)
    run_until_first_token(batcher, came)
    assert dict(queued.trace.waits.waited)["the machine"] == pytest.approx(3.0)
    assert came.trace.waits.waited[0] == ("the machine", pytest.approx(1.0))
    for seq in (queued, came):
        assert_adds_up(seq.trace)


def test_a_run_alone_adds_up_and_names_no_wait(scripted):
    batcher, clock = scripted(BatchConfig(slots=4, prefill_chunk=128))
    alone = batcher.add(prompt(20), settings(3), "alone")
    run_until_first_token(batcher, alone)
    parts = alone.trace.waits
    assert [p.key for p in parts.named()] == ["computed"]
    assert parts.total == pytest.approx(20 * TOKEN_S)
    assert_adds_up(alone.trace)
    assert first_token_words(parts) == "20 ms on the server: 20 ms computing its 20 prompt tokens"


def test_the_clients_part_is_what_is_left_of_the_ttft_it_measured_and_labelled_derived():
    parts = WaitParts((("no free slot", 0.5),), computed=0.2, computed_tokens=30, chunks=1, chunk=128, others=0.1)
    named = parts.named(ttft=1.0)
    assert sum(p.seconds for p in named) == pytest.approx(1.0)
    assert (named[-1].key, named[-1].clock, named[-1].seconds) == ("submit and delivery", DERIVED, pytest.approx(0.2))
    assert parts.as_dict(1.0)["server_ttft"] == pytest.approx(0.8)


def test_every_reason_a_plan_gives_for_the_queue_has_words():
    assert {r.value for r in WaitReason if not r.holds_slot} == set(WAITING_WORDS)


def test_the_trace_exports_carry_the_parts_and_their_clocks(scripted):
    import csv
    import io
    import json
    batcher, clock = scripted(BatchConfig(slots=4, prefill_chunk=8))
    seq = batcher.add(prompt(20), settings(2), "x")
    while batcher.busy():
        batcher.step()
    d = json.loads(seq.trace.to_json())
    assert d["prefill_chunk"] == 8 and d["waits"]["server_ttft"] == pytest.approx(seq.trace.waits.total)
    assert [p["key"] for p in d["waits"]["parts"]] == ["computed"] and d["waits"]["parts"][0]["clock"] == SERVER
    rows = list(csv.DictReader(io.StringIO(seq.trace.to_csv())))
    assert rows[0]["first_token_parts_s"].startswith("computed=0.020000 (server)") and rows[1]["first_token_parts_s"] == ""


# --- on the tiny model, through the engine loop

def test_every_request_of_a_concurrent_batch_has_parts_that_add_up_to_its_ttft(tiny_onnx_engine):
    from playground.serve.engine_loop import EngineLoop
    e = tiny_onnx_engine
    loop = EngineLoop(e, BatchConfig(slots=2, prefill_chunk=16, prefix_cache=512), capacity=256)
    greedy = GenerationSettings(max_new_tokens=6, top_candidates=1)
    try:
        prompts = ["List three colours, one per line. " * 4, "Hi", "What is the capital of France?",
                   "List three colours, one per line. " * 4 + "Now four.", "Name a planet."]
        tickets = [loop.submit(e.prompt_ids(p, greedy)[1], greedy, client=f"c{i % 2}") for i, p in enumerate(prompts)]
        wait_for(lambda: all(t.done for t in tickets), 120, "every request to end")
    finally:
        loop.close()
    for t in tickets:
        trace = t.trace
        assert trace.steps and trace.waits is not None
        assert_adds_up(trace)
        assert trace.waits.computed > 0 and trace.waits.computed_tokens + trace.cached_tokens == len(trace.prompt_ids)
    assert any(dict(t.trace.waits.waited).get("no free slot", 0) > 0 for t in tickets)   # 5 requests, 2 slots
    assert any(t.trace.waits.chunks > 1 and t.trace.waits.others > 0 for t in tickets)


# --- the Watch view: the longest wait names what it waited for

def watch_record(rid, client, arrival, admitted=None, finished=None, waited=None, waiting_for=None):
    from playground.serve.records import RequestRecord
    from playground.serve.workload import Request
    from playground.trace import Trace
    trace = None
    if admitted is not None:
        trace = Trace("", "", [1] * 20, GenerationSettings(), "fake", "cpu", "float32", "m", None)
        trace.waits = WaitParts(waited) if waited is not None else None
    return RequestRecord(Request(rid, "short", "", 8, arrival), prompt_tokens=20, admitted=admitted, trace=trace,
                         finished=finished, stop_reason="eos" if finished else None, client=client, origin="API",
                         waiting_for=waiting_for)


def test_the_longest_wait_while_slots_were_free_names_the_machine_and_the_iteration_not_the_slots():
    from playground.serve.shares import client_shares, longest_wait
    records = [watch_record(0, "client 1", 0.0, 0.0, 9.0),
               watch_record(1, "page 10", 0.1, 7.7, waited=(("the iteration in progress", 0.4), ("the machine", 7.2)))]
    sentence = longest_wait(client_shares(records, now=9.0), records, 9.0, slots=32)
    assert sentence.startswith("Longest wait to be admitted: page 10, 7.6 s (request #1): 400 ms waiting for the "
                               "iteration in progress")
    assert "7.2 s waiting for the machine" in sentence and "slots" not in sentence


def test_the_longest_wait_for_a_slot_when_all_were_held_says_who_held_them():
    from playground.serve.shares import client_shares, longest_wait
    records = [watch_record(0, "client 1", 0.0, 0.0, 3.0), watch_record(1, "client 1", 0.0, 0.0, 3.0),
               watch_record(2, "page 1", 0.1, 2.2, waited=(("no free slot", 2.1),)),
               watch_record(3, "page 2", 0.2, waiting_for="no free slot")]
    sentence = longest_wait(client_shares(records[:3], now=4.0), records[:3], 4.0, slots=2)
    assert sentence == ("Longest wait to be admitted: page 1, 2.1 s (request #2): 2.1 s waiting for a KV slot (every "
                        "slot was held); holding none of the 2 slots while client 1 held up to 2.")
    still = longest_wait(client_shares(records, now=4.0), records, 4.0, slots=2)
    assert still.startswith("Longest wait to be admitted: page 2, 3.8 s (request #3, still waiting, now waiting for "
                            "a KV slot (every slot was held)); holding none")


# --- a workload's requests on the batching scheduler (the Serve tab, the Lesson's step 6)

def test_a_workloads_waits_are_its_wait_parts_and_its_clock_starts_once_the_pool_is_ready(tiny_onnx_engine,
                                                                                          monkeypatch):
    """The harness's setup (its prompts tokenized, the KV pool allocated) is no request's wait: the workload's clock
    starts after it, so four requests on an empty engine wait only for what the batcher's plans say; each record's
    wait and TTFT are its wait parts' (one set of marks), and the Gantt's waiting bars name the reasons."""
    from playground.charts.serve import plot_gantt
    from playground.serve import batching
    from playground.serve.workload import Request, Workload
    made = []

    class Timed(batching.Batcher):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(time.perf_counter())   # timing: when the pool exists, to order it before the clock's start

    monkeypatch.setattr(batching, "Batcher", Timed)
    workload = Workload((Request(0, "long", "List three colours, one per line. " * 6, 4, 0.0),
                         *(Request(i, "short", "Hi", 4, 0.0) for i in (1, 2, 3))), arrival="fixed")
    result = batching.ContinuousBatching(tiny_onnx_engine, BatchConfig(slots=4, prefill_chunk=16)).run(workload)
    assert made and result.started >= made[0]   # timing: an order of events: the pool made, then the clock started
    for r in result.records:
        assert r.wait_parts is not None and r.steps
        assert r.waiting == pytest.approx(r.wait_parts.queued, abs=1e-9)
        assert r.ttft == pytest.approx(r.wait_parts.total, abs=1e-9)
        assert set(dict(r.wait_parts.waited)) <= {"the iteration in progress"}   # an empty engine: no slot wait
    hovers = [h for bar in plot_gantt(result).data if bar.name.startswith("waiting") for h in bar.customdata]
    assert all("waiting for the iteration in progress" in h for h in hovers), hovers
    assert result.to_dict()["requests"][0]["first_token_parts"]["server_ttft"] == pytest.approx(result.records[0].ttft)


def test_requests_held_back_while_work_runs_alone_name_the_machine(tiny_onnx_engine):
    """The loop pauses while a Serve workload holds the machine alone: the requests that arrive meanwhile wait for
    the machine, and their parts say so (not "waiting for a slot" while every slot is free)."""
    from playground.machine import MachineGate
    from playground.serve.engine_loop import EngineLoop
    gate = MachineGate()
    loop = EngineLoop(tiny_onnx_engine, BatchConfig(slots=4), capacity=128, machine=gate)
    greedy = GenerationSettings(max_new_tokens=3, top_candidates=1)
    try:
        assert gate.acquire_alone(timeout=5)
        try:
            tickets = [loop.submit([5, 6, 7], greedy, client=f"c{i}") for i in range(2)]
            wait_for(lambda: loop.paused, 30, "the loop to pause")
            assert all(t.seq.wait is WaitReason.MACHINE for t in tickets)
        finally:
            gate.release_alone()
        wait_for(lambda: all(t.done for t in tickets), 60, "both requests to end")
    finally:
        loop.close()
    for t in tickets:
        reasons = dict(t.trace.waits.waited)
        assert reasons["the machine"] > 0 and "no free slot" not in reasons
        assert_adds_up(t.trace)
        assert WAITING_WORDS["the machine"] in first_token_words(t.trace.waits, shown_from=0)


def test_generates_timeline_draws_the_first_token_as_its_parts(scripted):
    from playground.charts.run import plot_timeline
    batcher, clock = scripted(BatchConfig(slots=4, prefill_chunk=128))
    busy = batcher.add(prompt(10), settings(50), "busy")
    batcher.step()
    doc = batcher.add(prompt(300), settings(3), "doc")
    clock.advance(0.05)
    while batcher.busy() and not doc.done:
        batcher.step()
    bars = plot_timeline(doc.trace).data
    names = [b.name for b in bars]
    assert names[:3] == ["waiting: the iteration in progress", "its prompt computed", "other requests' steps"]
    assert "waiting for a turn" not in names and not any(n.startswith("prefill") for n in names)
    ends = [b.base[0] + b.x[0] for b in bars[:3]]
    assert [b.base[0] for b in bars[1:3]] == pytest.approx(ends[:2])   # one after the other, from the arrival
    assert ends[2] == pytest.approx((doc.trace.queued + doc.trace.steps[0].time) * 1e3)   # to the first token
    assert busy.trace.steps


def test_a_request_waiting_when_the_loop_pauses_is_watched_as_waiting_for_the_machine(scripted):
    """Recorded iterations, as the Watch view records them: a request a plan left waiting for a slot, then the loop
    paused (work took the machine alone): its record names the batcher's reason now, the machine, not the reason
    of the last plan made before the pause; its hover and the longest-wait sentence say so; resumed, the next plan
    names its reason again, and its parts count both."""
    from types import SimpleNamespace

    from playground.charts.serve import waiting_hover
    from playground.serve.shares import client_shares, longest_wait
    from playground.serve.traffic import ClientTraffic
    batcher, clock = scripted(BatchConfig(slots=1, prefill_chunk=128))
    traffic = ClientTraffic()
    seqs = [batcher.add(prompt(8), settings(6), rid, client=f"client {rid}") for rid in (1, 2)]
    for seq in seqs:
        traffic.submitted(SimpleNamespace(seq=seq, client=seq.client, session=None))
    traffic.iterated(batcher.step(), batcher)   # the first takes the one slot; the plan leaves the second waiting
    waiting = traffic.in_loop[id(seqs[1])]
    assert waiting.waiting_for == "no free slot"
    clock.advance(0.5)
    batcher.pause()
    traffic.paused(batcher)
    clock.advance(2.0)
    assert waiting.waiting_for == "the machine" == str(seqs[1].wait)
    assert waiting_hover(waiting, 2.5).endswith("now waiting for the machine (work that needs it alone held it)")
    records = traffic.snapshot().records
    sentence = longest_wait(client_shares(records, now=3.0), records, now=3.0, slots=1)
    assert "still waiting, now waiting for the machine" in sentence, sentence
    batcher.resume()
    traffic.iterated(batcher.step(), batcher)
    assert waiting.waiting_for == "no free slot"   # the next plan's reason
    while batcher.busy():
        traffic.iterated(batcher.step(), batcher)
    waited = dict(seqs[1].trace.waits.waited)
    assert set(waited) - {"the iteration in progress"} == {"no free slot", "the machine"}
    assert waited["the machine"] == pytest.approx(2.0) and waited["no free slot"] > 0.5


def test_the_engine_loop_tells_its_record_when_it_pauses(tiny_onnx_engine):
    """A request that came while the loop was free, then found the machine's CPU slots taken: the loop pauses, and
    the record the Watch view reads says the machine (at its submission it said the iteration in progress)."""
    from playground.machine import MachineGate
    from playground.serve.engine_loop import EngineLoop
    from playground.serve.traffic import ClientTraffic
    gate, traffic = MachineGate(), ClientTraffic()
    loop = EngineLoop(tiny_onnx_engine, BatchConfig(slots=2), capacity=128, observer=traffic, machine=gate)
    taken = [gate.enter_shared(timeout=5) for _ in range(gate.slots)]   # both CPU slots: the loop cannot step
    try:
        assert all(taken)
        ticket = loop.submit([5, 6, 7], GenerationSettings(max_new_tokens=2, top_candidates=1), client="c")
        wait_for(lambda: loop.paused, 30, "the loop to pause")
        wait_for(lambda: traffic.in_loop[id(ticket.seq)].waiting_for == "the machine", 30,
                 "the record to say the machine")
    finally:
        for _ in taken:
            gate.leave_shared()
    wait_for(lambda: ticket.done, 60, "the request to end")
    loop.close()
    assert dict(ticket.trace.waits.waited).get("the machine", 0) > 0
