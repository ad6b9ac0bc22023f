"""The app-wide CPU gate: every local run shares the machine's CPU slots; a Serve workload holds it alone.

    gate = MachineGate()                    # one per app (build_demo makes it, or is handed one)
    with gate.shared(): …                   # any CPU work (Generate, Compare, Experiments, Lesson)
    if gate.acquire_alone(timeout=60): …    # a workload: waits for the others to end, then runs alone
    gate_cpu_events(demo, queue, gate)      # wraps every handler of the CPU queue in gate.shared()

The gate is also the CPU limit: at most CPU_SLOTS local runs share the machine (2 cores); Gradio lets
more events of the queue in (GENERATE_CONCURRENCY), so a Generate run on a remote server, which takes no
slot, never waits behind local ones. On 2 shared cores a workload's figures mean nothing if a Generate
run shares the CPU, so a workload takes the machine alone: it waits (up to a minute, saying so) for CPU
work in progress to end, and CPU work started meanwhile waits in its handler until the workload ends.

Every handler of the CPU queue takes Gradio's dict inputs (one dict, and a gr.Request where it asks for one), so
one wrapper of a fixed shape gates them all. Left out: the Serve tab's workload job (serve_job.py).
"""
from __future__ import annotations

import functools
import inspect
import threading
from contextlib import contextmanager

import gradio as gr

from .common import CPU_SLOTS


class MachineGate:
    """A readers-writer gate: up to `slots` CPU runs share the machine; a workload holds it alone (and goes first)."""

    def __init__(self, slots: int = CPU_SLOTS):
        self._cond = threading.Condition()
        self.slots, self.sharing, self.alone, self.wanting = slots, 0, False, 0

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

    def acquire_alone(self, timeout: float) -> bool:
        with self._cond:
            if self.alone:
                return False
            self.wanting += 1
            try:
                ok = self._cond.wait_for(lambda: not self.alone and self.sharing == 0, timeout)
                if ok:
                    self.alone = True
                return ok
            finally:
                self.wanting -= 1
                self._cond.notify_all()

    def release_alone(self) -> None:
        with self._cond:
            self.alone = False
            self._cond.notify_all()


def _shared(fn, gate: MachineGate):
    """`fn` (a handler of dict inputs) inside gate.shared(); Gradio sees fn's own signature (functools.wraps) and
    passes a gr.Request only where fn asks for one."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(values: dict, request: gr.Request | None = None):
            with gate.shared():
                yield from (fn(values) if request is None else fn(values, request))
        return generator

    @functools.wraps(fn)
    def function(values: dict, request: gr.Request | None = None):
        with gate.shared():
            return fn(values) if request is None else fn(values, request)
    return function


def gate_cpu_events(demo, queue: str, gate: MachineGate, skip=()) -> int:
    """Run every handler of concurrency group `queue` (except `skip`) inside gate.shared(); returns how many.
    TypeError for a handler of the queue that does not take dict inputs (the wrapper passes one dict on)."""
    wrapped = 0
    # Gradio internals: Gradio 6.17 has no public API to list or wrap an app's registered handlers (test_ui_forms.py)
    for block_fn in demo.fns.values():
        fn = block_fn.fn
        if (block_fn.concurrency_id == queue and fn is not None and fn not in skip
                and not inspect.iscoroutinefunction(fn) and not inspect.isasyncgenfunction(fn)):
            if not block_fn.inputs_as_dict:
                raise TypeError(f"{block_fn.name}: a handler of the {queue!r} queue takes dict inputs (a set)")
            block_fn.fn = _shared(fn, gate)
            wrapped += 1
    return wrapped
