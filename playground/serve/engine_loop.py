"""The engine loop: one background thread steps a continuous-batching Batcher for requests from any thread.

    loop = EngineLoop(onnx_engine, BatchConfig(slots=8), capacity=1024, machine=gate)
    ticket = loop.submit(ids, settings, prompt="Hi", text=chat_text)   # any thread; ValueError if it cannot fit
    async for steps in ticket.updates(): ...     # a coroutine (a FastAPI route): the new Steps as they are made
    ticket.listen(callback)                       # or be called (in the loop's thread) after each of its Steps
    run = loop.run(ids, settings, backend="onnx-gguf4")   # or a Run (source.py), iterated like Engine.run's
    loop.ahead(ticket)                            # requests waiting ahead of it for a KV slot (None: it has one)
    loop.cancel(ticket)                           # a client went away: its slot is free after the next iteration
    loop.close()

Every request joins one Batcher (batcher.py): the endpoint's clients and the page's Generate runs alike, so
requests that arrive together share its forward passes: a Step's `rows` says how many requests its pass
carried. The loop thread sleeps on an event while nothing is waiting or running (no spinning) and is woken by
`submit` and `cancel`. After each iteration it wakes the tickets that got a Step or ended; their readers then
read the new Steps from the request's own Trace (the one record every view reads), so nothing is copied or
timed twice. A request's Trace starts (t0) when it takes a KV slot; `trace.queued` is how long it waited
for one. An `observer` (the live record of client traffic, serve/traffic.py) is told of each request as it is
submitted and of each iteration, in the loop thread, before the readers are woken, and of the loop's pause (its
waiting requests then wait for the machine: no plan is made to say so).

With a `machine` (machine.py's MachineGate) the loop holds one of its CPU slots while it has work, for all
of its requests, and lets go between two iterations when work that needs the machine alone asks for it
(a Serve workload): requests then wait in the queue, and `paused` says why.

Left out: HTTP (api/routes.py), limits (api/limits.py) and preemption (the Batcher keeps a request to its end).
"""
from __future__ import annotations

import queue
import threading
from contextlib import aclosing
from typing import Callable, Iterator

from ..config import GenerationSettings
from ..jobs import woken
from ..source import Run
from ..trace import Step, StopReason
from .batcher import BatchConfig, Batcher, Iteration, Sequence

PAGE = "page"   # the first word of the client name of a page session's runs (the others: the endpoint's clients)


def page_client(session_id: str) -> str:
    """The client name of a page session's runs: each session is one client of the room (its turn comes between
    the others'); it names no one.

    >>> page_client("7f3a"), client_origin(page_client("7f3a")), client_origin("key 2")
    ('page 7f3a', 'page', 'API')
    """
    return f"{PAGE} {session_id}"


def client_origin(client: str) -> str:
    """Where a request came from, by its client name: "page" (a Generate run) or "API" (the endpoint)."""
    return PAGE if client.startswith(f"{PAGE} ") else "API"


IDLE_WAIT_S = 1.0   # an idle loop wakes this often only to notice close(); a request wakes it at once


class Ticket:
    """One request in the loop: its Sequence (Trace, stop reason) and a way to wait for its new Steps."""

    def __init__(self, seq: Sequence, client: str = "", session=None):
        self.seq, self.client = seq, client
        self.session = session   # the sessions.Session the request named, or None
        self._listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def trace(self):
        return self.seq.trace

    @property
    def done(self) -> bool:
        return self.seq.done

    @property
    def started(self) -> bool:
        """Whether it has taken a KV slot (its Trace's t0), or ended."""
        return self.seq.admitted is not None or self.seq.done

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

    async def updates(self, poll_s: float = 0.5, stop: Callable[[], object] | None = None, idle: bool = False):
        """The new Steps, a list per wake-up, until the request ends. Every `poll_s` s without one, the
        awaitable `stop()` (e.g. request.is_disconnected) is asked whether to give up; then it returns. With
        `idle`, such a wake-up yields [] too (a stream may then tell its client why it waits)."""
        seen = 0
        async with aclosing(woken(self, poll_s)) as wakes:
            async for news in wakes:
                if not news:
                    if stop is not None and await stop():
                        return
                    if idle:
                        yield []
                    continue
                steps, done = self.read(seen)
                if steps:
                    seen += len(steps)
                    yield steps
                if done:
                    return


class EngineLoop:
    """A Batcher over one ONNX engine, stepped by its own daemon thread while it has work."""

    def __init__(self, engine, config: BatchConfig | None = None, capacity: int | None = None,
                 observer=None, machine=None):
        self.engine = engine
        self.batcher = Batcher(engine, config, capacity)
        self.observer = observer   # .submitted(ticket), .iterated(iteration, batcher), .paused(batcher), or None
        self.machine = machine     # a MachineGate (machine.py), or None: the loop takes the CPU as it comes
        self.holding = False       # whether the loop holds one of the machine's CPU slots
        self.paused = False        # whether it waits for the machine (work that needs it alone holds it)
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
               ignore_eos: bool = False, request_id=None, client: str = "", server: dict | None = None,
               turn=None, session=None, priority: int = 0) -> Ticket:
        """Queue a request; ValueError when it cannot fit a slot or the loop is closed. `server`: what the
        endpoint knows of it (its Trace's `server` dict, filled before the observer is told); `turn`: a chat
        request's conversations.Turn (its Trace gets the record of its prefix-cache lookup); `session`: the
        sessions.Session it named (its ticket carries it to the observer's record); `priority`: 0, or more to
        yield to the other requests (plan.py)."""
        if self._closed:
            raise ValueError("the engine loop is closed")
        with self._lock:
            seq = self.batcher.add(ids, settings, request_id, prompt, text, ignore_eos, client, turn, session=session,
                                   priority=priority)
            seq.trace.server.update(server or {})
            ticket = self.tickets[id(seq)] = Ticket(seq, client, session)
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

    @property
    def slots(self) -> int:
        """Requests the loop holds at once (its KV slots); the others wait in its queue."""
        return self.batcher.config.slots

    def ahead(self, ticket: Ticket) -> int | None:
        """Requests waiting ahead of `ticket` for a KV slot; None once it has one (or has ended)."""
        return self.batcher.ahead(ticket.seq)

    def run(self, ids: list[int], settings: GenerationSettings, *, prompt: str = "", text: str = "",
            backend: str | None = None, client: str = "", turn=None) -> "LoopRun":
        """Submit a request and return it as a Run (source.py): iterate it for its Steps as the loop makes them,
        `cancel()` it. `backend`: the name its Trace carries (default: the Batcher's label); `turn`: as submit's."""
        ticket = self.submit(ids, settings, prompt=prompt, text=text, client=client, turn=turn)
        if backend:
            ticket.trace.backend = backend
        return LoopRun(self, ticket)

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
                if not self.batcher.busy() or (self.holding and self.machine.wanted()):
                    self._let_machine_go()
                if not self.batcher.busy():
                    if self._closed:
                        return
                    self._wake.wait(IDLE_WAIT_S)
                    continue
                if self._take_machine():
                    self._deliver(self.batcher.step())
        except Exception as exc:   # noqa: BLE001 - every waiting reader must learn the loop is gone
            self.error = f"the engine loop stopped: {type(exc).__name__}: {exc}"
            self._closed = True
            self._fail_all()
        finally:
            self._let_machine_go()

    def _take_machine(self) -> bool:
        """Hold one of the machine's CPU slots (at once without a machine); False after waiting IDLE_WAIT_S for it
        (the loop then looks again: a request may have been cancelled, or the loop closed)."""
        if self.machine is None or self.holding:
            return True
        entered = self.machine.enter_shared(timeout=0)
        if not entered:
            self.batcher.pause()   # its requests' waits count for the machine from now (before `paused` says so)
            if self.observer is not None:
                self.observer.paused(self.batcher)   # the record of each waiting request says so too
        self.paused = not entered
        if self.paused:
            self.paused = not self.machine.enter_shared(timeout=IDLE_WAIT_S)
            if self.paused and self._closed:
                self.batcher.cancel_all()
                self._deliver(self.batcher.step())   # ends every request without a forward pass
        if not self.paused:
            self.batcher.resume()
        self.holding = not self.paused
        return self.holding

    def _let_machine_go(self) -> None:
        if self.holding:
            self.holding = False
            self.machine.leave_shared()

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


class LoopRun(Run):
    """A request in the loop as a Run (source.py): iterating it waits for the Steps the loop makes for it; `cancel()`
    ends it at the loop's next iteration. Its Trace is the loop's, filled in the loop's thread."""

    def __init__(self, loop: EngineLoop, ticket: Ticket):
        self.loop, self.ticket = loop, ticket
        self._moved = threading.Event()   # set by the loop's thread at the request's first Step or its end
        ticket.listen(self._moved.set)
        super().__init__(ticket.trace, LoopRun._steps, 0.0)

    @property
    def started(self) -> bool:
        return self.ticket.started

    def ahead(self) -> int | None:
        return self.loop.ahead(self.ticket)

    def waiting_for(self) -> str | None:
        """What it waits for now, as the latest plan (or the loop's pause) said; None once it holds a slot."""
        seq = self.ticket.seq
        return None if seq.wait_since is None else str(seq.wait)

    def wait_turn(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the request's first Step (or its end); whether it has a slot now."""
        self._moved.wait(timeout)
        return self.started

    def cancel(self) -> None:
        super().cancel()
        self.loop.cancel(self.ticket)

    def _steps(self) -> Iterator[Step]:
        woken = queue.SimpleQueue()
        poke = lambda: woken.put(True)   # noqa: E731 - called in the loop's thread
        self.ticket.listen(poke)
        seen = 0
        try:
            while True:
                steps, done = self.ticket.read(seen)
                seen += len(steps)
                yield from steps
                if done:
                    return
                try:
                    woken.get(timeout=IDLE_WAIT_S)
                except queue.Empty:
                    if self.loop.error:
                        raise RuntimeError(self.loop.error) from None
        finally:
            self.ticket.unlisten(poke)
            if not self.ticket.done:
                self.loop.cancel(self.ticket)
