"""The page's runs on a remote server (--endpoint) in the Watch view: each Generate run recorded from the client's
side, the server's own figures beside it, "missing" (never 0) where the server sends none.

Hand-made runs pin the record's arithmetic; the fake server (tests/fake_openai_server.py: no timings) drives the
page's own Generate handler. The same against a real llama-server: test_remote_watch_llama.py (marker `server`).
"""
from __future__ import annotations

from functools import partial
import re
import threading
import time
from types import SimpleNamespace

import pytest

from playground.config import GenerationSettings
from playground.registry import SourceRegistry
from playground.remote.endpoints import add_endpoints
from playground.serve.engine_loop import page_client
from playground.serve.remote_record import (GAP_DELIVERY, GAP_QUEUE, MISSING, NOT_YET, RemoteRecord, remote_line,
                                            server_rows)
from playground.ui.session import Session
from playground.source import Origin, Run
from playground.next_token import new_step
from playground.trace import StopReason, Trace
from playground.ui.generate_handlers import generate as on_generate
from playground.ui.remote_watch import watch_view

from tests.helpers import generate_args, generate_values, tab_by_name, wait_for

LLAMA_TIMINGS = {"cache_n": 29, "prompt_n": 8, "prompt_ms": 27.0, "predicted_n": 3, "predicted_ms": 40.0,
                 "predicted_per_second": 75.0}
WATCH_OUT = SimpleNamespace(**{n: n for n in ("clients_limits", "clients_status", "clients_gantt", "clients_shares",
                                               "clients_kv_map", "clients_classes", "clients_refused",
                                               "clients_server")})


def hand_made_run(server: dict, first_at: float = 0.05, release: threading.Event | None = None) -> Run:
    """A remote-like Run of three Steps (the first `first_at` s after it was sent) whose trace ends with `server`
    (what the server said), as remote/streamed_run.py leaves it; `release`: the run waits for it before its end."""
    trace = Trace("Hi", "Hi", [1] * 37, GenerationSettings(max_new_tokens=3), "llama.cpp @ 127.0.0.1:1", "remote",
                  "", "m", None)
    trace.server = {"kind": "llama.cpp"}

    def produce(run):
        for i, t in enumerate((first_at, first_at + 0.02, first_at + 0.04)):
            yield new_step(trace.steps, token_id=i, text="x", special=False, time=t, latency=0.02)
        if release is not None:
            release.wait(10)
        trace.server.update(server)
        trace.stop_reason = StopReason.LENGTH
    return Run(trace, produce, time.perf_counter())


def test_a_run_is_recorded_from_the_client_side_with_the_servers_timings_beside_it():
    record = RemoteRecord(["server @ 127.0.0.1:1"])
    pressed = time.perf_counter()
    run = record.add(hand_made_run({"timings": LLAMA_TIMINGS}), page_client("7f3a"), pressed, "server @ 127.0.0.1:1")
    run.wait()
    [r] = record.since(0.0).records
    assert r.origin == "page" and r.client == "page 1" and r.stop_reason == StopReason.LENGTH
    assert r.arrival <= r.admitted <= r.first_token <= r.last_token   # pressed, sent, its tokens (stamped by hand)
    assert r.finished >= r.admitted and r.prefill == pytest.approx(0.05)
    assert r.output_tokens == 3 and r.prompt_tokens == 37
    f = r.server
    assert (f.computed_tokens, f.cached_tokens, f.first_token_ms, f.decode_ms, f.decode_tps) == (8, 29, 27.0, 40.0, 75.0)
    assert r.gap_ms == pytest.approx(50.0 - 27.0)   # client TTFT from sending (50 ms) less its prompt_ms
    assert f.gap_means == GAP_QUEUE and GAP_QUEUE in r.server_detail and "23 ms" in r.server_detail
    assert r.server_note == "server: prompt 8 + 29 cached in 27 ms · 75.0 tok/s"
    row = server_rows([r])[0]
    assert row[4:10] == [50, 27, 23, GAP_QUEUE, "8 + 29", 40] and row[11] == "3 / 3"
    said = remote_line([r], record.servers)
    assert said.startswith("1 request from this page to remote servers: 1 done · 0 running")
    assert "server @ 127.0.0.1:1 (llama.cpp) (remote) reports per request" in said and GAP_QUEUE in said


def test_a_server_that_times_its_queue_leaves_delivery_as_the_difference():
    record = RemoteRecord()
    metrics = {"queue_time_ms": 10.0, "time_to_first_token_ms": 30.0, "generation_time_ms": 40.0, "mean_itl_ms": 20.0}
    record.add(hand_made_run({"metrics": metrics}, first_at=0.06)).wait()
    [r] = record.snapshot().records
    assert r.server.server_ttft_ms == 40.0 and r.gap_ms == pytest.approx(20.0) and r.server.decode_tps == 50.0
    assert r.server.gap_means == GAP_DELIVERY and "queue + its time to first token" in remote_line([r])


def test_a_server_that_sends_no_figures_is_labelled_missing_never_zero():
    record = RemoteRecord()
    record.add(hand_made_run({})).wait()
    [r] = record.snapshot().records
    assert r.server.missing and r.gap_ms is None and r.server_note == "server figures missing (it sent none)"
    row = server_rows([r])[0]
    assert row[5] == row[6] == row[8] == row[9] == row[10] == MISSING and row[11] == f"3 / {MISSING}"
    assert 0 not in row[5:11]
    assert "sends no per-request figures: they are marked missing (never 0)" in remote_line([r])


def test_a_running_request_says_its_figures_are_not_yet_sent():
    release = threading.Event()
    record = RemoteRecord()
    run = record.add(hand_made_run({"timings": LLAMA_TIMINGS}, release=release))
    worker = threading.Thread(target=run.wait)
    worker.start()
    try:
        wait_for(lambda: len(run.trace.steps) == 3, 10)
        [r] = record.snapshot().records
        assert r.stop_reason is None and r.finished is None and r.server_note == "server figures come at its end"
        assert server_rows([r])[0][5] == NOT_YET and "1 running" in remote_line([r])
    finally:
        release.set()
        worker.join(10)
    assert record.snapshot().records[0].finished is not None


def test_an_ended_run_told_late_is_still_recorded_at_once():
    run = hand_made_run({})
    run.wait()
    record = RemoteRecord()
    record.add(run)
    assert record.snapshot().records[0].stop_reason == StopReason.LENGTH   # on_end called at once


@pytest.fixture
def fake_room(fake_server, tiny_engine):
    registry = SourceRegistry.fixed(tiny_engine)
    [name] = add_endpoints(registry, [fake_server.url("ok")], read_timeout=5)
    return registry, name, RemoteRecord([name])


def test_the_pages_generate_runs_on_a_server_without_timings_show_in_the_watch_view(fake_room):
    registry, name, record = fake_room
    t0 = record.now()
    generate = partial(on_generate, tab_by_name(registry, remote=record))
    sessions = [Session(), Session()]
    for session in sessions:
        updates = list(generate(generate_values(session, backend=name, max_new_tokens=4)))
        assert "finished" in updates[-1]["status"]
    assert registry.get(name).info.origin == Origin.REMOTE
    frame = watch_view(None, record, t0, WATCH_OUT)
    recs = record.since(t0).records
    # each session one client, named as every view names it: by number, its own id left out
    assert sorted(r.client for r in recs) == [f"page {k + 1}" for k in range(2)]
    assert all(r.trace is s.trace for r, s in zip(recs, sessions))   # the page's own Steps, not a second timing
    assert "2 requests from this page to remote servers: 2 done" in frame["clients_status"]
    assert "reports token counts only (usage): its times are marked missing (never 0)" in frame["clients_status"]
    labels = list(frame["clients_gantt"].layout.yaxis.ticktext)
    assert len(labels) == 2 and all(re.search(r"· page \d · server times missing", x) for x in labels), labels
    rows = server_rows(recs)
    assert [row[5:7] + row[9:11] for row in rows] == [[MISSING] * 4] * 2   # its times: none sent, none drawn as 0
    assert [row[11] for row in rows] == ["3 / 3"] * 2   # the tokens the page counted, the server's usage beside them
    assert all(isinstance(row[4], int) and row[4] >= 0 for row in rows)   # the client's own TTFT, always measured
    assert frame["clients_server"].count(f"<td>{MISSING}</td>") == 2 * 4 + 2   # the prompt's split too
    assert "client TTFT from sending" in frame["clients_server"]


def test_a_local_run_is_not_in_the_remote_record(fake_room, tiny_engine):
    registry, _, record = fake_room
    generate = partial(on_generate, tab_by_name(registry, remote=record))
    list(generate(generate_values(Session(), backend=tiny_engine.info.name, max_new_tokens=2)))
    assert record.snapshot().records == []


@pytest.mark.slow
def test_with_an_endpoint_the_page_wires_generate_and_the_watch_view_to_one_record(fake_room):
    """build_demo(…, remote=): the Serve tab's Watch is offered without the app's own endpoint, and the frame it
    draws after a client's /generate on the server holds that run, the server's figures table among its outputs."""
    from gradio_client import Client

    from playground.ports import free_port
    from playground.ui import build_demo
    registry, name, record = fake_room
    demo = build_demo(registry, remote=record)
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1",
                                    quiet=True)
    try:
        watch = next(fn for fn in demo.fns.values() if fn.api_name == "serve_watch")
        by_id = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
        status, table = by_id["serve-clients-status"], by_id["serve-clients-server"]
        assert table in watch.outputs and table.visible
        frames = watch.fn()
        assert "0 requests from this page to remote servers" in next(frames)[status]   # the watch's t0: before
        Client(url, verbose=False).predict(*generate_args(max_new_tokens=3, backend=name), api_name="/generate")
        frame = next(frames)
        assert "1 request from this page to remote servers: 1 done" in frame[status]
        assert "client TTFT from sending" in frame[table] and f"<td>{MISSING}</td>" in frame[table]
        frames.close()
    finally:
        demo.close()


def test_a_runs_end_is_told_once_however_it_ends():
    """Run.on_end (source.py): the record's end stamp comes once, after a cancel and after an error too."""
    def failing(run):
        yield from ()
        raise RuntimeError("the server broke off")
    ended = []
    broken = Run(hand_made_run({}).trace, failing, time.perf_counter())
    broken.on_end(ended.append)
    with pytest.raises(RuntimeError):
        broken.wait()
    stopped = hand_made_run({})
    stopped.on_end(ended.append)
    steps = iter(stopped)
    next(steps)
    stopped.cancel()
    steps.close()   # as a handler closed mid-run closes it
    assert ended == [broken, stopped]
    assert broken.trace.stop_reason == StopReason.ERROR and stopped.trace.stop_reason == StopReason.CANCELLED


def test_with_the_apps_endpoint_too_the_watch_adds_the_remote_runs_on_one_clock():
    from playground.api import ClientTraffic
    traffic = ClientTraffic()
    record = RemoteRecord(["server @ 127.0.0.1:1"], clock=traffic.clock)   # as app.watch_remote makes it
    t0 = traffic.now()
    record.add(hand_made_run({"timings": LLAMA_TIMINGS}), page_client("ab"), None, "server @ 127.0.0.1:1").wait()
    frame = watch_view(traffic, record, t0, WATCH_OUT)
    status = frame["clients_status"]
    assert "none yet" in status.split("<br>")[0]   # the endpoint's clients: none
    assert "1 request from this page to remote servers: 1 done" in status
    assert "<td>8 + 29</td>" in frame["clients_server"]
