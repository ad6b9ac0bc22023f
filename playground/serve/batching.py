"""Continuous batching on ONNX Runtime: the scheduler of the Serve lesson, ours, one loop written to be read.

    batcher = Batcher(onnx_engine, BatchConfig(slots=16, prefill_chunk=128), capacity=1024)
    Batcher(onnx_engine, BatchConfig(prefix_cache=4096, kv_budget=2048))   # prefix caching; a smaller memory
    seq = batcher.add(prompt_ids, settings)          # waits for a KV slot
    while batcher.busy():
        it = batcher.step()                          # one iteration: admit, decode, prefill, free
    seq.trace                                        # its Steps, as a request run alone has them
    ContinuousBatching(onnx_engine).run(workload)    # the Serve tab's scheduler (a workload's arrivals)

One iteration (anchors: nano-vLLM's scheduler, llama.cpp server's slots, Sarathi's chunked prefill, vLLM v1):
  0. reserve -- (with a KV budget) every decoding request takes the block its next position needs; when
                none is left, the most recently admitted request is preempted: its KV is dropped and it
                goes back to the front of the queue, to be recomputed (its prompt and every token it made)
  1. admit   -- waiting requests take the free KV slots (and, with a budget, the blocks their prefill will
                write; the next that does not fit waits, and so do those behind it: no one overtakes, so a
                preempted request resumes before later arrivals). Whose turn: a preempted request's, else the
                earliest of the client holding the fewest slots (first come first served among one client's
                requests, and among requests of no named client): a client with many requests takes turns
                with the others instead of every slot. With
                prefix caching, its longest cached prefix is copied into its slot (the copy) and only the
                rest is prefilled
  2. decode  -- one call of the decode graph: every decoding request is one row, each at its own length
  3. prefill -- prompts are read in chunks, at most `prefill_chunk` prompt tokens per iteration, the request
                with the fewest prompt tokens left first: a question is not stuck behind a document, and a
                document's prefill holds the decoding requests up for one chunk at a time, not its whole prompt;
                with prefix caching, each block of 16 prompt positions a chunk completes joins the cache, and
                before its chunk a request copies any cached blocks that continue what it has read (requests
                that arrived together share what the first of them reads)
  4. free    -- a request that ended (EOS, its token budget, the context window, cancel) leaves at once; its
                slot is free for the next iteration

`step()` reads as decide (0 and 1, and dropping the cancelled) -> run (2 and 3: the forward passes) -> apply
(each pass's logits as it ends: a token sampled per request, its Step, the stop rule, and 4).

Each Step is stamped when its token is sampled, says how many rows its forward pass carried and which
graph ran it, and its KV bytes are its slot's positions in use (KVSlots: measured from the buffers'
shapes and element type). Sampling is per request (its own settings and seed, the Engine's Sampler), so
a greedy request gives the tokens it gives alone: the decode graph's rows are bit-identical to one row.

Left out: priorities, swapping a preempted request's KV out instead of recomputing it, caching the blocks a
request generates (a preempted request's whole context is cached, so its recompute copies it back), and the
torch backend (transformers' manager batches there: batching_torch.py).
"""
from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterator

import torch

from ..backends.onnx_batch import (DECODE_GRAPH, PREFILL_GRAPH, KVSlots, check_batchable, decode_rows, position_bytes,
                                   prefill_chunk)
from ..config import GenerationSettings
from ..sampling import Detokenizer, Sampler
from ..next_token import sampled_step, stop_reason
from ..trace import Step, StopReason, Trace
from .prefix_cache import BLOCK_SIZE, PrefixCache, block_hashes
from .records import BatchStep, Preemption
from .schedulers import Scheduler, fail, progress_line, request_ids, settings_for
from .slots import KVBudget, SlotTable

MAX_POOL_BYTES = 2 * 2**30   # the slots are fewer when slots x capacity would take more memory than this


@dataclass(frozen=True)
class BatchConfig:
    slots: int = 16              # KV slots: requests held at once (decoding or prefilling)
    prefill_chunk: int = 128     # prompt tokens read per iteration (a longer prompt is read in chunks)
    prefix_cache: int = 0        # positions of KV the prefix cache may keep (blocks of 16); 0: no prefix caching
    kv_budget: int = 0           # positions the running requests may hold in all; 0: no limit but the slots

    def validate(self) -> "BatchConfig":
        if not 1 <= self.slots <= 64 or not 1 <= self.prefill_chunk <= 4096:
            raise ValueError(f"KV slots must be 1-64 and the prefill chunk 1-4096 tokens; got {self.slots} and "
                             f"{self.prefill_chunk}")
        if not 0 <= self.prefix_cache <= 1 << 20:
            raise ValueError(f"the prefix cache must be 0-{1 << 20} positions (0: off); got {self.prefix_cache}")
        if self.kv_budget and not BLOCK_SIZE <= self.kv_budget <= 1 << 20:
            raise ValueError(f"the KV budget must be 0 (no limit) or {BLOCK_SIZE}-{1 << 20} positions; "
                             f"got {self.kv_budget}")
        return self


@dataclass(eq=False)
class Sequence:
    """One request inside the batcher: its prompt, sampler, cache length and Trace."""
    id: object
    ids: list[int]                 # the prompt's token ids
    settings: GenerationSettings
    trace: Trace
    sampler: Sampler
    detok: Detokenizer
    eos: frozenset
    read: int = 0                  # prompt tokens read into its slot so far
    length: int = 0                # positions its slot's cache holds
    last: int | None = None        # its latest token: the next decode step's input
    arrived: float = 0.0           # perf_counter() when it was added (queued)
    admitted: float | None = None  # perf_counter() when it first took a slot (its trace's t0)
    t_prev: float = 0.0
    cancelled: bool = False
    prefill_ids: list[int] = field(default_factory=list)   # what its prefill reads: the prompt (after a
    #                                                         preemption: the prompt and every token it made)
    hashes: list[int] = field(default_factory=list)        # the hash chain of prefill_ids' full blocks
    held: list = field(default_factory=list)   # the prefix cache's blocks it holds (its prefix, first block first)
    caching: bool = True           # its completed blocks still extend its chain in the cache
    blocks: int = 0                # KV budget blocks it holds
    joined: float = 0.0            # perf_counter() of its latest admission
    preemptions: int = 0
    client: str = ""               # who sent it (a page session, an API key): slots are shared out between clients

    @property
    def done(self) -> bool:
        return self.trace.stop_reason is not None


@dataclass
class Iteration:
    """What one loop iteration did (perf_counter times): what the scheduler records and draws."""
    start: float
    end: float = 0.0
    admitted: list[Sequence] = field(default_factory=list)
    decoded: int = 0                                   # rows of the batched decode step
    copies: list[tuple[Sequence, float, float, int]] = field(default_factory=list)   # cached prefix copied in
    preempted: list[tuple[Sequence, float, int]] = field(default_factory=list)       # (seq, when, positions dropped)
    chunks: list[tuple[Sequence, float, float, int]] = field(default_factory=list)   # (seq, start, end, tokens)
    steps: list[tuple[Sequence, Step]] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)


class Batcher:
    """The loop's state: requests waiting, the slot table (who is prefilling, who decoding), the KV pool."""

    def __init__(self, engine, config: BatchConfig | None = None, capacity: int | None = None,
                 clock=time.perf_counter):
        self.engine, self.backend, self.clock = engine, engine.backend, clock
        check_batchable(self.backend)
        self.config = (config or BatchConfig()).validate()
        window = int(self.backend.context_window)
        self.capacity = min(int(capacity or window), window)
        self.kv = KVSlots(self.backend, self.config.slots, self.capacity)
        self.table = SlotTable(self.kv)
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []   # holding a slot, in order of admission: the last is preempted first
        self.cache = PrefixCache(self.config.prefix_cache // BLOCK_SIZE) if self.config.prefix_cache else None
        self.budget = KVBudget(self.config.kv_budget) if self.config.kv_budget else None
        self.looked_up = self.cached = self.preemptions = 0   # prompt tokens looked up, found cached; preemptions
        self.lock = threading.Lock()   # add and cancel may come from other threads than step's

    # --- requests in and out

    def add(self, ids: list[int], settings: GenerationSettings, request_id=None, prompt: str = "", text: str = "",
            ignore_eos: bool = False, client: str = "") -> Sequence:
        """Queue a request (its prompt's token ids; `client`: who sent it); ValueError when it cannot fit a slot."""
        settings = settings.validate()
        if not ids or len(ids) >= self.capacity:
            raise ValueError(f"prompt is {len(ids)} tokens; a KV slot holds {self.capacity} positions "
                             "(leave room for at least one new token)")
        most = min(len(ids) + settings.max_new_tokens, self.capacity)
        if self.budget and self.budget.blocks_for(most) > self.budget.blocks:
            raise ValueError(f"prompt and new tokens need up to {most} KV positions; the KV budget holds "
                             f"{self.budget.blocks * BLOCK_SIZE}: it could never finish")
        b = self.backend
        trace = Trace(prompt, text, list(ids), settings, f"{b.name} · continuous batching", b.device, b.dtype,
                      b.model_name, b.kv_shape, ignore_eos=ignore_eos, replay=self.engine.replay)
        sampler = Sampler(settings)
        trace.seed = sampler.seed
        seq = Sequence(request_id, list(ids), settings, trace, sampler, Detokenizer(b.tokenizer, ids),
                       frozenset() if ignore_eos else b.eos_token_ids, prefill_ids=list(ids),
                       hashes=block_hashes(ids) if self.cache is not None else [], arrived=self.clock(),
                       client=client)
        with self.lock:
            self.waiting.append(seq)
        return seq

    def cancel(self, seq: Sequence) -> None:
        """End `seq` at the next iteration (waiting or running)."""
        seq.cancelled = True

    def cancel_all(self) -> None:
        with self.lock:
            for seq in self.waiting + self.table.decoding + self.table.prefilling:
                seq.cancelled = True

    def ahead(self, seq: Sequence) -> int | None:
        """How many waiting requests take a KV slot before `seq` (as things stand); None once it holds one (or has
        ended)."""
        with self.lock:
            return next((i for i, s in enumerate(self.turns()) if s is seq), None)

    def turns(self) -> list[Sequence]:
        """The waiting requests in the order they would take free slots (the admit rule, each pick counted as a
        slot its client holds)."""
        held = Counter(s.client for s in self.running)
        order, left = [], list(self.waiting)
        while left:
            seq = self._next(left, held)
            order.append(seq)
            left.remove(seq)
            held[seq.client] += 1
        return order

    @staticmethod
    def _next(waiting: list[Sequence], held: Counter) -> Sequence:
        """Whose turn it is: a preempted request at the front, else the earliest request of the client holding
        the fewest slots (min keeps the first of equals: first come, first served)."""
        return waiting[0] if waiting[0].preemptions else min(waiting, key=lambda s: held[s.client])

    def busy(self) -> bool:
        return bool(self.waiting or self.table.decoding or self.table.prefilling)

    def holders(self) -> list[tuple[int, Sequence]]:
        return self.table.holders()

    # --- one iteration

    def step(self) -> Iteration:
        """One iteration, as decide -> run -> apply: the scheduling decisions (who leaves, who keeps its blocks,
        who takes a slot), then each forward pass (the decode graph's rows, each prefill chunk) with its
        logits applied as it ends (a token sampled per request, its Step recorded, the stop rule)."""
        it = Iteration(self.clock())
        self._decide(it)
        if self.table.decoding:
            self._apply(self._decode(it), it)
        for done in self._prefill(it):   # a chunk that ends a prompt: its first token, before the next chunk
            self._apply([done], it)
        it.end = self.clock()
        return it

    # --- decide: who leaves, who keeps its blocks, who takes a slot

    def _decide(self, it: Iteration) -> None:
        self._drop_cancelled(it)
        if self.budget:
            self._reserve(it)
        self._admit(it)

    def _drop_cancelled(self, it: Iteration) -> None:
        with self.lock:
            for seq in [s for s in self.waiting if s.cancelled]:
                self.waiting.remove(seq)
                seq.trace.stop_reason = StopReason.CANCELLED
                it.finished.append(seq)
        for seq in [s for s in self.table.decoding + self.table.prefilling if s.cancelled]:
            self._finish(seq, StopReason.CANCELLED, it)

    def _reserve(self, it: Iteration) -> None:
        """Each decoding request, oldest first, takes the block its next position needs; short of blocks, the
        most recently admitted request is preempted (possibly the one asking) until it fits (vLLM v1's rule)."""
        for seq in list(self.running):
            if seq not in self.running or seq not in self.table.decoding:
                continue
            need = self.budget.blocks_for(seq.length + 1) - seq.blocks
            while need > self.budget.free:
                victim = self.running[-1]
                self._preempt(victim, it)
                if victim is seq:
                    break
            else:
                self.budget.take(need)
                seq.blocks += need

    def _preempt(self, seq: Sequence, it: Iteration) -> None:
        """Drop `seq`'s KV and put it back at the front of the queue; its prefill will read its whole context.
        With prefix caching its full blocks are kept in the cache first, so the recompute copies them back."""
        context = seq.ids + [s.token_id for s in seq.trace.steps]
        if self.cache is not None:
            slot = self.table.slot(seq)
            for i, h in enumerate(block_hashes(context[:seq.length])):
                kept = self.cache.insert(h, context[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE],
                                         lambda i=i: self.kv.read(slot, i * BLOCK_SIZE, BLOCK_SIZE))
                if kept is None:
                    break
        it.preempted.append((seq, self.clock(), seq.length))
        self._let_go(seq)
        seq.prefill_ids, seq.hashes = context, block_hashes(context) if self.cache is not None else []
        seq.read = seq.length = 0
        seq.preemptions += 1
        self.preemptions += 1
        with self.lock:
            self.waiting.insert(0, seq)

    def _let_go(self, seq: Sequence) -> None:
        """Give back what `seq` holds: its slot, its budget blocks, its hold on cached blocks."""
        self.table.remove(seq)
        self.running.remove(seq)
        if self.budget:
            self.budget.give(seq.blocks)
        if self.cache is not None:
            self.cache.release(seq.held)
        seq.blocks, seq.held, seq.caching = 0, [], True

    def _admit(self, it: Iteration) -> None:
        with self.lock:
            while self.waiting and self.table.free():
                seq = self._next(self.waiting, Counter(s.client for s in self.running))
                if self.budget:   # its prefill will write len(prefill_ids) positions
                    need = self.budget.blocks_for(len(seq.prefill_ids))
                    if need > self.budget.free:
                        break     # it waits, and so does everyone behind it
                    self.budget.take(need)
                    seq.blocks = need
                self.waiting.remove(seq)
                seq.joined = self.clock()
                if seq.admitted is None:
                    seq.admitted = seq.t_prev = seq.joined
                    seq.trace.queued = seq.admitted - seq.arrived
                self.table.add(seq)
                self.running.append(seq)
                it.admitted.append(seq)
                if self.cache is not None:
                    if not seq.preemptions:   # a request's first admission: what the hit rate counts
                        self.looked_up += len(seq.ids)
                    self._copy_prefix(seq, it)

    def _copy_prefix(self, seq: Sequence, it: Iteration) -> None:
        """Copy the cached blocks that continue what `seq` has read (whole blocks, leaving at least one token to
        compute) into its slot. Called at admission and again before each of its chunks: a request admitted
        while another was still reading the same beginning finds those blocks once the other has read them."""
        if seq.read != len(seq.held) * BLOCK_SIZE or not seq.caching:
            return   # it has computed past its cached chain: its next blocks are its own
        hit = self.cache.match(seq.prefill_ids, seq.hashes, len(seq.prefill_ids) - 1)[len(seq.held):]
        if not hit:
            return
        start, slot, first = self.clock(), self.table.slot(seq), seq.read
        for i, block in enumerate(hit):
            self.kv.write(slot, first + i * BLOCK_SIZE, block.kv)
        self.cache.hold(hit)
        seq.held += hit
        n = len(hit) * BLOCK_SIZE
        seq.read = seq.length = first + n
        if not seq.preemptions:
            self.cached += n
            seq.trace.cached_tokens += n
        it.copies.append((seq, start, self.clock(), n))

    def _cache_blocks(self, seq: Sequence) -> None:
        """Keep the blocks `seq`'s prefill has completed in the prefix cache (a copy each) and hold them."""
        slot = self.table.slot(seq)
        while seq.caching and len(seq.held) < seq.read // BLOCK_SIZE:
            i = len(seq.held)
            block = self.cache.insert(seq.hashes[i], seq.prefill_ids[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE],
                                      lambda: self.kv.read(slot, i * BLOCK_SIZE, BLOCK_SIZE))
            if block is None:   # the cache is full of blocks running requests hold: the chain stops here
                seq.caching = False
                break
            self.cache.hold([block])
            seq.held.append(block)

    # --- run: the forward passes; each gives (request, its logits row, rows in the pass, graph) to apply

    def _decode(self, it: Iteration) -> list[tuple]:
        rows = list(self.table.decoding)   # slot r holds rows[r]
        logits = decode_rows(self.backend, self.kv, [s.last for s in rows], [s.length for s in rows])
        it.decoded = len(rows)
        for seq in rows:   # every cache grew by one position before any request leaves (and moves another)
            seq.length += 1
        return [(seq, row, len(rows), DECODE_GRAPH) for seq, row in zip(rows, logits)]

    def _prefill(self, it: Iteration) -> Iterator[tuple]:
        """The iteration's prefill chunks, one pass each; yields each request whose prompt a chunk finishes."""
        budget = self.config.prefill_chunk
        for seq in sorted(self.table.prefilling, key=lambda s: len(s.prefill_ids) - s.read):
            if budget <= 0:
                break
            if self.cache is not None:
                self._copy_prefix(seq, it)
            chunk = seq.prefill_ids[seq.read:seq.read + budget]
            start = self.clock()
            logits = prefill_chunk(self.backend, self.kv, self.table.slot(seq), chunk, seq.length)
            seq.read += len(chunk)
            seq.length += len(chunk)
            budget -= len(chunk)
            it.chunks.append((seq, start, self.clock(), len(chunk)))
            if self.cache is not None:
                self._cache_blocks(seq)
            if seq.read == len(seq.prefill_ids):   # the prompt is read: its next token, then it decodes with the others
                self.table.start_decoding(seq)
                yield seq, logits, 1, PREFILL_GRAPH

    # --- apply: a token per request from its logits, its Step, the stop rule

    def _apply(self, outputs: list[tuple], it: Iteration) -> None:
        for seq, logits, rows, graph in outputs:
            self._emit(seq, logits, rows, graph, it)

    def _emit(self, seq: Sequence, logits, rows: int, graph: str, it: Iteration) -> None:
        """Sample `seq`'s next token from its logits row, record the Step, and end it if a stop is reached."""
        ids = seq.ids + [s.token_id for s in seq.trace.steps]
        pick = seq.sampler.choose(ids, torch.from_numpy(logits), seq.settings.top_candidates)
        t, wall_ns = self.clock(), time.time_ns()
        steps = seq.trace.steps
        step = sampled_step(steps, pick, seq.detok, time=t - seq.admitted, latency=t - seq.t_prev, seq_len=seq.length,
                            kv_bytes=seq.length * self.kv.position_bytes, wall_ns=wall_ns, rows=rows, graph=graph)
        seq.t_prev, seq.last = t, pick.token
        it.steps.append((seq, step))
        # its context is now the cache's positions and this token; a KV slot holds at most `capacity` of them
        reason = stop_reason(pick.token, made=len(steps), length=seq.length + 1, eos=seq.eos,
                             max_new_tokens=seq.settings.max_new_tokens, window=self.capacity)
        if reason:
            self._finish(seq, reason, it)

    def _finish(self, seq: Sequence, reason: str, it: Iteration) -> None:
        seq.trace.stop_reason = reason
        self._let_go(seq)
        it.finished.append(seq)


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
        records = {}
        pending = sorted((r for r in result.records if r.request.id in prompts), key=lambda r: r.arrival)
        try:
            while not report.cancelled and (pending or batcher.busy()):
                while pending and pending[0].arrival <= clock.now():
                    record = pending.pop(0)
                    text, ids = prompts[record.request.id]
                    record.prompt_tokens = len(ids)
                    try:
                        seq = batcher.add(ids, settings_for(record.request), record.request.id, record.request.prompt,
                                          text, record.request.ignore_eos)
                    except ValueError as exc:   # e.g. it could never fit the KV budget: it ends, the others run
                        fail(record, clock, exc)
                        continue
                    records[id(seq)] = record
                if not batcher.busy():
                    clock.wait_until(pending[0].arrival, report.event)
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
    for seq in it.admitted:
        record = records[id(seq)]
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


