"""Each client's share of the engine: a room's requests (the live record of clients, serve/traffic.py) per client.

    rows = client_shares(records, refusals, now=result.now())   # a ClientShare per client, the longest wait first
    longest_wait(rows, records, now, slots=8)   # "Longest wait to be admitted: page 2, 2.1 s (request #14): …"

Per client (a record's `client`: "page 2", "client 3", never a key), from its records and refusals: its requests
by state -- done, running, waiting for a KV slot, cancelled (its client went away, waiting or running), failed,
refused before they reached the engine --, the output tokens it got (one a decode step) and its share of every
client's in the window, the longest and the median wait for a slot (arrival to admission; a request still
waiting counts until `now`, one that left while waiting until it left), its prompt tokens and how many of them
were copied from the prefix cache. The sentence names the client that waited longest, what it waited for (the
batcher's reasons: its record's wait parts once admitted, wait_parts.py; the latest plan's while it waits) and,
where it waited for a slot or its turn (or the reason is not known), the slots held while it waited: its own, and the
most any other client held.

Left out: a preempted request's second wait (its wait is its first admission's), and requests that arrived before
the window (they may hold slots the window's records do not show, so the slots held are the window's).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..metrics import percentile
from ..run_view import format_seconds
from ..trace import COMPLETED, StopReason
from ..wait_parts import WAITING_WORDS
from .engine_loop import PAGE, client_origin

UNNAMED = "unnamed"   # the row of requests that carry no client name
# the batcher's reasons under which the slots other clients held say why a request waited
FOR_SLOTS = frozenset({"no free slot", "its turn among clients", "a request of a higher priority", "no KV budget",
                       "behind a request short of KV budget"})


class ClientNames:
    """The name every view shows for a loop's client name: a page session's as "page N" (N counts the sessions in
    the order they first came; the session's own id stays out of every view), any other as it is (the guard's
    "client N", "the presenter"), "unnamed" for none.

    >>> names = ClientNames()
    >>> [names(c) for c in ("page 7f3a", "client 2", "page 9b1c", "page 7f3a", "")]
    ['page 1', 'client 2', 'page 2', 'page 1', 'unnamed']
    """

    def __init__(self):
        self._pages: dict[str, str] = {}   # a page session's client name -> "page N"

    def __call__(self, client: str) -> str:
        if client_origin(client) != PAGE:
            return client or UNNAMED
        return self._pages.setdefault(client, f"{PAGE} {len(self._pages) + 1}")


@dataclass(frozen=True)
class ClientShare:
    """One client's row: what its requests got of the engine in the window."""
    client: str
    origin: str                     # "page" | "API" | "" (not told)
    done: int = 0
    running: int = 0
    waiting: int = 0                # for a KV slot, now
    cancelled: int = 0              # its client went away (waiting or running)
    failed: int = 0
    refused: int = 0                # before reaching the engine (a 400, a 429, …)
    tokens: int = 0                 # output tokens: one a decode step
    share: float | None = None      # of every client's output tokens in the window; None: none made yet
    longest_wait: float | None = None   # seconds, its longest wait for a slot; None: none of its requests waited
    wait_p50: float | None = None
    longest_request: int | None = None  # the id of the request that waited longest
    prompt_tokens: int = 0
    cached_tokens: int = 0          # of its prompt tokens, copied from the prefix cache

    @property
    def requests(self) -> int:
        return self.done + self.running + self.waiting + self.cancelled + self.failed + self.refused

    @property
    def label(self) -> str:
        """The client's name, where it came from added unless the name says it.

        >>> ClientShare("client 3", "API").label, ClientShare("page 2", "page").label
        ('client 3 (API)', 'page 2')
        """
        return self.client if not self.origin or self.client.startswith(self.origin) else f"{self.client} ({self.origin})"

    def states(self) -> str:
        """Its requests by state, the states it has none in left out.

        >>> ClientShare("client 3", "API", done=3, cancelled=1, refused=2).states()
        '3 done · 1 cancelled · 2 refused'
        """
        counts = (("done", self.done), ("running", self.running), ("waiting", self.waiting),
                  (StopReason.CANCELLED.value, self.cancelled), ("failed", self.failed), ("refused", self.refused))
        return " · ".join(f"{n} {state}" for state, n in counts if n) or "none"


def wait_for_slot(record, now: float | None = None) -> float | None:
    """Seconds a request waited for a KV slot: to its admission, to when it left if it never got one, to `now`
    while it waits (None without `now`).

    >>> from types import SimpleNamespace as S
    >>> def r(admitted=None, finished=None): return S(arrival=1.0, admitted=admitted, finished=finished)
    >>> wait_for_slot(r(admitted=1.5)), wait_for_slot(r(finished=3.0)), wait_for_slot(r(), now=4.0), wait_for_slot(r())
    (0.5, 2.0, 3.0, None)
    """
    end = _wait_end(record, now)
    return None if end is None else end - record.arrival


def _wait_end(record, now: float | None) -> float | None:
    return record.admitted if record.admitted is not None else record.finished if record.finished is not None else now


def _state(record) -> str:
    """done, running, waiting (for a slot), cancelled (StopReason.CANCELLED: waiting or running) or failed."""
    if record.admitted is None:
        return "waiting" if record.stop_reason is None else StopReason.CANCELLED
    if record.stop_reason is None:
        return "running"
    if record.stop_reason in COMPLETED:
        return "done"
    return StopReason.CANCELLED if record.stop_reason == StopReason.CANCELLED else "failed"


def client_shares(records, refusals=(), now: float | None = None) -> list[ClientShare]:
    """A row per client of the records and refusals, the client that waited longest first (then by name).

    >>> from types import SimpleNamespace as S
    >>> def r(client, arrival, admitted, tokens, stop="eos"):
    ...     return S(client=client, origin="API", arrival=arrival, admitted=admitted, finished=None,
    ...              stop_reason=stop if admitted is not None else None, output_tokens=tokens, prompt_tokens=10,
    ...              cached_tokens=0, request=S(id=int(arrival * 10)))
    >>> rows = client_shares([r("client 1", 0.0, 0.0, 30), r("client 2", 0.1, 0.5, 10), r("client 1", 0.2, None, 0)],
    ...                      now=1.2)
    >>> [(x.client, x.done, x.waiting, x.tokens, x.share, x.longest_wait) for x in rows]
    [('client 1', 1, 1, 30, 0.75, 1.0), ('client 2', 1, 0, 10, 0.25, 0.4)]
    """
    by_client: dict[str, list] = {}
    for record in records:
        by_client.setdefault(record.client or UNNAMED, []).append(record)
    refused = Counter(x.client or UNNAMED for x in refusals)
    total = sum(r.output_tokens for r in records)
    rows = []
    for client in sorted(set(by_client) | set(refused)):
        mine = by_client.get(client, [])
        states = Counter(_state(r) for r in mine)
        waits = [(w, r.request.id) for r in mine if (w := wait_for_slot(r, now)) is not None]
        tokens = sum(r.output_tokens for r in mine)
        longest = max(waits, key=lambda x: x[0], default=(None, None))
        rows.append(ClientShare(
            client, next((r.origin for r in mine if r.origin), "API" if refused[client] else ""),
            states["done"], states["running"], states["waiting"], states[StopReason.CANCELLED], states["failed"],
            refused[client], tokens, tokens / total if total else None, longest[0],
            percentile([w for w, _ in waits], 50), longest[1], sum(r.prompt_tokens or 0 for r in mine),
            sum(r.cached_tokens for r in mine)))
    return sorted(rows, key=lambda x: -x.longest_wait if x.longest_wait is not None else float("inf"))


def _holds(record, t: float) -> bool:
    """Whether the request held a KV slot at `t` (admitted, not yet ended, not preempted then)."""
    if record.admitted is None or t < record.admitted or (record.finished is not None and t >= record.finished):
        return False
    return not any(p.at <= t and (p.resumed is None or t < p.resumed) for p in getattr(record, "preemptions", ()))


def slots_held(records, start: float, end: float) -> Counter:
    """The most KV slots each client held at once from `start` until just before `end` (the window's records).

    >>> from types import SimpleNamespace as S
    >>> def r(client, admitted, finished): return S(client=client, admitted=admitted, finished=finished)
    >>> recs = [r("a", 0.0, 2.0), r("a", 0.5, 1.0), r("a", 1.5, None), r("b", 0.2, 0.4)]
    >>> dict(slots_held(recs, 0.3, 3.0)), dict(slots_held(recs, 1.1, 1.4))
    ({'a': 2, 'b': 1}, {'a': 1})
    """
    records = [r for r in records if r.admitted is not None and r.admitted < end   # those that held one meanwhile
               and (r.finished is None or r.finished > start)]
    times = {start} | {t for r in records for t in (r.admitted, r.finished, *(x for p in getattr(r, "preemptions", ())
                                                                             for x in (p.at, p.resumed)))
                       if t is not None and start <= t < end}
    most: Counter = Counter()
    for t in times:
        for client, n in Counter(r.client or UNNAMED for r in records if _holds(r, t)).items():
            most[client] = max(most[client], n)
    return most


def waited_for(record) -> tuple[tuple[str, float], ...] | None:
    """What a request waited for before its slot, by the batcher's reasons: (reason, seconds) from its wait parts once
    admitted; (its latest plan's reason, None) while it waits; None where no reason is known (another scheduler)."""
    parts = getattr(getattr(record, "trace", None), "waits", None)
    if record.admitted is not None:
        return None if parts is None else parts.waited
    reason = getattr(record, "waiting_for", None)
    return None if reason is None else ((reason, None),)


def longest_wait(rows: list[ClientShare], records, now: float | None = None, slots: int | None = None) -> str:
    """Who waited longest to be admitted, how long, what for (the batcher's reasons, where the record has them) and,
    where it waited for a slot or its turn, the slots held meanwhile: the client's own and the most any other client
    held (the turn rule gives the next free slot to the client holding the fewest).

    >>> from types import SimpleNamespace as S
    >>> def r(id, client, arrival, admitted, finished=None, trace=None):
    ...     return S(client=client, origin="API", arrival=arrival, admitted=admitted, finished=finished,
    ...              stop_reason="eos" if finished else None, output_tokens=3, prompt_tokens=9, cached_tokens=0,
    ...              request=S(id=id), preemptions=[], trace=trace)
    >>> recs = [r(0, "client 1", 0.0, 0.0, 3.0), r(1, "client 1", 0.0, 0.0, 3.0), r(2, "page 1", 0.1, 2.2)]
    >>> print(longest_wait(client_shares(recs), recs, slots=2))
    Longest wait to be admitted: page 1, 2.1 s (request #2), holding none of the 2 slots while client 1 held up to 2.
    >>> recs = [r(0, "client 1", 0.0, 0.0, 3.0), r(1, "page 1", 0.0, 0.0), r(2, "client 1", 0.1, 3.0)]
    >>> print(longest_wait(client_shares(recs), recs, slots=2))
    Longest wait to be admitted: client 1, 2.9 s (request #2), holding up to 1 of the 2 slots; no other client held more.
    >>> recs = [r(0, "page 1", 0.0, 0.004, 1.0)]
    >>> print(longest_wait(client_shares(recs), recs, slots=8))
    Longest wait to be admitted: page 1, 4 ms (request #0), holding none of the 8 slots; no client held one.
    >>> from playground.wait_parts import WaitParts
    >>> machine = S(waits=WaitParts((("the iteration in progress", 0.4), ("the machine", 7.2))))
    >>> recs = [r(0, "client 1", 0.0, 0.0, 9.0), r(1, "page 10", 0.1, 7.7, trace=machine)]
    >>> print(longest_wait(client_shares(recs), recs, slots=32))
    Longest wait to be admitted: page 10, 7.6 s (request #1): 400 ms waiting for the iteration in progress (it came after the batcher had planned the iteration running), 7.2 s waiting for the machine (work that needs it alone held it).
    >>> longest_wait([], [])
    'No request has waited for a slot yet.'
    """
    first = next((x for x in rows if x.longest_wait is not None), None)
    if first is None:
        return "No request has waited for a slot yet."
    record = next(r for r in records if r.request.id == first.longest_request)
    still = record.admitted is None and record.finished is None
    reasons = waited_for(record)
    words = ", ".join(WAITING_WORDS.get(reason, f"waiting: {reason}") if s is None else
                      f"{format_seconds(s)} {WAITING_WORDS.get(reason, f'waiting: {reason}')}"
                      for reason, s in reasons or () if s is None or s >= 0.0005)
    now_for = f", now {words}" if still and words else ""
    head = (f"Longest wait to be admitted: {first.client}, {format_seconds(first.longest_wait)} "
            f"(request #{record.request.id}{', still waiting' if still else ''}{now_for})"
            + (f": {words}" if words and not still else ""))
    if reasons is not None and not any(reason in FOR_SLOTS for reason, _ in reasons):
        return head + "."
    held = slots_held(records, record.arrival, _wait_end(record, now))
    own = held.pop(first.client, 0)
    of = f"of the {slots} slot{'s' * (slots != 1)}" if slots else "of the slots"
    top = max(sorted(held), key=lambda c: held[c], default=None)
    most = held[top] if top is not None else 0
    others = (f" while {top} held up to {most}" if most > own else "; no other client held more" if own
              else "; no client held one")
    return f"{head}{';' if reasons else ','} holding {f'up to {own}' if own else 'none'} {of}{others}."
