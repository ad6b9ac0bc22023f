"""One iteration's decisions as a value: the `Plan` the batcher makes from its state before any forward pass.

    plan = batcher.plan()      # decide: reads the state, changes nothing, runs no model
    plan.admitted              # who takes a KV slot, and what the prefix cache held of its prompt (`Lookup`)
    plan.decode                # who is one row of the decode pass
    plan.prefill               # whose prompt is read this iteration: from which position, how many tokens
    plan.waits                 # who waits, and why (a WaitReason)
    plan.preempted             # whose KV is dropped under the KV budget, and for whom
    batcher.step()             # decide (a plan) -> run (its passes) -> apply (a token per request)

vLLM v1 keeps `schedule()`, which returns a `SchedulerOutput`, apart from `update_from_output()`; nano-vLLM's
`step()` is schedule, run, postprocess. Here `make_plan` reads the batcher's state and says what the iteration
will do, and `Batcher.step` (batcher.py) carries it out and applies each pass's logits. The rules, in the order
the plan applies them:

  0. end   -- cancelled requests end, waiting or holding a slot
  1. grow  -- (with a KV budget) each decoding request, oldest first, takes the block its next position needs;
              short of blocks, the most recently admitted request is preempted (it may be the one asking) until
              it fits, as vLLM v1 does: its KV is dropped, and it goes back to the front of the queue, to read
              its prompt and every token it made again
  2. admit -- while a slot is free, the request whose turn it is takes it (`next_turn`: a preempted request
              first, else among the requests of the highest priority -- 0, unless a request asked to yield --
              the earliest of the client holding the fewest slots); with a budget, only if the
              blocks its prefill writes fit, and no one overtakes a request that does not fit. With prefix
              caching its lookup (`Lookup`) says how much of its prompt the cache holds: that is copied, not
              computed
  3. decode -- every request whose prompt is read is one row of the decode pass
  4. prefill -- at most `prefill_chunk` prompt tokens are computed per iteration, the highest priority first,
              then the prompt with the fewest tokens left (equals in slot order); before its chunk a request copies the cached blocks
              that continue what it has read
  5. wait  -- everyone else waits, and the plan says why (WaitReason)

The plan looks ahead in two places. The blocks an earlier chunk of the iteration completes count as cached for
the chunks after it, so requests admitted together share what the first of them reads; when a full prefix cache
cannot keep such a block, the later request copies what is there and computes from where the copy ends, within
the iteration's token budget (then its chunk reads fewer positions than planned). And prompts with as many
tokens left are read in slot order as the iteration begins (a request that ends in the decode pass moves the
others only after the plan is made).

Each request's wait before it takes a slot is accounted by reason (`Sequence.waited`, batcher.py): from its
arrival to the first plan that sees it, it waits for the iteration in progress; from each plan to the next, for
the reason that plan gave. A request's admission carries its cache lookup and, for a conversation's turn, the
record of why the rest of its prompt is computed (cache_miss.py; the batcher adds it: `Admission.turn`).

>>> from types import SimpleNamespace as S
>>> from .slots import SlotTable
>>> def seq(name, prompt, client="", arrived=0.0):
...     return S(id=name, ids=[1] * prompt, prefill_ids=[1] * prompt, hashes=[], read=0, length=0, held=[],
...              caching=True, blocks=0, preemptions=0, client=client, arrived=arrived, cancelled=False, priority=0)
>>> table = SlotTable(S(slots=2, move=None, swap=None))
>>> waiting = [seq("doc", 300), seq("q", 20, arrived=1.0), seq("late", 8, arrived=2.0)]
>>> plan = make_plan(waiting, [], table, None, None, prefill_chunk=128, now=5.0)
>>> print("\\n".join(plan.lines()))
admit doc, q
prefill q: tokens 0-20 (20)
prefill doc: tokens 0-108 (108)
late waits: no free slot
>>> plan.reason(waiting[2]), plan.prefill[1].tokens
(<WaitReason.NO_SLOT: 'no free slot'>, 108)

A request's priority is vLLM's: 0 by default, a larger number later. Here it only yields (a request may ask for
1 or more, never less than 0): an attendee's Serve workload in a served room (Room.joined_share) yields to the
people's requests, in admission and in prefill; every request holding a slot is a row of the decode pass alike.

>>> bg = seq("workload", 20, client="attendee", arrived=0.0); bg.priority = 1
>>> people = [seq("alice", 40, client="a", arrived=1.0), seq("bob", 60, client="b", arrived=2.0)]
>>> plan = make_plan([bg] + people, [], SlotTable(S(slots=2, move=None, swap=None)), None, None, 128, now=5.0)
>>> print("\\n".join(plan.lines()))
admit alice, bob
prefill alice: tokens 0-40 (40)
prefill bob: tokens 0-60 (60)
workload waits: a request of a higher priority

Left out: preempting a running request for a higher priority (vLLM's priority policy does), and a plan spanning
several iterations (each iteration plans afresh from its state).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from ..trace import TextEnum
from .prefix_cache import block_hashes
from .slots import SlotTable


class WaitReason(TextEnum):
    """Why a request made no progress in an iteration. Serialized as its string."""
    IN_PROGRESS = "the iteration in progress"       # it came after the plan was made: the next plan decides
    NO_SLOT = "no free slot"                        # every KV slot is held
    TURN = "its turn among clients"                 # a slot came free, and went to a request of a client holding
    #                                                 fewer slots, though it came later (the per-client rule)
    PRIORITY = "a request of a higher priority"     # it asked to yield (priority 1 or more): a slot went to a
    #                                                 request of a smaller priority number, though it came later
    KV_BUDGET = "no KV budget"                      # a slot is free, the blocks its prefill writes are not
    BEHIND = "behind a request short of KV budget"  # no one overtakes the request whose turn it is
    PREFILL_BUDGET = "prefill tokens spent"         # it holds a slot; the iteration's prompt tokens went to
    #                                                 prompts ahead of it (a higher priority, or fewer tokens left)
    MACHINE = "the machine"                         # no plan is made: work that needs the machine alone holds it
    #                                                 (the engine loop's pause: Batcher.pause, never a plan's reason)

    @property
    def holds_slot(self) -> bool:
        """Whether a request waiting for this holds a KV slot (its prompt is being read) or waits in the queue."""
        return self is WaitReason.PREFILL_BUDGET


class PreemptReason(TextEnum):
    """Why a request's KV was dropped. Serialized as its string."""
    KV_BUDGET = "no KV block for the next position"   # an older decoding request needed a block, none was free


class Lookup(NamedTuple):
    """What the prefix cache held of a request's prompt at its admission, in positions."""
    tokens: int    # positions its prefill reads (its prompt; after a preemption, every token it had too)
    limit: int     # the most the cache could give: whole blocks, leaving at least one token to compute
    found: int     # positions found cached, from position 0: copied into its slot instead of computed

    @property
    def computed(self) -> int:
        return self.tokens - self.found


class Admission(NamedTuple):
    seq: object
    blocks: int = 0                # KV budget blocks it takes (0: no budget)
    lookup: Lookup | None = None   # None: no prefix cache
    turn: object = None            # a conversation's turn: its record of the lookup, why the rest is computed
    #                                (conversations.TurnRecord; batcher.py adds it to the plan); None: no record


class Chunk(NamedTuple):
    """A prompt read in one prefill pass: `copied` positions of cached blocks first, then `tokens` computed."""
    seq: object
    start: int            # the first position computed (after the copy)
    tokens: int
    copied: int = 0       # positions copied from the prefix cache just before (blocks another chunk completed)

    @property
    def end(self) -> int:
        return self.start + self.tokens


class Victim(NamedTuple):
    """A request preempted: its KV dropped, to be read again from `context` (its prompt and the tokens it made)."""
    seq: object
    reason: PreemptReason
    needed_by: object     # the decoding request whose next block it made room for (it may be the victim itself)
    positions: int        # positions of KV dropped
    context: tuple        # what its prefill reads when it is admitted again
    hashes: tuple = ()    # the hash chain of context's full blocks (with prefix caching)


class Growth(NamedTuple):
    seq: object
    blocks: int           # KV budget blocks a decoding request takes for its next position


class Wait(NamedTuple):
    seq: object
    reason: WaitReason


@dataclass(frozen=True)
class Plan:
    """What one iteration does, decided before it runs (each list in the order it is carried out)."""
    at: float                              # the batcher's clock when it was made
    cancelled: tuple = ()                  # requests that end now (waiting ones first)
    preempted: tuple[Victim, ...] = ()
    growth: tuple[Growth, ...] = ()
    admitted: tuple[Admission, ...] = ()
    decode: tuple = ()                     # rows of the decode pass (it carries them in slot order)
    prefill: tuple[Chunk, ...] = ()
    waits: tuple[Wait, ...] = ()

    def reason(self, seq) -> WaitReason | None:
        """Why `seq` waits in this iteration; None when it is admitted, decoded or read (or not in the plan)."""
        return next((w.reason for w in self.waits if w.seq is seq), None)

    def lines(self, name=lambda seq: str(seq.id)) -> list[str]:
        """The plan in words, a line per decision (`name`: how a request is called)."""
        out = [f"end {name(s)} (cancelled)" for s in self.cancelled]
        out += [f"preempt {name(v.seq)} ({v.reason}: {name(v.needed_by)}'s), {v.positions} positions dropped"
                for v in self.preempted]
        if self.admitted:
            out.append("admit " + ", ".join(name(a.seq) + _admission_note(a) for a in self.admitted))
        if self.decode:
            out.append("decode " + ", ".join(name(s) for s in self.decode))
        out += [f"prefill {name(c.seq)}: " + (f"copy {c.copied}, " if c.copied else "")
                + f"tokens {c.start}-{c.end} ({c.tokens})" for c in self.prefill]
        out += [f"{name(w.seq)} waits: {w.reason}" for w in self.waits]
        return out


def _admission_note(a: Admission) -> str:
    """What the lookup found, and a conversation's turn's cause: " (48 of 110 cached: template rewrite)"."""
    found = f"{a.lookup.found} of {a.lookup.tokens} cached" if a.lookup and a.lookup.found else ""
    cause = a.turn.record.cause.value if a.turn is not None else ""
    return f" ({': '.join(x for x in (found, cause) if x)})" if found or cause else ""


def next_turn(waiting: list, held: Counter, resuming=frozenset()):
    """Whose turn it is to take a slot: a preempted request at the front (`resuming`: preempted in the plan being
    made: their ids), else among the highest priority (the smallest number) the earliest request of the client
    holding the fewest slots (`held`: client -> slots; min keeps the first of equals: first come, first served)."""
    first = waiting[0]
    if first.preemptions or id(first) in resuming:
        return first
    return min(waiting, key=lambda s: (s.priority, held[s.client]))


class _NoKV:
    """The KV pool as far as a scratch SlotTable needs it: a slot count, and moves that copy nothing."""

    def __init__(self, slots: int):
        self.slots = slots

    def move(self, *_):
        pass

    def swap(self, *_):
        pass


def _prefilling_after(table: SlotTable, removed: list) -> list:
    """The prefilling requests in slot order once `removed` have left the table (its moves reorder them)."""
    if not removed:
        return list(table.prefilling)
    scratch = SlotTable(_NoKV(table.kv.slots))
    scratch.decoding, scratch.prefilling = list(table.decoding), list(table.prefilling)
    for seq in removed:
        scratch.remove(seq)
    return scratch.prefilling


class _CacheView:
    """The prefix cache as the plan's passes will find it: what it holds now, and the blocks the plan's earlier
    steps complete (a preempted request's context, a chunk's full blocks) counted as kept."""

    def __init__(self, cache):
        self.cache, self.size, self.kept = cache, cache.block_size, {}

    def found(self, ids, hashes, first: int, limit: int) -> int:
        """Blocks of `ids`' chain held from block `first` on, at most `limit` positions in all."""
        n = first
        while n < min(len(hashes), limit // self.size):
            block = self.cache.blocks.get(hashes[n])
            tokens = tuple(ids[n * self.size:(n + 1) * self.size])
            if (block.tokens if block is not None else self.kept.get(hashes[n])) != tokens:
                break
            n += 1
        return n - first

    def keep(self, ids, hashes, first: int, last: int) -> None:
        for i in range(first, min(last, len(hashes))):
            self.kept.setdefault(hashes[i], tuple(ids[i * self.size:(i + 1) * self.size]))


@dataclass
class _Reading:
    """A slot holder's prompt as the plan advances it."""
    seq: object
    ids: list
    hashes: list
    read: int
    held: int       # cached blocks it holds
    caching: bool


class _Draft:
    """The batcher's state as the plan being made changes it: copies of the queue and the slot holders, the free
    slots and budget blocks, the prefix cache's view; the state itself is never touched."""

    def __init__(self, waiting, running, table: SlotTable, budget, cache):
        self.table, self.budget, self.cache = table, budget, cache
        self.queue, self.running = list(waiting), list(running)
        self.free, self.spare = table.free(), budget.free if budget else 0
        self.view = _CacheView(cache) if cache is not None else None
        self.size = cache.block_size if cache is not None else 0
        self.removed, self.victims, self.readings = [], {}, []   # let go of their slots; id -> Victim; admitted

    def leave(self, seq) -> None:
        self.running.remove(seq)
        self.removed.append(seq)
        self.free, self.spare = self.free + 1, self.spare + seq.blocks

    def end_cancelled(self) -> tuple:
        """0. The cancelled end: waiting ones first, then slot holders in slot order."""
        waiting = [s for s in self.queue if s.cancelled]
        holding = [s for s in self.table.decoding + self.table.prefilling if s.cancelled]
        self.queue = [s for s in self.queue if not s.cancelled]
        for seq in holding:
            self.leave(seq)
        return tuple(waiting + holding)

    def grow(self) -> tuple[tuple, tuple]:
        """1. Each decoding request, oldest first, takes the block its next position needs; short of blocks, the
        most recently admitted request is preempted until it fits (or it is preempted itself)."""
        preempted, growth = [], []
        decoding = {id(s) for s in self.table.decoding}
        for seq in list(self.running):
            if seq not in self.running or id(seq) not in decoding:
                continue
            need = self.budget.blocks_for(seq.length + 1) - seq.blocks
            while need > self.spare:
                preempted.append(self.preempt(self.running[-1], seq))
                if preempted[-1].seq is seq:
                    break
            else:
                self.spare -= need
                if need:
                    growth.append(Growth(seq, need))
        return tuple(preempted), tuple(growth)

    def preempt(self, victim, needed_by) -> Victim:
        context = tuple(victim.ids) + tuple(s.token_id for s in victim.trace.steps)
        hashes = tuple(block_hashes(context, self.size)) if self.view is not None else ()
        if self.view is not None:   # its full blocks are kept in the cache as it leaves
            self.view.keep(context, hashes, 0, victim.length // self.size)
        self.leave(victim)
        self.queue.insert(0, victim)
        self.victims[id(victim)] = Victim(victim, PreemptReason.KV_BUDGET, needed_by, victim.length, context, hashes)
        return self.victims[id(victim)]

    def admit(self) -> tuple[tuple, object]:
        """2. While a slot is free, the request whose turn it is takes it if the blocks its prefill writes fit;
        (the admissions, the request whose blocks did not fit or None)."""
        if not (self.queue and self.free):
            return (), None
        admitted, held = [], Counter(s.client for s in self.running)
        while self.queue and self.free:
            seq = next_turn(self.queue, held, self.victims)
            victim = self.victims.get(id(seq))
            ids = list(victim.context) if victim else seq.prefill_ids
            hashes = list(victim.hashes) if victim else seq.hashes
            need = self.budget.blocks_for(len(ids)) if self.budget else 0
            if need > self.spare:
                return tuple(admitted), seq   # it waits, and so does everyone behind it
            self.spare, self.free = self.spare - need, self.free - 1
            self.queue.remove(seq)
            held[seq.client] += 1
            lookup = None
            if self.view is not None:
                limit = (len(ids) - 1) // self.size * self.size
                lookup = Lookup(len(ids), limit, self.view.found(ids, hashes, 0, limit) * self.size)
            admitted.append(Admission(seq, need, lookup))
            found = lookup.found if lookup else 0
            self.readings.append(_Reading(seq, ids, hashes, found, found // self.size if lookup else 0, True))
        return tuple(admitted), None

    def decode(self) -> tuple:
        """3. Every request whose prompt is read, and still holds its slot."""
        if not self.removed:
            return tuple(self.table.decoding)
        gone = {id(s) for s in self.removed}
        return tuple(s for s in self.table.decoding if id(s) not in gone)

    def prefill(self, prefill_chunk: int) -> tuple[Chunk, ...]:
        """4. Prompt chunks within the token budget, the fewest tokens left first (equals in slot order, the
        admitted after the others); before its chunk a request copies the cached blocks that continue it."""
        self.readings = [_Reading(s, s.prefill_ids, s.hashes, s.read, len(s.held), s.caching)
                         for s in _prefilling_after(self.table, self.removed)] + self.readings
        chunks, left = [], prefill_chunk
        for r in sorted(self.readings, key=lambda r: (r.seq.priority, len(r.ids) - r.read)):
            if left <= 0:
                break
            copied = 0
            if self.view is not None and r.caching and r.read == r.held * self.size:
                copied = self.view.found(r.ids, r.hashes, r.held, len(r.ids) - 1) * self.size
                r.read, r.held = r.read + copied, r.held + copied // self.size
            tokens = min(left, len(r.ids) - r.read)
            chunks.append(Chunk(r.seq, r.read, tokens, copied))
            r.read, left = r.read + tokens, left - tokens
            if self.view is not None and r.caching:   # its completed blocks join the cache for the chunks after it
                self.view.keep(r.ids, r.hashes, r.held, r.read // self.size)
                r.held = max(r.held, min(r.read // self.size, len(r.hashes)))
        return tuple(chunks)

    def waits(self, admitted: tuple, short, chunks: tuple) -> tuple[Wait, ...]:
        """5. Why each request left in the queue waits, then each slot holder whose prompt got no chunk. Left in
        the queue with no request short of budget, a request waits for a slot; for a higher priority if a later
        request of a smaller priority number took one, for its turn if a later request of another client did."""
        if short is not None:
            queued = [Wait(s, WaitReason.KV_BUDGET if s is short else WaitReason.BEHIND) for s in self.queue]
        else:
            latest = {}   # client -> the latest arrival among its requests admitted now
            for a in admitted:
                latest[a.seq.client] = max(latest.get(a.seq.client, a.seq.arrived), a.seq.arrived)

            def reason(s) -> WaitReason:
                if any(a.seq.priority < s.priority and a.seq.arrived > s.arrived for a in admitted):
                    return WaitReason.PRIORITY
                if any(c != s.client and t > s.arrived for c, t in latest.items()):
                    return WaitReason.TURN
                return WaitReason.NO_SLOT
            queued = [Wait(s, reason(s)) for s in self.queue]
        read = {id(c.seq) for c in chunks}
        return tuple(queued) + tuple(Wait(r.seq, WaitReason.PREFILL_BUDGET) for r in self.readings
                                     if id(r.seq) not in read)


def make_plan(waiting: list, running: list, table: SlotTable, budget, cache, prefill_chunk: int,
              now: float) -> Plan:
    """Decide one iteration from the batcher's state: its queue, the requests holding slots (in order of
    admission), the slot table, the KV budget and the prefix cache (None where off). Nothing is changed and no
    model runs; `now` is the plan's time."""
    draft = _Draft(waiting, running, table, budget, cache)
    cancelled = draft.end_cancelled()
    preempted, growth = draft.grow() if budget else ((), ())
    admitted, short = draft.admit()
    decode = draft.decode()
    chunks = draft.prefill(prefill_chunk)
    return Plan(now, cancelled, preempted, growth, admitted, decode, chunks, draft.waits(admitted, short, chunks))

