"""One at a time (FCFS over the tiny Engine) and concurrent requests (over a fake server whose runs are
thread-safe): ordering, consistent timelines, caps, the server's KV figure, failures, cancel."""
from __future__ import annotations

import threading
import time

import pytest

from playground.serve import SCHEDULERS, Request, RequestClass, Workload
from playground.serve.concurrent import ConcurrentScheduler
from tests.fakes import ThreadSafeFakeSource
from tests.helpers import check_timelines

Q = RequestClass("short", "What is the capital of France?", 6, 1.0)


# --- one at a time

@pytest.mark.slow
def test_one_at_a_time_serves_in_arrival_order_without_overlap(tiny_engine):
    w = Workload.build([Q, RequestClass("other", "Why is the sky blue?", 4, 1.0)], 6, "poisson", 20.0, seed=1)
    result = SCHEDULERS["one-at-a-time"].create(tiny_engine).run(w)
    check_timelines(result)
    ordered = sorted(result.records, key=lambda r: r.arrival)
    assert all(a.finished <= b.admitted for a, b in zip(ordered, ordered[1:]))
    assert {r.stop_reason for r in result.records} <= {"eos", "length"} and result.done and not result.cancelled
    assert result.kv_unit == "bytes" and result.kv[-1][1] == 0 and max(v for _, v in result.kv) > 0


def test_one_at_a_time_keeps_going_after_a_bad_request(tiny_engine):
    w = Workload((Request(0, "short", Q.prompt, 4, 0.0), Request(1, "huge", "word " * 3000, 4, 0.0),
                  Request(2, "short", Q.prompt, 4, 0.0)))
    result = SCHEDULERS["one-at-a-time"].create(tiny_engine).run(w)
    assert [r.stop_reason for r in result.records] == ["length", "error", "length"]
    assert "context window" in result.records[1].error


def test_cancelling_one_at_a_time_stops_the_running_request_within_a_step(tiny_engine):
    w = Workload.build([RequestClass("long", Q.prompt, 400, 1.0)], 3, ignore_eos=True)
    cancel, scheduler = threading.Event(), SCHEDULERS["one-at-a-time"].create(tiny_engine)
    result = scheduler.prepare(w)
    thread = threading.Thread(target=scheduler.run, args=(w, None, cancel, result))
    thread.start()
    while not result.records[0].steps:
        time.sleep(0.005)
    cancel.set()
    thread.join(10)
    assert not thread.is_alive() and result.cancelled
    assert [r.stop_reason for r in result.records] == ["cancelled"] * 3
    assert 0 < result.records[0].output_tokens < 400 and result.records[1].admitted is None


# --- concurrent requests over a fake server

def test_concurrent_requests_are_in_flight_together():
    server = ThreadSafeFakeSource(together=6)   # a request's first token waits for the sixth to arrive
    result = SCHEDULERS["concurrent"].create(server).run(Workload.build([Q], 6))
    check_timelines(result)
    assert server.most == 6 and [r.stop_reason for r in result.records] == ["length"] * 6
    assert result.kv_unit == "fraction" and result.kv and max(v for _, v in result.kv) <= 1.0


def test_max_concurrency_caps_requests_in_flight_and_the_rest_wait():
    server = ThreadSafeFakeSource()
    result = ConcurrentScheduler(server, max_concurrency=2).run(Workload.build([Q], 6))
    check_timelines(result)
    assert server.most == 2
    assert sum(r.waiting > server.delay for r in result.records) >= 3


def test_a_refused_request_and_a_cut_stream_end_in_error_while_the_others_finish():
    server = ThreadSafeFakeSource(refuse=("bad",), cut=("cut",))
    classes = [Q, RequestClass("bad", "bad", 4, 1.0), RequestClass("cut", "cut", 4, 1.0)]
    result = ConcurrentScheduler(server).run(Workload.build(classes, 3))
    ends = {r.request.cls: (r.stop_reason, r.error) for r in result.records}
    assert ends["short"] == ("length", None)
    assert ends["bad"][0] == "error" and "400" in ends["bad"][1]
    assert ends["cut"][0] == "error" and "stream cut" in ends["cut"][1]
    assert [len(r.steps) for r in result.records if r.request.cls == "cut"] == [2]


def test_cancelling_concurrent_requests_stops_all_of_them():
    server = ThreadSafeFakeSource(tokens=200, delay=0.02)
    cancel, scheduler = threading.Event(), ConcurrentScheduler(server)
    w = Workload.build([Q], 4, "fixed", 10.0)
    threading.Timer(0.5, cancel.set).start()
    result = scheduler.run(w, cancel=cancel)
    assert result.cancelled and all(len(r.steps) < 200 for r in result.records)   # none ran to its end
    assert {r.stop_reason for r in result.records} == {"cancelled"} and server.in_flight == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("serve-request-")]


@pytest.mark.server
@pytest.mark.integration
def test_concurrent_requests_to_llama_server_with_its_own_kv_figure(llama_server):
    """llama.cpp batches the requests itself (2 slots: the other two wait inside the server)."""
    from playground.remote import RemoteSource
    source = RemoteSource(llama_server.url)
    w = Workload.build([Q, RequestClass("sky", "Why is the sky blue?", 24, 1.0)], 4)
    result = SCHEDULERS["concurrent"].create(source).run(w)
    check_timelines(result)
    assert {r.stop_reason for r in result.records} <= {"eos", "length"}
    firsts = sorted(r.first_token for r in result.records)
    assert firsts[1] < min(r.last_token for r in result.records)   # two were decoding at the same time
    assert result.kv_unit == "tokens" and result.kv_total == 4096 and max(v for _, v in result.kv) > 0


def test_concurrent_requests_keep_each_sessions_turns_in_order_with_their_gaps():
    """A session's later turn is sent when its predecessor has ended and its gap passed (sessions.Releases)."""
    from dataclasses import replace
    server = ThreadSafeFakeSource()
    first = Workload.build([Q], 4)
    turns = [replace(first.requests[0], session="a"), replace(first.requests[1], session="b"),
             replace(first.requests[2], session="a", after=0, delay=0.2),
             replace(first.requests[3], session="b", after=1, delay=0.1)]
    result = ConcurrentScheduler(server).run(replace(first, requests=tuple(turns)))
    records = result.records
    assert all(r.stop_reason == "length" for r in records)
    for later, earlier in ((records[2], records[0]), (records[3], records[1])):
        assert later.released >= earlier.finished + later.request.delay and later.admitted >= later.released
    assert records[0].released is None and records[1].released is None   # first turns: at their arrival
