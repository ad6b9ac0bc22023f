"""The Serve tab's handlers called as functions, without Gradio running: the components are named by strings (the
form's fields, `job`, OUTPUTS), so a handler takes and gives dicts keyed by those names."""
from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import pytest

from playground.prompts import SUMMARIZE_INSTRUCTION, long_document
from playground.registry import SourceRegistry
from playground.ui.machine_gate import MachineGate
from playground.ui.serve_job import ServeJob
from playground.ui.serve_layout import NONE, ServeForm, SweepForm
from playground.ui.serve_tab import SHARED_DRAW_EVERY, ServeHandlers, rejudge, shared_frame
from playground.ui.serve_views import OUTPUTS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")   # gr.Warning outside an event warns


@pytest.fixture
def handlers(tiny_engine, tiny_onnx_engine):
    sources = {"onnx": tiny_onnx_engine, "torch": tiny_engine}
    registry = SourceRegistry(lambda name, progress: sources[name], list(sources), default="onnx")
    names = lambda cls: SimpleNamespace(**{f.name: f.name for f in fields(cls)})   # noqa: E731
    forms = SimpleNamespace(serve=names(ServeForm), sweep=names(SweepForm), job="job")
    return ServeHandlers(registry, forms, SimpleNamespace(**{n: n for n in OUTPUTS}), MachineGate())


def serve_form(**changes) -> ServeForm:
    fields_ = dict(n=3, arrival="all-at-once", rate=1.0, seed=0, short_prompt="What is the capital of France?",
                   short_tokens=4, short_share=0.5, long_prompt="Summarize: the cat sat on the mat.", long_tokens=4,
                   long_share=0.5, scheduler_a="one-at-a-time", source_a="onnx", scheduler_b="batching",
                   source_b="onnx", slots=4, chunk=64, max_batch_tokens=128, blocks=0, manager="fifo")
    return ServeForm(**{**fields_, **changes})


def sweep_form(**changes) -> SweepForm:
    return SweepForm(**{**dict(kind="rate", scheduler="batching", source="onnx", sizes="1,2", new_tokens=4,
                               rates="50", requests=2, ttft=0, tpot=0), **changes})


def test_run_serves_the_workload_on_a_and_b_and_draws_the_last_frame(handlers):
    job = ServeJob()
    frames = list(handlers.serve({**vars(serve_form()), "job": job}))
    assert frames[-1]["status"].count("done") == 2
    assert [r.scheduler for r in job.results] == ["one-at-a-time", "batching"]
    assert all(rec.stop_reason for r in job.results for rec in r.records) and len(job.results[0].records) == 3
    job.close()


@pytest.mark.parametrize("changes, message", [
    ({"scheduler_b": "concurrent"}, "needs a remote server"),
    ({"slots": 0}, "KV slots must be 1-64"),
    ({"short_share": 0.0, "long_share": 0.0}, "add up to 0"),
])
def test_a_workload_that_cannot_be_built_is_refused_in_the_status_and_nothing_runs(handlers, changes, message):
    job = ServeJob()
    frames = list(handlers.start_workload(serve_form(**changes), job))
    assert message in frames[-1]["status"] and job.thread is None


def test_a_second_workload_in_the_session_waits_for_stop(handlers):
    job = ServeJob()
    job.start(lambda job: job.cancel.wait(60), done=lambda: None)   # a workload still running
    frames = list(handlers.start_workload(serve_form(scheduler_b=NONE), job))
    job.stop(wait=10)
    assert [list(f) for f in frames] == [["status"]] and "already running" in frames[0]["status"]


def test_a_rate_sweep_gives_a_point_per_rate(handlers):
    job = ServeJob()
    frames = list(handlers.sweep({**vars(sweep_form(rates="50,20")), "job": job}))
    assert frames and [p.rate for p in job.sweeps[-1].points] == [20.0, 50.0]
    job.close()


@pytest.mark.parametrize("changes, message", [
    ({"kind": "batch", "sizes": "0"}, "batch sizes must be"),
    ({"kind": "chunk", "chunks": "8"}, "prefill chunks must be"),
    ({"scheduler": "concurrent"}, "needs a remote server"),
])
def test_a_sweep_that_cannot_be_planned_says_why(handlers, changes, message):
    job = ServeJob()
    frames = list(handlers.start_sweep(sweep_form(**changes), job))
    assert message in frames[-1]["status"] and job.thread is None


def test_stop_before_any_workload_says_so(handlers):
    assert "no workload has run" in handlers.stop(ServeJob())["status"]


def test_a_new_slo_rejudges_the_stored_records_and_a_bad_one_is_refused():
    job = ServeJob()
    assert "an SLO is a number" in rejudge(-1, 0, job)
    assert job.slo == (2.0, 0.5)
    rejudge(3, 0, job)
    assert job.slo == (3.0, None)


def test_a_replayed_traces_sessions_are_drawn_with_each_gaps_blocks(handlers, tmp_path):
    from playground.ui.serve_layout import ReplayForm
    trace = tmp_path / "agents.jsonl"
    trace.write_text(
        '{"session_id": "a", "timestamp": 0, "input_length": 40, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 10, "input_length": 12, "output_length": 2, "hash_ids": [7]}\n'
        '{"session_id": "a", "delay": 50, "input_length": 60, "output_length": 2, "hash_ids": [1, 2]}\n')
    form = ReplayForm(**{**vars(serve_form(scheduler_a="batching", scheduler_b=NONE, prefix_cache_a=True)),
                         "trace_file": str(trace)})
    handlers.forms.serve.trace_file = "trace_file"   # ReplayForm's one field more
    job = ServeJob()
    frames = list(handlers.replay({**vars(form), "job": job}))
    assert [(g.session, g.turn) for g in job.gaps[0]] == [("a", 1)]
    fig = frames[-1]["session_timeline"]
    turns, = [t for t in fig.data if t.name == "turn"]
    assert list(turns.y) == ["a", "a"] and all("TTFT" in text for text in turns.text)
    # our batching measured the gap's block in its own prefix cache when the second turn came: drawn as measured
    assert job.results[0].records[2].gap_blocks is not None
    parts = {t.name for t in fig.data} - {"turn"}
    assert parts and all(name.endswith(" (measured)") for name in parts), parts
    job.close()


def test_a_drawn_workload_has_no_session_gaps(handlers):
    job = ServeJob()
    frames = list(handlers.serve({**vars(serve_form(scheduler_b=NONE)), "job": job}))
    assert job.gaps == [] and not frames[-1]["session_timeline"].data
    job.close()


def test_a_workload_through_the_apps_own_endpoint_joins_the_loop_instead_of_holding_the_machine(tiny_onnx_engine):
    """The Serve tab's source "this app's endpoint" sends the workload through the room's own engine loop. Held alone
    by the run, the machine would leave that loop waiting for it while the run waited for the loop's answers: the
    run joins the loop as one more client instead, and the machine is never held alone. Taking nothing alone, it
    needs no presenter key while the room is served: an attendee's run. The tab's default long document, cut to a
    local source's window by its tokenizer, is cut to the endpoint's by the endpoint's own count."""
    from playground.api import ApiConfig
    from playground.remote.source import RemoteSource
    from tests.api.test_openai_api import Served

    s = Served(tiny_onnx_engine, ApiConfig(slots=4, capacity=512, presenter_key="presenter-key-7f2"))
    try:
        registry = SourceRegistry(lambda name, progress: RemoteSource(s.url + "/v1", api_key="presenter-key-7f2"),
                                  ["this app's endpoint"], default="this app's endpoint")
        s.room.loop_sources.add("this app's endpoint")   # as app.make_room marks the app's own endpoint
        s.room.served = "the OpenAI-compatible endpoint is on"   # a served room, whose presenter has a key
        s.room.set_presenter_key("the-presenters-own")
        taken = []
        acquire = s.room.gate.acquire_alone
        s.room.gate.acquire_alone = lambda *a, **k: taken.append(1) or acquire(*a, **k)
        names = lambda cls: SimpleNamespace(**{f.name: f.name for f in fields(cls)})   # noqa: E731
        forms = SimpleNamespace(serve=names(ServeForm), sweep=names(SweepForm), job="job")
        handlers = ServeHandlers(registry, forms, SimpleNamespace(**{n: n for n in OUTPUTS}), s.room.gate, s.room)
        job = ServeJob()
        # the tab's own long document, longer than the endpoint's window: cut by the endpoint's own count to fit
        form = serve_form(n=6, scheduler_a="concurrent", source_a="this app's endpoint", scheduler_b=NONE,
                          source_b=NONE, long_prompt=SUMMARIZE_INSTRUCTION + long_document())
        assert len(tiny_onnx_engine.tokenizer(form.long_prompt)["input_ids"]) > 512
        batcher = s.service.engine_loop.batcher
        add, priorities = batcher.add, []
        batcher.add = lambda *a, **k: priorities.append(k.get("priority")) or add(*a, **k)
        frames = list(handlers.serve({**vars(form), "job": job}))
        assert "done" in frames[-1]["status"], frames[-1]["status"]
        # and each of its requests yields to the room's (priority 1: the plan reads the people's prompts first)
        assert priorities == [1] * 6 and "yielding to other requests (priority 1)" in frames[-1]["status"]
        records = job.results[0].records
        assert len(records) == 6 and all(r.stop_reason in ("eos", "length") for r in records)
        assert len(s.traffic.snapshot().records) == 6   # the room's record has the run's requests
        assert taken == [] and form.presenter_key == ""   # no key typed, and the machine never asked for alone
        # an attendee's run is one client of the room: at most its share (the endpoint's per-client limit, 4) in
        # flight at once, the others waiting on the page, and the status line says so
        assert s.room.client_share == 4 and "at most 4 in flight at once" in frames[-1]["status"]
        spans = [(r.admitted, r.finished) for r in records]
        assert max(sum(a <= t < b for a, b in spans) for t, _ in spans) == 4
        assert sum(r.admitted > r.arrival + 0.01 for r in records) >= 2   # all six arrived at once: two waited
        # its figures are drawn on the room's cores: each second the status and lesson lines, the whole view every
        # fifth second and at the end; the status says why the timeline and charts wait
        assert "gantt_a" in frames[-1] and "download" in frames[-1]
        light, whole = (shared_frame(job, handlers.out, tick, final=False) for tick in (0, SHARED_DRAW_EVERY - 1))
        assert set(light) == {"status", "lesson"} and f"redraw every {SHARED_DRAW_EVERY} s" in light["status"]
        assert {"gantt_a", "requests_a", "kv_map_a"} <= set(whole) and "redraw every" not in whole["status"]
        running = [f for f in frames[:-1] if "lesson" in f]   # its first second: the lines alone
        assert running and all(set(f) == {"status", "lesson"} for f in running), [sorted(f) for f in running]
        job.close()
        # the presenter, key typed, runs the workload as it is: every request sent at once
        job = ServeJob()
        frames = list(handlers.serve({**vars(serve_form(n=6, scheduler_a="concurrent", source_a="this app's endpoint",
                                                        scheduler_b=NONE, source_b=NONE,
                                                        presenter_key="the-presenters-own")), "job": job}))
        assert "done" in frames[-1]["status"] and "in flight at once" not in frames[-1]["status"]
        assert priorities[6:] == [0] * 6 and "yielding" not in frames[-1]["status"]
        job.close()
    finally:
        s.stop()
