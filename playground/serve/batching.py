"""The `batching` scheduler: a workload's requests join our Batcher (batcher.py) as they arrive, and each iteration
is written into the workload's record -- the Serve tab's continuous batching on ONNX Runtime.

    result = ContinuousBatching(onnx_engine, BatchConfig(slots=16)).run(workload)   # SCHEDULERS["batching"]
    pool_capacity(lengths, window), pool_slots(16, capacity, backend)   # the pool sized for a workload or a room
    describe_pool(result, batcher, 16); record_iteration(it, batcher, records, result, clock)

The harness (schedulers.py's `Scheduler`) releases each request at its arrival time (a session's later turn
when its predecessor has ended and its delay passed: sessions.Releases); this one adds it to the batcher and steps the batcher while anything waits or runs. When a session's later turn is released, the prefix cache's state of
its predecessor's chain is measured (`gap_blocks`: held, evictable, evicted by reason) into its record. `record_iteration` writes what an iteration did
into a `WorkloadResult` -- admissions, prefill chunks, cached copies, preemptions, ends, the pass, KV in use and
the slot map -- and is the same code for the live record of a room's clients (api/record.py).

Left out: the scheduler itself (batcher.py: its loop; plan.py: its decisions; slots.py, prefix_cache.py).
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..backends.onnx_batch import check_batchable, position_bytes
from .batcher import BatchConfig, Batcher, Iteration
from .prefix_cache import BLOCK_SIZE, block_hashes
from .records import BatchStep, Preemption
from .schedulers import Scheduler, fail, progress_line, request_ids, settings_for
from .sessions import Releases, trace_session

MAX_POOL_BYTES = 2 * 2**30   # the slots are fewer when slots x capacity would take more memory than this


def pool_slots(asked: int, capacity: int, backend) -> int:
    """The KV slots a pool of `capacity` positions each gets: the `asked` number, fewer when that would take more
    memory than MAX_POOL_BYTES, at least one (the Serve tab's scheduler and the endpoint size their pools here)."""
    return max(1, min(asked, MAX_POOL_BYTES // (capacity * position_bytes(backend))))


def pool_capacity(lengths: list[int], window: int, step: int = 64) -> int:
    """Positions per slot for requests of these total lengths (prompt + new tokens): the longest, rounded up.

    >>> pool_capacity([40 + 48, 845 + 48], 2048)
    896
    """
    return min(window, max(step, math.ceil(max(lengths, default=1) / step) * step))


class ContinuousBatching(Scheduler):
    """The Serve tab's scheduler on an ONNX engine: a workload's requests join the Batcher as they arrive."""
    name, label = "batching", "continuous batching (ours: KV slots, chunked prefill; ONNX Runtime)"

    def __init__(self, source, config: BatchConfig | None = None):
        super().__init__(source)
        backend = getattr(source, "backend", None)
        if backend is None:
            raise ValueError("continuous batching runs a local ONNX backend; pick onnx-gguf4 or onnx as its source")
        check_batchable(backend)
        self.config = c = (config or BatchConfig()).validate()
        extras = [f"prefix cache {c.prefix_cache:,} positions" if c.prefix_cache else "",
                  session_hold(c) if c.prefix_cache and c.session_share else "",
                  f"KV budget {c.kv_budget:,} positions" if c.kv_budget else ""]
        self.label = " · ".join([self.label, *(x for x in extras if x)])   # A and B say how they differ

    def _run(self, result, clock, report):
        engine, backend = self.source, self.source.backend
        prompts = {}
        for record in result.records:
            try:
                prompts[record.request.id] = request_ids(engine, record.request)
            except ValueError as exc:
                fail(record, clock, exc)
                record.finished = record.arrival
        lengths = [len(ids) + r.request.max_new_tokens for r in result.records if r.request.id in prompts
                   for _, ids in [prompts[r.request.id]]]
        capacity = pool_capacity(lengths, int(backend.context_window))
        slots = pool_slots(self.config.slots, capacity, backend)
        batcher = Batcher(engine, replace(self.config, slots=slots), capacity)
        describe_pool(result, batcher, self.config.slots)
        clock.restart(result)   # the requests arrive on a clock that starts once the pool is ready to take them
        records, releases = {}, Releases(result.records)
        pending = sorted((r for r in result.records if r.request.id in prompts), key=lambda r: r.arrival)
        try:
            while not report.cancelled and (pending or batcher.busy()):
                for record in releases.take_due(pending, clock.now()):
                    record.gap_blocks = gap_blocks(batcher, releases.by_id.get(record.request.after))
                    text, ids = prompts[record.request.id]
                    record.prompt_tokens = len(ids)
                    try:
                        # it arrived at its time, maybe during the iteration just run: that wait is its own
                        seq = batcher.add(ids, settings_for(record.request), record.request.id, record.request.prompt,
                                          text, record.request.ignore_eos, arrived=clock.start + record.arrival,
                                          session=trace_session(record.request.session))
                    except ValueError as exc:   # e.g. it could never fit the KV budget: it ends, the others run
                        fail(record, clock, exc)
                        continue
                    records[id(seq)] = record
                if not batcher.busy():
                    first = releases.next(pending)
                    if first is None:   # what is left waits for turns that never ran
                        break
                    clock.wait_until(first[1], report.event)
                    continue
                record_iteration(batcher.step(), batcher, records, result, clock)
                report(*progress_line(result))
        finally:
            if batcher.busy():
                batcher.cancel_all()
                record_iteration(batcher.step(), batcher, records, result, clock)
            result.pool["moves"] = batcher.table.moves
            result.pool.update(looked_up=batcher.looked_up, cached=batcher.cached, preemptions=batcher.preemptions,
                               evicted=batcher.cache.evicted if batcher.cache is not None else 0)


def session_hold(c: BatchConfig) -> str:
    """How a config holds sessions' blocks across their gaps, for its label.

    >>> session_hold(BatchConfig(session_share=0.5, session_ttl=30)), session_hold(BatchConfig(session_share=0.5))
    ('sessions held 30 s, at most 50% of it', 'sessions held only for a TTL they ask, at most 50% of it')
    """
    held = f"held {c.session_ttl:g} s" if c.session_ttl else "held only for a TTL they ask"
    return f"sessions {held}, at most {c.session_share:.0%} of it"


def gap_blocks(batcher: Batcher, previous) -> dict | None:
    """Where the blocks `previous` (a session turn's record, ended) kept in the prefix cache are now
    (PrefixCache.chain_state: held, evictable, evicted by reason, missing): its prompt and what it generated, up to the
    last position it wrote KV for, as the batcher kept and held them. None: no cache, no previous turn, or none ran."""
    if batcher.cache is None or previous is None or previous.trace is None:
        return None
    trace = previous.trace
    context = [*trace.prompt_ids, *(i for i in trace.output_ids if i is not None)]
    return batcher.cache.chain_state(block_hashes(context[:len(context) - 1]))


def describe_pool(result, batcher: Batcher, asked_slots: int) -> None:
    """Say in `result` what KV pool the batcher holds: its slots and their size, and what the KV figure means."""
    kv = batcher.kv
    result.kv_unit, result.kv_total = "bytes", kv.nbytes
    result.kv_note = f"KV positions in use, of {kv.slots} slots × {kv.capacity} positions"
    result.pool = {"kind": "slots", "slots": kv.slots, "capacity": kv.capacity, "bytes": kv.nbytes,
                   "position_bytes": kv.position_bytes, "prefill_chunk": batcher.config.prefill_chunk,
                   "asked_slots": asked_slots, "max_bytes": MAX_POOL_BYTES, "moves": 0, "block_size": BLOCK_SIZE,
                   "prefix_cache_blocks": batcher.cache.capacity if batcher.cache is not None else 0,
                   "kv_budget": batcher.budget.blocks * BLOCK_SIZE if batcher.budget else 0,
                   "looked_up": 0, "cached": 0, "preemptions": 0, "evicted": 0}


def record_iteration(it: Iteration, batcher: Batcher, records: dict, result, clock) -> None:
    """Write what one iteration did into a WorkloadResult: admissions, prefill chunks, ends, the pass, KV bytes in
    use and the slot map (`records`: id(seq) -> its RequestRecord; times on `clock`, a serve.schedulers.Clock)."""
    for seq, at, positions in it.preempted:
        records[id(seq)].preemptions.append(Preemption(clock.since(at), len(seq.trace.steps), positions))
    for wait in it.plan.waits if it.plan is not None else ():
        if not wait.reason.holds_slot and id(wait.seq) in records:
            records[id(wait.seq)].waiting_for = str(wait.reason)
    for seq in it.admitted:
        record = records[id(seq)]
        record.waiting_for = None
        if record.admitted is None:
            record.admitted, record.trace = clock.since(seq.admitted), seq.trace
        else:
            record.preemptions[-1].resumed = clock.since(seq.joined)
    for seq, start, end, n in it.copies:
        record = records[id(seq)]
        if record.preemptions:
            p = record.preemptions[-1]
            p.cached += n
            p.copy = (p.copy[0] if p.copy else clock.since(start), clock.since(end))
        else:
            record.cache_copies.append((clock.since(start), clock.since(end), n))
    for seq, start, end, n in it.chunks:
        record = records[id(seq)]
        passes = record.preemptions[-1].chunks if record.preemptions else record.chunks
        passes.append((clock.since(start), clock.since(end), n))
    for seq in it.finished:
        record = records[id(seq)]
        record.stop_reason, record.finished = seq.trace.stop_reason, clock.since(it.end)
    end = clock.since(it.end)
    held = batcher.holders()
    result.batches.append(BatchStep(clock.since(it.start), end, it.decoded + len(it.chunks),
                                    sum(n for *_, n in it.chunks), it.decoded, len(held)))
    result.kv.append((end, sum(s.length for _, s in held) * batcher.kv.position_bytes))
    result.slot_map.append((end, tuple((slot, records[id(s)].request.id, s.length) for slot, s in held)))
    if batcher.cache is not None:   # the prefix cache's blocks, and which of them each running request holds
        state = (len(batcher.cache), tuple((records[id(s)].request.id, tuple(b.id for b in s.held))
                                           for s in batcher.running if s.held))
        if not result.cache_map or result.cache_map[-1][1:] != state:
            result.cache_map.append((end, *state))


