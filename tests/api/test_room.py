"""A room fits the endpoint's defaults: 30 clients at once -- 30 keys, or 30 source addresses in 127.0.0.0/8 --
are all answered 200 by the app's endpoint as ApiConfig() sets it up (the tiny model on ONNX Runtime); with
fewer KV slots than people, those beyond the slots wait in the engine's queue instead of being refused."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from playground.api import ApiConfig
from playground.serve.room import ROOM
from playground.serve.traffic import endpoint_text
from tests.api.test_openai_api import QUESTION, Served
from tests.helpers import wait_for


def hold_until_the_room_is_in(served: Served, monkeypatch) -> None:
    """The loop takes its first pass once every request of the room is in it (or one was refused), as a busy
    server would: what the test sees does not depend on how fast the machine sends them."""
    loop = served.service.engine_loop
    step, arrived = loop.batcher.step, threading.Event()

    def step_once_the_room_is_in():
        if not arrived.is_set():
            wait_for(lambda: loop.in_flight() >= ROOM or served.traffic.refusals, timeout=60,
                     message=f"{ROOM} requests to reach the loop")
            arrived.set()
        return step()
    monkeypatch.setattr(loop.batcher, "step", step_once_the_room_is_in)


def ask_as_a_room(served: Served, by: str) -> list[int]:
    """One chat request from each of ROOM people at the same moment: each with a key of its own (`keys`), or
    each from an address of its own (`addresses`: 127.0.0.2 .. 127.0.0.31, no key). Their HTTP statuses."""
    def ask(i: int) -> int:
        local = "127.0.0.1" if by == "keys" else f"127.0.0.{i + 2}"
        headers = {"Authorization": f"Bearer room-key-{i}"} if by == "keys" else {}
        with httpx.Client(transport=httpx.HTTPTransport(local_address=local), timeout=60) as http:
            return http.post(served.url + "/v1/chat/completions", headers=headers, json={
                "messages": QUESTION, "max_tokens": 4, "temperature": 0, "ignore_eos": True}).status_code
    with ThreadPoolExecutor(ROOM) as pool:
        return list(pool.map(ask, range(ROOM)))


@pytest.mark.parametrize("by", ["keys", "addresses"])
def test_a_room_of_thirty_at_once_is_all_served_with_the_defaults(tiny_onnx_engine, monkeypatch, by):
    keys = tuple(f"room-key-{i}" for i in range(ROOM)) if by == "keys" else ()
    served = Served(tiny_onnx_engine, ApiConfig(keys=keys))
    try:
        hold_until_the_room_is_in(served, monkeypatch)
        statuses = ask_as_a_room(served, by)
        assert statuses == [200] * ROOM, (statuses, served.traffic.refusals)
        assert len(served.service.guard._names) == ROOM   # thirty clients, each named apart
        record = served.traffic.snapshot()
        assert served.service.engine_loop.batcher.kv.slots >= ROOM   # sized from memory: the room held at once
        assert len(record.records) == ROOM and all(r.output_tokens == 4 for r in record.records)
        assert max(b.decode_tokens for b in record.batches) == ROOM   # one decode step carried the whole room
    finally:
        served.stop()


def test_a_room_larger_than_the_slots_waits_in_the_engines_queue_not_refused(tiny_onnx_engine, monkeypatch):
    served = Served(tiny_onnx_engine, ApiConfig(slots=4))
    try:
        hold_until_the_room_is_in(served, monkeypatch)
        assert ask_as_a_room(served, "addresses") == [200] * ROOM, served.traffic.refusals
        record = served.traffic.snapshot()
        assert len(record.records) == ROOM and max(b.requests for b in record.batches) <= 4   # at most the slots
        first_done = min(r.finished for r in record.records)
        assert sum(r.admitted >= first_done for r in record.records) == ROOM - 4   # the rest took a freed slot
        assert "The engine holds 4 requests at once" in endpoint_text(served.traffic.endpoint)
    finally:
        served.stop()
