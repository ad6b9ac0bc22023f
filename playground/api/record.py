"""Requests from clients as a live record: a WorkloadResult that never ends, for the Serve tab to draw.

    traffic = ClientTraffic(keep_s=600)
    service = ApiService(get_engine, config, observer=traffic)   # the engine loop tells it what happens
    result = traffic.snapshot()     # a WorkloadResult of the last keep_s seconds: records, batches, KV, slot map
    summarize(result)               # p50/p95 per class (short/long by prompt tokens), as for any workload

Each request becomes a RequestRecord the moment it is submitted (its arrival), with its class by prompt
tokens (SHORT_MAX_TOKENS); the loop's iterations then fill in admission, prefill chunks, the Steps (its
Trace) and its end, and the scheduler's batches, KV bytes in use and slot map -- exactly as the Serve
tab's continuous-batching scheduler records a workload (serve.continuous.record_iteration, the same code), so
every chart of that tab can draw it. Times are seconds since the record started. What is older than
`keep_s` (finished requests, batches, KV samples) is dropped as the record grows.

Left out: prompts (a Trace here has token ids, no text) and which client sent a request (the records
carry no client name, so a shared view shows no one's identity).
"""
from __future__ import annotations

import threading
from dataclasses import replace

from ..serve.continuous import describe_pool, record_iteration
from ..serve.records import RequestRecord, WorkloadResult
from ..serve.schedulers import Clock
from ..serve.workload import Request, Workload

SHORT_MAX_TOKENS = 256   # a prompt of more tokens is "long"
LABEL = "requests from clients (OpenAI-compatible endpoint; continuous batching on ONNX Runtime)"


def request_class(prompt_tokens: int) -> str:
    """The request's class on the Serve tab, by its prompt tokens.

    >>> request_class(40), request_class(900)
    ('short', 'long')
    """
    return "short" if prompt_tokens <= SHORT_MAX_TOKENS else "long"


class ClientTraffic:
    def __init__(self, keep_s: float = 600.0, source: str = "the API's engine loop"):
        self.keep_s = keep_s
        self.clock = Clock()
        self.result = WorkloadResult("clients", LABEL, source, Workload(()), [], started=self.clock.start,
                                     admitted_means="the engine loop gave the request a KV slot")
        self.in_loop: dict[int, RequestRecord] = {}   # id(seq) -> its record, while the loop holds it
        self._next_id = 0
        self._lock = threading.Lock()

    # --- the engine loop's observer

    def submitted(self, ticket) -> None:
        seq = ticket.seq
        with self._lock:
            request = Request(self._next_id, request_class(len(seq.ids)), "", seq.settings.max_new_tokens,
                              self.clock.now(), seq.trace.ignore_eos)
            self._next_id += 1
            record = RequestRecord(request, prompt_tokens=len(seq.ids))
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

    def _forget(self, before: float) -> None:
        r = self.result
        if r.batches and r.batches[0].end >= before:
            return
        r.records = [x for x in r.records if x.finished is None or x.finished >= before]
        r.batches = [b for b in r.batches if b.end >= before]
        r.kv = [p for p in r.kv if p[0] >= before]
        r.slot_map = [p for p in r.slot_map if p[0] >= before]

    # --- readers

    def snapshot(self) -> WorkloadResult:
        """A copy to draw or summarize from another thread (the records' Traces are shared, still growing)."""
        with self._lock:
            r = self.result
            records = list(r.records)
            return replace(r, workload=Workload(tuple(x.request for x in records)), records=records,
                           batches=list(r.batches), kv=list(r.kv), slot_map=list(r.slot_map),
                           pool=dict(r.pool or {}) or None, elapsed=self.clock.now())
