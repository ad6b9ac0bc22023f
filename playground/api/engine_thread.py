"""The engine thread: one background thread steps a continuous-batching Batcher for requests from any thread.

    loop = EngineLoop(onnx_engine, BatchConfig(slots=8), capacity=1024)
    ticket = loop.submit(ids, settings, prompt="Hi", text=chat_text)   # any thread; ValueError if it cannot fit
    async for steps in ticket.updates(): ...     # a coroutine (a FastAPI route): the new Steps as they are made
    ticket.listen(callback)                       # or be called (in the loop's thread) after each of its Steps
    loop.cancel(ticket)                           # a client went away: its slot is free after the next iteration
    loop.close()

Every request joins one Batcher (playground/serve/batching.py), so requests that arrive together share
its decode steps: a Step's `rows` says how many requests its forward pass carried. The loop thread sleeps
on an event while nothing is waiting or running (no spinning) and is woken by `submit` and `cancel`.
After each iteration it wakes the tickets that got a Step or ended; their readers then read the new Steps
from the request's own Trace (the one record every view reads), so nothing is copied or timed twice.
An `observer` (the live record of client traffic, record.py) is told of each request as it is submitted
and of each iteration, in the loop thread, before the readers are woken.

Left out: HTTP (routes.py), limits (limits.py) and preemption (the Batcher keeps a request to its end).
"""
from __future__ import annotations

import asyncio
import threading
from typing import Callable

from ..config import GenerationSettings
from ..serve.batching import Batcher, Iteration, Sequence
from ..serve.slots import BatchConfig
from ..trace import Step, StopReason

IDLE_WAIT_S = 1.0   # an idle loop wakes this often only to notice close(); a request wakes it at once


class Ticket:
    """One request in the loop: its Sequence (Trace, stop reason) and a way to wait for its new Steps."""

    def __init__(self, seq: Sequence, client: str = ""):
        self.seq, self.client = seq, client
        self._listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def trace(self):
        return self.seq.trace

    @property
    def done(self) -> bool:
        return self.seq.done

    def listen(self, listener: Callable[[], None]) -> None:
        """Call `listener` (in the loop's thread) after each iteration that gives this request a Step or ends it."""
        with self._lock:
            self._listeners.append(listener)

    def unlisten(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.remove(listener)

    def notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def read(self, start: int) -> tuple[list[Step], bool]:
        """(the Steps from index `start` on, whether the request has ended); the end is read first, so a
        reader that sees it ended also sees every Step."""
        done = self.done
        return self.seq.trace.steps[start:], done

    async def updates(self, poll_s: float = 0.5, stop: Callable[[], object] | None = None):
        """The new Steps, a list per wake-up, until the request ends. Every `poll_s` s without one, the
        awaitable `stop()` (e.g. request.is_disconnected) is asked whether to give up; then it returns."""
        loop, wake = asyncio.get_running_loop(), asyncio.Event()

        def poke():   # the engine loop's thread
            loop.call_soon_threadsafe(wake.set)
        self.listen(poke)
        seen = 0
        try:
            while True:
                wake.clear()
                steps, done = self.read(seen)
                if steps:
                    seen += len(steps)
                    yield steps
                if done:
                    return
                try:
                    await asyncio.wait_for(wake.wait(), poll_s)
                except asyncio.TimeoutError:
                    if stop is not None and await stop():
                        return
        finally:
            self.unlisten(poke)


class EngineLoop:
    """A Batcher over one ONNX engine, stepped by its own daemon thread while it has work."""

    def __init__(self, engine, config: BatchConfig | None = None, capacity: int | None = None,
                 observer=None):
        self.engine = engine
        self.batcher = Batcher(engine, config, capacity)
        self.observer = observer   # .submitted(ticket) and .iterated(iteration, batcher), or None
        self.tickets: dict[int, Ticket] = {}   # id(seq) -> its ticket, while the request is in the loop
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self.iterations = 0
        self.error: str | None = None          # why the loop thread stopped, if it failed
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._thread.start()

    @property
    def capacity(self) -> int:
        """Positions one request may hold: prompt + new tokens."""
        return self.batcher.capacity

    def submit(self, ids: list[int], settings: GenerationSettings, *, prompt: str = "", text: str = "",
               ignore_eos: bool = False, request_id=None, client: str = "", server: dict | None = None) -> Ticket:
        """Queue a request; ValueError when it cannot fit a slot or the loop is closed. `server`: what the
        endpoint knows of it (its Trace's `server` dict, filled before the observer is told)."""
        if self._closed:
            raise ValueError("the engine loop is closed")
        with self._lock:
            seq = self.batcher.add(ids, settings, request_id, prompt, text, ignore_eos)
            seq.trace.server.update(server or {})
            ticket = self.tickets[id(seq)] = Ticket(seq, client)
            if self.observer is not None:
                self.observer.submitted(ticket)
        self._wake.set()
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """End the request at the next iteration; its slot is free after it."""
        self.batcher.cancel(ticket.seq)
        self._wake.set()

    def in_flight(self) -> int:
        with self._lock:
            return len(self.tickets)

    def close(self, timeout: float = 5.0) -> None:
        """Cancel every request, let the thread end them, and stop it."""
        self._closed = True
        self.batcher.cancel_all()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while True:
                self._wake.clear()
                if not self.batcher.busy():
                    if self._closed:
                        return
                    self._wake.wait(IDLE_WAIT_S)
                    continue
                self._deliver(self.batcher.step())
        except Exception as exc:   # noqa: BLE001 - every waiting reader must learn the loop is gone
            self.error = f"the engine loop stopped: {type(exc).__name__}: {exc}"
            self._closed = True
            self._fail_all()

    def _deliver(self, it: Iteration) -> None:
        self.iterations += 1
        with self._lock:
            woken = {id(seq): self.tickets[id(seq)] for seq, _ in it.steps if id(seq) in self.tickets}
            for seq in it.finished:
                ticket = self.tickets.pop(id(seq), None)
                if ticket is not None:
                    woken[id(seq)] = ticket
        if self.observer is not None:
            self.observer.iterated(it, self.batcher)
        for ticket in woken.values():
            ticket.notify()

    def _fail_all(self) -> None:
        with self._lock:
            tickets, self.tickets = list(self.tickets.values()), {}
        for ticket in tickets:
            ticket.seq.trace.error = self.error
            ticket.seq.trace.stop_reason = StopReason.ERROR
            ticket.notify()
