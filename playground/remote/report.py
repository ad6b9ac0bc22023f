"""A server's own figures for one run, in words: what the metrics panel shows under "server-reported".

    >>> from types import SimpleNamespace
    >>> t = SimpleNamespace(steps=[], server={"kind": "llama.cpp", "timings": {"prompt_n": 1, "prompt_ms": 27.4,
    ...     "cache_n": 36, "predicted_n": 12, "predicted_ms": 258.4, "predicted_per_second": 42.6}})
    >>> server_lines(t)[0]
    'llama.cpp timings: prompt 1 tokens in 27 ms (36 more reused from its prompt cache) · decode 12 tokens in 258 ms (42.6 tok/s)'
    >>> server_lines(SimpleNamespace(steps=[], server={}))
    []

Where the server counted its part of the first token (vLLM's `metrics`: queue + time to first token; else
llama.cpp's `timings.prompt_ms`, which leaves its queue out), a line sets it beside the client's TTFT, and
names the rest: delivery (HTTP, the event stream, the network), which no server figure covers.

    >>> first = SimpleNamespace(time=0.412)
    >>> delivery_line(SimpleNamespace(steps=[first], server={"metrics": {"queue_time_ms": 12.0,
    ...     "time_to_first_token_ms": 368.0}}))
    'first token at this client 412 ms = server 380 ms (queued 12 ms, then 368 ms to its first token) + delivery 32 ms (HTTP, the event stream, the network: no server figure covers it)'
    >>> delivery_line(SimpleNamespace(steps=[first], server={"timings": {"prompt_ms": 368.0}}))
    'first token at this client 412 ms = server prompt_ms 368 ms (its slot on the prompt) + queue and delivery 44 ms (llama.cpp times no queue)'

vLLM's `kv_pool_used_share` is the share of the server's whole preallocated KV block pool in use, across
every request it holds, not this request's cache: the line says so; a server of several engines has a pool per
engine, and the line gives each engine's share (`figures_text`). Nothing here is a client measurement.
Left out: charts of the sampled figures (the Serve tab draws the pool over time).
"""
from __future__ import annotations


def _in_ms(value) -> str:
    return "in a time not given" if not isinstance(value, (int, float)) else f"in {value:.0f} ms"


def _timings(kind: str, t: dict) -> str:
    cached = t.get("cache_n")
    prompt = f"prompt {t.get('prompt_n')} tokens {_in_ms(t.get('prompt_ms'))}" + (
        f" ({cached} more reused from its prompt cache)" if cached else "")
    rate = decode_rate(t)
    decode = f"decode {t.get('predicted_n')} tokens {_in_ms(t.get('predicted_ms'))}" + (
        f" ({rate:.1f} tok/s)" if rate else "")
    return f"{kind} timings: {prompt} · {decode}"


def decode_rate(timings: dict) -> float | None:
    """llama.cpp's `predicted_per_second`, where it is a rate: over two tokens or more. For one token llama-server
    floors the generation time at 1 µs and sends 1,000,000 tok/s (the endpoint here mirrors it); no view shows it.

    >>> decode_rate({"predicted_n": 12, "predicted_per_second": 46.4}), decode_rate({"predicted_n": 1,
    ...     "predicted_ms": 0.001, "predicted_per_token_ms": 0.001, "predicted_per_second": 1e6})
    (46.4, None)
    """
    n, rate = timings.get("predicted_n"), timings.get("predicted_per_second")
    return float(rate) if isinstance(n, int) and n > 1 and isinstance(rate, (int, float)) and rate else None


def _metrics(kind: str, m: dict) -> str:
    def ms(name):
        v = m.get(name)
        return "not given" if v is None else f"{v:.0f} ms"
    itl, rate = m.get("mean_itl_ms"), m.get("tokens_per_second")
    return (f"{kind} metrics: queued {ms('queue_time_ms')} · first token {ms('time_to_first_token_ms')} after "
            f"scheduling · generation {ms('generation_time_ms')}"
            + (f" ({itl:.1f} ms between tokens)" if itl is not None else "")
            + (f" · {rate:.1f} tok/s from scheduling to the last token" if rate is not None else ""))


def delivery_line(trace) -> str | None:
    """The client's TTFT beside the server's count of it, the difference named; None where the server gave none."""
    steps, s = trace.steps, getattr(trace, "server", None) or {}
    if not steps:
        return None
    client = steps[0].time * 1e3
    m, t = s.get("metrics") or {}, s.get("timings") or {}
    if m.get("queue_time_ms") is not None and m.get("time_to_first_token_ms") is not None:
        queued, first = m["queue_time_ms"], m["time_to_first_token_ms"]
        server = queued + first
        said = f"server {server:.0f} ms (queued {queued:.0f} ms, then {first:.0f} ms to its first token)"
        rest = "delivery", "HTTP, the event stream, the network: no server figure covers it"
    elif t.get("prompt_ms") is not None:
        server = t["prompt_ms"]
        said = f"server prompt_ms {server:.0f} ms (its slot on the prompt)"
        rest = "queue and delivery", "llama.cpp times no queue"
    else:
        return None
    gap = client - server
    if gap < 0:
        return (f"first token at this client {client:.0f} ms, {-gap:.0f} ms less than the {said}: the two "
                "clocks disagree")
    return f"first token at this client {client:.0f} ms = {said} + {rest[0]} {gap:.0f} ms ({rest[1]})"


def _count(s: dict, key: str) -> str:
    return "not given" if s.get(key) is None else f"{s[key]:.0f}"


def figures_text(s: dict) -> str:
    """One sample of the server's live figures in words: request counts summed over its engines, the KV pool's
    share per engine (each engine has a pool of its own), llama.cpp's slots; a figure it did not give is said so.

    >>> figures_text({"running": 3.0, "waiting": 1.0, "engines": 2, "kv_pool_used_share": 0.45,
    ...               "kv_pool_used_share_by_engine": {"0": 0.3, "1": 0.6}})
    "3 requests running, 1 waiting (summed over its 2 engines); KV pool in use: engine 0 30.0%, engine 1 60.0% (each engine's share of its own preallocated pool, all requests together, not this one's cache)"
    >>> figures_text({"running": 0.0, "slots": [{"processing": False, "n_ctx": 2048}] * 2})
    '0 requests running, not given waiting; 0 of 2 slots busy (2048 tokens of context each)'
    """
    parts = []
    if "running" in s or "waiting" in s:
        engines = s.get("engines")
        parts.append(f"{_count(s, 'running')} requests running, {_count(s, 'waiting')} waiting"
                     + (f" (summed over its {engines} engines)" if engines else ""))
    by_engine = s.get("kv_pool_used_share_by_engine") or {}
    if by_engine:
        each = ", ".join(f"engine {name} {share:.1%}" for name, share in by_engine.items())
        parts.append(f"KV pool in use: {each} (each engine's share of its own preallocated pool, all requests "
                     "together, not this one's cache)")
    elif "kv_pool_used_share" in s:
        parts.append(f"KV pool in use: {s['kv_pool_used_share']:.1%} of the server's whole preallocated pool "
                     "(all requests together, not this one's cache)")
    slots = s.get("slots") or []
    if slots:
        busy = sum(1 for slot in slots if slot.get("processing"))
        parts.append(f"{busy} of {len(slots)} slots busy ({slots[0].get('n_ctx')} tokens of context each)")
    return "; ".join(parts)


def _sample(s: dict) -> str:
    said = figures_text(s)
    return f"at {s.get('time', 0):.2f} s ({s.get('when', '')}): {said}" if said else ""


def tpot_by_usage(trace) -> float | None:
    """TPOT with the server's count of completion tokens (when it differs from the client's count)."""
    steps, reported = trace.steps, (trace.server.get("usage") or {}).get("completion_tokens")
    if not steps or not isinstance(reported, int) or reported == sum(s.tokens for s in steps):
        return None
    after_first = reported - steps[0].tokens
    return (steps[-1].time - steps[0].time) / after_first if after_first > 0 else None


def reported_thinking(trace) -> int | None:
    """The server's count of thinking tokens: usage's completion_tokens_details.reasoning_tokens (None: not said)."""
    usage = (getattr(trace, "server", None) or {}).get("usage") or {}
    n = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def server_lines(trace) -> list[str]:
    s = getattr(trace, "server", None) or {}
    if not s:
        return []
    kind, lines = s.get("kind", "server"), []
    if s.get("timings"):
        lines.append(_timings(kind, s["timings"]))
    if s.get("metrics"):
        lines.append(_metrics(kind, s["metrics"]))
    delivery = delivery_line(trace)
    if delivery:
        lines.append(delivery)
    usage = s.get("usage") or {}
    if usage:
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        thinking = reported_thinking(trace)
        lines.append(f"usage: {usage.get('prompt_tokens')} prompt tokens"
                     + (f" ({cached} cached)" if cached else "") + f", {usage.get('completion_tokens')} completion tokens"
                     + (f" ({thinking} of them thinking)" if thinking else ""))
    tpot = tpot_by_usage(trace)
    if tpot is not None:
        lines.append(f"TPOT by the server's token count: {tpot * 1e3:.1f} ms")
    if "usage says" in s.get("token_count_source", ""):
        lines.append(f"token count: {s['token_count_source']}")
    samples = [_sample(x) for x in s.get("samples") or []]
    lines += [x for x in samples[-2:] if x]
    if s.get("prob_meaning"):
        lines.append(f"probabilities: {s['prob_meaning']}")
    lines += [f"⚠ {w}" for w in s.get("warnings") or []]
    if s.get("not_exposed"):
        lines.append(f"not exposed by {kind}: {s['not_exposed']}")
    return lines
