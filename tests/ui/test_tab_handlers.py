"""The Compare, Experiments and Lesson tabs' handlers called as functions, without Gradio running: the components
are named by strings, so a handler takes and gives dicts keyed by those names (the Serve tab's:
tests/serve/test_serve_handlers.py)."""
from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import pytest

from playground.ui.compare_tab import OUTPUTS as COMPARE_OUTPUTS, CompareForm, CompareHandlers
from playground.ui.experiments_tab import OUTPUTS as EXPERIMENT_OUTPUTS, ExperimentForm, ExperimentHandlers, Job
from playground.ui.lesson_tab import OUTPUTS as LESSON_OUTPUTS, LessonHandlers, LessonSession
from tests.helpers import EXPERIMENT, FRANCE, tiny_registry

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")   # gr.Warning outside an event warns


def by_name(names) -> SimpleNamespace:
    return SimpleNamespace(**{n: n for n in names})


@pytest.fixture
def registry(tiny_backend, tiny_engine):
    return tiny_registry(tiny_backend, tiny_engine)


def test_compare_runs_both_backends_and_draws_their_agreement(registry):
    form = CompareForm("torch", "copy", FRANCE, max_new_tokens=6, temperature=0, chat=True)
    handlers = CompareHandlers(registry, by_name(f.name for f in fields(CompareForm)), by_name(COMPARE_OUTPUTS))
    *_, last = handlers.compare(vars(form))
    assert set(last) == set(COMPARE_OUTPUTS) and "Token agreement" in last["agreement"]
    assert [row[3] for row in last["table"]] == [6, 6]


def test_compare_refuses_a_backend_that_fails_to_load(registry):
    handlers = CompareHandlers(registry, by_name(()), by_name(COMPARE_OUTPUTS))
    *_, last = handlers.run(CompareForm("torch", "onnx", FRANCE, max_new_tokens=6, temperature=0, chat=True))
    assert list(last) == ["status"] and "onnx" in last["status"] and "Pick another backend" in last["status"]


def experiment_form(name, **changes) -> ExperimentForm:
    return ExperimentForm(name, "torch", {name: {**EXPERIMENT.get(name, {}), **changes}})


def test_an_experiment_runs_to_its_chart_summary_and_json(registry):
    handlers = ExperimentHandlers(registry, by_name(()), by_name(EXPERIMENT_OUTPUTS))
    job = Job()
    *_, last = handlers.start(experiment_form("cache"), job)
    assert last["status"] == "finished" and "Cache vs no cache" in last["summary"] and last["download"]
    job.close()


@pytest.mark.parametrize("form, message, started", [
    (ExperimentForm("nope", "torch"), "experiment must be one of", False),
    (experiment_form("cache", prompt_tokens=2000, new_tokens=100), "context window", True),   # the worker refuses it
])
def test_an_experiment_that_cannot_run_says_why(registry, form, message, started):
    handlers = ExperimentHandlers(registry, by_name(()), by_name(EXPERIMENT_OUTPUTS))
    job = Job()
    *_, last = handlers.start(form, job)
    assert message in last["status"] and (job.thread is not None) == started


def test_cancel_before_any_experiment_says_so(registry):
    handlers = ExperimentHandlers(registry, by_name(()), by_name(EXPERIMENT_OUTPUTS))
    assert "no experiment has run" in handlers.cancel(Job())["status"]


def test_next_on_a_fresh_page_runs_step_one_and_stop_asks_it_to_end(registry, monkeypatch):
    from playground.lesson import STEPS
    from playground.lesson.lesson_step import LessonStep, StepResult
    monkeypatch.setitem(STEPS, 1, LessonStep(1, STEPS[1].title, lambda lesson, report: StepResult(1, "t", "ran")))
    handlers = LessonHandlers(registry, by_name(LESSON_OUTPUTS))
    session = LessonSession()
    *_, last = handlers.next_step({"backend": "torch", "session": session})
    assert session.step == 1 and last["takeaway"] == "**ran**" and last["status"].startswith("measured")
    assert handlers.stop(session) == {"status": "stopping…"} and session.job.cancel.is_set()
