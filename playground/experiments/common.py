"""What every experiment shares: the run's identity, the result's base, a least-squares fit.

    fit = fit_polynomial([1, 2, 3, 4], [6, 11, 18, 27], degree=2)
    fit.coefficients                                  # ~(3.0, 2.0, 1.0): 3 + 2x + x^2, lowest power first

Measuring (Progress, follow, exact-length prompts, warm-up) is measure.py's; the shared prompts are
prompts.py's. Cancellation: an experiment checks `cancel` between measurements; once it is set the
experiment stops and returns what it has measured so far with `cancelled=True` (no exception), so a
caller can still draw the partial result. Progress fractions handed to `progress(fraction, message)`
never decrease.

Left out: warm-up beyond one short run, thread pinning, and statistics beyond quartiles.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np



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
