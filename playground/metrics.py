"""Serving metrics from a Trace, with the definitions of vLLM's benchmark and GenAI-Perf.

t0 = request start; t1..tN = the moment each output token is available.
    TTFT = t1 - t0                   ITL_i = t_i - t_(i-1), i >= 2
    TPOT = (tN - t1) / (N - 1)       E2E = tN - t0
    decode tok/s = (N - 1) / (tN - t1)    prefill tok/s = prompt tokens / TTFT

Example: steps at 0.5, 0.6, 0.8 s for a 10-token prompt give TTFT 0.5, ITL [0.1, 0.2],
TPOT 0.15, E2E 0.8, decode 13.33 tok/s, prefill 20 tok/s.

Left out: queueing time (a Trace starts when the engine starts the request).
"""
from __future__ import annotations

from dataclasses import dataclass


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
    kv_bytes: int               # measured KV-cache size after the last step (0 before the first)


def compute_metrics(trace) -> Metrics:
    times = [s.time for s in trace.steps]
    n, p = len(times), len(trace.prompt_ids)
    if n == 0:
        return Metrics(p, 0, None, None, None, (), None, None, 0)
    ttft = times[0]
    itl = tuple(b - a for a, b in zip(times, times[1:]))
    span = times[-1] - times[0]
    tpot = span / (n - 1) if n > 1 else None
    decode_tps = (n - 1) / span if n > 1 and span > 0 else None
    prefill_tps = p / ttft if ttft > 0 else None
    return Metrics(p, n, ttft, tpot, times[-1], itl, decode_tps, prefill_tps, trace.steps[-1].kv_bytes)


def estimate_cost(metrics: Metrics, usd_per_m_input: float, usd_per_m_output: float) -> float:
    """An estimate (label it so): tokens x price per million tokens."""
    return (metrics.prompt_tokens * usd_per_m_input + metrics.output_tokens * usd_per_m_output) / 1e6
