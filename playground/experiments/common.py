"""What every experiment shares: the run's identity, progress and cancel, exact-length prompts, a fit.

    ids = exact_length_ids(source, 100)             # 100 ids of real text (the long document, repeated)
    trace = follow(source.run_ids(ids, settings), report)   # every measurement is a Run of the source
    fit = fit_polynomial([1, 2, 3, 4], [6, 11, 18, 27], degree=2)
    fit.coefficients                                  # ~(3.0, 2.0, 1.0): 3 + 2x + x^2, lowest power first

Cancellation: an experiment checks `cancel` between measurements; once it is set the experiment stops
and returns what it has measured so far with `cancelled=True` (no exception), so a caller can still
draw the partial result. Progress fractions handed to `progress(fraction, message)` never decrease.

Left out: warm-up beyond one short run, thread pinning, and statistics beyond quartiles.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..config import GenerationSettings

ProgressFn = Callable[[float, str], None]
LONG_DOCUMENT_PATH = Path(__file__).resolve().parents[2] / "assets" / "long_document.txt"


# --- what a result ran on

@dataclass(frozen=True)
class RunInfo:
    backend: str               # the step source's name: "torch", "onnx-int8", "llama.cpp @ host", …
    device: str
    dtype: str
    model: str
    context_window: int | None
    threads: int | None        # the runtime's threads at the time of the run (None: a remote source)

    @classmethod
    def of(cls, source) -> "RunInfo":
        i = source.info
        threads = (getattr(source, "replay", None) or {}).get("threads")
        return cls(i.name, i.device, i.dtype, i.model, i.context_window, threads)

    def describe(self) -> str:
        return f"{self.model} · {self.backend} · {self.device} · {self.dtype}"


class ResultBase:
    """Mixin for the result dataclasses: `to_dict()` is asdict plus the derived numbers of `summary()`."""

    def summary(self) -> dict:
        return {}

    def findings(self) -> list[str]:
        """The result in words with units, one finding a line (see units.py); empty: too little measured."""
        return []

    def to_dict(self) -> dict:
        return {"experiment": self.NAME, **asdict(self), "summary": self.summary()}


# --- progress and cancel

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


# --- prompts

def long_document() -> str:
    """The shipped summarization text (assets/long_document.txt, self-written, ~800 SmolLM2 tokens)."""
    return LONG_DOCUMENT_PATH.read_text(encoding="utf-8")


def exact_length_ids(source, length: int, text: str | None = None) -> list[int]:
    """`length` token ids of real text (no chat template, no special tokens), repeating the text as needed.

    `source`: a step source (its `encode`) or a transformers tokenizer.
    """
    text = text or long_document()
    encode = getattr(source, "encode", None)
    ids = encode(text) if encode is not None else source(text, add_special_tokens=False)["input_ids"]
    return (ids * math.ceil(length / len(ids)))[:length]


# --- runs (every measurement is a Run of the source: one timing loop in the project)

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


# --- least squares

@dataclass(frozen=True)
class Fit:
    coefficients: tuple[float, ...]  # lowest power first: (a, b, c) for a + b x + c x^2
    r2: float                        # coefficient of determination on the fitted points

    def __call__(self, x):
        x = np.asarray(x, dtype=float)
        return sum(c * x**i for i, c in enumerate(self.coefficients))


def fit_polynomial(x, y, degree: int) -> Fit | None:
    """Least-squares polynomial (numpy.polyfit); the degree drops when there are too few distinct x.

    None without any point. Coefficients are always degree + 1 long (missing powers are 0).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size == 0:
        return None
    deg = min(degree, len(set(x.tolist())) - 1)
    coef = np.polyfit(x, y, deg)[::-1].tolist() if deg > 0 else [float(y.mean())]
    coef += [0.0] * (degree + 1 - len(coef))
    fit = Fit(tuple(float(c) for c in coef), 1.0)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    ss_res = float(((y - fit(x)) ** 2).sum())
    return Fit(fit.coefficients, 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0)
