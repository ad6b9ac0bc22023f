"""The live channel (ui/live/channel.py): a page reads its run's steps as they are made, not 100 ms later.

The route is served (uvicorn, in a thread: a test client would buffer the stream) by a FastAPI app built
from the same `app_kwargs()` the app launches with; steps are added from another thread, as the run's
thread does.
"""
from __future__ import annotations

from functools import partial
import gc
import threading

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from playground.config import GenerationSettings
from playground.step_stream import StepStream, read_stream
from playground.ui.session import UPDATE_INTERVAL, WATCHED_INTERVAL, Session
from playground.trace import Step
from playground.ui.live.channel import MAX_READERS, app_kwargs
from tests.helpers import free_port, generate_values, tab_by_name, wait_for


def fake_trace(n: int = 0):
    trace = type("T", (), {"prompt_ids": [1, 2], "backend": "fake", "kv_shape": None,
                           "settings": GenerationSettings(), "stop_reason": "length", "error": None})()
    trace.steps = [Step(index=i, token_id=10 + i, text=f"t{i}", special=False, phase="decode", time=.1 * i, latency=.1, prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None, wall_ns=i)
                   for i in range(n)]
    return trace


@pytest.fixture(scope="module")
def client():
    server = uvicorn.Server(uvicorn.Config(FastAPI(**app_kwargs()), host="127.0.0.1", port=free_port(),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=30)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.config.port}", timeout=30) as c:
        yield c
    server.should_exit = True
    thread.join(10)


def events(response, on_event=None) -> list[tuple[str | None, list[str]]]:
    """(id, data lines) per SSE event of a streaming response; `on_event(data)` as each arrives."""
    out, ident, data = [], None, []
    for line in response.iter_lines():
        if line.startswith("id: "):
            ident = line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and data:
            out.append((ident, data))
            if on_event is not None:
                on_event(data)
            ident, data = None, []
    return out


@pytest.mark.slow
def test_each_step_reaches_the_reader_as_it_is_made_then_the_end_closes_the_stream(client):
    trace = fake_trace(6)
    stream = StepStream(trace)
    received = [threading.Event() for _ in trace.steps]
    late = []

    def run():   # the run's thread: each step once the reader has the one before, then the end line
        for step in trace.steps:
            if step.index and not received[step.index - 1].wait(30):
                late.append(step.index - 1)   # a stream held back until the end never delivers it
            stream.add([step])
        stream.finish()

    def arrived(data):
        for line in data:
            if line.startswith("["):
                received[int(line[1:line.index(",")])].set()
    threading.Thread(target=run, daemon=True).start()
    with client.stream("GET", f"/playground/live/{stream.run_id}") as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        got = events(response, arrived)
    assert late == [], f"steps {late} reached the reader only after 30 s: not as they were made"
    lines = [line for _, data in got for line in data]
    head, steps, end = read_stream(stream.text.splitlines()[0] + "\n" + "\n".join(lines) + "\n")
    assert [s["seq"] for s in steps] == list(range(6)) and end["end"] == "length" and end["steps"] == 6
    assert not stream.watched   # the reader is gone with the response
    assert len(got) >= 6   # one event a step at least, not one at the end
    assert got[-2][0] == "6" or got[-1][0] == "6"   # the id is the next step's number


def test_a_reconnecting_reader_resumes_after_the_last_step_it_had(client):
    trace = fake_trace(5)
    stream = StepStream(trace)
    stream.finish()
    with client.stream("GET", f"/playground/live/{stream.run_id}", headers={"Last-Event-ID": "3"}) as response:
        lines = [line for _, data in events(response) for line in data]
    assert [line[:3] for line in lines[:2]] == ["[3,", "[4,"] and '"end"' in lines[-1] and len(lines) == 3
    done = client.get(f"/playground/live/{stream.run_id}", headers={"Last-Event-ID": "5"})
    assert done.status_code == 204   # it had everything: 204 tells an EventSource to stop reconnecting


def test_an_unknown_or_forgotten_run_gets_no_content(client):
    assert client.get("/playground/live/0123456789abcdef0123456789abcdef").status_code == 204
    stream = StepStream(fake_trace(1))
    run_id = stream.run_id
    assert StepStream.find(run_id) is stream
    del stream
    gc.collect()
    assert StepStream.find(run_id) is None   # held by its session only: gone with it
    assert client.get(f"/playground/live/{run_id}").status_code == 204


def test_run_ids_are_not_guessable():
    ids = {StepStream(fake_trace()).run_id for _ in range(50)}
    assert len(ids) == 50 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_a_run_takes_at_most_a_few_readers(client):
    stream = StepStream(fake_trace(1))
    keep = [lambda: None for _ in range(MAX_READERS)]
    for reader in keep:
        stream.listen(reader)
    refused = client.get(f"/playground/live/{stream.run_id}")
    assert refused.status_code == 429 and "too many readers" in refused.text


def test_the_run_thread_fills_the_stream_and_gradio_updates_slow_down_while_a_channel_reads(tiny_engine):
    session = Session()
    session.start(tiny_engine.run("Hello", GenerationSettings(max_new_tokens=8, chat=False)))
    session.background.thread.join(60)
    assert session.stream.packed == len(session.trace.steps) == 8   # without anyone taking a batch
    assert session.background.interval() == UPDATE_INTERVAL
    session.stream.listen(lambda: None)
    assert session.background.interval() == WATCHED_INTERVAL > UPDATE_INTERVAL
    assert sum(len(batch) for batch in session.steps) == 8   # Gradio's updates still carry every step
    session.close()


def test_two_generate_handlers_of_one_session_each_read_their_own_run(tiny_backend):
    """A client that submits twice in one session: the second run supersedes the first, and the first
    handler must not take the second run's batches (it did: both iterated session.steps, and Gradio
    raised "generator already executing" when they met, and the first one's final update ended the second
    run's stream)."""
    from playground.engine import Engine
    from playground.registry import SourceRegistry
    from playground.ui.generate_handlers import generate as on_generate
    from tests.fakes import SlowBackend
    engine = Engine(SlowBackend(tiny_backend, pause=0.01))
    registry = SourceRegistry(lambda name, progress: engine, ["slow"], default="slow")
    generate = partial(on_generate, tab_by_name(registry))
    session = Session()
    values = generate_values(session, "Hello", max_new_tokens=20, chat=False, backend="slow")   # speculative off
    first, second = generate(values), generate(values)
    assert "stream" in next(first) and "stream" in next(second)   # each yielded its head: run 2 superseded run 1
    ended_first = list(first)[-1]   # the first handler to the end: its own (cancelled) run only
    assert read_stream(ended_first["stream"])[2]["end"] == "cancelled" and "files" not in ended_first
    updates = [u for u in second if "stream" in u]
    live_steps = [len(read_stream(u["stream"])[1]) for u in updates[:-1]]
    assert live_steps and max(live_steps) > 0   # the second handler still streamed its run's steps
    assert read_stream(updates[-1]["stream"])[2]["steps"] == 20 and session.trace.stop_reason == "length"
    session.close()
