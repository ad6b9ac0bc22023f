"""One engine serves the room: the page's Generate runs join the engine loop the endpoint's requests join.

In process, on the tiny model's ONNX engine (what our batching runs). Requests are made to share passes without
depending on the machine's speed: the machine gate is held alone (as a Serve workload holds it) while they are
submitted, so the loop waits, and they are admitted together when it is released.
"""
from __future__ import annotations

from functools import partial
import threading
import time

import pytest

from playground.api import ClientTraffic
from playground.config import GenerationSettings
from playground.machine import MachineGate
from playground.registry import SourceRegistry
from playground.serve.room import LoopSize, Room
from playground.ui.session import Session
from playground.trace import StopReason
from playground.ui.generate_handlers import generate as on_generate

from tests.helpers import generate_values, tab_by_name

@pytest.fixture
def room(tiny_onnx_engine):
    gate = MachineGate()
    traffic = ClientTraffic()
    service = Room(lambda: tiny_onnx_engine, tiny_onnx_engine.info.name, LoopSize(slots=4, capacity=256), gate, traffic)
    yield service, gate, traffic
    service.close()


def values(session, **changes) -> dict:
    return generate_values(session, backend="onnx", **changes)


def handler(engine, room, gate):
    return partial(on_generate, tab_by_name(SourceRegistry.fixed(engine), room))


def test_a_lone_generate_run_joins_the_loop_and_says_its_wait(tiny_onnx_engine, room):
    service, gate, _ = room
    session = Session()
    updates = list(handler(tiny_onnx_engine, service, gate)(values(session, max_new_tokens=6)))
    trace = session.trace
    assert "finished" in updates[-1]["status"] and len(trace.steps) == 6
    assert trace.queued is not None and trace.queued >= 0
    assert {s.rows for s in trace.steps} == {1}   # alone: every pass carried it alone
    assert trace.backend == tiny_onnx_engine.info.name
    assert "Your first token:" in updates[-1]["metrics"] and "No other request shared" in updates[-1]["metrics"]
    assert service.engine_loop.iterations > 0   # the loop made its Steps, not Engine.run
    assert gate.sharing == 0   # the loop let the machine's slot go when it had nothing left


def test_the_greedy_tokens_equal_the_one_stream_engines(tiny_onnx_engine, room):
    service, gate, _ = room
    session = Session()
    list(handler(tiny_onnx_engine, service, gate)(values(session, max_new_tokens=8)))
    alone = tiny_onnx_engine.run(session.trace.prompt, GenerationSettings(max_new_tokens=8)).wait()
    assert session.trace.output_ids == alone.output_ids


def test_runs_submitted_together_share_passes_and_count_their_wait(tiny_onnx_engine, room):
    service, gate, traffic = room
    service.loop_for(service.backend)   # loaded before the gate is held
    generate = handler(tiny_onnx_engine, service, gate)
    sessions = [Session() for _ in range(3)]
    statuses: list[list[str]] = [[] for _ in sessions]
    metrics = [""] * len(sessions)

    def press(i):
        for update in generate(values(sessions[i], max_new_tokens=5)):
            statuses[i].append(update.get("status", ""))
            metrics[i] = update.get("metrics", metrics[i])

    assert gate.acquire_alone(timeout=5)
    threads = [threading.Thread(target=press, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    def told_to_wait(said):   # the page says why its run waits
        return any("a Serve workload has the machine alone" in line for line in list(said))
    while not all(told_to_wait(said) for said in statuses) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert service.engine_loop.in_flight() == 3 and service.engine_loop.iterations == 0
    gate.release_alone()   # every request arrived and waited: none could take a slot before this
    for t in threads:
        t.join(60)
    for session, said, panel in zip(sessions, statuses, metrics):
        trace = session.trace
        assert trace.stop_reason == StopReason.LENGTH and trace.queued > 0
        assert max(s.rows for s in trace.steps) == 3   # its decode steps carried all three
        assert "shared a forward pass, with up to 2 other requests" in panel
    api = service.engine_loop.submit([5, 6, 7], GenerationSettings(max_new_tokens=2), client="key-1")
    while not api.done:
        time.sleep(0.02)
    result = traffic.snapshot()   # the Watch view's record: the page's runs and the API client's, told apart
    assert [r.origin for r in result.records] == ["page"] * 3 + ["API"]
    from playground.charts.serve import plot_gantt
    labels = set(plot_gantt(result).layout.yaxis.ticktext)
    # each row names its client as the share table does: the page sessions by number, the API client as such
    assert {label.split(" · ")[1] for label in labels} == {"page 1", "page 2", "page 3", "key-1"}, labels


def test_the_queue_says_how_many_are_ahead(tiny_onnx_engine, room):
    service, gate, _ = room
    loop = service.loop_for(service.backend)
    assert gate.acquire_alone(timeout=5)
    try:
        runs = [loop.run([1, 2, 3], GenerationSettings(max_new_tokens=2)) for _ in range(3)]
        assert [r.ahead() for r in runs] == [0, 1, 2] and not any(r.started for r in runs)
        assert not runs[1].wait_turn(0)   # no slot yet: it says so at once
        runs[0].cancel()
    finally:
        gate.release_alone()
    assert all(r.wait_turn(60) for r in runs[1:])   # woken by its first Step, not a poll later
    for r in runs:
        r.wait()
    assert runs[0].trace.stop_reason == StopReason.CANCELLED and not runs[0].trace.steps
    assert [r.trace.stop_reason for r in runs[1:]] == [StopReason.LENGTH] * 2
    assert [r.ahead() for r in runs] == [None] * 3


def test_a_run_too_long_for_the_loops_slots_runs_alone_and_says_why(tiny_onnx_engine, room):
    service, gate, _ = room
    session = Session()
    updates = list(handler(tiny_onnx_engine, service, gate)(values(session, max_new_tokens=300)))
    assert "do not fit the engine loop's slots (256 positions each)" in updates[-1]["status"]
    assert session.trace.queued is not None and all(s.rows is None for s in session.trace.steps)


def test_speculative_decoding_runs_on_its_own_and_says_why(tiny_onnx_engine, room):
    service, gate, _ = room
    session = Session()
    updates = list(handler(tiny_onnx_engine, service, gate)(values(session, max_new_tokens=4, speculate=True)))
    assert "speculative decoding runs on its own" in updates[-1]["status"]
    assert session.trace.speculation and all(s.rows is None for s in session.trace.steps)
    assert service.engine_loop is None or service.engine_loop.iterations == 0   # the loop never ran it


def test_a_speculative_run_is_in_the_rooms_record_counted_alone_with_its_reason(tiny_onnx_engine, room):
    """The preset "a short open question" turns speculative decoding on, which runs on its own: that run was
    missing from the Watch view and from the room's takeaway. It is the room's record's now, counted as alone.
    Pressed with a run that joins the loop, both held until both have arrived (the machine gate held alone), so
    they are one rush of the room."""
    from types import SimpleNamespace

    from playground.lesson.you_are_the_workload import room_step
    from playground.serve.traffic import AloneReason
    from playground.ui.serve_views import clients_view

    service, gate, traffic = room
    service.loop_for(service.backend)   # loaded before the gate is held
    generate = handler(tiny_onnx_engine, service, gate)
    sessions, said = [Session(), Session()], [[], []]

    def press(i, **changes):
        for update in generate(values(sessions[i], **changes)):
            said[i].append(update.get("status", ""))

    assert gate.acquire_alone(timeout=5)
    threads = [threading.Thread(target=press, args=(0,), kwargs=dict(max_new_tokens=5, speculate=True)),
               threading.Thread(target=press, args=(1,), kwargs=dict(max_new_tokens=3))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while not (any("Waiting for a CPU slot" in line for line in list(said[0]))
               and service.engine_loop.in_flight() == 1) and time.monotonic() < deadline:
        time.sleep(0.02)
    gate.release_alone()
    for t in threads:
        t.join(60)
    assert "finished" in said[0][-1] and "speculative decoding runs on its own" in said[0][-1]
    records = traffic.snapshot().records
    assert sorted(r.alone for r in records) == ["", AloneReason.SPECULATIVE]
    run = next(r for r in records if r.alone)
    assert (run.origin, run.stop_reason) == ("page", StopReason.LENGTH) and run.trace is sessions[0].trace
    assert run.arrival < run.admitted <= run.first_token <= run.finished   # it waited for a CPU slot, then ran
    out = SimpleNamespace(**{name: name for name in ("clients_limits", "clients_status", "clients_gantt",
                                                     "clients_shares", "clients_kv_map", "clients_classes",
                                                     "clients_refused")})
    view = clients_view(traffic, 0.0, out)
    status = view["clients_status"]
    assert "1 ran alone, outside the engine loop on a CPU slot of its own (speculative decoding ×1)" in status
    assert "1 admitted (1 done" in status   # the loop's own count: the run that ran alone is not among them
    assert any("alone: speculative decoding" in t for t in view["clients_gantt"].layout.yaxis.ticktext)
    takeaway = room_step(traffic).takeaway
    assert "2 requests (1 from the page, 1 alone for speculative decoding)" in takeaway, takeaway
    assert len(takeaway.split()) <= 35


def test_a_run_paused_mid_answer_by_a_serve_workload_says_it_waits_for_the_machine(tiny_onnx_engine):
    """A page whose run was mid-answer when a Serve run took the machine alone kept its "generating…" while no
    token came: at the next poll without a Step it names the wait, and it goes on once the machine is released."""
    gate, asked = MachineGate(), threading.Event()

    class Taking(ClientTraffic):   # after the loop's third iteration, a Serve workload asks for the machine alone
        iterations = 0

        def iterated(self, it, batcher):
            super().iterated(it, batcher)
            self.iterations += 1
            if self.iterations == 3:
                threading.Thread(target=gate.acquire_alone, args=(60,), daemon=True).start()
                while not (gate.wanting or gate.alone):   # it has asked before this iteration ends
                    time.sleep(0.005)
                asked.set()

    traffic = Taking()
    service = Room(lambda: tiny_onnx_engine, tiny_onnx_engine.info.name, LoopSize(slots=4, capacity=256), gate,
                   traffic)
    try:
        service.loop_for(service.backend)
        session, statuses = Session(), []
        press = threading.Thread(target=lambda: statuses.extend(
            u.get("status", "") for u in handler(tiny_onnx_engine, service, gate)(values(session, max_new_tokens=40))))
        press.start()
        deadline = time.monotonic() + 60
        while not (asked.is_set() and gate.alone) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert gate.alone, "the workload never had the machine"
        held_at = len(session.trace.steps)
        while not any("a Serve workload has the machine alone" in s for s in list(statuses)) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        told = [s for s in list(statuses) if "a Serve workload has the machine alone" in s]
        assert told and not session.trace.finished and len(session.trace.steps) == held_at < 40
        gate.release_alone()
        press.join(60)
    finally:
        if gate.alone:
            gate.release_alone()
        service.close()
    assert len(session.trace.steps) == 40 and "finished" in statuses[-1]
    after = statuses[statuses.index(told[0]) + 1:]
    assert any("generating" in s for s in after), after   # released: the page says it generates again
