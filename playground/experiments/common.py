"""What every experiment shares: the run's identity, progress and cancel, exact-length prompts, a fit.

    ids = exact_length_ids(backend.tokenizer, 100)   # 100 ids of real text (the long document, repeated)
    fit = fit_polynomial([1, 2, 3, 4], [6, 11, 18, 27], degree=2)
    fit.coefficients                                  # ~(3.0, 2.0, 1.0): 3 + 2x + x^2, lowest power first

Cancellation: an experiment checks `cancel` between measurements; once it is set the experiment stops
and returns what it has measured so far with `cancelled=True` (no exception), so a caller can still
draw the partial result. Progress fractions handed to `progress(fraction, message)` never decrease.

Left out: warm-up beyond one short forward pass, thread pinning, and statistics beyond quartiles.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

ProgressFn = Callable[[float, str], None]
LONG_DOCUMENT_PATH = Path(__file__).resolve().parents[2] / "assets" / "long_document.txt"


# --- what a result ran on

@dataclass(frozen=True)
class RunInfo:
    backend: str          # "torch" | "onnx" | "onnx-int8"
    device: str
    dtype: str
    model: str
    context_window: int
    threads: int          # torch intra-op threads at the time of the run

    @classmethod
    def of(cls, backend) -> "RunInfo":
        import torch
        return cls(backend.name, backend.device, backend.dtype, backend.model_name,
                   int(backend.context_window), torch.get_num_threads())

    def describe(self) -> str:
        return f"{self.model} · {self.backend} · {self.device} · {self.dtype}"


class ResultBase:
    """Mixin for the result dataclasses: `to_dict()` is asdict plus the derived numbers of `summary()`."""

    def summary(self) -> dict:
        return {}

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


def exact_length_ids(tokenizer, length: int, text: str | None = None) -> list[int]:
    """`length` token ids of real text (no chat template, no special tokens), repeating the text as needed."""
    ids = tokenizer(text or long_document(), add_special_tokens=False)["input_ids"]
    return (ids * math.ceil(length / len(ids)))[:length]


# --- timed forward passes (each timestamp after synchronize, like the engine's)

def argmax(logits) -> int:
    return int(logits.argmax())


class Timing(NamedTuple):
    wall: float  # seconds on the clock: the latency a user sees
    cpu: float   # CPU seconds of this process (all its threads): the work, less sensitive to other load


def _timed(backend, step) -> tuple[Timing, int, object]:
    w0, c0 = time.perf_counter(), time.process_time()
    logits, state = step()
    backend.synchronize()
    token = argmax(logits)
    return Timing(time.perf_counter() - w0, time.process_time() - c0), token, state


def timed_prefill(backend, ids: list[int]) -> tuple[Timing, int, object]:
    """(time of prefill + synchronize + greedy pick, the picked token, the cache state)."""
    return _timed(backend, lambda: backend.prefill(ids))


def timed_decode(backend, token: int, state) -> tuple[Timing, int, object]:
    """(time of one decode step + synchronize + greedy pick, the picked token, the new state)."""
    return _timed(backend, lambda: backend.decode(token, state))


def warm_up(backend) -> None:
    """One short prefill and decode, so one-off costs (allocations, lazy init) stay out of the data."""
    _, token, state = timed_prefill(backend, exact_length_ids(backend.tokenizer, 8))
    timed_decode(backend, token, state)


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
