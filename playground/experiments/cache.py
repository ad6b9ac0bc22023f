"""Cache vs no cache: the same greedy generation with the KV cache, and with everything recomputed.

    cmp = run_cache_comparison(backend, prompt_tokens=128, new_tokens=32)
    cmp.summary()["ratio"]          # no-cache total time / cached total time
    cmp.summary()["identical"]      # True: the cache changes the cost, not the answer

With the cache: one prefill of the prompt, then one `decode` per token (each reads the cache).
Without it: at step i, `prefill(prompt + the i tokens so far)` and the state is thrown away, so each
step recomputes keys and values for the whole context and costs about a prefill of L + i tokens.
Step 0 is the same prefill in both. Every step is timed with synchronize + greedy pick (wall clock,
and the process's CPU time beside it), and EOS is ignored so both runs make exactly `new_tokens` tokens.

Left out: sampling (greedy only, so the two token streams can be compared one for one).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .common import Progress, ProgressFn, ResultBase, RunInfo, exact_length_ids, timed_decode, timed_prefill, \
    warm_up


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
                "cached_cpu_s": sum(self.cached_cpu), "uncached_cpu_s": sum(self.uncached_cpu),
                "ratio": uncached / cached if cached and len(self.uncached_latency) == len(self.cached_latency)
                else None,
                "identical": self.cached_tokens[:n] == self.uncached_tokens[:n] and n == len(self.cached_tokens),
                "compared_tokens": n}


def run_cache_comparison(backend, prompt_tokens: int = 128, new_tokens: int = 32,
                         progress: ProgressFn | None = None,
                         cancel: threading.Event | None = None) -> CacheComparison:
    if prompt_tokens < 1 or new_tokens < 1 or prompt_tokens + new_tokens > backend.context_window:
        raise ValueError(f"prompt_tokens + new_tokens must be at most the context window "
                         f"({backend.context_window}), both at least 1; got {prompt_tokens} + {new_tokens}")
    report = Progress(progress, cancel)
    result = CacheComparison(RunInfo.of(backend), prompt_tokens, new_tokens)
    ids = exact_length_ids(backend.tokenizer, prompt_tokens)
    # progress weights (rough): a no-cache step costs about a prefill of L + i tokens, ~ (L + i) / 64 decodes
    cost_cached, cost_uncached = new_tokens, new_tokens * (prompt_tokens + new_tokens / 2) / 64
    total = cost_cached + cost_uncached
    report(0.0, "warming up")
    warm_up(backend)

    state, token = None, None
    for i in range(new_tokens):
        if report.cancelled:
            break
        t, token, state = (timed_prefill(backend, ids) if i == 0 else timed_decode(backend, token, state))
        result.cached_latency.append(t.wall)
        result.cached_cpu.append(t.cpu)
        result.cached_tokens.append(token)
        report((i + 1) / total, f"with cache: step {i + 1}/{new_tokens} {t.wall * 1000:.0f} ms")
    del state

    context = list(ids)
    for i in range(new_tokens):
        if report.cancelled:
            break
        t, token, _ = timed_prefill(backend, context)
        context.append(token)
        result.uncached_latency.append(t.wall)
        result.uncached_cpu.append(t.cpu)
        result.uncached_tokens.append(token)
        report((cost_cached + (i + 1) * cost_uncached / new_tokens) / total,
               f"without cache: step {i + 1}/{new_tokens} (recompute {len(context) - 1} tokens) "
               f"{t.wall * 1000:.0f} ms")
    result.cancelled = report.cancelled and len(result.uncached_latency) < new_tokens
    result.elapsed = report.elapsed()
    report(1.0, "cancelled" if result.cancelled else "done")
    return result
