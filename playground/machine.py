"""The machine's CPU, shared: local runs share its slots; work whose figures need the machine takes it alone.

    gate = MachineGate()                    # one per app
    with gate.shared(): …                   # CPU work (a run alone, Compare, Experiments, the Lesson)
    if gate.acquire_alone(timeout=60): …    # a Serve workload: waits for the others to end, then runs alone
    gate.wanted()                           # True while work waits to take the machine alone

At most CPU_SLOTS local runs share the machine (2 cores: more only slows every run). The engine loop that
batches the room's requests (serve/engine_loop.py) holds one slot while it has work, for all of them. On 2
shared cores a workload's figures mean nothing if another run shares the CPU, so a workload takes the
machine alone: it waits for CPU work in progress to end, and CPU work started meanwhile waits until it ends
(the engine loop lets go between two iterations as soon as a workload asks: `wanted()`).

Left out: gradio (ui/machine_gate.py wraps the page's handlers in `shared()`).
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

CPU_SLOTS = 2   # local runs at once: 2 CPU cores; more only slows every run


class MachineGate:
    """A readers-writer gate: up to `slots` CPU runs share the machine; a workload holds it alone (and goes first).

    >>> gate = MachineGate(slots=1)
    >>> gate.enter_shared(timeout=0), gate.enter_shared(timeout=0)   # the one slot is taken
    (True, False)
    >>> gate.leave_shared(); gate.acquire_alone(timeout=0), gate.enter_shared(timeout=0)
    (True, False)
    """

    def __init__(self, slots: int = CPU_SLOTS):
        self._cond = threading.Condition()
        self.slots, self.sharing, self.alone, self.wanting = slots, 0, False, 0
        self.alone_since: float | None = None   # time.monotonic() when work took the machine alone; None: none holds it
        self.wanted_since: float | None = None  # when work began to wait to take it alone; None: none waits

    def enter_shared(self, timeout: float | None = None) -> bool:
        """Take a CPU slot (waiting up to `timeout` seconds; None: as long as it takes); True when taken."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self.alone and not self.wanting and self.sharing < self.slots,
                                       timeout):
                return False
            self.sharing += 1
            return True

    def leave_shared(self) -> None:
        with self._cond:
            self.sharing -= 1
            self._cond.notify_all()

    @contextmanager
    def shared(self):
        self.enter_shared()
        try:
            yield
        finally:
            self.leave_shared()

    def wanted(self) -> bool:
        """Whether work waits to take the machine alone, or holds it."""
        return bool(self.wanting or self.alone)

    def acquire_alone(self, timeout: float) -> bool:
        with self._cond:
            if self.alone:
                return False
            self.wanting += 1
            if self.wanted_since is None:
                self.wanted_since = time.monotonic()
            try:
                ok = self._cond.wait_for(lambda: not self.alone and self.sharing == 0, timeout)
                if ok:
                    self.alone, self.alone_since = True, time.monotonic()
                return ok
            finally:
                self.wanting -= 1
                if not self.wanting:
                    self.wanted_since = None
                self._cond.notify_all()

    def release_alone(self) -> None:
        with self._cond:
            self.alone, self.alone_since = False, None
            self._cond.notify_all()

    def held_alone_for(self) -> float | None:
        """Seconds the machine has been held alone so far; None while no work holds it alone.

        >>> gate = MachineGate()
        >>> gate.held_alone_for(), gate.acquire_alone(timeout=0), gate.held_alone_for() >= 0
        (None, True, True)
        """
        since = self.alone_since
        return None if since is None else time.monotonic() - since

    def paused(self) -> tuple[str, float] | None:
        """Why the engine loop pauses, and for how many seconds so far: ("held", s) while work holds the machine
        alone, ("taking", s) while work waits for the runs in progress to end to take it (the loop lets go
        meanwhile); None while neither.

        >>> gate = MachineGate(slots=1)
        >>> gate.paused(), gate.enter_shared(timeout=0), gate.acquire_alone(timeout=0.01), gate.paused()
        (None, True, False, None)
        >>> import threading; taker = threading.Thread(target=gate.acquire_alone, args=(5,)); taker.start()
        >>> while gate.paused() is None: time.sleep(0.01)
        >>> gate.paused()[0]
        'taking'
        >>> gate.leave_shared(); taker.join(); gate.paused()[0]
        'held'
        """
        held, since = self.held_alone_for(), self.wanted_since
        if held is not None:
            return "held", held
        return None if since is None else ("taking", time.monotonic() - since)
