"""Requests from clients as a live record: a WorkloadResult that never ends, for the Serve tab to draw.

    traffic = ClientTraffic(keep_s=600)
    room = Room(get_engine, traffic=traffic)   # serve/room.py: its engine loop tells the record what happens
    result = traffic.snapshot()     # a WorkloadResult of the last keep_s seconds: records, batches, KV, slot map
    summarize(result)               # p50/p95 per class (short/long by prompt tokens), as for any workload
    t0 = traffic.now(); view = traffic.since(t0)   # later: what arrived since t0, its times counted from t0
    traffic.refusals, traffic.endpoint               # requests refused (status, reason); the endpoint's limits

Each request becomes a RequestRecord the moment it is submitted (its arrival), with its class by prompt
tokens (SHORT_MAX_TOKENS); the loop's iterations then fill in admission, prefill chunks, the Steps (its
Trace) and its end, and the scheduler's batches, KV bytes in use and slot map -- exactly as the Serve
tab's continuous-batching scheduler records a workload (serve.batching.record_iteration, the same code), so
every chart of that tab can draw it. Times are seconds since the record started; `since(t0)` counts them
from t0 instead (a page that starts watching at t0 sees a time base of its own). What is older than
`keep_s` (finished requests, batches, KV samples, refusals) is dropped as the record grows. A request the
endpoint refuses before it reaches the loop (a 400, a 429, …) is kept as a Refusal with its reason.

A record carries the session its request named (`session`: sessions.Session, or None), as the endpoint read it.

Each record and refusal carries who sent it by a name that identifies no one (`client_label`): an API client
as the guard names it ("client 3", never its key or address), a page session as "page 1", "page 2", … in the
order its first request came; the Watch view's share of each client (serve/shares.py) reads them.

Left out: prompts (a Trace here has token ids, no text).
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, replace
from enum import StrEnum

from ..trace import COMPLETED, StopReason
from .batching import describe_pool, record_iteration
from .engine_loop import client_origin
from .prefix_cache import BLOCK_SIZE
from .records import RequestRecord, WorkloadResult
from .schedulers import Clock
from .shares import ClientNames
from .workload import Request, Workload

SHORT_MAX_TOKENS = 256   # a prompt of more tokens is "long"
CLIENT_GONE = "client gone"   # what a cancelled request means here: its client hung up (routes.py)
LABEL = "requests from clients (OpenAI-compatible endpoint; continuous batching on ONNX Runtime)"


def request_class(prompt_tokens: int) -> str:
    """The request's class on the Serve tab, by its prompt tokens.

    >>> request_class(40), request_class(900)
    ('short', 'long')
    """
    return "short" if prompt_tokens <= SHORT_MAX_TOKENS else "long"


class AloneReason(StrEnum):
    """Why one of the room's runs took a CPU slot of its own instead of joining the engine loop, in the words the
    Watch view and the Lesson's "You are the workload" say it."""
    SPECULATIVE = "speculative decoding"   # drafts verified several tokens a pass; the loop decodes one a pass
    OTHER_BACKEND = "another backend"      # the loop batches one backend's requests
    TOO_LONG = "too long for a KV slot"    # prompt + new tokens past the loop's positions a slot


@dataclass(frozen=True)
class Refusal:
    """A request the endpoint answered with an error before the loop saw it: when, the HTTP status, why, and
    which client sent it ("" where it was refused before it was named: a missing or wrong key), and in a few words
    where the status alone says too little ("no key", "wrong key": ApiError.words)."""
    time: float
    status: int
    reason: str
    client: str = ""
    words: str = ""


class ClientTraffic:
    def __init__(self, keep_s: float = 600.0, source: str = "the API's engine loop"):
        self.keep_s = keep_s
        self.clock = Clock()
        self.refusals: list[Refusal] = []
        self.endpoint: dict = {}   # the service's limits, and once loaded its context and slots (described())
        self.reach: list[str] = []   # where the page answers, as a room opens it (ports.room_urls); [] unknown
        self.result = WorkloadResult("clients", LABEL, source, Workload(()), [], started=self.clock.start,
                                     admitted_means="the engine loop gave the request a KV slot")
        self.in_loop: dict[int, RequestRecord] = {}   # id(seq) -> its record, while the loop holds it
        self._names = ClientNames()                   # a loop's client name -> the one every view shows
        self._next_id = 0
        self._lock = threading.Lock()

    # --- the engine loop's observer

    def submitted(self, ticket) -> None:
        seq = ticket.seq
        with self._lock:
            request = Request(self._next_id, request_class(len(seq.ids)), "", seq.settings.max_new_tokens,
                              self.clock.now(), seq.trace.ignore_eos)
            self._next_id += 1
            record = RequestRecord(request, prompt_tokens=len(seq.ids), origin=client_origin(ticket.client),
                                   client=self.client_label(ticket.client), waiting_for=str(seq.wait),
                                   session=ticket.session)
            self.in_loop[id(seq)] = record
            self.result.records.append(record)

    def iterated(self, it, batcher) -> None:
        with self._lock:
            if self.result.pool is None:
                describe_pool(self.result, batcher, batcher.config.slots)
            self.result.pool["moves"] = batcher.table.moves
            record_iteration(it, batcher, self.in_loop, self.result, self.clock)
            for seq in it.finished:
                self.in_loop.pop(id(seq), None)
            self._forget(self.clock.since(it.end) - self.keep_s)

    def paused(self, batcher) -> None:
        """The loop paused (Batcher.pause: work that needs the machine holds it): each request waiting for a slot now
        waits for what the batcher says (the machine), not the reason of the last plan made before the pause."""
        with batcher.lock:
            waiting = list(batcher.waiting)
        with self._lock:
            for seq in waiting:
                record = self.in_loop.get(id(seq))
                if record is not None and seq.wait_since is not None:
                    record.waiting_for = str(seq.wait)

    # --- a run of the room outside the loop

    def alone(self, run, client: str, pressed: float, why: AloneReason):
        """Keep `run` (a local Run, just started on a CPU slot of its own, outside the loop) as one of the room's
        requests, counted apart with `why`: arrival when its person pressed Generate (`pressed`, perf_counter()),
        admitted when it started (its wait: for a CPU slot), its Steps as it makes them, its end. Returns the run."""
        trace = run.trace
        with self._lock:
            request = Request(self._next_id, request_class(len(trace.prompt_ids)), "", trace.settings.max_new_tokens,
                              self.clock.since(pressed), trace.ignore_eos)
            self._next_id += 1
            record = RequestRecord(request, prompt_tokens=len(trace.prompt_ids), admitted=self.clock.since(run.t0),
                                   trace=trace, origin=client_origin(client), client=self.client_label(client),
                                   alone=str(why))
            self.result.records.append(record)
        run.on_end(lambda ended: self._ended_alone(record, ended))
        return run

    def _ended_alone(self, record: RequestRecord, run) -> None:
        with self._lock:
            record.finished = self.clock.now()
            record.stop_reason, record.error = run.trace.stop_reason or StopReason.CANCELLED, run.trace.error

    def refused(self, status: int, reason: str, client: str = "", words: str = "") -> None:
        with self._lock:
            self.refusals.append(Refusal(self.clock.now(), status, reason, self.client_label(client) if client else "",
                                         words))
            self.refusals = [x for x in self.refusals if x.time >= self.clock.now() - self.keep_s]

    def client_label(self, client: str) -> str:
        """The name a record shows for the loop's client name (serve.shares.ClientNames: "page N", "client 2").

        >>> traffic = ClientTraffic()
        >>> [traffic.client_label(c) for c in ("page 7f3a", "client 2", "page 9b1c", "page 7f3a", "")]
        ['page 1', 'client 2', 'page 2', 'page 1', 'unnamed']
        """
        return self._names(client)

    def described(self, **facts) -> None:
        """The service's limits (an ApiLimits: `limits`), and once its model loads: `context` (positions a
        request may use), `window` (the model's), `slots`, `prefix_cache` (positions; 0: off)."""
        self.endpoint = {**self.endpoint, **facts}

    def _forget(self, before: float) -> None:
        r = self.result
        if r.batches and r.batches[0].end >= before:
            return
        r.records = [x for x in r.records if x.finished is None or x.finished >= before]
        r.batches = [b for b in r.batches if b.end >= before]
        r.kv = [p for p in r.kv if p[0] >= before]
        r.slot_map = [p for p in r.slot_map if p[0] >= before]

    # --- readers

    def now(self) -> float:
        return self.clock.now()

    def since(self, t0: float) -> WorkloadResult:
        """A snapshot of the requests that arrived at t0 or later, every time counted from t0 (its prefill passes,
        cached copies and preemptions too; a request's Steps are counted from its admission already); the loop's
        passes, KV, slot map and prefix-cache map from t0 on."""
        r = self.snapshot()

        def shift(spans):   # (start, end, n) spans
            return [(a - t0, b - t0, n) for a, b, n in spans]

        records = [replace(x, request=replace(x.request, arrival=x.arrival - t0),
                           admitted=None if x.admitted is None else x.admitted - t0,
                           chunks=shift(x.chunks), cache_copies=shift(x.cache_copies),
                           preemptions=[replace(p, at=p.at - t0, resumed=None if p.resumed is None else p.resumed - t0,
                                                copy=None if p.copy is None else (p.copy[0] - t0, p.copy[1] - t0),
                                                chunks=shift(p.chunks)) for p in x.preemptions],
                           finished=None if x.finished is None else x.finished - t0)
                   for x in r.records if x.arrival >= t0]
        ids = {x.request.id for x in records}
        return replace(r, workload=Workload(tuple(x.request for x in records)), records=records,
                       batches=[replace(b, start=b.start - t0, end=b.end - t0) for b in r.batches if b.start >= t0],
                       kv=[(t - t0, v) for t, v in r.kv if t >= t0],
                       slot_map=[(t - t0, tuple(h for h in held if h[1] in ids)) for t, held in r.slot_map if t >= t0],
                       cache_map=[(t - t0, n, held) for t, n, held in r.cache_map if t >= t0],
                       started=r.started + t0, elapsed=r.elapsed - t0)

    def refused_since(self, t0: float) -> list[Refusal]:
        with self._lock:
            return [replace(x, time=x.time - t0) for x in self.refusals if x.time >= t0]

    def snapshot(self) -> WorkloadResult:
        """A copy to draw or summarize from another thread (the records' Traces are shared, still growing)."""
        with self._lock:
            r = self.result
            records = list(r.records)
            return replace(r, workload=Workload(tuple(x.request for x in records)), records=records,
                           batches=list(r.batches), kv=list(r.kv), slot_map=list(r.slot_map),
                           pool=dict(r.pool or {}) or None, elapsed=self.clock.now())


def watch_counts(records, refusals) -> dict:
    """Every request of a watch in one state: refused (never reached the engine), waiting for a KV slot, gone
    while waiting (its client left first), or admitted -- then running, done, cancelled (client gone) or failed;
    `preempted` counts the admitted ones whose KV was dropped once or more (they are running or ended too).

    >>> from types import SimpleNamespace as S
    >>> recs = [S(admitted=0.1, stop_reason="eos", preemptions=[1]), S(admitted=0.2, stop_reason=None, preemptions=[]),
    ...         S(admitted=0.3, stop_reason=StopReason.CANCELLED, preemptions=[]),
    ...         S(admitted=None, stop_reason=None, preemptions=[]),
    ...         S(admitted=None, stop_reason=StopReason.CANCELLED, preemptions=[])]
    >>> watch_counts(recs, [Refusal(1.0, 429, "too many"), Refusal(1.0, 429, "too many")])
    {'requests': 7, 'admitted': 3, 'done': 1, 'running': 1, 'hung up': 1, 'failed': 0, 'waiting': 1, 'gone waiting': 1, 'refused': 2, 'preempted': 1}
    """
    admitted = [r for r in records if r.admitted is not None]
    queued = [r for r in records if r.admitted is None]
    return {"requests": len(records) + len(refusals), "admitted": len(admitted),
            "done": sum(r.stop_reason in COMPLETED for r in admitted),
            "running": sum(r.stop_reason is None for r in admitted),
            "hung up": sum(r.stop_reason == StopReason.CANCELLED for r in admitted),
            "failed": sum(r.stop_reason == StopReason.ERROR for r in admitted),
            "waiting": sum(r.stop_reason is None for r in queued),
            "gone waiting": sum(r.stop_reason is not None for r in queued),
            "refused": len(refusals), "preempted": sum(bool(r.preemptions) for r in admitted)}


def alone_line(records) -> str:
    """The room's runs that took a CPU slot alone, outside the engine loop, counted with their reasons ("": none).

    >>> from types import SimpleNamespace as S
    >>> alone_line([S(alone="speculative decoding"), S(alone=""), S(alone="speculative decoding")])
    '2 ran alone, outside the engine loop on a CPU slot of their own (speculative decoding ×2)'
    >>> alone_line([S(alone="another backend")]), alone_line([S(alone="")])
    ('1 ran alone, outside the engine loop on a CPU slot of its own (another backend ×1)', '')
    """
    reasons = Counter(r.alone for r in records if r.alone)
    n = sum(reasons.values())
    if not n:
        return ""
    return (f"{n} ran alone, outside the engine loop on a CPU slot of {'its' if n == 1 else 'their'} own ("
            + ", ".join(f"{why} ×{k}" for why, k in reasons.most_common()) + ")")


def watch_line(counts: dict, slots: int | None = None) -> str:
    """watch_counts in one line, every state counted (a zero too), the KV slots the engine holds where known.

    >>> print(watch_line({'requests': 7, 'admitted': 3, 'done': 1, 'running': 1, 'hung up': 1, 'failed': 0,
    ...                   'waiting': 1, 'gone waiting': 1, 'refused': 2, 'preempted': 1}, slots=32))
    7 requests: 3 admitted (1 done · 1 running · 1 cancelled: client gone) · 1 waiting for a KV slot (the engine holds 32 at once) · 1 left while waiting · 2 refused · 1 preempted
    """
    failed = f" · {counts['failed']} failed" if counts["failed"] else ""
    holds = f" (the engine holds {slots} at once)" if slots else ""
    gone = f" · {counts['gone waiting']} left while waiting" if counts["gone waiting"] else ""
    return (f"{counts['requests']} request{'s' * (counts['requests'] != 1)}: {counts['admitted']} admitted ({counts['done']} done · "
            f"{counts['running']} running · {counts['hung up']} cancelled: {CLIENT_GONE}{failed}) · "
            f"{counts['waiting']} waiting for a KV slot{holds}{gone} · {counts['refused']} refused · "
            f"{counts['preempted']} preempted")


def endpoint_text(endpoint: dict) -> str:
    """The endpoint's limits and context in one paragraph (ClientTraffic.endpoint: `limits`, then once loaded
    `context`, `window`, `slots`, `prefix_cache`).

    >>> from types import SimpleNamespace as S   # an api.ApiLimits' defaults
    >>> limits = S(in_flight_per_client=4, in_flight=64, prompt_tokens=896, max_tokens=512, tokens_per_minute=20_000)
    >>> print(endpoint_text({"limits": limits, "context": 1024, "window": 8192, "slots": 32}))
    The endpoint's limits: each client at most 4 requests in flight (64 from all clients), 896 prompt tokens and 512 new tokens a request, 20,000 tokens a minute; context 1,024 tokens a request, prompt and answer together (the model's window is 8,192). The engine holds 32 requests at once (a KV slot each); the others in flight wait in its queue for a free slot. A request over a limit is refused: 400 (too long), 429 (too many; it says when to retry).
    >>> print(endpoint_text({"limits": limits, "context": 1024, "window": 8192, "slots": 8,
    ...                      "prefix_cache": 4096}).split(". ")[2])
    Prefix caching on: 4,096 positions of KV (256 blocks of 16) kept for prompts that begin alike; a response's usage.prompt_tokens_details.cached_tokens says how many prompt tokens were copied, not computed
    """
    limits = endpoint.get("limits")
    if limits is None:
        return "The endpoint's limits: not known (no service has described them)."
    context = endpoint.get("context")
    where = (f"context {context:,} tokens a request, prompt and answer together (the model's window is "
             f"{endpoint['window']:,}). The engine holds {endpoint['slots']} requests at once (a KV slot each); the "
             "others in flight wait in its queue for a free slot" if context
             else "context and KV slots: not known until the model has loaded")
    cache = endpoint.get("prefix_cache")
    caching = ("" if cache is None else "Prefix caching off. " if not cache else
               f"Prefix caching on: {cache:,} positions of KV ({cache // BLOCK_SIZE} blocks of {BLOCK_SIZE}) kept for "
               "prompts that begin alike; a response's usage.prompt_tokens_details.cached_tokens says how many prompt "
               "tokens were copied, not computed. ")
    return (f"The endpoint's limits: each client at most {limits.in_flight_per_client} requests in flight "
            f"({limits.in_flight} from all clients), {limits.prompt_tokens:,} prompt tokens and {limits.max_tokens:,} "
            f"new tokens a request, {limits.tokens_per_minute:,} tokens a minute; {where}. {caching}A request over a "
            "limit is refused: 400 (too long), 429 (too many; it says when to retry).")
