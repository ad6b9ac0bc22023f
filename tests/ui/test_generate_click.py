"""A click on Generate, followed without Gradio: the files it crosses to reach the room's engine loop, and each of
its Steps going into the run's stream once.

In process, on the tiny model: the handler is generate_handlers.generate, called as Gradio calls it (a dict of the
form's values by component, here components named by strings).
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from playground.registry import SourceRegistry
from playground.serve.engine_loop import EngineLoop
from playground.serve.room import LoopSize, Room
from playground.step_stream import StepStream
from playground.ui.generate_handlers import generate
from playground.ui.session import Session
from tests.helpers import generate_values, tab_by_name

PACKAGE = Path(__file__).resolve().parents[2] / "playground"
# The distinct playground/ files a click on Generate entered on its way to EngineLoop.submit before the Room
# (measured on main then, on this same trace: ui/generate_tab.py, ui/forms.py, registry.py, ui/common.py,
# config.py, api/service.py, engine.py, serve/engine_loop.py).
FILES_BEFORE_THE_ROOM = 8


@pytest.fixture
def room(tiny_onnx_engine):
    room = Room(lambda: tiny_onnx_engine, tiny_onnx_engine.info.name, LoopSize(slots=2, capacity=256))
    assert room.loop_for(room.backend) is not None   # loaded, as the room is once its first request came
    yield room
    room.close()


def files_to_submit(updates) -> list[str]:
    """The playground/ files whose code is entered (in this thread) while `updates` (a handler's generator) runs up
    to the engine loop's submit, in the order first entered; the run is then followed to its end untraced."""
    root, entered, reached = f"{PACKAGE}/", [], []
    submit = EngineLoop.submit.__code__

    def profile(frame, event, arg):
        if reached or event != "call":
            return
        name = frame.f_code.co_filename
        if name.startswith(root) and name[len(root):] not in entered:
            entered.append(name[len(root):])
        if frame.f_code is submit:
            reached.append(True)
    sys.setprofile(profile)
    try:
        for _ in updates:
            if reached:
                break
    finally:
        sys.setprofile(None)
    for _ in updates:   # the rest of the run, as the page would take it
        pass
    assert reached, f"the click never reached EngineLoop.submit (it entered {entered})"
    return entered


def test_a_click_reaches_the_engine_loop_through_fewer_files_than_before_the_room(tiny_onnx_engine, room):
    tab = tab_by_name(SourceRegistry.fixed(tiny_onnx_engine), room)
    session = Session()
    entered = files_to_submit(generate(tab, generate_values(session, backend=room.backend, max_new_tokens=4)))
    assert entered[0] == "ui/generate_handlers.py" and entered[-1] == "serve/engine_loop.py", entered
    assert len(entered) < FILES_BEFORE_THE_ROOM, entered
    assert session.trace.finished and len(session.trace.steps) == 4 and room.engine_loop.iterations > 0


def steps_passed_to_streams(monkeypatch) -> Counter:
    """Count every (stream, step index) handed to StepStream.add from now on."""
    passed: Counter = Counter()
    add = StepStream.add

    def counting(stream, steps):
        steps = list(steps)
        passed.update((stream.run_id, s.index) for s in steps)
        return add(stream, steps)
    monkeypatch.setattr(StepStream, "add", counting)
    return passed


@pytest.mark.parametrize("where", ["engine loop", "alone"])
def test_each_step_is_added_to_the_stream_once(where, tiny_onnx_engine, tiny_engine, monkeypatch, request):
    """The run's thread adds each Step as it is made (the live channel reads it there); the handler's updates and
    the final one send the stream's text without adding a Step again."""
    room = request.getfixturevalue("room") if where == "engine loop" else Room()
    engine = tiny_onnx_engine if where == "engine loop" else tiny_engine
    passed = steps_passed_to_streams(monkeypatch)
    session = Session()
    updates = list(generate(tab_by_name(SourceRegistry.fixed(engine), room),
                            generate_values(session, backend=engine.info.name, max_new_tokens=6)))
    assert "finished" in updates[-1]["status"] and len(session.trace.steps) == 6
    assert (room.engine_loop is not None) == (where == "engine loop")
    run_id = session.stream.run_id
    assert passed == Counter({(run_id, i): 1 for i in range(6)})
