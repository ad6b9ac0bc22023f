"""The prefill row: the median TTFT of a one-token Run from exactly 1024 prompt ids, on one backend.

    python -m playground.bench prefill onnx --model tiny   # one JSON row (make bench runs one a backend)

Measured through the source's own step loop, as the prefill experiment measures it (real text, cut to
an exact length), after one warm-up run; any step source with `exact_ids` can be measured
(measure_prefill), not only a local backend (prefill_row).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..config import GenerationSettings
from ..measure import exact_length_ids, require
from .rows import Row, say


@dataclass(frozen=True)
class PrefillRow(Row):
    """Median TTFT of a one-token Run from exactly `prefill_tokens` prompt ids (measure_prefill).

    >>> PrefillRow("onnx", 1024, 0.8, 1280.0).to_json()
    {'backend': 'onnx', 'prefill_tokens': 1024, 'prefill_s': 0.8, 'prefill_tps': 1280.0}
    """

    backend: str
    prefill_tokens: int
    prefill_s: float
    prefill_tps: float


PREFILL_TOKENS = 1024


def prefill_row(name: str, tokens: int = PREFILL_TOKENS, repeats: int = 3, model: str | None = None) -> PrefillRow:
    """The prefill figure of backend `name` (see measure_prefill)."""
    from ..backends import create_backend
    from ..engine import Engine

    return measure_prefill(Engine(create_backend(name, model)), tokens, repeats)


def measure_prefill(source, tokens: int = PREFILL_TOKENS, repeats: int = 3) -> PrefillRow:
    """Median TTFT of a one-token Run from exactly `tokens` prompt ids (warm-up run excluded): the
    prefill experiment's measurement, through the source's own step loop like every other figure."""
    require(source, "exact_ids", "the prefill row")
    tokens = min(tokens, (source.info.context_window or 2**31) - 1)   # the tiny test model's window is 512
    ids = exact_length_ids(source, tokens)   # real text, as the prefill experiment uses
    one = GenerationSettings(max_new_tokens=1)
    source.run_ids(ids[:64], one).wait()
    median = statistics.median(source.run_ids(ids, one).wait().steps[0].time for _ in range(repeats))
    return PrefillRow(source.info.name, tokens, round(median, 3), round(tokens / median, 1))


def main(argv: list[str]) -> None:
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench prefill", description=__doc__.splitlines()[0])
    p.add_argument("backend")
    p.add_argument("--model", default=None, help="model spec (default: the bundled SmolLM2; 'tiny' for tests)")
    p.add_argument("--tokens", type=int, default=PREFILL_TOKENS)
    args = p.parse_args(argv)
    say(prefill_row(args.backend, args.tokens, model=args.model))
