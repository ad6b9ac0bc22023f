"""Continuous batching on ONNX Runtime: the scheduler of the Serve lesson, ours, one loop written to be read.

    batcher = Batcher(onnx_engine, BatchConfig(slots=16, prefill_chunk=128), capacity=1024)
    Batcher(onnx_engine, BatchConfig(prefix_cache=4096, kv_budget=2048))   # prefix caching; a smaller memory
    seq = batcher.add(prompt_ids, settings)          # waits for a KV slot
    batcher.plan()                                   # what the next iteration would do (plan.py), nothing changed
    while batcher.busy():
        it = batcher.step()                          # one iteration: decide, run, apply
    seq.trace                                        # its Steps, as a request run alone has them
    seq.waited                                       # seconds it waited for a slot, by reason
    seq.trace.waits                                  # its arrival -> first token in named parts (wait_parts.py)

One iteration is three calls (anchors: nano-vLLM's scheduler, vLLM v1's schedule() and update_from_output(),
llama.cpp server's slots, Sarathi's chunked prefill):
  decide -- `plan()`: a `Plan` (plan.py) made from the state, changing nothing: who ends (cancelled), who is
            preempted under the KV budget and for whom, who takes a free KV slot and what the prefix cache held
            of its prompt, who decodes, whose prompt is read by how many tokens, and who waits and why
  run    -- `_run(plan)`: carry it out. The bookkeeping first: the cancelled and the preempted let go of their
            slots (a preempted request's KV is dropped, its full blocks kept in the prefix cache, and it goes
            back to the front of the queue, to be recomputed: its prompt and every token it made), the admitted
            take theirs and copy their cached prefix in. Then the passes: one call of the decode graph, every
            decoding request one row at its own length; then each prefill chunk, one call each
  apply  -- `_apply(outputs)`: each pass's logits as the pass ends (a first token before the next chunk runs):
            a token sampled per request, its Step, the stop rule; a request that ended leaves at once, its slot
            free for the next iteration

A request's time from its arrival to its first token is accounted in parts from the same marks (wait_parts.py):
its wait for a slot by the reason each plan gave (`Sequence.waited`; the queue time `trace.queued` is their sum),
the cached prefix copied into its slot, its own chunks computed, pauses while the machine is held by work that runs
alone (`pause`, `resume`: the engine loop's), and what is left: other requests' steps before and between its
chunks. They are written into its Trace (`trace.waits`) at its first token.

The KV slots are one contiguous buffer per layer (slots.py keeps who holds which); with prefix caching, cached
KV lives in blocks named by a hash chain of their tokens (prefix_cache.py) and is copied into a slot, each
block of 16 prompt positions a chunk completes joins the cache, and when a request ends the blocks it generated
join them through the same chain (its whole context's full blocks), so the next turn of a conversation finds its
history up to the last full block; a KV budget in positions stands for a smaller memory.

A chat request that says which conversation it is (`turn`, conversations.py) gets a record of its first lookup:
the plan's admission entry carries it (`Admission.turn`), and the request's Trace keeps it (`trace.cache`,
cache_miss.py, without the decoded tokens: a Trace keeps no client's text): what the cache held for its
conversation, what it found, and why the rest was computed.

Each Step is stamped when its token is sampled, says how many rows its forward pass carried and which
graph ran it, and its KV bytes are its slot's positions in use (KVSlots: measured from the buffers'
shapes and element type). Sampling is per request (its own settings and seed, the Engine's Sampler), so
a greedy request gives the tokens it gives alone: the decode graph's rows are bit-identical to one row.

Left out: priorities, swapping a preempted request's KV out instead of recomputing it (a preempted request's
whole context is cached, so its recompute copies it back), the workload harness (the `batching` scheduler: batching.py) and the torch backend (transformers' manager
batches there: batching_torch.py).
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterator, NamedTuple

import numpy as np
import torch

from ..backends.onnx_batch import DECODE_GRAPH, PREFILL_GRAPH, KVSlots, check_batchable, decode_rows, prefill_chunk
from ..config import GenerationSettings
from ..next_token import sampled_step, stop_reason
from ..sampling import Detokenizer, Sampler
from ..trace import Step, StopReason, Trace
from ..wait_parts import WaitParts
from .conversations import Conversations
from .plan import Admission, Chunk, Plan, Victim, WaitReason, make_plan, next_turn
from .prefix_cache import BLOCK_SIZE, PrefixCache, block_hashes
from .slots import KVBudget, SlotTable


@dataclass(frozen=True)
class BatchConfig:
    slots: int = 16              # KV slots: requests held at once (decoding or prefilling)
    prefill_chunk: int = 128     # prompt tokens read per iteration (a longer prompt is read in chunks)
    prefix_cache: int = 0        # positions of KV the prefix cache may keep (blocks of 16); 0: no prefix caching
    kv_budget: int = 0           # positions the running requests may hold in all; 0: no limit but the slots
    session_share: float = 0.0   # the share of the prefix cache sessions may hold across their gaps (0: none)
    session_ttl: float = 0.0     # seconds a session that asks no TTL is held (0: only those that ask one are)

    def validate(self) -> "BatchConfig":
        if not 1 <= self.slots <= 64 or not 1 <= self.prefill_chunk <= 4096:
            raise ValueError(f"KV slots must be 1-64 and the prefill chunk 1-4096 tokens; got {self.slots} and "
                             f"{self.prefill_chunk}")
        if not 0 <= self.prefix_cache <= 1 << 20:
            raise ValueError(f"the prefix cache must be 0-{1 << 20} positions (0: off); got {self.prefix_cache}")
        if self.kv_budget and not BLOCK_SIZE <= self.kv_budget <= 1 << 20:
            raise ValueError(f"the KV budget must be 0 (no limit) or {BLOCK_SIZE}-{1 << 20} positions; "
                             f"got {self.kv_budget}")
        if not 0.0 <= self.session_share <= 1.0 or not 0.0 <= self.session_ttl <= 86_400.0:
            raise ValueError(f"the sessions' share of the prefix cache must be 0-1 and their default TTL 0-86400 s; "
                             f"got {self.session_share} and {self.session_ttl}")
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
    priority: int = 0              # vLLM's: 0, or more to yield to the others (plan.py: admission, prefill order)
    waited: dict = field(default_factory=dict)   # WaitReason -> seconds it waited in the queue for it, in all
    wait: WaitReason = WaitReason.IN_PROGRESS    # what it waits for now (the latest plan's reason)
    wait_since: float | None = None              # since when: not yet in `waited` (None: it holds a slot)
    turn: object = None            # a chat request's conversations.Turn (its record is made at admission), or None
    session: object = None         # the sessions.Session it named: its blocks are held across the gap after it
    conversation: object = None    # its conversations.TurnRecord, once admitted
    copying: float = 0.0           # until its first token: seconds copying cached blocks into its slot
    computing: float = 0.0         # its own prefill chunks, and its first token sampled
    chunks_read: int = 0           # its prefill chunks, and the prompt tokens they computed
    tokens_read: int = 0
    chunk_end: float = 0.0         # when its latest chunk ended
    paused: float = 0.0            # seconds the engine loop paused while it held a slot (before its first token)
    paused_mark: float = 0.0       # the batcher's `paused_s` when it last took a slot

    @property
    def done(self) -> bool:
        return self.trace.stop_reason is not None

    @property
    def label(self) -> str:
        """What names it in the prefix cache's eviction log: its id and its client."""
        return " · ".join(str(x) for x in (self.id, self.client) if x not in (None, ""))

    def account_wait(self, reason: WaitReason | None, t: float) -> None:
        """Its wait until `t` was for `self.wait`; from `t` on it waits for `reason` (None: it took a slot)."""
        if self.wait_since is not None:
            self.waited[self.wait] = self.waited.get(self.wait, 0.0) + t - self.wait_since
        self.wait_since = t if reason is not None else None
        if reason is not None:
            self.wait = reason


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
    plan: Plan | None = None                           # what it was decided to do


class Output(NamedTuple):
    """One request's part of a forward pass: its logits row, the rows the pass carried, the graph that ran it."""
    seq: Sequence
    logits: np.ndarray
    rows: int
    graph: str


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
        self.cache = PrefixCache(self.config.prefix_cache // BLOCK_SIZE, held_share=self.config.session_share) \
            if self.config.prefix_cache else None
        self.conversations = Conversations() if self.cache is not None else None
        self.budget = KVBudget(self.config.kv_budget) if self.config.kv_budget else None
        self.looked_up = self.cached = self.preemptions = 0   # prompt tokens looked up, found cached; preemptions
        self.paused_s, self.paused_since = 0.0, None   # seconds paused in all (the engine loop's pause), since when
        self.lock = threading.Lock()   # add and cancel may come from other threads than step's

    # --- requests in and out

    def add(self, ids: list[int], settings: GenerationSettings, request_id=None, prompt: str = "", text: str = "",
            ignore_eos: bool = False, client: str = "", turn=None, arrived: float | None = None,
            session=None, priority: int = 0) -> Sequence:
        """Queue a request (its prompt's token ids; `client`: who sent it; `turn`: a chat request's
        conversations.Turn; `session`: the sessions.Session it named; `arrived`: when it arrived on the batcher's clock, if before now: a workload's request
        released between two iterations; `priority`: 0, or more to yield to the others, plan.py); ValueError when
        it cannot fit a slot or its priority is below 0."""
        if not isinstance(priority, int) or priority < 0:
            raise ValueError(f"priority must be a whole number of 0 or more (a request may yield, never go ahead "
                             f"of the others), got {priority!r}")
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
        arrived = self.clock() if arrived is None else arrived
        seq = Sequence(request_id, list(ids), settings, trace, sampler, Detokenizer(b.tokenizer, ids),
                       frozenset() if ignore_eos else b.eos_token_ids, prefill_ids=list(ids),
                       hashes=block_hashes(ids) if self.cache is not None else [], arrived=arrived,
                       client=client, wait_since=arrived, turn=turn, session=session, priority=priority,
                       wait=WaitReason.IN_PROGRESS if self.paused_since is None else WaitReason.MACHINE)
        trace.prefill_chunk = self.config.prefill_chunk
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
            seq = next_turn(left, held)
            order.append(seq)
            left.remove(seq)
            held[seq.client] += 1
        return order

    def pause(self) -> None:
        """No iteration runs until `resume()`: work that needs the machine alone holds it (the engine loop's pause).
        Each request in the queue waits for the machine from now on; one holding a slot counts the pause apart."""
        now = self.clock()
        if self.paused_since is not None:
            return
        self.paused_since = now
        with self.lock:
            waiting = list(self.waiting)
        for seq in waiting:
            seq.account_wait(WaitReason.MACHINE, now)

    def resume(self) -> None:
        """Iterations may run again (the next plan says what each waiting request waits for)."""
        if self.paused_since is not None:
            self.paused_s += self.clock() - self.paused_since
            self.paused_since = None

    def busy(self) -> bool:
        return bool(self.waiting or self.table.decoding or self.table.prefilling)

    def holders(self) -> list[tuple[int, Sequence]]:
        return self.table.holders()

    # --- one iteration

    def step(self) -> Iteration:
        """One iteration: decide (a Plan), run it (its bookkeeping, then each forward pass), and apply each pass's
        logits as it ends (a token sampled per request, its Step recorded, the stop rule)."""
        plan = self.plan()
        it = Iteration(plan.at, plan=plan)
        for outputs in self._run(plan, it):
            self._apply(outputs, it)
        it.end = self.clock()
        return it

    # --- decide

    def plan(self) -> Plan:
        """What the next iteration does, decided from the state as it is now (plan.py); nothing is changed. A
        conversation's turn taking its first slot gets the record of its lookup in its admission entry."""
        with self.lock:
            waiting = list(self.waiting)
        plan = make_plan(waiting, self.running, self.table, self.budget, self.cache, self.config.prefill_chunk,
                         self.clock())
        if self.conversations is None or not any(a.seq.turn is not None and not a.seq.preemptions
                                                 for a in plan.admitted):
            return plan
        decode = self.backend.tokenizer.decode
        return replace(plan, admitted=tuple(
            a._replace(turn=self.conversations.record(a.seq, a.lookup.found, self.cache, decode))
            if a.seq.turn is not None and not a.seq.preemptions else a for a in plan.admitted))

    # --- run: carry the plan out; each forward pass gives its outputs to apply

    def _run(self, plan: Plan, it: Iteration) -> Iterator[list[Output]]:
        for seq in plan.cancelled:
            self._end_cancelled(seq, it)
        for victim in plan.preempted:
            self._preempt(victim, it)
        for growth in plan.growth:
            self.budget.take(growth.blocks)
            growth.seq.blocks += growth.blocks
        with self.lock:
            for admission in plan.admitted:
                self._admit(admission, it)
        for seq, reason in plan.waits:   # a wait's time goes to the reason the plan before gave, when it changes
            if not reason.holds_slot and (reason is not seq.wait or seq.wait_since is None):
                seq.account_wait(reason, plan.at)
        if plan.decode:
            yield self._decode(it)
        left = self.config.prefill_chunk   # prompt tokens the iteration may compute
        for chunk in plan.prefill:
            if left <= 0:
                break
            computed, done = self._prefill(chunk, left, it)
            left -= computed
            if done is not None:   # a chunk that ends a prompt: its first token, before the next chunk
                yield [done]

    def _end_cancelled(self, seq: Sequence, it: Iteration) -> None:
        if seq in self.running:
            self._finish(seq, StopReason.CANCELLED, it)
            return
        with self.lock:
            self.waiting.remove(seq)
        seq.trace.stop_reason = StopReason.CANCELLED
        it.finished.append(seq)

    def _preempt(self, victim: Victim, it: Iteration) -> None:
        """Drop the victim's KV and put it back at the front of the queue; its prefill will read its whole context.
        With prefix caching its full blocks are kept in the cache first, so the recompute copies them back."""
        seq, context = victim.seq, list(victim.context)
        if self.cache is not None:
            self._keep(seq, context, victim.hashes)
        it.preempted.append((seq, self.clock(), seq.length))
        seq.paused += self.paused_s - seq.paused_mark
        self._let_go(seq)
        seq.prefill_ids, seq.hashes = context, list(victim.hashes)
        seq.read = seq.length = 0
        seq.preemptions += 1
        self.preemptions += 1
        with self.lock:
            self.waiting.insert(0, seq)

    def _keep(self, seq: Sequence, context: list[int], hashes) -> None:
        """Keep the full blocks of what `seq`'s slot holds (`context`: its prompt and the tokens it made; `hashes`:
        their chain) in the prefix cache before it lets the slot go; those already kept are touched."""
        slot = self.table.slot(seq)
        for i, h in enumerate(hashes[:seq.length // BLOCK_SIZE]):
            kept = self.cache.insert(h, context[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE],
                                     lambda i=i: self.kv.read(slot, i * BLOCK_SIZE, BLOCK_SIZE), seq.label)
            if kept is None:
                break

    def _let_go(self, seq: Sequence) -> None:
        """Give back what `seq` holds: its slot, its budget blocks, its hold on cached blocks."""
        self.table.remove(seq)
        self.running.remove(seq)
        if self.budget:
            self.budget.give(seq.blocks)
        if self.cache is not None:
            self.cache.release(seq.held)
        seq.blocks, seq.held, seq.caching = 0, [], True

    def _admit(self, admission: Admission, it: Iteration) -> None:
        """`seq` takes a KV slot (and its budget blocks), and copies in the cached prefix its lookup found."""
        seq = admission.seq
        self.waiting.remove(seq)
        if self.budget:
            self.budget.take(admission.blocks)
            seq.blocks = admission.blocks
        seq.joined = self.clock()
        seq.account_wait(None, seq.joined)
        seq.paused_mark = self.paused_s
        if seq.admitted is None:
            seq.admitted = seq.t_prev = seq.joined
            seq.trace.queued = sum(seq.waited.values())   # its arrival -> now, by reason: the same marks
            seq.trace.waits = WaitParts(tuple((str(r), s) for r, s in seq.waited.items() if s > 0),
                                        chunk=self.config.prefill_chunk)   # the rest at its first token
        self.table.add(seq)
        self.running.append(seq)
        it.admitted.append(seq)
        if admission.lookup is not None:
            if not seq.preemptions:   # a request's first admission: what the hit rate counts
                self.looked_up += len(seq.ids)
            self._copy_prefix(seq, admission.lookup.found // BLOCK_SIZE, it)
        if admission.turn is not None:
            seq.conversation = admission.turn
            seq.trace.cache = admission.turn.record.as_dict(text=False)   # a Trace keeps no text

    def _copy_prefix(self, seq: Sequence, blocks: int, it: Iteration) -> None:
        """Copy up to `blocks` cached blocks that continue what `seq` has read into its slot (as many as the cache
        still holds: the plan counted on them)."""
        if not blocks or seq.read != len(seq.held) * BLOCK_SIZE or not seq.caching:
            return   # it has computed past its cached chain: its next blocks are its own
        first = len(seq.held)
        hit = self.cache.match(seq.prefill_ids, seq.hashes, len(seq.prefill_ids) - 1)[first:first + blocks]
        if not hit:
            return
        start, slot, at = self.clock(), self.table.slot(seq), seq.read
        for i, block in enumerate(hit):
            self.kv.write(slot, at + i * BLOCK_SIZE, block.kv)
        self.cache.hold(hit)
        seq.held += hit
        n = len(hit) * BLOCK_SIZE
        seq.read = seq.length = at + n
        if not seq.preemptions:
            self.cached += n
            seq.trace.cached_tokens += n
        end = self.clock()
        if not seq.trace.steps:
            seq.copying += end - start
        it.copies.append((seq, start, end, n))

    def _cache_blocks(self, seq: Sequence) -> None:
        """Keep the blocks `seq`'s prefill has completed in the prefix cache (a copy each) and hold them."""
        slot = self.table.slot(seq)
        while seq.caching and len(seq.held) < seq.read // BLOCK_SIZE:
            i = len(seq.held)
            block = self.cache.insert(seq.hashes[i], seq.prefill_ids[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE],
                                      lambda: self.kv.read(slot, i * BLOCK_SIZE, BLOCK_SIZE), seq.label)
            if block is None:   # the cache is full of blocks running requests hold: the chain stops here
                seq.caching = False
                break
            self.cache.hold([block])
            seq.held.append(block)

    def _decode(self, it: Iteration) -> list[Output]:
        rows = list(self.table.decoding)   # slot r holds rows[r]
        logits = decode_rows(self.backend, self.kv, [s.last for s in rows], [s.length for s in rows])
        it.decoded = len(rows)
        for seq in rows:   # every cache grew by one position before any request leaves (and moves another)
            seq.length += 1
        return [Output(seq, row, len(rows), DECODE_GRAPH) for seq, row in zip(rows, logits)]

    def _prefill(self, chunk: Chunk, left: int, it: Iteration) -> tuple[int, Output | None]:
        """One prefill pass: the chunk's cached blocks copied, then its tokens computed, at most `left`; (tokens
        computed, the output when it ends the prompt: the request then decodes with the others). The chunk computes
        its planned tokens, unless the cache lost a block it counted on: then it computes from where the copy ended
        as far as `left` allows."""
        seq = chunk.seq
        if chunk.copied:
            self._copy_prefix(seq, chunk.copied // BLOCK_SIZE, it)
        tokens = seq.prefill_ids[seq.read:seq.read + left]
        start = self.clock()
        logits = prefill_chunk(self.backend, self.kv, self.table.slot(seq), tokens, seq.length)
        seq.read += len(tokens)
        seq.length += len(tokens)
        end = self.clock()
        it.chunks.append((seq, start, end, len(tokens)))
        if not seq.trace.steps:
            seq.computing += end - start
            seq.chunks_read, seq.tokens_read, seq.chunk_end = seq.chunks_read + 1, seq.tokens_read + len(tokens), end
        if self.cache is not None:
            self._cache_blocks(seq)
        if seq.read < len(seq.prefill_ids):
            return len(tokens), None
        self.table.start_decoding(seq)
        return len(tokens), Output(seq, logits, 1, PREFILL_GRAPH)

    # --- apply: a token per request from its logits, its Step, the stop rule

    def _apply(self, outputs: list[Output], it: Iteration) -> None:
        for out in outputs:
            self._emit(out, it)

    def _emit(self, out: Output, it: Iteration) -> None:
        """Sample the request's next token from its logits row, record the Step, and end it if a stop is reached."""
        seq = out.seq
        ids = seq.ids + [s.token_id for s in seq.trace.steps]
        pick = seq.sampler.choose(ids, torch.from_numpy(out.logits), seq.settings.top_candidates)
        t, wall_ns = self.clock(), time.time_ns()
        steps = seq.trace.steps
        step = sampled_step(steps, pick, seq.detok, time=t - seq.admitted, latency=t - seq.t_prev, seq_len=seq.length,
                            kv_bytes=seq.length * self.kv.position_bytes, wall_ns=wall_ns, rows=out.rows,
                            graph=out.graph)
        seq.t_prev, seq.last = t, pick.token
        it.steps.append((seq, step))
        if step.index == 0:
            self._account_first_token(seq, t)
        # its context is now the cache's positions and this token; a KV slot holds at most `capacity` of them
        reason = stop_reason(pick.token, made=len(steps), length=seq.length + 1, eos=seq.eos,
                             max_new_tokens=seq.settings.max_new_tokens, window=self.capacity)
        if reason:
            self._finish(seq, reason, it)

    def _account_first_token(self, seq: Sequence, t: float) -> None:
        """Write where its time from arrival to its first token (at `t`) went into its Trace: its waits by reason,
        its copies and chunks (the sampling after its last chunk counted in them), the pauses while it held a slot,
        and what is left: other requests' steps."""
        computing = seq.computing + (t - seq.chunk_end if seq.chunks_read else 0.0)
        paused = seq.paused + self.paused_s - seq.paused_mark
        waited = tuple((str(reason), s) for reason, s in seq.waited.items() if s > 0)
        others = (t - seq.arrived) - sum(s for _, s in waited) - seq.copying - computing - paused
        seq.trace.waits = WaitParts(waited, seq.copying, seq.trace.cached_tokens, computing, seq.tokens_read,
                                    seq.chunks_read, self.config.prefill_chunk, paused, max(0.0, others))

    def _finish(self, seq: Sequence, reason: str, it: Iteration) -> None:
        """End `seq` (it holds a slot): with prefix caching its context's full blocks are kept first, the ones it
        generated too, held for its session's TTL, and its conversation remembers it."""
        seq.trace.stop_reason = reason
        if self.cache is not None:
            context = seq.ids + [s.token_id for s in seq.trace.steps]
            hashes = block_hashes(context[:seq.length])
            self._keep(seq, context, hashes)
            if seq.session is not None:
                ttl = seq.session.ttl_s if seq.session.ttl_s is not None else self.config.session_ttl
                self.cache.retain(hashes, seq.session.id, ttl)
            self.conversations.finished(seq)
        self._let_go(seq)
        it.finished.append(seq)
