"""A workload's numbers: p50/p95 per class, throughput, goodput under an SLO, and the lesson in one sentence.

    summarize(result)                    # {"classes": {...}, "throughput": {...}, "lesson": "…"}
    goodput(result, ttft=1.0, tpot=0.2)  # requests/s that met both (vLLM's `bench serve --goodput`)

Throughput = output tokens / the workload's wall time (from its start to its last token). Percentiles
are metrics.percentile's (linear interpolation, as numpy's) over the requests that produced a token. The lesson sentence names
the class with the longest prompts "long" and the shortest "short", and measures how long the long
ones' prefill (for one at a time: their whole service, which holds the engine) overlapped each short
request's wait for its first token.

>>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([], 95)
(2.5, None)

Left out: confidence intervals (a workload is one sample; replay it to see the spread).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..metrics import percentile
from ..trace import COMPLETED, Phase

METRICS = ("waiting", "ttft", "tpot", "e2e")


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
    """When a long request held up others: its prefill chunks as they ran (before its first token too, so a live
    count never drops one), its prefill when no chunk was seen, or its whole service."""
    if record.admitted is None:
        return []
    if whole_service:
        return [(record.admitted, record.last_token)] if record.steps else []
    return [(a, b) for a, b, _ in record.chunks] or ([(record.admitted, record.first_token)] if record.steps else [])


def _overlap(span, intervals) -> float:
    a, b = span
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in intervals)


def plural(n: int, one: str, many: str | None = None) -> str:
    """A count and its noun, singular for one.

    >>> plural(1, "request"), plural(3, "request"), plural(0, "was", "were")
    ('1 request', '3 requests', '0 were')
    """
    return f"{n} {one if n == 1 else many or one + 's'}"


def delay_sentence(delays: list[float], shorts: int, short: str, long: str, what: str, done: bool) -> str:
    """The long requests' hold on the short ones' first token, over the short requests that have one. A live run
    says it covers the requests so far, so a later figure extends it.

    >>> delay_sentence([], 1, "short", "long", "prompt reading", done=False)
    "so far, of the 1 short request with a first token, none waited for a long request's prompt reading"
    >>> delay_sentence([0.5, 0.2], 3, "short", "long", "prompt reading", done=True)
    "of the 3 short requests, the long requests' prompt reading delayed 2 first tokens by a median of 0.35 s"
    """
    scope = (f"so far, of the {plural(shorts, short + ' request')} with a first token" if not done
             else f"of the {plural(shorts, short + ' request')}")
    if not delays:
        return f"{scope}, none waited for a {long} request's {what}"
    return (f"{scope}, the {long} requests' {what} delayed {plural(len(delays), 'first token')} by a median of "
            f"{statistics.median(delays):.2f} s")


def lesson(result, who: str | None = None) -> str:
    """The run in one sentence of its own numbers, opening with `who` (default: "On <the scheduler's label>");
    while the run goes on, it covers the requests so far."""
    pair, recs = short_and_long(result), served(result)
    who = who or f"On {result.scheduler_label}"
    if not recs:
        return f"{who}: no request produced a token" + (" (cancelled)." if result.cancelled else ".")
    tp = throughput(result)
    tail = f"{tp['output_tokens']} output tokens in {tp['wall_s']:.1f} s ({tp['output_tps']:.1f} tok/s)"
    shorts = [r for r in recs if pair and r.request.cls == pair[0]]
    so_far = "" if result.done else "so far, "
    if not shorts:
        ttft = [r.ttft for r in recs]
        return (f"{who}: {so_far}TTFT p50 {percentile(ttft, 50):.2f} s, p95 {percentile(ttft, 95):.2f} s "
                f"over {len(recs)} requests; {tail}.")
    short, long = pair
    whole = result.scheduler == "one-at-a-time"
    intervals = [iv for r in result.records if r.request.cls == long for iv in _blocking(r, whole)]
    delays = [d for d in (_overlap((r.arrival, r.first_token), intervals) for r in shorts) if d > 0]
    ttft = [r.ttft for r in shorts]
    what = "service (prefill and decode, one at a time)" if whole else Phase.PREFILL
    head = delay_sentence(delays, len(shorts), short, long, what, result.done)
    return (f"{who}: {head}; {short} TTFT p50 {percentile(ttft, 50):.2f} s, "
            f"p95 {percentile(ttft, 95):.2f} s; {tail}.")


def class_p50(result, cls: str | None, key: str) -> float | None:
    """The p50 of `key` (a RequestRecord property: tpot, e2e, ttft) over the served requests of class `cls`
    (None: every class); None when none was measured."""
    return percentile([getattr(r, key) for r in served(result) if cls is None or r.request.cls == cls], 50)


def mean_rows(result) -> float | None:
    """The requests one forward pass carried, on average over every token's pass (Step.rows); None where unknown."""
    rows = [s.rows for r in served(result) for s in r.steps if s.rows]
    return statistics.mean(rows) if rows else None


def more_or_fewer(b: float, a: float, more: str = "more", fewer: str = "fewer", same: str = "the same") -> str:
    """The comparative word for b against a, computed.

    >>> more_or_fewer(2.0, 1.0), more_or_fewer(1.0, 2.0, "faster", "slower"), more_or_fewer(1.0, 1.0)
    ('more', 'slower', 'the same')
    """
    return more if b > a else fewer if b < a else same


@dataclass(frozen=True)
class Expectation:
    """What B's output tokens/s should come out against A's ("more" or "fewer"; None: no direction expected), and
    why, in words the page states before it says whether the run agreed."""
    throughput: str | None
    why: str


BATCHING = Expectation("more", "batching should give more output tokens/s: a step carries several requests")
NO_DIRECTION = Expectation(None, "")


def expectation_for(a, b) -> Expectation:
    """What a plain A/B comparison expects: batching against one at a time gives more tokens/s; anything else, no
    direction (a preset passes its own)."""
    alone = "one-at-a-time"
    return BATCHING if a.scheduler == alone and b.scheduler != alone else NO_DIRECTION


def verdict(measured: str, expected: str | None, why: str) -> str:
    """Whether the run agreed with what was expected, the expectation in its own words.

    >>> verdict("fewer", "fewer", "a KV budget makes B slower: fewer requests fit")
    'as expected (a KV budget makes B slower: fewer requests fit)'
    >>> verdict("more", "fewer", "a KV budget makes B slower: fewer requests fit")
    'this run came out the other way (expected: a KV budget makes B slower: fewer requests fit)'
    """
    if expected is None:
        return ""
    if measured == expected:
        return f"as expected ({why})"
    return f"{'not as expected' if measured == 'the same' else 'this run came out the other way'} (expected: {why})"


def rows_clause(a, b, name_a: str, name_b: str) -> str:
    """How many requests each run's forward passes carried, computed; "" where a run's Steps do not say."""
    ra, rb = mean_rows(a), mean_rows(b)
    if ra is None or rb is None:
        return ""
    return (f"; {name_b}'s forward passes carried {more_or_fewer(rb, ra)} requests: {rb:.1f} on average against "
            f"{ra:.1f}")


def cost_sentence(a, b, cls: str | None, name_a: str = "A", name_b: str = "B") -> str | None:
    """What B's way cost against A's, in their own numbers: the `cls` requests' TPOT p50 (time per output token
    after the first) and E2E p50, and the requests a forward pass carried. None when either was not measured."""
    tpot, e2e = [class_p50(x, cls, "tpot") for x in (a, b)], [class_p50(x, cls, "e2e") for x in (a, b)]
    if None in tpot or None in e2e or not tpot[0] or not tpot[1]:
        return None
    who = f"the {cls} requests'" if cls else "the requests'"
    numbers = (f"{who} TPOT p50 was {tpot[1]:.3f} s on {name_b} against {tpot[0]:.3f} s on {name_a}"
               f" ({more_or_fewer(tpot[1], tpot[0], f'{tpot[1] / tpot[0]:.1f}× longer', f'{tpot[0] / tpot[1]:.1f}× shorter')}"
               " per token), "
               f"and their E2E p50 {e2e[1]:.2f} s against {e2e[0]:.2f} s{rows_clause(a, b, name_a, name_b)}")
    if tpot[1] > tpot[0]:
        return f"What it cost: {numbers}."
    return f"Per token it cost nothing here: {numbers}."


def compare(a, b, named: bool = False, expect: Expectation | None = None) -> str:
    """A few sentences on the same workload under two schedulers or settings, A and B (B against A), in their
    measured numbers: B's output tokens/s against A's and whether that is what `expect` said (default:
    expectation_for), the short requests' p95 TTFT, and what B cost (their TPOT and E2E p50). `named`: the reader
    already knows which scheduler A and B are.

    It says so when the two ran on different sources: then two runtimes differ, not only two schedulers."""
    ta, tb = throughput(a)["output_tps"], throughput(b)["output_tps"]
    pair = short_and_long(a)
    cls = pair[0] if pair else None
    p95 = [percentile([r.ttft for r in served(x) if cls is None or r.request.cls == cls], 95) for x in (a, b)]
    if not (ta and tb) or None in p95:
        return "Too little was measured to compare the two runs."
    who = f"the {cls} requests'" if cls else "the"
    sooner = more_or_fewer(p95[1], p95[0], f"{p95[1] / max(p95[0], 1e-9):.1f}× later",
                           f"{p95[0] / max(p95[1], 1e-9):.1f}× sooner", "the same")
    name_a, name_b = ("A", "B") if named else (f"A ({a.scheduler_label})", f"B ({b.scheduler_label})")
    word, expect = more_or_fewer(tb, ta), expect or expectation_for(a, b)
    agreed = verdict(word, expect.throughput, expect.why)
    rate = (f"with {word} output tokens/s {'as' if word == 'the same' else 'than'} {name_a}: {tb:.1f} against "
            f"{ta:.1f} ({tb / ta:.2f}×"
            f"{'; ' + agreed if agreed else ''})")
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
