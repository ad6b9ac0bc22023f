"""A session trace's gaps replayed against the prefix cache alone: which of a session's blocks were held, evictable
or evicted (and why) when its next turn came, under a budget, a held share and a TTL.

    gaps, cache = replay_gaps(trace.rows, capacity=64, held_share=0.5, ttl_s=300.0)   # agent_trace.py's rows
    gaps[0].session, gaps[0].seconds, gaps[0].state   # {"held", "evictable", "evicted": {reason: n}, "missing"}
    first_eviction(gaps)                              # the first gap whose session lost a block (None: none did)

Each row's `hash_ids` name its blocks (Mooncake's: one id per block of the trace's block size, a prefix shared by
equal ids) and stand for them in a `PrefixCache` of `capacity` blocks on a clock of the trace's own time. A turn
takes no time: it arrives (a session's first turn at its timestamp, a later one `delay` after its predecessor),
its blocks are inserted (the least recently used evicted first, session-held ones last), and its session holds
them for `ttl_s`. Just before a session's next turn its previous chain is sampled: the gap's `state`. What the
cache alone decides is shown; the engine's compute time, and the slots' KV, are not (serve/batching.py replays
the same rows on the model).

>>> from playground.serve.agent_trace import read_rows
>>> rows = read_rows(['{"session_id": "a", "timestamp": 0, "input_length": 32, "output_length": 1, "hash_ids": [1, 2]}',
...                   '{"timestamp": 1000, "input_length": 48, "output_length": 1, "hash_ids": [7, 8, 9]}',
...                   '{"session_id": "a", "delay": 5000, "input_length": 48, "output_length": 1, "hash_ids": [1, 2, 3]}'])
>>> gaps, _ = replay_gaps(rows, capacity=4, held_share=0.5, ttl_s=300.0)
>>> [(g.session, g.seconds, g.state["held"], g.state["evicted"]) for g in gaps]
[('a', 5.0, 2, {})]
>>> gaps, _ = replay_gaps(rows, capacity=4, held_share=0.0, ttl_s=300.0)   # no retention: the other row took a's room
>>> gaps[0].state["evicted"], first_eviction(gaps)
({'least recently used': 1}, 0)
"""
from __future__ import annotations

from dataclasses import dataclass

from .prefix_cache import PrefixCache


@dataclass(frozen=True)
class Gap:
    """A session's gap: after its turn `turn` (1 = its first), `seconds` long, and its blocks when the next came."""
    session: str
    turn: int
    start: float          # seconds on the trace's clock: the turn before the gap
    seconds: float
    state: dict           # PrefixCache.chain_state of the turn's chain, sampled just before the next turn
    evictions: int        # blocks the whole cache had evicted by then


def _times(rows) -> list[tuple[float, int]]:
    """(seconds, row index) of each turn: a session's first (or a row of no session) at its timestamp, a later turn
    `delay` after its predecessor (turns take no time here)."""
    out, last = [], {}
    for i, row in enumerate(rows):
        previous = last.get(row.session_id) if row.session_id is not None else None
        if previous is not None and row.delay is not None:
            t = previous + row.delay / 1000
        else:
            t = (row.timestamp or 0.0) / 1000
        out.append((t, i))
        if row.session_id is not None:
            last[row.session_id] = t
    return sorted(out)


def replay_gaps(rows, capacity: int, held_share: float, ttl_s: float) -> tuple[list[Gap], PrefixCache]:
    """Each session gap of `rows` (agent_trace.SessionRow) in the order the next turns come, and the cache after."""
    now = [0.0]
    cache = PrefixCache(capacity, block_size=1, clock=lambda: now[0], held_share=held_share)
    gaps, previous = [], {}   # session -> (its latest turn's time, its turn number, its chain)
    for t, i in _times(rows):
        row, now[0] = rows[i], t
        session = row.session_id
        if session is not None and session in previous:
            start, turn, chain = previous[session]
            gaps.append(Gap(session, turn, start, t - start, cache.chain_state(chain), cache.evicted))
        for h in row.hash_ids:
            cache.insert(h, (h,), lambda: [], by=f"row {i + 1}" + (f" · {session}" if session is not None else ""))
        if session is not None:
            cache.retain(row.hash_ids, session, ttl_s)
            turn = previous[session][1] + 1 if session in previous else 1
            previous[session] = (t, turn, row.hash_ids)
    return gaps, cache


def first_eviction(gaps) -> int | None:
    """The index of the first gap whose session found a block of its chain evicted (None: none did)."""
    return next((k for k, g in enumerate(gaps) if g.state["evicted"]), None)
