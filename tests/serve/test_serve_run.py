"""Serve runs once (serve/run.py): the Serve tab's Run and `python -m playground.serve`, given the same settings, run
the same workload on the same schedulers and give the same records (requests, prompt tokens, output tokens, how each
ended); both build through run.py, neither makes a scheduler itself; a stop before a run marks it not run."""
from __future__ import annotations

import inspect
import json
import threading
from dataclasses import fields
from types import SimpleNamespace

import pytest

from playground.serve import SCHEDULERS, RequestClass, Workload, cli, run
from playground.serve.setup import Pick
from playground.trace import StopReason
from playground.ui.serve_tab import ServeHandlers, serve_setup, sweep_plan
from playground.ui.machine_gate import MachineGate
from playground.ui.serve_job import ServeJob
from playground.ui.serve_layout import ServeForm, SweepForm
from playground.ui.serve_views import OUTPUTS
from tests.serve.test_serve_setup import cli_flags, registry_of, serve_form

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")   # gr.Warning outside an event warns


@pytest.fixture(scope="module")
def sources(tiny_engine, tiny_onnx_engine):
    return {"onnx": tiny_onnx_engine, "torch": tiny_engine}


def handlers(sources) -> ServeHandlers:
    names = lambda cls: SimpleNamespace(**{f.name: f.name for f in fields(cls)})   # noqa: E731
    forms = SimpleNamespace(serve=names(ServeForm), sweep=names(SweepForm), job="job")
    return ServeHandlers(registry_of(sources), forms, SimpleNamespace(**{n: n for n in OUTPUTS}),
                                   MachineGate())


def shape(record: dict) -> tuple:
    """A request's record without its clock: the request, its prompt tokens, its output token ids, how it ended."""
    steps = record["trace"]["steps"] if record["trace"] else []
    return (record["id"], record["class"], record["request"], record["prompt_tokens"], record["output_tokens"],
            record["stop_reason"], [s["token_id"] for s in steps], [s["phase"] for s in steps])


def as_json(value):
    return json.loads(json.dumps(value, ensure_ascii=False))


@pytest.mark.parametrize("a, b, changes", [
    ("one-at-a-time", "batching", {"n": 4, "tokens": 4, "rate": 50.0}),
    ("batching", "batching", {"n": 3, "tokens": 4, "preset": "shared system prompt"}),
])
def test_the_tabs_run_and_the_cli_give_the_same_records(sources, tmp_path, a, b, changes):
    job = ServeJob()
    form = serve_form(a, b, **changes)
    frames = list(handlers(sources).serve({**vars(form), "job": job}))
    assert frames[-1]["status"].count("done") == 2 and not job.error
    assert (job.fraction, job.message) == (1.0, "done")   # the runs reported their progress to the tab's job
    out = tmp_path / "cli"
    assert cli.main([*cli_flags(a, b, **changes), "--model", "tiny", "--out", str(out)]) == 0
    names = ["batching-a", "batching-b"] if "preset" in changes else [a, b]
    assert as_json(job.results[0].workload.to_dict()) == json.loads((out / "workload.json").read_text())
    for name, result in zip(names, job.results, strict=True):
        written = [json.loads(p.read_text()) for p in sorted((out / name / "requests").glob("*.json"))]
        assert [shape(as_json(r.to_dict())) for r in result.records] == [shape(r) for r in written]
        assert all(r["trace"]["steps"] and r["stop_reason"] in ("eos", "length") for r in written)
        summary = json.loads((out / f"{name}.json").read_text())
        assert (summary["scheduler"], summary["source"]) == (result.scheduler, result.source)
    job.close()


def test_both_front_ends_make_their_schedulers_through_run(sources, monkeypatch):
    """The tab's setup, its sweep plan and the CLI's setup each reach run.py's make_scheduler (a front end that made
    its own would bypass it), and neither front end's source names make_scheduler."""
    made = []

    def counted(pick, get_source, offered=None):
        made.append(pick.scheduler)
        return make(pick, get_source, offered)
    make = run.make_scheduler
    monkeypatch.setattr(run, "make_scheduler", counted)
    tab, _ = serve_setup(registry_of(sources), serve_form("one-at-a-time", "batching", n=3))
    assert made == ["one-at-a-time", "batching"] and [s.name for s in tab] == made
    headless, _ = cli.setup(cli.parse_args(cli_flags("batching", "one-at-a-time", n=3)), dict(sources))
    assert made[2:] == ["batching", "one-at-a-time"] and [s.name for s in headless] == made[2:]
    form = SweepForm(kind="chunk", scheduler="one-at-a-time", source="onnx", sizes="1", new_tokens=4, rates="1",
                     requests=2, ttft=0, tpot=0, chunks="64,32")
    plan = sweep_plan(registry_of(sources), form)   # the chunk sweep runs our batching
    assert made[4:] == ["batching"] and plan.scheduler.name == "batching" and plan.chunks == [32, 64]
    for module in (cli, inspect.getmodule(ServeHandlers)):
        assert "make_scheduler" not in inspect.getsource(module), module.__name__


def test_a_stop_before_a_run_marks_it_not_run_and_calls_back_only_the_runs_that_ran(tiny_onnx_engine):
    schedulers = [SCHEDULERS[n].create(tiny_onnx_engine) for n in ("one-at-a-time", "batching")]
    workload = Workload.build([RequestClass("q", "What is the capital of France?", 3, 1.0)], 2)
    cancel, ran, live = threading.Event(), [], []

    def stop_after_a(i, result):
        ran.append((i, result.scheduler))
        cancel.set()
    results = run.run_workload(schedulers, workload, cancel=cancel, results=live, ran=stop_after_a)
    assert results is live and ran == [(0, "one-at-a-time")]
    a, b = results
    assert a.started is not None and all(r.stop_reason in ("eos", "length") for r in a.records)
    assert b.started is None and b.done and b.cancelled
    assert {r.stop_reason for r in b.records} == {StopReason.CANCELLED}


def test_a_sweep_the_cli_cannot_plan_is_refused_in_words_before_anything_runs(sources):
    args = cli.parse_args(["--out", "unused", "--backend", "onnx", "--requests", "2", "--sweep", "batch",
                           "--sizes", "0,2"])
    schedulers, workload = cli.setup(args, dict(sources))
    with pytest.raises(SystemExit, match="batch sizes must be whole numbers"):
        cli.sweep_plans(args, schedulers, workload)


def test_a_chunk_sweep_on_another_scheduler_is_refused_in_words(sources):
    scheduler = run.make_scheduler(Pick("one-at-a-time", "onnx"), sources.__getitem__)
    with pytest.raises(ValueError, match="runs our batching, not one-at-a-time"):
        run.plan_sweep("chunk", scheduler)


def test_an_error_in_the_clis_worker_is_raised_where_it_waits():
    def work():
        raise RuntimeError("the source went away")
    with pytest.raises(RuntimeError, match="went away"):
        cli.in_background(work, threading.Event())
