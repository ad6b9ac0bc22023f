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
              first, else the earliest of the client holding the fewest slots); with a budget, only if the
              blocks its prefill writes fit, and no one overtakes a request that does not fit. With prefix
              caching its lookup (`Lookup`) says how much of its prompt the cache holds: that is copied, not
              computed
  3. decode -- every request whose prompt is read is one row of the decode pass
  4. prefill -- at most `prefill_chunk` prompt tokens are computed per iteration, the prompt with the fewest
              tokens left first (equals in slot order); before its chunk a request copies the cached blocks
              that continue what it has read
  5. wait  -- everyone else waits, and the plan says why (WaitReason)

The plan looks ahead in one place: the blocks an earlier chunk of the iteration completes count as cached for
the chunks after it, so requests admitted together share what the first of them reads. When a full prefix
cache cannot keep such a block (every block held), the later request copies what is there and computes its
planned tokens from where the copy ends: the plan's token budget holds either way.

Each request's wait before it takes a slot is accounted by reason (`Sequence.waited`, batcher.py): from its
arrival to the first plan that sees it, it waits for the iteration in progress; from each plan to the next, for
the reason that plan gave. A request's admission carries its cache lookup, the place to record why it missed.

>>> from types import SimpleNamespace as S
>>> from .slots import KVBudget, SlotTable
>>> def seq(name, prompt, client="", arrived=0.0):
...     return S(id=name, ids=[1] * prompt, prefill_ids=[1] * prompt, hashes=[], read=0, length=0, held=[],
...              caching=True, blocks=0, preemptions=0, client=client, arrived=arrived, cancelled=False)
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

Left out: priorities, and a plan spanning several iterations (each iteration plans afresh from its state).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..trace import TextEnum
from .prefix_cache import block_hashes
from .slots import SlotTable


class WaitReason(TextEnum):
    """Why a request made no progress in an iteration. Serialized as its string."""
    IN_PROGRESS = "the iteration in progress"       # it came after the plan was made: the next plan decides
    NO_SLOT = "no free slot"                        # every KV slot is held
    TURN = "its turn among clients"                 # a slot came free, and went to a request of a client holding
    #                                                 fewer slots, though it came later (the per-client rule)
    KV_BUDGET = "no KV budget"                      # a slot is free, the blocks its prefill writes are not
    BEHIND = "behind a request short of KV budget"  # no one overtakes the request whose turn it is
    PREFILL_BUDGET = "prefill tokens spent"         # it holds a slot; the iteration's prompt tokens went to
    #                                                 prompts with fewer tokens left

    @property
    def holds_slot(self) -> bool:
        """Whether a request waiting for this holds a KV slot (its prompt is being read) or waits in the queue."""
        return self is WaitReason.PREFILL_BUDGET


class PreemptReason(TextEnum):
    """Why a request's KV was dropped. Serialized as its string."""
    KV_BUDGET = "no KV block for the next position"   # an older decoding request needed a block, none was free


@dataclass(frozen=True, slots=True)
class Lookup:
    """What the prefix cache held of a request's prompt at its admission, in positions."""
    tokens: int    # positions its prefill reads (its prompt; after a preemption, every token it had too)
    limit: int     # the most the cache could give: whole blocks, leaving at least one token to compute
    found: int     # positions found cached, from position 0: copied into its slot instead of computed

    @property
    def computed(self) -> int:
        return self.tokens - self.found


@dataclass(frozen=True, slots=True)
class Admission:
    seq: object
    blocks: int = 0                # KV budget blocks it takes (0: no budget)
    lookup: Lookup | None = None   # None: no prefix cache


@dataclass(frozen=True, slots=True)
class Chunk:
    """A prompt read in one prefill pass: `copied` positions of cached blocks first, then `tokens` computed."""
    seq: object
    start: int            # the first position computed (after the copy)
    tokens: int
    copied: int = 0       # positions copied from the prefix cache just before (blocks another chunk completed)

    @property
    def end(self) -> int:
        return self.start + self.tokens


@dataclass(frozen=True, slots=True)
class Victim:
    """A request preempted: its KV dropped, to be read again from `context` (its prompt and the tokens it made)."""
    seq: object
    reason: PreemptReason
    needed_by: object     # the decoding request whose next block it made room for (it may be the victim itself)
    positions: int        # positions of KV dropped
    context: tuple        # what its prefill reads when it is admitted again
    hashes: tuple = ()    # the hash chain of context's full blocks (with prefix caching)


@dataclass(frozen=True, slots=True)
class Growth:
    seq: object
    blocks: int           # KV budget blocks a decoding request takes for its next position


@dataclass(frozen=True, slots=True)
class Wait:
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
            out.append("admit " + ", ".join(name(a.seq) + (f" ({a.lookup.found} of {a.lookup.tokens} cached)"
                                                            if a.lookup and a.lookup.found else "")
                                            for a in self.admitted))
        if self.decode:
            out.append("decode " + ", ".join(name(s) for s in self.decode))
        out += [f"prefill {name(c.seq)}: " + (f"copy {c.copied}, " if c.copied else "")
                + f"tokens {c.start}-{c.end} ({c.tokens})" for c in self.prefill]
        out += [f"{name(w.seq)} waits: {w.reason}" for w in self.waits]
        return out


def next_turn(waiting: list, held: Counter, resuming=frozenset()):
    """Whose turn it is to take a slot: a preempted request at the front (`resuming`: preempted in the plan being
    made: their ids), else the earliest request of the client holding the fewest slots (`held`: client -> slots;
    min keeps the first of equals: first come, first served)."""
    first = waiting[0]
    if first.preemptions or id(first) in resuming:
        return first
    return min(waiting, key=lambda s: held[s.client])


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
    """A slot holder's prompt as the plan advances it (the state is not touched)."""
    seq: object
    ids: list
    hashes: list
    read: int
    held: int       # cached blocks it holds
    caching: bool


def make_plan(waiting: list, running: list, table: SlotTable, budget, cache, prefill_chunk: int,
              now: float) -> Plan:
    """Decide one iteration from the batcher's state (its queue, the requests holding slots in order of admission,
    the slot table, the KV budget and the prefix cache, None where off); nothing is changed, no model runs."""
    holding = table.decoding + table.prefilling
    cancelled = [s for s in waiting if s.cancelled] + [s for s in holding if s.cancelled]
    queue = [s for s in waiting if not s.cancelled]
    running = [s for s in running if not s.cancelled]
    removed = [s for s in holding if s.cancelled]
    free = table.free() + len(removed)
    spare = budget.free + sum(s.blocks for s in removed) if budget else 0
    view = _CacheView(cache) if cache is not None else None

    preempted, growth, victims = [], [], {}
    if budget:
        decoding = {id(s) for s in table.decoding}
        for seq in list(running):
            if seq not in running or id(seq) not in decoding:
                continue
            need = budget.blocks_for(seq.length + 1) - seq.blocks
            while need > spare:
                victim = running.pop()
                context = tuple(victim.ids) + tuple(s.token_id for s in victim.trace.steps)
                hashes = tuple(block_hashes(context, cache.block_size)) if cache is not None else ()
                if view is not None:   # its full blocks are kept in the cache as it leaves
                    view.keep(context, hashes, 0, victim.length // cache.block_size)
                preempted.append(Victim(victim, PreemptReason.KV_BUDGET, seq, victim.length, context, hashes))
                victims[id(victim)] = preempted[-1]
                removed.append(victim)
                free, spare = free + 1, spare + victim.blocks
                queue.insert(0, victim)
                if victim is seq:
                    break
            else:
                spare -= need
                if need:
                    growth.append(Growth(seq, need))

    admitted, short, readings = [], None, []
    held = Counter(s.client for s in running)
    while queue and free:
        seq = next_turn(queue, held, victims)
        victim = victims.get(id(seq))
        ids = list(victim.context) if victim else seq.prefill_ids
        hashes = list(victim.hashes) if victim else seq.hashes
        need = budget.blocks_for(len(ids)) if budget else 0
        if need > spare:
            short = seq   # it waits, and so does everyone behind it
            break
        spare -= need
        queue.remove(seq)
        free -= 1
        held[seq.client] += 1
        lookup = None
        if view is not None:
            found = view.found(ids, hashes, 0, len(ids) - 1) * cache.block_size
            lookup = Lookup(len(ids), (len(ids) - 1) // cache.block_size * cache.block_size, found)
        admitted.append(Admission(seq, need, lookup))
        readings.append(_Reading(seq, ids, hashes, lookup.found if lookup else 0,
                                 lookup.found // cache.block_size if lookup else 0, True))

    gone = {id(s) for s in removed}
    decode = tuple(s for s in table.decoding if id(s) not in gone)
    readings = [_Reading(s, s.prefill_ids, s.hashes, s.read, len(s.held), s.caching)
                for s in _prefilling_after(table, removed)] + readings
    chunks, left = [], prefill_chunk
    for r in sorted(readings, key=lambda r: len(r.ids) - r.read):
        if left <= 0:
            break
        copied = 0
        if view is not None and r.caching and r.read == r.held * cache.block_size:
            copied = view.found(r.ids, r.hashes, r.held, len(r.ids) - 1) * cache.block_size
            r.read += copied
            r.held += copied // cache.block_size
        tokens = min(left, len(r.ids) - r.read)
        chunks.append(Chunk(r.seq, r.read, tokens, copied))
        r.read += tokens
        left -= tokens
        if view is not None and r.caching:   # its completed blocks join the cache for the chunks after it
            view.keep(r.ids, r.hashes, r.held, r.read // cache.block_size)
            r.held = max(r.held, min(r.read // cache.block_size, len(r.hashes)))

    read = {id(c.seq) for c in chunks}
    waits = [Wait(s, _queue_reason(s, short, admitted)) for s in queue]
    waits += [Wait(r.seq, WaitReason.PREFILL_BUDGET) for r in readings if id(r.seq) not in read]
    return Plan(now, tuple(cancelled), tuple(preempted), tuple(growth), tuple(admitted), decode, tuple(chunks),
                tuple(waits))


def _queue_reason(seq, short, admitted: list) -> WaitReason:
    """Why `seq` is left in the queue: `short` is the request whose turn it was and whose blocks did not fit."""
    if short is not None:
        return WaitReason.KV_BUDGET if seq is short else WaitReason.BEHIND
    if any(a.seq.arrived > seq.arrived and a.seq.client != seq.client for a in admitted):
        return WaitReason.TURN
    return WaitReason.NO_SLOT
