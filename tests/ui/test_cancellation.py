"""A request whose client goes away (tab closed, job cancelled) frees its worker within one step."""
from __future__ import annotations

import threading
import time

import pytest
from gradio_client import Client

from playground.engine import Engine
from playground.registry import SourceRegistry
from playground.ui import build_demo
from tests.fakes import CountingBackend, RecordingEngine, SlowBackend
from tests.helpers import compute_stopped, experiment_args, free_port, generate_args, generated, wait_for


@pytest.fixture(scope="module")
def app(tiny_backend, tiny_engine):
    slow = CountingBackend(tiny_backend)
    engines = {"torch": tiny_engine, "slow": RecordingEngine(slow)}
    demo = build_demo(SourceRegistry(lambda name, progress: engines[name], ["torch", "slow"], default="torch"))
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1",
                                    quiet=True)
    yield url, slow, engines["slow"]
    demo.close()


@pytest.mark.slow
def test_cancelled_generations_stop_and_the_next_request_runs(app):
    url, slow, engine = app
    client = Client(url, verbose=False)
    jobs = [client.submit(*generate_args(max_new_tokens=2000, backend="slow"), api_name="/generate")
            for _ in range(2)]   # both generate slots busy with long runs
    wait_for(lambda: slow.calls >= 10)
    for job in jobs:
        job.cancel()
    runs = engine.runs[-2:]
    wait_for(lambda: compute_stopped(slow, runs), timeout=20,
             message="both runs to end and their forward passes to stop")   # closed, cache released, workers free
    assert slow.calls < 2 * 2000
    assert [r.trace.stop_reason for r in runs] == ["cancelled", "cancelled"]
    assert all(0 < len(r.trace.steps) < 2000 for r in runs)
    out = client.predict(*generate_args(max_new_tokens=8, backend="torch"), api_name="/generate")
    assert "finished" in generated(out)["status"]


@pytest.mark.slow
def test_a_cancelled_experiment_stops_its_worker_thread(app):
    url, slow, _ = app
    client = Client(url, verbose=False)
    job = client.submit(*experiment_args("depth", backend="slow", prompt_tokens=16, new_tokens=400),
                        api_name="/experiment")
    wait_for(lambda: any(t.name.startswith("experiment-") for t in threading.enumerate()))
    wait_for(lambda: slow.calls >= 5)
    job.cancel()
    wait_for(lambda: not any(t.name.startswith("experiment-") for t in threading.enumerate()), timeout=30)
    assert slow.active == 0   # its thread ended mid-run: no forward pass left running


def test_an_experiment_nobody_asks_about_cancels_itself(tiny_backend):
    """Regression: an experiment whose handler was dropped without being closed ran to its end."""

    import sys

    tab = sys.modules["playground.ui.experiments_tab"]   # the package re-exports a function of that name

    engine = Engine(SlowBackend(tiny_backend, pause=0.005))
    job = tab.Job()
    job.lease = 0.2
    job.run("depth", {"prompt_tokens": 16, "new_tokens": 480}, engine)   # no handler asks
    job.thread.join(60)
    assert job.error is None and job.result.cancelled and len(job.result.latency) < 480


def test_a_draw_slower_than_the_lease_does_not_count_as_an_abandoned_page():
    """Regression: on a loaded machine a Serve frame took longer to draw than the lease, and the run was cancelled
    while its page was still following it."""
    from playground.jobs import BackgroundJob

    job = BackgroundJob()
    job.lease = 0.2
    finished = threading.Event()

    def work(job):
        for k in range(60):
            if job.cancel.is_set():
                return "cancelled"
            job.report(k / 60, "working")
            time.sleep(0.01)   # timing: a worker's pace, long enough for several leases
        finished.set()
        return "done"

    def draw(final, tick):
        time.sleep(0.4)   # timing: the slow draw under test, twice the lease
        return final

    job.start(work)
    frames = list(job.follow(draw, every=0.01))
    assert frames[-1] is True and job.result == "done" and finished.is_set()
