"""Decode cost vs context depth: the latency of each decode step as the KV cache grows.

    sweep = run_depth_sweep(source, prompt_tokens=256, new_tokens=256)
    sweep.seq_len[i], sweep.latency[i], sweep.kv_bytes[i]   # one row per decode step, measured
    sweep.fit.coefficients                                  # (a, b): seconds = a + b * seq_len

One greedy Run of the source from exact ids with EOS ignored, so the generation always reaches
`prompt_tokens + new_tokens` positions (a real prompt may stop after a few tokens). Each decode step's
latency and KV bytes are the Run's own Steps (None where the source cannot measure the cache). Each decode reads the whole cache, so its cost grows
with seq_len; how steeply depends on model and runtime (the linear fit reports the slope). Seen with
SmolLM2-135M on CPU: about 67 ms per step at depth 300, 108 ms at depth 500.

Left out: the first token (that is prefill; see the prefill sweep).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..config import GenerationSettings
from ..run_view import format_seconds
from ..measure import Progress, ProgressFn, exact_length_ids, follow, require, warm_up
from .common import Fit, ResultBase, RunInfo, fit_polynomial
from ..units import precise_duration
from ..trace import StopReason


@dataclass
class DepthSweep(ResultBase):
    NAME = "depth"
    info: RunInfo
    prompt_tokens: int
    new_tokens: int                                   # decode steps requested
    seq_len: list[int] = field(default_factory=list)  # tokens in the cache after each decode step
    latency: list[float] = field(default_factory=list)  # seconds per decode step (measured ITL)
    kv_bytes: list[int | None] = field(default_factory=list)   # measured cache bytes after each step (None: not measurable)
    kv_formula_bytes: list[int | None] = field(default_factory=list)  # the formula's estimate (None: shape unknown)
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

    def findings(self) -> list[str]:
        s = self.summary()
        if not s:
            return []
        out = [f"a decode step early on (first third of the steps): median {format_seconds(s['first_third_median_s'])}",
               f"late (last third): median {format_seconds(s['last_third_median_s'])}",
               f"average decode step: {format_seconds(s['mean_itl_s'])}"]
        if s["slope_s_per_token"] is not None:
            out.append(f"each token more in the KV cache adds {precise_duration(s['slope_s_per_token'])} to a step "
                       "(a straight-line fit)")
        return out


def run_depth_sweep(source, prompt_tokens: int = 256, new_tokens: int = 256,
                    progress: ProgressFn | None = None, cancel: threading.Event | None = None) -> DepthSweep:
    require(source, "exact_ids", "the depth sweep")
    window = source.info.context_window or 2**31
    if prompt_tokens < 1 or new_tokens < 1 or prompt_tokens + new_tokens >= window:
        raise ValueError(f"prompt_tokens + new_tokens must stay below the context window "
                         f"({window}), both at least 1; got {prompt_tokens} + {new_tokens}")
    report = Progress(progress, cancel)
    result = DepthSweep(RunInfo.of(source), prompt_tokens, new_tokens)
    shape = source.info.kv_shape
    report(0.0, "warming up")
    warm_up(source)

    def on_step(step):
        if step.index == 0:
            return   # the first token is prefill's (see the prefill sweep)
        seq = prompt_tokens + step.index
        result.seq_len.append(step.seq_len if step.seq_len is not None else seq)
        result.latency.append(step.latency)
        result.kv_bytes.append(step.kv_bytes)
        result.kv_formula_bytes.append(shape.formula_bytes(seq) if shape else None)
        if step.index % 8 == 0 or step.index == new_tokens:
            report(step.index / new_tokens, f"decode at depth {seq}: {step.latency * 1000:.0f} ms")

    ids = exact_length_ids(source, prompt_tokens)
    follow(source.run_ids(ids, GenerationSettings(max_new_tokens=new_tokens + 1), ignore_eos=True), report, on_step)
    result.cancelled = report.cancelled and len(result.latency) < new_tokens
    result.fit = fit_polynomial(result.seq_len, result.latency, 1)
    result.elapsed = report.elapsed()
    report(1.0, StopReason.CANCELLED if result.cancelled else "done")
    return result
