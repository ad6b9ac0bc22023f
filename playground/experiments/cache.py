"""Cache vs no cache: the same greedy generation with the KV cache, and with everything recomputed.

    cmp = run_cache_comparison(source, prompt_tokens=128, new_tokens=32)
    cmp.summary()["ratio"]          # no-cache total time / cached total time
    cmp.summary()["identical"]      # True: the cache changes the cost, not the answer

Two Runs of the source from the same exact ids, EOS ignored so both make exactly `new_tokens` tokens:
with the cache (one prefill of the prompt, then one decode per token, each reading the cache), and
with `use_cache=False` (at step i the source re-reads prompt + the i tokens so far and keeps no cache,
so each step costs about a prefill of L + i tokens). Step 0 is the same prefill in both. The step
latencies are the Runs' own (wall clock), with the process's CPU time per step beside them.

Left out: sampling (greedy only, so the two token streams can be compared one for one).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..config import GenerationSettings
from ..run_view import format_seconds
from ..measure import Progress, ProgressFn, exact_length_ids, follow, require, warm_up
from .common import ResultBase, RunInfo
from ..units import times, tokens
from ..trace import StopReason


@dataclass
class CacheComparison(ResultBase):
    NAME = "cache"
    info: RunInfo
    prompt_tokens: int
    new_tokens: int                                            # requested
    cached_latency: list[float] = field(default_factory=list)  # wall seconds per step, measured
    uncached_latency: list[float] = field(default_factory=list)
    cached_cpu: list[float] = field(default_factory=list)      # process CPU seconds per step, measured:
    uncached_cpu: list[float] = field(default_factory=list)    # the work, steadier than wall on a busy host
    cached_tokens: list[int] = field(default_factory=list)
    uncached_tokens: list[int] = field(default_factory=list)
    cancelled: bool = False
    elapsed: float = 0.0

    def summary(self) -> dict:
        cached, uncached = sum(self.cached_latency), sum(self.uncached_latency)
        n = min(len(self.cached_tokens), len(self.uncached_tokens))
        return {"cached_total_s": cached, "uncached_total_s": uncached,
                "cached_cpu_s": sum(self.cached_cpu) if self.cached_cpu else None,   # None: not measured
                "uncached_cpu_s": sum(self.uncached_cpu) if self.uncached_cpu else None,
                "ratio": uncached / cached if cached and len(self.uncached_latency) == len(self.cached_latency)
                else None,
                "identical": self.cached_tokens[:n] == self.uncached_tokens[:n] and n == len(self.cached_tokens),
                "compared_tokens": n}

    def findings(self) -> list[str]:
        if not self.cached_latency:
            return []
        s = self.summary()

        def cpu(key):
            return f" (CPU time {format_seconds(s[key])})" if s[key] is not None else ""
        out = [f"with the KV cache: {tokens(len(self.cached_latency))} in {format_seconds(s['cached_total_s'])}"
               f"{cpu('cached_cpu_s')}"]
        if self.uncached_latency:
            out.append(f"without it (everything recomputed at each step): {tokens(len(self.uncached_latency))} in "
                       f"{format_seconds(s['uncached_total_s'])}{cpu('uncached_cpu_s')}")
        out.append(f"without the cache it took {times(s['ratio'])} as long" if s["ratio"]
                   else "how much longer without the cache: not known (that run did not finish)")
        if s["compared_tokens"]:
            out.append(f"the same {s['compared_tokens']} tokens both ways: the cache changes the cost, not the answer"
                       if s["identical"] else f"the tokens differ ({tokens(s['compared_tokens'])} compared)")
        return out


def run_cache_comparison(source, prompt_tokens: int = 128, new_tokens: int = 32,
                         progress: ProgressFn | None = None,
                         cancel: threading.Event | None = None) -> CacheComparison:
    require(source, "exact_ids", "the cache comparison")
    require(source, "no_cache", "the cache comparison")
    window = source.info.context_window or 2**31
    if prompt_tokens < 1 or new_tokens < 1 or prompt_tokens + new_tokens > window:
        raise ValueError(f"prompt_tokens + new_tokens must be at most the context window "
                         f"({window}), both at least 1; got {prompt_tokens} + {new_tokens}")
    report = Progress(progress, cancel)
    result = CacheComparison(RunInfo.of(source), prompt_tokens, new_tokens)
    ids = exact_length_ids(source, prompt_tokens)
    settings = GenerationSettings(max_new_tokens=new_tokens)
    # progress weights (rough): a no-cache step costs about a prefill of L + i tokens, ~ (L + i) / 64 decodes
    cost_cached, cost_uncached = new_tokens, new_tokens * (prompt_tokens + new_tokens / 2) / 64
    total = cost_cached + cost_uncached
    report(0.0, "warming up")
    warm_up(source)

    def cached_step(step):
        report((step.index + 1) / total, f"with cache: step {step.index + 1}/{new_tokens} {step.latency * 1e3:.0f} ms")

    def uncached_step(step):
        report((cost_cached + (step.index + 1) * cost_uncached / new_tokens) / total,
               f"without cache: step {step.index + 1}/{new_tokens} (recompute {prompt_tokens + step.index} tokens) "
               f"{step.latency * 1e3:.0f} ms")

    for use_cache, on_step in ((True, cached_step), (False, uncached_step)):
        if report.cancelled:
            break
        trace = follow(source.run_ids(ids, settings, ignore_eos=True, use_cache=use_cache), report, on_step)
        kind = "cached" if use_cache else "uncached"
        getattr(result, f"{kind}_latency").extend(s.latency for s in trace.steps)
        getattr(result, f"{kind}_cpu").extend(s.cpu for s in trace.steps if s.cpu is not None)
        getattr(result, f"{kind}_tokens").extend(s.token_id for s in trace.steps)
    result.cancelled = report.cancelled and len(result.uncached_latency) < new_tokens
    result.elapsed = report.elapsed()
    report(1.0, StopReason.CANCELLED if result.cancelled else "done")
    return result
