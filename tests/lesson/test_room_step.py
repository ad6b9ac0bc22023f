"""Lesson step 6 with the room as its workload (lesson/you_are_the_workload.py): drawn from the requests the app's engine loop
recorded, its takeaway computed from that record; without room traffic, the step says so above its own workload.

The room is real here: the tiny model's ONNX engine loop with the endpoint's record (api.ClientTraffic), its
requests made to arrive together without depending on the machine's speed (the machine gate held alone while
they are submitted, as tests/ui/test_room_generate.py does)."""
from __future__ import annotations

import re
import time
from types import SimpleNamespace

import pytest

from playground.api import ClientTraffic
from playground.config import GenerationSettings
from playground.lesson import STEPS, Lesson
from playground.lesson.lesson_step import LessonStep, StepResult
from playground.lesson.you_are_the_workload import NO_ROOM_YET, NO_TRAFFIC, room_step, rush_figures, room_rush
from playground.machine import MachineGate
from playground.run_view import format_seconds
from playground.serve.room import LoopSize, Room
from playground.ui.lesson_tab import OUTPUTS, LessonHandlers, LessonSession
from tests.helpers import tiny_registry


def wait_for_all(tickets, seconds=60.0) -> None:
    deadline = time.monotonic() + seconds
    while not all(t.done for t in tickets) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(t.done for t in tickets)


@pytest.fixture(scope="module")
def room(tiny_onnx_engine):
    """Five requests at once (three from page sessions, two API clients) on a loop of 4 slots, then, once they are
    done, one more on its own: the record holds a rush of five and a rush of one."""
    gate, traffic = MachineGate(), ClientTraffic()
    room = Room(lambda: tiny_onnx_engine, tiny_onnx_engine.info.name, LoopSize(slots=4, capacity=256), gate, traffic)
    loop = room.loop_for(room.backend)
    settings = GenerationSettings(max_new_tokens=6)
    assert gate.acquire_alone(timeout=5)
    try:
        clients = ["page 1", "page 2", "page 3", "key-1", "key-2"]
        tickets = [loop.submit([5, 6, 7 + i], settings, client=c) for i, c in enumerate(clients)]
    finally:
        gate.release_alone()
    wait_for_all(tickets)
    wait_for_all([loop.submit([9, 9, 9], settings, client="key-3")])
    yield traffic, tickets
    room.close()


def test_step_six_draws_the_rooms_busiest_rush_and_says_what_it_measured(room):
    traffic, tickets = room
    step = room_step(traffic)
    n = step.numbers
    assert (n["requests"], n["page"], n["api"], n["unfinished"]) == (5, 3, 2, 0)   # the rush of five, not the one
    rows = max(s.rows for t in tickets for s in t.seq.trace.steps)
    assert n["most_rows"] == rows == 4   # 4 slots: the fifth waited for one
    waits = [r.waiting for r in traffic.snapshot().records[:5]]
    assert n["longest_wait_s"] == pytest.approx(max(waits)) and max(waits) > 0
    said = re.fullmatch(r"You are the workload: 5 requests \(3 from the page, 2 through the API\) in (.+), (?:served in "
                        r"passes of up to 4 requests|in passes of up to 4); the longest wait: (.+), most for (.+)\.",
                        step.takeaway)   # the passes said shorter where the reason takes more words (35 at most)
    assert said, step.takeaway
    assert said.group(2) == format_seconds(max(waits)) and len(step.takeaway.split()) <= 35
    # they came while the machine was held alone (or before the loop's first plan), then the fifth waited for one of
    # the 4 slots: the batcher's reasons
    assert said.group(3) in ("the machine", "a free slot", "the iteration in progress"), step.takeaway
    gantt = step.figures["gantt"]
    assert len(gantt.layout.yaxis.ticktext) == 5 and sum("· page" in t for t in gantt.layout.yaxis.ticktext) == 3
    ended = max(r.finished for r in room_rush(traffic).records)
    assert "running" not in gantt.layout.title.text and gantt.layout.xaxis.range[1] == pytest.approx(ended * 1.03)
    assert step.drawn_from and not step.takeaway.startswith("You are the workload so far")


def test_a_rush_still_running_says_so_far_and_what_it_leaves_out(room):
    traffic, _ = room
    figures = rush_figures(room_rush(traffic))
    running = room_step(SimpleNamespace(snapshot=traffic.snapshot, since=lambda t0: unfinished(traffic.since(t0))))
    assert running.takeaway.startswith("You are the workload so far: 5 requests")
    assert running.numbers["unfinished"] == 5 and figures["unfinished"] == 0
    assert running.notes[0].startswith("5 requests still running")
    assert "running" in running.figures["gantt"].layout.title.text   # drawn live, to now


def unfinished(result):
    """The rush as it looked while its requests were running: no end recorded yet."""
    from dataclasses import replace
    return replace(result, records=[replace(r, finished=None) for r in result.records])


def test_without_room_traffic_step_six_says_so_above_its_own_workload(tiny_onnx_engine):
    """No record (an app without the endpoint), or a record with no request yet: the step's own measured
    workload, with the reason in its first note."""
    lesson = Lesson(tiny_onnx_engine)
    lesson.from_room = True
    assert room_step(None) is None and room_step(ClientTraffic()) is None
    measured = lesson.run(6)
    assert not measured.takeaway.startswith("You are the workload") and measured.notes[0].startswith(NO_TRAFFIC)
    lesson = Lesson(tiny_onnx_engine, room=Room(traffic=ClientTraffic()))
    lesson.from_room = True
    assert lesson.run(6).notes[0].startswith(NO_ROOM_YET)
    lesson.from_room = False
    assert not any(NO_ROOM_YET in note for note in lesson.run(6).notes)   # asked for its own workload: no such note


def last(frames):
    *_, frame = frames
    return frame


def test_the_lesson_tabs_room_button_draws_step_six_from_the_room_and_run_again_measures(room, tiny_backend,
                                                                                       tiny_engine, monkeypatch):
    traffic, _ = room
    monkeypatch.setitem(STEPS, 6, LessonStep(6, STEPS[6].title, lambda lesson, report: room_step(lesson.room.traffic)
                                             if lesson.from_room else StepResult(6, STEPS[6].title, "measured")))
    out = SimpleNamespace(**{name: name for name in OUTPUTS})
    handlers = LessonHandlers(tiny_registry(tiny_backend, tiny_engine), out, room=Room(traffic=traffic))
    session = LessonSession()
    values = {"backend": "torch", "session": session}
    shown = last(handlers.from_room(values))
    assert session.step == 6 and shown["takeaway"].startswith("**You are the workload: 5 requests")
    assert shown["status"].startswith("drawn from the room's requests")
    assert last(handlers.rerun("torch", session))["takeaway"] == "**measured**"
    again = last(handlers.from_room(values))   # read afresh from the record, not the kept result
    assert again["takeaway"].startswith("**You are the workload")


def test_a_room_of_many_draws_pages_apart_from_the_api_with_rows_taller_than_its_legend():
    """Seventeen requests were seventeen unlabelled rows in about 110 px under a legend taller than the plot, with
    no page/API distinction: now the page's rows come first, a line under them, each group labelled once with its
    count, and the legend at the right, never taller than the rows."""
    from dataclasses import replace

    from playground.lesson.you_are_the_workload import ROW_PX
    from tests.serve.test_sentences import chats

    traffic = ClientTraffic()
    for i, rec in enumerate(chats(0.1, 4, n=17).records):
        traffic.result.records.append(replace(rec, request=replace(rec.request, arrival=0.1 * i), admitted=0.1 * i,
                                              finished=0.1 * i + 1.2, origin="API" if i % 3 == 0 else "page"))
    layout = room_step(traffic).figures["gantt"].layout
    origin = {f"#{r.request.id} {r.request.cls}": r.origin for r in traffic.result.records}
    order = [origin[row] for row in layout.yaxis.categoryarray]
    assert order == ["page"] * 11 + ["API"] * 6   # the page's rows, then the API's
    assert list(layout.yaxis.ticktext) == ["from the page (11)", "through the API (6)"]
    assert [origin[row] for row in layout.yaxis.tickvals] == ["page", "API"]
    assert [s.y0 for s in layout.shapes] == [10.5]   # the line between the groups
    plot_px = layout.height - layout.margin.t - layout.margin.b
    assert plot_px >= ROW_PX * 17   # every row its own height, before presenter mode fits the figure
    assert layout.legend.orientation == "v" and layout.legend.x > 1   # beside the rows, not under them
