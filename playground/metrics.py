"""Serving metrics from a Trace, with the definitions of vLLM's benchmark and GenAI-Perf.

t0 = request start; t1..tN = the moment each output token is available.
    TTFT = t1 - t0                   ITL_i = t_i - t_(i-1), i >= 2
    TPOT = (tN - t1) / (N - 1)       E2E = tN - t0
    decode tok/s = (N - 1) / (tN - t1)    prefill tok/s = prompt tokens / TTFT

A remote server's stream is seen as events, each carrying one or more tokens (`Step.tokens`): N counts
tokens, ITL is per event, and TPOT / decode tok/s divide by the tokens after the first event's.

Example: steps at 0.5, 0.6, 0.8 s for a 10-token prompt give TTFT 0.5, ITL [0.1, 0.2],
TPOT 0.15, E2E 0.8, decode 6.67 tok/s (2 tokens in 0.3 s), prefill 20 tok/s.

A reasoning server thinks before it answers (Steps marked `thinking`): TTFT is still its first token, the
first thought; `ttft_answer` is the time to the first answer token (GuideLLM's time to first output token,
AIPerf's TTFO), and `thinking_tokens` counts the thinking (an output token like any, priced as one).

    >>> from playground.trace import Phase, Step
    >>> def step(i, t, prev): return Step(index=i, token_id=5, text="x", special=False, phase=Phase.DECODE, time=t,
    ...                                     latency=t - prev, prob=None, sample_prob=None, top=None, seq_len=None,
    ...                                     kv_bytes=None)
    >>> m = compute_metrics(SimpleNamespace(steps=[step(0, .5, 0), step(1, .6, .5), step(2, .8, .6)],
    ...                                     prompt_ids=list(range(10))))
    >>> m.ttft, [round(x, 3) for x in m.itl], round(m.tpot, 3), m.e2e, round(m.decode_tps, 2), m.prefill_tps
    (0.5, [0.1, 0.2], 0.15, 0.8, 6.67, 20.0)
    >>> m.kv_bytes is None    # this source measured no KV cache: missing, not zero
    True
    >>> m.thinking_tokens, m.ttft_answer    # no thinking: the first answer token is the first token
    (0, 0.5)

Percentiles (p50, p95 of many requests) come from `percentile`, one definition for the whole project: linear
between the two nearest ranks (numpy's default, as vLLM's benchmark computes them); the bench rows whose figures
are a measured value each (room, clients) ask for the nearest rank.

Left out: queueing time (a Trace starts when the engine starts the request; serve/ adds waiting).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace  # noqa: F401 - used by the doctest


@dataclass(frozen=True)
class Metrics:
    prompt_tokens: int
    output_tokens: int
    ttft: float | None          # seconds; None before the first token
    tpot: float | None          # seconds per output token after the first; None with < 2 tokens
    e2e: float | None
    itl: tuple[float, ...]      # inter-token latencies, one per token after the first
    decode_tps: float | None
    prefill_tps: float | None
    kv_bytes: int | None        # measured KV-cache size after the last step; None: not measured (or no step yet)
    thinking_tokens: int = 0    # output tokens of the model's thinking (Step.thinking), before its answer
    ttft_answer: float | None = None   # t0 -> the first answer token (not thinking); None before it (or never)


def compute_metrics(trace) -> Metrics:
    steps = trace.steps
    p = len(trace.prompt_ids)
    if not steps:
        return Metrics(p, 0, None, None, None, (), None, None, None)
    n = sum(s.tokens for s in steps)
    ttft, e2e = steps[0].time, steps[-1].time
    itl = tuple(b.time - a.time for a, b in zip(steps, steps[1:]))
    span, after_first = e2e - ttft, n - steps[0].tokens
    tpot = span / after_first if after_first > 0 else None
    decode_tps = after_first / span if after_first > 0 and span > 0 else None
    prefill_tps = p / ttft if ttft > 0 else None
    thinking = sum(s.tokens for s in steps if getattr(s, "thinking", False))
    answer = next((s.time for s in steps if not getattr(s, "thinking", False)), None)
    return Metrics(p, n, ttft, tpot, e2e, itl, decode_tps, prefill_tps, steps[-1].kv_bytes, thinking, answer)


def estimate_cost(metrics: Metrics, usd_per_m_input: float, usd_per_m_output: float) -> float:
    """An estimate (label it so): tokens x price per million tokens."""
    return (metrics.prompt_tokens * usd_per_m_input + metrics.output_tokens * usd_per_m_output) / 1e6


LINEAR, NEAREST_RANK = "linear", "nearest-rank"


def percentile(values, q: float, method: str = LINEAR) -> float | None:
    """The q-th percentile (q from 0 to 100) of the values that are not None; None when there are none.

    LINEAR (the definition used everywhere unless a row says otherwise; numpy's default, to the last bit): the rank
    q/100 x (n - 1) of the sorted values, interpolated between the two nearest. NEAREST_RANK: the ceil(q/100 x n)-th
    smallest, a value that was measured.

    >>> percentile([4.0, 1.0, 3.0, 2.0], 50), percentile([0.0, 10.0], 95), percentile([None, 3.0], 99)
    (2.5, 9.5, 3.0)
    >>> percentile([4.0, 1.0, 3.0, 2.0], 50, NEAREST_RANK), percentile(range(1, 21), 95, NEAREST_RANK)
    (2.0, 19.0)
    >>> percentile([], 95) is None, percentile([None], 50, NEAREST_RANK) is None
    (True, True)
    """
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is between 0 and 100; got {q}")
    ordered = sorted(float(v) for v in values if v is not None)
    if not ordered:
        return None
    n = len(ordered)
    if method == NEAREST_RANK:
        return ordered[max(0, math.ceil(q * n / 100) - 1)]
    if method != LINEAR:
        raise ValueError(f"a percentile's method is {LINEAR!r} or {NEAREST_RANK!r}; got {method!r}")
    rank = q / 100 * (n - 1)
    below = math.floor(rank)
    a, b, t = ordered[below], ordered[min(below + 1, n - 1)], rank - below
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t   # numpy's lerp, which is exact at t = 1
