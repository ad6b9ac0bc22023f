"""The Lesson tab's handlers (ui/lesson_tab.py) as the page calls them, without a browser: a deep link's step
keeps its result when the presenter comes back to it."""
from __future__ import annotations

from types import SimpleNamespace

from playground.lesson import STEPS
from playground.lesson.lesson_step import LessonStep, StepResult
from playground.ui.lesson_tab import OUTPUTS, LessonHandlers, LessonSession
from tests.helpers import tiny_registry


def last(frames):
    *_, frame = frames
    return frame


def test_a_deep_link_step_is_kept_after_next_then_previous(tiny_backend, tiny_engine, monkeypatch):
    """Regression: the page-load event sends None for the backend dropdown and the buttons its name ("torch");
    the load's Lesson was dropped at Next, and Previous measured ?lesson=2's step again ("measured in 0.0 s",
    other numbers) instead of showing the result it kept."""
    runs = []

    def counted(number):
        def run(lesson, report):
            runs.append(number)
            return StepResult(number, STEPS[number].title, f"step {number}, run {len(runs)}")
        return run
    for n in (2, 3):
        monkeypatch.setitem(STEPS, n, LessonStep(n, STEPS[n].title, counted(n)))
    out = SimpleNamespace(**{name: name for name in OUTPUTS})
    go = LessonHandlers(tiny_registry(tiny_backend, tiny_engine), out).go
    session = LessonSession()
    deep_link = SimpleNamespace(query_params={"lesson": "2"})
    opened = last(go(0, None, session, deep_link))   # what lesson_tab's `opened` passes on page load
    assert opened["status"].startswith("measured") and opened["takeaway"] == "**step 2, run 1**"
    assert last(go(1, "torch", session))["takeaway"] == "**step 3, run 2**"
    back = last(go(-1, "torch", session))
    assert (back["status"], back["takeaway"]) == ("kept from earlier (Run again to re-measure)", "**step 2, run 1**")
    assert runs == [2, 3]
