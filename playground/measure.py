"""Measuring runs, shared by the experiments, the lesson and the Serve tab: progress and cancel, following
a Run to its end, exact-length prompts, a warm-up.

    report = Progress(progress, cancel)               # fractions clamped to 0..1, never going backwards
    ids = exact_length_ids(source, 100)                # 100 ids of real text (the long document, repeated)
    trace = follow(source.run_ids(ids, settings), report)   # every measurement is a Run of the source

Cancellation: a measurement checks `report.cancelled` between runs; `follow` cancels the run it follows
once the event is set, and returns the trace so far.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Callable

from .config import GenerationSettings
from .prompts import long_document

ProgressFn = Callable[[float, str], None]


class Progress:
    """Wraps the optional callback and event; fractions are clamped to 0..1 and never go backwards."""

    def __init__(self, progress: ProgressFn | None, cancel: threading.Event | None):
        self.callback, self.event, self.last = progress, cancel, 0.0
        self.start = time.perf_counter()

    def __call__(self, fraction: float, message: str) -> None:
        self.last = max(self.last, min(1.0, max(0.0, float(fraction))))
        if self.callback is not None:
            self.callback(self.last, message)

    @property
    def cancelled(self) -> bool:
        return self.event is not None and self.event.is_set()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def exact_length_ids(source, length: int, text: str | None = None) -> list[int]:
    """`length` token ids of real text (no chat template, no special tokens), repeating the text as needed.

    `source`: a step source (its `encode`) or a transformers tokenizer.
    """
    text = text or long_document()
    encode = getattr(source, "encode", None)
    ids = encode(text) if encode is not None else source(text, add_special_tokens=False)["input_ids"]
    return (ids * math.ceil(length / len(ids)))[:length]


def require(source, capability: str, experiment: str) -> None:
    """ValueError naming what `source` lacks for `experiment` (e.g. a server that cannot run without cache)."""
    if not getattr(source.capabilities, capability):
        label = source.capabilities.LABELS[capability]
        raise ValueError(f"{experiment} needs {label}; {source.info.name} does not offer it")


def follow(run, report: "Progress", on_step: Callable | None = None):
    """Iterate `run` to its end, cancelling it once `report` is cancelled; returns its trace."""
    for step in run:
        if report.cancelled:
            run.cancel()
        if on_step is not None:
            on_step(step)
    return run.trace


def warm_up(source) -> None:
    """One short run from exact ids, so one-off costs (allocations, lazy init) stay out of the data."""
    source.run_ids(exact_length_ids(source, 8), GenerationSettings(max_new_tokens=2), ignore_eos=True).wait()
