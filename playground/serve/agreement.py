"""Teacher-forced top-1 agreement after a recompute: why a preempted request's greedy tokens may part from A's.

    agreement = recompute_agreement(engine.backend, a, b)   # A with every slot's memory, B preempted under a budget
    agreement.agreed, agreement.positions                   # of the output positions compared
    agreement_clause(agreement)                             # the sentence the memory-pressure preset writes

Each request whose tokens in B parted from A's and that B preempted is fed its reference (A's prompt and output
ids) two ways, with the batcher's own calls (backends/onnx_batch.py), each in a KV slot of its own:
- one at a time: the prompt in one prefill pass, then one decode row a token: the KV its decode steps wrote;
- as B recomputed it: at each of B's preemptions, after the positions B copied back from the prefix cache (as
  the one-row decode wrote them), the positions B recomputed are read again by the prefill graph in B's own
  chunk sizes, a multi-row pass; one decode row a token in between.
At every output position from the request's first recompute on, the two passes' argmaxes are compared. The
one-at-a-time pass's top-1/top-2 logit margin says how near a tie each disagreement was, and how near one the
position was where B's tokens first parted from A's.

>>> top_two(np.array([[1.0, 3.0, 2.5], [0.0, -1.0, 4.0]]))
(array([1, 2]), array([0.5, 4. ]))

Left out: requests that parted without a preemption (batches of other sizes round differently: there is no
recompute to replay), sampled runs (their tokens part by design), a recompute whose cached blocks were evicted
between preemptions (replayed as if they were kept).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backends.onnx_batch import KVSlots, decode_rows, prefill_chunk
from .summary import plural

NEAR_TIE = 0.25   # logits: the top two within 1.28x in probability, a margin the default graph's recompute tips
#                   (the memory-pressure finding prints every margin it tipped beside the median of all)


def top_two(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's argmax and its margin over the runner-up (logits [n, vocab])."""
    best = logits.argmax(-1)
    two = np.partition(logits, -2, axis=-1)[:, -2:]
    return best, two[:, 1] - two[:, 0]


@dataclass(frozen=True)
class Parting:
    """Where one request's tokens in B first differed from A's."""
    request: int
    position: int             # output index
    margin: float | None      # the one-at-a-time pass's top-1/top-2 logit margin there (None: not replayed there)
    after_recompute: bool     # the position came after B's first recompute of it


@dataclass(frozen=True)
class Agreement:
    """The teacher-forced comparison over the requests that parted and were preempted."""
    positions: int                          # output positions compared
    agreed: int                             # of them, where both passes' top-1 was the same token
    margins: tuple[float, ...]              # the one-at-a-time margin at each position where they differed
    median_margin: float | None             # the one-at-a-time margin's median over every position compared
    partings: tuple[Parting, ...]           # one per replayed request
    cancelled: bool = False


def replay_request(backend, prompt: list[int], output: list[int], preemptions: list[tuple[int, int, list[int]]]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Teacher-forced on `prompt` + `output`: (one-at-a-time argmax, its margin, recompute argmax), one per output
    index; the recompute's are -1 before its first preemption. `preemptions`: (output tokens made before it,
    positions copied back, the recompute's chunk sizes) in order; chunks that do not add up to what was dropped
    (blocks copied between them) are read as one pass."""
    n, p = len(output), len(prompt)
    ids = list(prompt) + list(output)
    capacity = p + n + 1
    alone, again = KVSlots(backend, 1, capacity), KVSlots(backend, 1, capacity)
    rows = [prefill_chunk(backend, alone, 0, list(prompt), 0).copy()]
    for j in range(1, n):                                    # row j predicts output j, fed output j - 1
        rows.append(decode_rows(backend, alone, [output[j - 1]], [p + j - 1])[0].copy())
    best, margin = top_two(np.stack(rows))
    recompute = np.full(n, -1)
    at = {made: (cached, chunks) for made, cached, chunks in preemptions}
    first = min(at, default=n)
    for j in range(first, n):
        if j in at:                                          # dropped: B copied `cached` back, read the rest again
            cached, chunks = at[j]
            if j == first:
                again.write(0, 0, alone.read(0, 0, cached))
            if cached + sum(chunks) != p + j:   # copies between its chunks: the rest read as one pass
                chunks = [p + j - cached]
            start = cached
            for size in chunks:
                logits = prefill_chunk(backend, again, 0, ids[start:start + size], start)
                start += size
        else:
            logits = decode_rows(backend, again, [output[j - 1]], [p + j - 1])[0]
        recompute[j] = int(logits.argmax())
    return best, margin, recompute


def recompute_agreement(backend, a, b, cancel=None) -> Agreement:
    """Replay each request that parted from A (run a) in B (run b) and that B preempted; see the module's text."""
    positions = agreed = 0
    margins, partings, every = [], [], []
    for x, y in zip(a.records, b.records):
        if x.trace is None or y.trace is None or x.trace.output_ids == y.trace.output_ids:
            continue
        if not y.preemptions:
            continue
        if cancel is not None and cancel.is_set():
            return Agreement(positions, agreed, tuple(margins), _median(every), tuple(partings), cancelled=True)
        mine, theirs = x.trace.output_ids, y.trace.output_ids
        plan = [(e.after_tokens, e.cached, [n for *_, n in e.chunks]) for e in y.preemptions
                if e.after_tokens < len(mine)]
        best, margin, recompute = replay_request(backend, x.trace.prompt_ids, mine, plan)
        first = plan[0][0] if plan else len(mine)
        same = best[first:] == recompute[first:]
        positions, agreed = positions + len(same), agreed + int(same.sum())
        margins += [float(m) for m in margin[first:][~same]]
        every += margin[first:].tolist()
        part = next((j for j, (u, v) in enumerate(zip(mine, theirs)) if u != v), min(len(mine), len(theirs)))
        partings.append(Parting(x.request.id, part, float(margin[part]) if part < len(mine) else None, part >= first))
    return Agreement(positions, agreed, tuple(margins), _median(every), tuple(partings))


def span(values: list[float]) -> str:
    """The range of `values`, one figure when they are one.

    >>> span([0.5, 1.25]), span([0.5])
    ('0.500 to 1.250', '0.500')
    """
    lo, hi = min(values), max(values)
    return f"{lo:.3f}" if lo == hi else f"{lo:.3f} to {hi:.3f}"


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _share(agreed: int, positions: int) -> str:
    """A share that never rounds to all, or to none, when it is not.

    >>> _share(979, 1000), _share(9999, 10000), _share(1, 10000)
    ('97.9%', 'over 99.9%', 'under 0.1%')
    """
    share = agreed / positions
    if agreed < positions and share > 0.999:
        return "over 99.9%"
    if agreed and share < 0.001:
        return "under 0.1%"
    return f"{share:.1%}"


NOT_MEASURED = ("Teacher-forced agreement after a recompute is not measured in this run (the test suite gates it "
                "at ≥ 95% of positions on the default graph).")


def agreement_clause(agreement: Agreement | None, who: str = "A") -> str:
    """The measured figures in words, computed from them (`who`: the run replayed); `NOT_MEASURED` without them."""
    if agreement is None or agreement.cancelled:
        return NOT_MEASURED
    g = agreement
    if not g.positions:
        return "No request that parted was preempted: there is no recompute to replay."
    passes = "the recompute's top-1 agreed with the one-at-a-time pass"
    if g.agreed == g.positions:
        head = f"{passes} at all {g.positions:,} positions"
    else:
        widest = max(g.margins)
        near = sum(m < NEAR_TIE for m in g.margins)
        ties = ("every one a near-tie" if near == len(g.margins) else "none a near-tie" if not near else
                f"{near} of {len(g.margins)} near-ties")
        head = (f"{passes} at {_share(g.agreed, g.positions)} of {g.positions:,} positions; where they differed, the "
                f"one-at-a-time pass's top two logits were at most {widest:.3f} apart ({ties}: margin < {NEAR_TIE}, "
                f"against a median margin of {g.median_margin:.2f} over all {g.positions:,})")
    known = [p.margin for p in g.partings if p.margin is not None]
    tied, wide = sum(m < NEAR_TIE for m in known), [m for m in known if m >= NEAR_TIE]
    if not known:
        began = ""
    elif not wide:
        began = (f"; {'every change' if len(known) > 1 else 'the change'} began at a near-tie "
                 f"(margin < {NEAR_TIE}{'' if len(known) > 1 else f': {known[0]:.3f}'})")
    elif len(known) == 1:
        began = f"; the change began where its top two logits were {known[0]:.3f} apart, not a near-tie"
    else:
        others = "they" if not tied else "the other" if len(wide) == 1 else "the others"
        began = (f"; {tied or 'none'} of {len(known)} changes began at a near-tie (margin < {NEAR_TIE}); {others} "
                 f"began where the top two logits were {span(wide)} apart")
    before = sum(not p.after_recompute for p in g.partings)
    early = (f" {before} of them parted before their first recompute, where batches of other sizes tipped them."
             if before else "")
    return (f"Teacher-forced on the tokens {who} gave, for {plural(len(g.partings), 'preempted request')} that parted, "
            f"{head}{began}.{early}")

