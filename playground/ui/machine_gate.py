"""The app-wide CPU gate on the page: every handler of the CPU queue runs in one of the machine's CPU slots.

    gate = MachineGate()                    # one per app (build_demo makes it, or is handed one): machine.py
    gate_cpu_events(demo, queue, gate)      # wraps every handler of the CPU queue in gate.shared()

Gradio lets more events of the queue in (GENERATE_CONCURRENCY) than the gate has slots: a Generate run on
a remote server, or one that joins the engine loop (which holds one slot for all of its requests), takes
no slot of its own and never waits behind local runs. A Serve workload takes the machine alone (up to a
minute's wait, saying so); CPU work started meanwhile waits in its handler until the workload ends.

Every handler of the CPU queue takes Gradio's dict inputs (one dict, and a gr.Request where it asks for one), so
one wrapper of a fixed shape gates them all. Left out: the Serve tab's workload job (serve_job.py).
"""
from __future__ import annotations

import functools
import inspect

import gradio as gr

from ..machine import MachineGate

__all__ = ["MachineGate", "gate_cpu_events"]


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
    # Gradio internals: Gradio 6 has no public API to list or wrap an app's registered handlers (test_ui_forms.py)
    for block_fn in demo.fns.values():
        fn = block_fn.fn
        if (block_fn.concurrency_id == queue and fn is not None and fn not in skip
                and not inspect.iscoroutinefunction(fn) and not inspect.isasyncgenfunction(fn)):
            if not block_fn.inputs_as_dict:
                raise TypeError(f"{block_fn.name}: a handler of the {queue!r} queue takes dict inputs (a set)")
            block_fn.fn = _shared(fn, gate)
            wrapped += 1
    return wrapped
