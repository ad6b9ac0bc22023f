"""A workload's numbers: p50/p95 per class, throughput, goodput under an SLO, and the lesson in one sentence.

    summarize(result)                    # {"classes": {...}, "throughput": {...}, "lesson": "…"}
    goodput(result, ttft=1.0, tpot=0.2)  # requests/s that met both (vLLM's `bench serve --goodput`)

Throughput = output tokens / the workload's wall time (from its start to its last token). Percentiles
are numpy's (linear interpolation) over the requests that produced a token. The lesson sentence names
the class with the longest prompts "long" and the shortest "short", and measures how long the long
ones' prefill (for one at a time: their whole service, which holds the engine) overlapped each short
request's wait for its first token.

>>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([], 95)
(2.5, None)

Left out: confidence intervals (a workload is one sample; replay it to see the spread).
"""
from __future__ import annotations

import statistics

import numpy as np

from ..trace import COMPLETED, Phase

METRICS = ("waiting", "ttft", "tpot", "e2e")


def percentile(values, q: float) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.percentile(values, q)) if values else None


def served(result):
    return [r for r in result.records if r.steps]


def class_stats(result) -> dict[str, dict]:
    out = {}
    for cls in result.workload.classes():
        recs = [r for r in served(result) if r.request.cls == cls]
        row = {"requests": sum(r.request.cls == cls for r in result.records), "served": len(recs),
               "prompt_tokens": percentile([r.prompt_tokens for r in recs], 50),
               "output_tokens": sum(r.output_tokens for r in recs)}
        for m in METRICS:
            values = [getattr(r, m) for r in recs]
            row[f"{m}_p50"], row[f"{m}_p95"] = percentile(values, 50), percentile(values, 95)
        out[cls] = row
    return out


def throughput(result) -> dict:
    recs = served(result)
    end = max((r.last_token for r in recs), default=None)
    tokens = sum(r.output_tokens for r in recs)
    done = sum(r.stop_reason in COMPLETED for r in result.records)
    return {"output_tokens": tokens, "wall_s": end, "completed": done,
            "output_tps": tokens / end if end else None, "requests_per_s": done / end if end else None}


def goodput(result, ttft: float | None = None, tpot: float | None = None) -> dict:
    """Requests/s that finished and met every SLO given (seconds; None: not checked)."""
    ok = [r for r in served(result) if r.stop_reason in COMPLETED
          and (ttft is None or r.ttft <= ttft) and (tpot is None or r.tpot is None or r.tpot <= tpot)]
    wall = throughput(result)["wall_s"]
    return {"ttft_slo_s": ttft, "tpot_slo_s": tpot, "met": len(ok), "of": len(result.records),
            "goodput_rps": len(ok) / wall if wall else None}


def short_and_long(result) -> tuple[str, str] | None:
    sizes = {}
    for r in result.records:
        sizes.setdefault(r.request.cls, []).append(r.prompt_tokens or len(r.request.prompt) / 4)
    if len(sizes) < 2:
        return None
    ordered = sorted(sizes, key=lambda c: statistics.mean(sizes[c]))
    return ordered[0], ordered[-1]


def _blocking(record, whole_service: bool) -> list[tuple[float, float]]:
    """When a long request held up others: its prefill (chunks where known), or its whole service."""
    if record.admitted is None or not record.steps:
        return []
    if whole_service:
        return [(record.admitted, record.last_token)]
    return [(a, b) for a, b, _ in record.chunks] or [(record.admitted, record.first_token)]


def _overlap(span, intervals) -> float:
    a, b = span
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in intervals)


def lesson(result, who: str | None = None) -> str:
    """The run in one sentence of its own numbers, opening with `who` (default: "On <the scheduler's label>")."""
    pair, recs = short_and_long(result), served(result)
    who = who or f"On {result.scheduler_label}"
    if not recs:
        return f"{who}: no request produced a token" + (" (cancelled)." if result.cancelled else ".")
    tp = throughput(result)
    tail = f"{tp['output_tokens']} output tokens in {tp['wall_s']:.1f} s ({tp['output_tps']:.1f} tok/s)"
    shorts = [r for r in recs if pair and r.request.cls == pair[0]]
    if not shorts:
        ttft = [r.ttft for r in recs]
        return (f"{who}: TTFT p50 {percentile(ttft, 50):.2f} s, p95 {percentile(ttft, 95):.2f} s "
                f"over {len(recs)} requests; {tail}.")
    short, long = pair
    whole = result.scheduler == "one-at-a-time"
    intervals = [iv for r in recs if r.request.cls == long for iv in _blocking(r, whole)]
    delays = [d for d in (_overlap((r.arrival, r.first_token), intervals) for r in shorts) if d > 0]
    ttft = [r.ttft for r in shorts]
    what = "service (prefill and decode, one at a time)" if whole else Phase.PREFILL
    head = (f"the {long} requests' {what} delayed {len(delays)} of {len(shorts)} {short} requests' first token by a "
            f"median of {statistics.median(delays):.2f} s" if delays
            else f"no {short} request's first token waited for a {long} request's {what}")
    return (f"{who}: {head}; {short} TTFT p50 {percentile(ttft, 50):.2f} s, "
            f"p95 {percentile(ttft, 95):.2f} s; {tail}.")


def class_p50(result, cls: str | None, key: str) -> float | None:
    """The p50 of `key` (a RequestRecord property: tpot, e2e, ttft) over the served requests of class `cls`
    (None: every class); None when none was measured."""
    return percentile([getattr(r, key) for r in served(result) if cls is None or r.request.cls == cls], 50)


def cost_sentence(a, b, cls: str | None, name_a: str = "A", name_b: str = "B") -> str | None:
    """What B's way cost against A's, in their own numbers: the `cls` requests' TPOT p50 (time per output token
    after the first) and E2E p50. None when either was not measured."""
    tpot, e2e = [class_p50(x, cls, "tpot") for x in (a, b)], [class_p50(x, cls, "e2e") for x in (a, b)]
    if None in tpot or None in e2e or not tpot[0] or not tpot[1]:
        return None
    who = f"the {cls} requests'" if cls else "the requests'"
    numbers = (f"{who} TPOT p50 was {tpot[1]:.3f} s on {name_b} against {tpot[0]:.3f} s on {name_a}"
               f" ({max(tpot) / min(tpot):.1f}× {'longer' if tpot[1] > tpot[0] else 'shorter'} per token), and their "
               f"E2E p50 {e2e[1]:.2f} s against {e2e[0]:.2f} s")
    if tpot[1] > tpot[0]:
        return f"What it cost: {numbers}, since every step of {name_b} carries more requests."
    return f"Per token it cost nothing here: {numbers}."


def compare(a, b, named: bool = False) -> str:
    """A few sentences on the same workload under two schedulers, A and B (B against A), in their measured numbers:
    what B bought (output tokens/s, the short requests' p95 TTFT) and what it cost (their TPOT and E2E p50); it
    says so when B's throughput came out lower. `named`: the reader already knows which scheduler A and B are.

    It says so when the two ran on different sources: then two runtimes differ, not only two schedulers."""
    ta, tb = throughput(a)["output_tps"], throughput(b)["output_tps"]
    pair = short_and_long(a)
    cls = pair[0] if pair else None
    p95 = [percentile([r.ttft for r in served(x) if cls is None or r.request.cls == cls], 95) for x in (a, b)]
    if not (ta and tb) or None in p95:
        return "Too little was measured to compare the two runs."
    who = f"the {cls} requests'" if cls else "the"
    sooner = (f"{p95[0] / p95[1]:.1f}× sooner" if p95[1] < p95[0] else f"{p95[1] / p95[0]:.1f}× later") \
        if p95[1] > 0 else "at once"
    name_a, name_b = ("A", "B") if named else (f"A ({a.scheduler_label})", f"B ({b.scheduler_label})")
    if tb >= ta:
        rate = f"at {tb / ta:.2f}× the output tokens/s of {name_a}: {tb:.1f} against {ta:.1f}"
    else:
        rate = (f"at fewer output tokens/s than {name_a}, not more: {tb:.1f} against {ta:.1f} ({tb / ta:.2f}×; this "
                "run came out the other way)")
    head = (f"{name_b} served the same {len(b.records)} requests {rate}; {who} p95 TTFT was {p95[1]:.2f} s against "
            f"{p95[0]:.2f} s ({sooner}).")
    cost = cost_sentence(a, b, cls, "A" if named else name_a.split(" ")[0], "B" if named else name_b.split(" ")[0])
    if cost:
        head += f" {cost}"
    if a.source != b.source:
        head += (f" A ran on {a.source} and B on {b.source}: this compares two runtimes as well as two "
                 "schedulers.")
    return head


def pool_text(result) -> str | None:
    """The batching scheduler's KV pool in one sentence, as it was sized; None when it has none."""
    p = result.pool
    if not p:
        return None
    if p.get("kind") == "slots":
        fewer = (f" (fewer than the {p['asked_slots']} asked: at most {p['max_bytes'] / 2**30:g} GiB of KV)"
                 if p["slots"] < p["asked_slots"] else "")
        text = (f"KV slots: {p['slots']}{fewer} × {p['capacity']} positions (the longest request) = "
                f"{p['bytes'] / 2**20:.0f} MiB; at most {p['prefill_chunk']} prompt tokens read per iteration; "
                f"{p['moves']} cache copies kept the decoding rows packed.")
        if p.get("prefix_cache_blocks"):
            hit = p["cached"] / p["looked_up"] if p.get("looked_up") else 0.0
            text += (f" Prefix cache: {p['prefix_cache_blocks']} blocks of {p['block_size']} positions; "
                     f"{p['cached']:,} of {p['looked_up']:,} prompt tokens found cached (hit rate {hit:.0%}); "
                     f"{p['evicted']} blocks evicted.")
        if p.get("kv_budget"):
            text += (f" KV budget: {p['kv_budget']:,} positions in all (a smaller memory, as on a full GPU); "
                     f"{p['preemptions']} preemptions.")
        return text
    return (f"KV block pool (sized here): {p['num_blocks']} blocks × {p['block_size']} tokens = "
            f"{p['num_blocks'] * p['bytes_per_block'] / 2**20:.1f} MiB; at most {p['max_batch_tokens']} tokens per "
            f"forward pass (longer prompts are prefilled in chunks); scheduler {p['scheduler']}. Left alone, the "
            f"manager would have taken {p['left_alone_num_blocks']} blocks ({p['left_alone_bytes'] / 2**30:.2f} GiB).")


def summarize(result) -> dict:
    return {"classes": class_stats(result), "throughput": throughput(result), "lesson": lesson(result)}
