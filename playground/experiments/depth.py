"""Decode cost vs context depth: the latency of each decode step as the KV cache grows.

    sweep = run_depth_sweep(backend, prompt_tokens=256, new_tokens=256)
    sweep.seq_len[i], sweep.latency[i], sweep.kv_bytes[i]   # one row per decode step, measured
    sweep.fit.coefficients                                  # (a, b): seconds = a + b * seq_len

A dedicated greedy loop over `backend.decode` rather than an Engine run: EOS is ignored, so the
generation always reaches `prompt_tokens + new_tokens` positions (a real prompt may stop after a few
tokens). Each step is timed like the engine times it (decode + synchronize + pick); the KV bytes are
measured after the step, outside the timed span. Each decode reads the whole cache, so its cost grows
with seq_len; how steeply depends on model and runtime (the linear fit reports the slope). Seen with
SmolLM2-135M on CPU: about 67 ms per step at depth 300, 108 ms at depth 500.

Left out: the first token (that is prefill; see the prefill sweep).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .common import Fit, Progress, ProgressFn, ResultBase, RunInfo, exact_length_ids, fit_polynomial, \
    timed_decode, timed_prefill, warm_up


@dataclass
class DepthSweep(ResultBase):
    NAME = "depth"
    info: RunInfo
    prompt_tokens: int
    new_tokens: int                                   # decode steps requested
    seq_len: list[int] = field(default_factory=list)  # tokens in the cache after each decode step
    latency: list[float] = field(default_factory=list)  # seconds per decode step (measured ITL)
    kv_bytes: list[int] = field(default_factory=list)   # measured cache bytes after each step
    kv_formula_bytes: list[int] = field(default_factory=list)  # the formula's estimate, for comparison
    fit: Fit | None = None                            # a + b·seq_len over all steps
    cancelled: bool = False
    elapsed: float = 0.0

    def summary(self) -> dict:
        if not self.latency:
            return {}
        third = max(1, len(self.latency) // 3)
        first, last = sorted(self.latency[:third]), sorted(self.latency[-third:])
        return {"first_third_median_s": first[len(first) // 2], "last_third_median_s": last[len(last) // 2],
                "slope_s_per_token": self.fit.coefficients[1] if self.fit else None,
                "mean_itl_s": sum(self.latency) / len(self.latency)}


def run_depth_sweep(backend, prompt_tokens: int = 256, new_tokens: int = 256,
                    progress: ProgressFn | None = None, cancel: threading.Event | None = None) -> DepthSweep:
    if prompt_tokens < 1 or new_tokens < 1 or prompt_tokens + new_tokens >= backend.context_window:
        raise ValueError(f"prompt_tokens + new_tokens must stay below the context window "
                         f"({backend.context_window}), both at least 1; got {prompt_tokens} + {new_tokens}")
    report = Progress(progress, cancel)
    result = DepthSweep(RunInfo.of(backend), prompt_tokens, new_tokens)
    report(0.0, "warming up")
    warm_up(backend)
    _, token, state = timed_prefill(backend, exact_length_ids(backend.tokenizer, prompt_tokens))
    for i in range(new_tokens):
        if report.cancelled:
            result.cancelled = True
            break
        t, token, state = timed_decode(backend, token, state)
        seconds = t.wall
        seq = prompt_tokens + i + 1
        result.seq_len.append(seq)
        result.latency.append(seconds)
        result.kv_bytes.append(backend.kv_cache_bytes(state))
        result.kv_formula_bytes.append(backend.kv_shape.formula_bytes(seq))
        if i % 8 == 7 or i == new_tokens - 1:
            report((i + 1) / new_tokens, f"decode at depth {seq}: {seconds * 1000:.0f} ms")
    result.fit = fit_polynomial(result.seq_len, result.latency, 1)
    result.elapsed = report.elapsed()
    report(1.0, "cancelled" if result.cancelled else "done")
    return result
