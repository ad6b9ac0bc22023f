"""One request's server-side figures from its Trace, in the field's two per-request shapes.

    times = server_times(trace)          # ServerTimes: queued, first token, generation; prompt computed / cached
    llama_timings(trace)                 # llama-server's `timings` object (always in a response)
    vllm_metrics(trace)                  # vLLM's `metrics` object (--enable-per-request-metrics; opt-in here)
    server_times(trace, steps=8)         # the first 8 Steps only: what a response answered (a stop string ends it)

Every figure comes from the Trace the engine loop wrote: each Step's `time` (seconds since the request
took a KV slot, the Trace's t0) and `wall_ns` (time.time_ns() at the same moment), the prompt's ids, the
prefix cache's `cached_tokens`, `queued` (the seconds the batcher kept it waiting for a KV slot, on its own
clock: the sum of the reasons in its wait parts, `trace.waits`, wait_parts.py, one set of marks) and
`server["received_ns"]` (when the route received the request). So:

    prepared     received -> queued: the body read, templated and tokenized, the limits checked
    queued       queued -> a KV slot: waiting for the scheduler only, as vLLM's `queue_time_ms` (the Trace's
                 `queued`; None without it)
    first token  the KV slot -> the first token: the cached prefix copied, the rest of the prompt prefilled
                 (in chunks, between other requests' decode steps), the token sampled
    generation   the first token -> the last

llama-server's fields (tools/server: `result_timings::to_json`): `cache_n` prompt tokens reused from the
cache, `prompt_n` prompt tokens computed, `prompt_ms` (its slot starting on the prompt -> the first token),
`predicted_n` tokens made (the first one too), `predicted_ms` (the first token -> the latest, floored at 1 µs as
llama-server floors it: `std::max<int64_t>(1, t_current - t_start_generation) / 1e3`), and the per-token and
per-second figures of both, which llama-server divides as written here (predicted_n over predicted_ms, though
predicted_ms spans one token fewer). So a one-token answer gives llama-server's own values, predicted_ms 0.001,
predicted_per_token_ms 0.001 and predicted_per_second 1,000,000, for a client that parses them; they are no rate,
and no view here shows a rate from one token (remote/report.py `decode_rate`). vLLM's (docs/features/per_request_metrics.md):
`time_to_first_token_ms` (scheduled -> first token), `generation_time_ms` (first -> last token), `queue_time_ms`,
`mean_itl_ms` (null for one token), `tokens_per_second` (every token over scheduled -> last token). A figure
the Trace cannot give is null (JSON's None), never a zero: a prompt rate over no time, a queue the batcher did not time.

    >>> from types import SimpleNamespace as NS
    >>> def step(t): return NS(time=t, wall_ns=int(10**9 + t * 1e9), tokens=1)
    >>> trace = NS(steps=[step(0.2), step(0.25), step(0.3)], prompt_ids=[1] * 40, cached_tokens=32,
    ...            queued=0.05, server={"received_ns": 10**9 - 80_000_000})
    >>> llama_timings(trace)["prompt_n"], llama_timings(trace)["prompt_ms"], llama_timings(trace)["predicted_ms"]
    (8, 200.0, 100.0)
    >>> m = vllm_metrics(trace); m["queue_time_ms"], m["time_to_first_token_ms"], m["mean_itl_ms"]
    (50.0, 200.0, 50.0)
    >>> server_times(trace).prepared
    0.03
    >>> untimed = NS(steps=[step(0.2)], prompt_ids=[1], cached_tokens=0, queued=None, server={})
    >>> vllm_metrics(untimed)["queue_time_ms"] is None
    True

Left out: llama.cpp's `prompt_progress` (sent while a long prompt is read), and speculative decoding's
`draft_n` (the endpoint does not speculate).
"""
from __future__ import annotations

from dataclasses import dataclass

MS = 1e3


@dataclass(frozen=True)
class ServerTimes:
    """One request's wait and work as the server saw it (seconds; None where the Trace cannot say)."""
    prompt_tokens: int
    cached_tokens: int              # prompt tokens copied from the prefix cache, not computed
    output_tokens: int
    prepared: float | None          # received -> queued (the body read and tokenized)
    queued: float | None            # queued -> a KV slot (waiting for the scheduler)
    first_token: float | None       # a KV slot -> the first token
    generation: float | None        # the first token -> the last (0.0 for one token)
    last_token: float | None        # a KV slot -> the last token

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def server_ttft(self) -> float | None:
        """received -> the first token: what the server can count of a client's TTFT."""
        parts = (self.prepared, self.queued, self.first_token)
        return None if any(p is None for p in parts) else sum(parts)


def _since(ns, until_ns: float) -> float | None:
    """Seconds from the time.time_ns() stamp `ns` to `until_ns` (None without a stamp; never below 0)."""
    return max(0.0, (until_ns - ns) / 1e9) if isinstance(ns, int) and not isinstance(ns, bool) else None


def server_times(trace, steps: int | None = None) -> ServerTimes:
    """The figures of `trace`'s first `steps` Steps (all of them by default)."""
    made = trace.steps if steps is None else trace.steps[:steps]
    prompt, cached = len(trace.prompt_ids), int(getattr(trace, "cached_tokens", 0) or 0)
    if not made:
        return ServerTimes(prompt, cached, 0, None, None, None, None, None)
    first, last = made[0], made[-1]
    received = (getattr(trace, "server", None) or {}).get("received_ns")
    queued = getattr(trace, "queued", None)
    queued = float(queued) if isinstance(queued, (int, float)) and not isinstance(queued, bool) else None
    prepared = None
    if queued is not None and first.wall_ns:   # received -> (the KV slot, less the wait for it)
        prepared = _since(received, first.wall_ns - (first.time + queued) * 1e9)
    return ServerTimes(prompt, cached, sum(s.tokens for s in made), prepared, queued, first.time,
                       last.time - first.time, last.time)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * MS, 3)


def _per(a: float | None, b: float | None) -> float | None:
    """a / b, or None where b is no amount (a rate over no time, a time over no tokens)."""
    return None if a is None or not b else a / b


LLAMA_FLOOR_MS = 0.001   # llama-server's generation time is at least 1 µs


def llama_timings(trace, steps: int | None = None) -> dict:
    """llama-server's `timings` object for `trace` (its names, its order, its arithmetic, its 1 µs floor)."""
    t = server_times(trace, steps)
    prompt_ms, predicted_ms = _ms(t.first_token), _ms(t.generation)
    if predicted_ms is not None:
        predicted_ms = max(predicted_ms, LLAMA_FLOOR_MS)
    predicted_n = t.output_tokens
    return {"cache_n": t.cached_tokens, "prompt_n": t.computed_tokens, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": _per(prompt_ms, t.computed_tokens),
            "prompt_per_second": _per(t.computed_tokens * MS, prompt_ms),
            "predicted_n": predicted_n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": _per(predicted_ms, predicted_n),
            "predicted_per_second": _per(predicted_n * MS, predicted_ms)}


def vllm_metrics(trace, steps: int | None = None) -> dict:
    """vLLM's per-request `metrics` object for `trace`."""
    t = server_times(trace, steps)
    after_first = t.output_tokens - 1
    return {"time_to_first_token_ms": _ms(t.first_token), "generation_time_ms": _ms(t.generation),
            "queue_time_ms": _ms(t.queued),
            "mean_itl_ms": _per(_ms(t.generation), after_first) if after_first > 0 else None,
            "tokens_per_second": _per(t.output_tokens, t.last_token)}
