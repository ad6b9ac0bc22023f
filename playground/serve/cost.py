"""What a token costs on this machine: a machine's price per hour over the output tokens it makes per hour.

    rows = token_costs(0.10, {"one at a time": Rate(27.0, "batch sweep, 1 at once"), "batched at 8": None, ...})
    [(r.label, r.usd_per_million) for r in rows]    # None where the rate was not measured

The price per hour is an assumption the reader types (a cloud VM of this size rents for about that); the
rates are output tokens per second measured in this session: one request at a time, eight at once (the
Serve tab's batch-size sweep: all of them decoding) and speculative decoding (a Generate run). Each row
says where its rate comes from; a rate not measured is missing, never zero. Beside them, the price per
million output tokens the playground already uses for its estimates (an illustrative provider's price).

Left out: the input side (prefill is compute-bound and cheap per token: the Lesson shows it), idle time
(a machine rented by the hour costs the same when nobody asks), energy.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..trace import COMPLETED

__all__ = ["DEFAULT_USD_PER_HOUR", "Rate", "TokenCost", "cost_markdown", "measured_rates", "token_costs",
           "usd_per_million"]

DEFAULT_USD_PER_HOUR = 0.10   # an assumption: about what a 2-vCPU cloud machine rents for, on demand
KINDS = ("one at a time", "batched at 8", "speculative decoding")


@dataclass(frozen=True)
class Rate:
    tokens_per_s: float   # output tokens per second, measured
    source: str           # where it was measured (which run, which backend)


@dataclass(frozen=True)
class TokenCost:
    label: str
    rate: Rate | None          # None: not measured in this session
    usd_per_million: float | None


def measured_rates(sweeps=(), traces=()) -> dict:
    """The rates measured in a session: from its latest batch-size sweep (decode throughput of all requests at
    1 and at 8 at once) and its Generate runs (decode tok/s of the latest finished speculative run; of the latest
    plain one when the sweep has no point at 1). Kinds not measured are left out.

    >>> from types import SimpleNamespace as NS
    >>> sweep = NS(kind="batch", source="onnx-gguf4", points=[NS(concurrency=1, total_tps=20.0),
    ...                                                        NS(concurrency=8, total_tps=70.0)])
    >>> rates = measured_rates([sweep])
    >>> rates["batched at 8"]
    Rate(tokens_per_s=70.0, source='batch-size sweep, 8 at once, onnx-gguf4')
    >>> "speculative decoding" in rates
    False
    """
    rates = {}
    batch = next((s for s in reversed(list(sweeps)) if s.kind == "batch"), None)
    for point in batch.points if batch else ():
        kind = {1: "one at a time", 8: "batched at 8"}.get(point.concurrency)
        if kind and point.total_tps:
            rates[kind] = Rate(point.total_tps, f"batch-size sweep, {point.concurrency} at once, {batch.source}")
    for trace in reversed(list(traces)):
        tps = trace.metrics().decode_tps if trace.stop_reason in COMPLETED else None
        kind = "speculative decoding" if trace.speculation else "one at a time"
        if tps and kind not in rates:
            rates[kind] = Rate(tps, f"Generate run, {'speculative' if trace.speculation else 'plain'}, "
                                    f"{len(trace.prompt_ids)}-token prompt, {trace.backend}")
    return rates


def usd_per_million(usd_per_hour: float, tokens_per_s: float | None) -> float | None:
    """USD per million output tokens: the hour's price over the tokens made in an hour (None: no rate).

    >>> round(usd_per_million(0.10, 25.0), 3)      # 25 tok/s = 90,000 tokens an hour
    1.111
    >>> usd_per_million(0.10, None) is None
    True
    """
    if tokens_per_s is None or tokens_per_s <= 0:
        return None
    return usd_per_hour / (tokens_per_s * 3600) * 1e6


def check_price(usd_per_hour) -> float:
    """The price per hour as a float; ValueError saying what is wrong with anything else."""
    try:
        price = float(usd_per_hour)
    except (TypeError, ValueError):
        raise ValueError(f"the machine's price per hour must be a number of dollars, got {usd_per_hour!r}") from None
    if not price >= 0 or price == float("inf"):
        raise ValueError(f"the machine's price per hour must be zero or more, got {usd_per_hour!r}")
    return price


def token_costs(usd_per_hour, rates: dict) -> list[TokenCost]:
    """One row per kind of KINDS (in that order): its measured rate (or None) and USD per million output tokens.

    >>> rows = token_costs(0.36, {"one at a time": Rate(10.0, "a run"), "batched at 8": Rate(40.0, "a sweep")})
    >>> [(r.label, None if r.usd_per_million is None else round(r.usd_per_million, 2)) for r in rows]
    [('one at a time', 10.0), ('batched at 8', 2.5), ('speculative decoding', None)]
    """
    price = check_price(usd_per_hour)
    out = []
    for kind in KINDS:
        rate = rates.get(kind)
        out.append(TokenCost(kind, rate, usd_per_million(price, rate.tokens_per_s if rate else None)))
    return out


def cost_markdown(rows: list[TokenCost], usd_per_hour: float, provider_usd_per_m_output: float) -> str:
    """The rows as a Markdown table, the provider's price beside them, every figure labelled by kind.

    >>> print(cost_markdown(token_costs(0.36, {"one at a time": Rate(10.0, "a run")}), 0.36, 0.6).splitlines()[4])
    | one at a time | 10.0 tok/s (a run) | 36,000 | $10.00 |
    """
    lines = [f"Machine price: **${usd_per_hour:,.2f} per hour (an assumption: edit it)**; output tokens per hour "
             "measured in this session.", "",
             "| how it decodes | output tokens/s (measured) | tokens per hour | USD per 1M output tokens |",
             "|---|---|---|---|"]
    for r in rows:
        if r.rate is None:
            lines.append(f"| {r.label} | missing: not measured in this session | – | – |")
        else:
            lines.append(f"| {r.label} | {r.rate.tokens_per_s:.1f} tok/s ({r.rate.source}) | "
                         f"{r.rate.tokens_per_s * 3600:,.0f} | ${r.usd_per_million:,.2f} |")
    lines.append(f"| a hosted small model (illustrative price, the playground's estimate) | – | – | "
                 f"${provider_usd_per_m_output:,.2f} |")
    return "\n".join(lines)
