"""CPU slots: local runs share the machine's cores two at a time; a run on a remote server takes no slot."""
from __future__ import annotations

import dataclasses

import pytest
from gradio_client import Client

from playground.registry import SourceRegistry
from playground.serve.room import Room
from playground.ui import build_demo
from playground.ui.machine_gate import MachineGate
from tests.helpers import free_port, generate_args, generated, wait_for


class ServerLike:
    """The tiny engine described as a remote source (what the handler reads to decide on a CPU slot)."""

    def __init__(self, engine):
        self._engine = engine
        self.info = dataclasses.replace(engine.info, origin="remote")

    def __getattr__(self, name):
        return getattr(self._engine, name)


GATE = MachineGate()   # the app's gate, handed to build_demo in its room: the test holds its slots


@pytest.fixture(scope="module")
def app_url(tiny_engine):
    registry = SourceRegistry(lambda name, progress: tiny_engine if name == "torch" else ServerLike(tiny_engine),
                              ["torch", "server"], default="torch")
    demo = build_demo(registry, Room(gate=GATE))
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(),
                                    server_name="127.0.0.1", quiet=True)
    yield url
    demo.close()


def test_a_third_local_run_waits_for_a_slot():
    gate = MachineGate(slots=2)
    assert gate.enter_shared(timeout=0) and gate.enter_shared(timeout=0)
    assert not gate.enter_shared(timeout=0)   # both cores busy
    gate.leave_shared()
    assert gate.enter_shared(timeout=0)


@pytest.mark.slow
def test_a_server_run_streams_while_every_cpu_slot_is_taken(app_url):
    client = Client(app_url, verbose=False)
    for _ in range(GATE.slots):
        assert GATE.enter_shared(timeout=5)   # two local runs hold the machine
    try:
        local = client.submit(*generate_args(max_new_tokens=4, backend="torch"), api_name="/generate")
        remote = client.submit(*generate_args(max_new_tokens=4, backend="server"),
                               api_name="/generate").result(timeout=30)
        assert "finished" in generated(remote)["status"]       # no slot needed: it ran
        wait_for(lambda: any("Waiting for a CPU slot" in str(update) for update in local.outputs()), timeout=60,
                 message="the local run to say it waits for a CPU slot")   # the local one says it waits …
        assert not local.done()                                 # … and does: both slots are still held
    finally:
        for _ in range(GATE.slots):
            GATE.leave_shared()
    assert "finished" in generated(local.result(timeout=60))["status"]   # and runs once one is free


@pytest.mark.slow
def test_each_app_has_its_own_gate(app_url, tiny_engine):
    """Two apps in one process (the test suite's case) do not wait for each other's CPU slots."""
    registry = SourceRegistry(lambda name, progress: tiny_engine, ["torch"], default="torch")
    other = build_demo(registry)   # no room handed in: a room, and a gate, of its own
    _, url, _ = other.queue().launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1",
                                     quiet=True)
    for _ in range(GATE.slots):
        assert GATE.enter_shared(timeout=5)   # the first app's machine is full
    try:
        job = Client(url, verbose=False).submit(*generate_args(max_new_tokens=4, backend="torch"),
                                                api_name="/generate")
        reply = job.result(timeout=60)
        assert "finished" in generated(reply)["status"]
        assert not any("Waiting for a CPU slot" in str(update) for update in job.outputs())
    finally:
        for _ in range(GATE.slots):
            GATE.leave_shared()
        other.close()
