"""Prefix caching: KV blocks kept after their request ends, found again by a hash chain of their tokens.

    cache = PrefixCache(capacity=256)             # at most 256 blocks of BLOCK_SIZE positions
    hashes = block_hashes(prompt_ids)             # one hash per full block; each covers every earlier block
    hit = cache.match(prompt_ids, hashes, limit=len(prompt_ids) - 1)   # its longest cached prefix, in blocks
    cache.hold(hit)                               # a running request holds them: they cannot be evicted
    cache.insert(hashes[i], tokens, lambda: kv_of_block_i)   # a block its prefill completed (a copy)
    cache.release(hit)                            # it ended: the blocks stay, evictable, least recently used first

As vLLM's automatic prefix caching and nano-vLLM's block manager: a prompt is cut into blocks of 16
positions, and block i is named by a hash of its tokens *and block i-1's hash*, so a block is found only
after the very same tokens from position 0 (attention makes a position's K and V depend on every earlier
token: the same words after another system prompt have other KV). A lookup walks the prompt's hashes
until the first miss; that many blocks are copied into the request's KV slot (batching.py) and only the
rest is prefilled. At least one prompt token is always left to compute: its logits give the first token.

The cache has a budget in blocks. A block a running request holds (`refs` > 0) is never evicted; one no
request holds stays until the space is needed, then the least recently used goes first. A request
releases its chain tail first, so a chain is evicted from its end and its beginning (the most shared
part) stays longest. When every block is held, a new block is simply not kept.

When a request ends, the blocks it generated join its prompt's through the same chain (batching.py): the
next turn of a conversation, whose prompt is the whole history, finds it again up to the last full block
(the last generated token has no KV: 16·⌊(prompt + answer − 1)/16⌋ positions). Each eviction is written in
`evictions`, a log keyed by the evicted block's hash: when (time.time()) and what took the room (the
label of the request whose block was inserted), the newest EVICTION_LOG of them (the oldest dropped
first), so a turn that missed can say its blocks were evicted, when and by whom (cache_miss.py).

A session's blocks are held across its gap (`retain`): when a turn of a session ends, its whole chain is held for
the TTL the session asked (Anthropic's cache_control "5m"/"1h", vLLM's agent_hint; the operator's default for a
session named otherwise), while a tool runs and the model waits. Session-held blocks are evicted last: the least
recently used block that no request and no session holds goes first; only when nothing else is left (pressure)
is a held one evicted anyway. At most `held_share` of the budget is held at once: past it, the oldest holds are
released (a chain from its tail, so its beginning is held longest). Time is the cache's `clock` (time.time
unless given one: a test's fake clock). Each eviction's `reason` says why that block went (`Reason`): least
recently used (never held), TTL expired, released over the held share, or pressure (still held).

>>> now = [0.0]
>>> cache = PrefixCache(capacity=2, block_size=4, clock=lambda: now[0], held_share=0.5)
>>> a, b = cache.insert(1, [1] * 4, lambda: []), cache.insert(2, [2] * 4, lambda: [])
>>> cache.retain([1], "s1", 300.0), cache.held_positions()   # block 1 held 300 s for session s1
(1, 4)
>>> cache.insert(3, [3] * 4, lambda: [], by="req 3") is not None, 1 in cache.blocks, 2 in cache.blocks
(True, True, False)
>>> cache.evictions[2].reason.value, cache.evictions[2].by
('least recently used', 'req 3')
>>> now[0] = 301.0; _ = cache.insert(4, [4] * 4, lambda: [], by="req 4"); cache.evictions[1].reason.value
'TTL expired'

>>> a, b = block_hashes(list(range(40)), 16), block_hashes([7] * 16 + list(range(16, 40)), 16)
>>> len(a), a[1] == b[1]     # two full blocks; block 1 has the same tokens, after another block 0
(2, False)
>>> cache = PrefixCache(capacity=2, block_size=4)
>>> ids = [1, 2, 3, 4, 5, 6, 7, 8, 9]
>>> h = block_hashes(ids, 4)
>>> [cache.insert(x, ids[4 * i:4 * i + 4], lambda: []) is not None for i, x in enumerate(h)]
[True, True]
>>> len(cache.match(ids, h, limit=len(ids) - 1)), len(cache.match([1, 2, 3, 4, 0, 0, 0, 0, 9], block_hashes([1, 2, 3, 4, 0, 0, 0, 0, 9], 4), 8))
(2, 1)
>>> held = cache.match(ids, h, 8); cache.hold(held)
>>> cache.insert(123, [0, 0, 0, 0], lambda: []) is None   # full, and every block held: not kept
True
>>> cache.release(held); cache.insert(123, [0, 0, 0, 0], lambda: [], by="req 9") is not None, len(cache)   # tail evicted
(True, 2)
>>> cache.evictions[h[1]].by
'req 9'

Left out: sharing a block in place (CPU GroupQueryAttention has no block table: a slot is one
contiguous run of positions, so a cached block is copied into it).
"""
from __future__ import annotations

import hashlib
import enum
import itertools
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

import numpy as np

BLOCK_SIZE = 16   # positions per block (vLLM's default on GPUs)
EVICTION_LOG = 4096   # evictions remembered (by block hash), the newest; about 600 KB at most


def chain_hash(previous: int, tokens) -> int:
    """A block's name: a 64-bit hash of the previous block's name and this block's token ids."""
    h = hashlib.blake2b(digest_size=8)
    h.update(int(previous).to_bytes(8, "little"))
    h.update(np.asarray(tokens, np.int64).tobytes())
    return int.from_bytes(h.digest(), "little")


def block_hashes(ids, block_size: int = BLOCK_SIZE) -> list[int]:
    """The hash chain of `ids`' full blocks (a last partial block has none: it is never cached)."""
    hashes, previous = [], 0
    for start in range(0, len(ids) - block_size + 1, block_size):
        previous = chain_hash(previous, ids[start:start + block_size])
        hashes.append(previous)
    return hashes


_numbers = itertools.count()


@dataclass(eq=False)
class CachedBlock:
    hash: int
    tokens: tuple[int, ...]
    kv: list                      # one array per past input: [kv_heads, block_size, head_dim] (a copy)
    refs: int = 0                 # running requests holding it
    id: int = field(default_factory=lambda: next(_numbers))   # a short name for drawing it
    hold: "Hold | None" = None    # a session holds it across its gap (None: no session does)
    ended: "Reason | None" = None  # why its latest session hold ended (None: never held, or used since)


class Reason(str, enum.Enum):
    """Why a block was evicted."""
    LRU = "least recently used"        # no session held it: the least recently used block went first
    EXPIRED = "TTL expired"            # a session held it; its TTL ran out before the room was needed
    SHARE = "over the held share"      # a session held it; newer holds took the held share and released it
    PRESSURE = "pressure"              # a session still held it, and every other block was held or in use


@dataclass(frozen=True)
class Hold:
    """A session's hold on a block: which session, since when and until when (the cache's clock)."""
    session: str
    since: float
    until: float


@dataclass(frozen=True)
class Eviction:
    """One block evicted: when (the cache's clock: time.time()), what took its room (the inserting request's label;
    "" unnamed), why (`Reason`), and the session that held it last ("" none)."""
    hash: int
    at: float
    by: str
    block: int     # the evicted block's id
    reason: Reason = Reason.LRU
    session: str = ""


class PrefixCache:
    def __init__(self, capacity: int, block_size: int = BLOCK_SIZE, clock=time.time, held_share: float = 0.0):
        if capacity < 0 or block_size < 1:
            raise ValueError(f"a prefix cache holds 0 or more blocks of 1 or more positions; got {capacity}, "
                             f"{block_size}")
        if not 0.0 <= held_share <= 1.0:
            raise ValueError(f"the share of the prefix cache sessions may hold is from 0 to 1; got {held_share}")
        self.capacity, self.block_size, self.clock = int(capacity), int(block_size), clock
        self.held_most = int(self.capacity * held_share)   # blocks sessions may hold at once
        self.holds: OrderedDict[int, CachedBlock] = OrderedDict()   # session-held blocks, the oldest hold first
        self.by_reason: Counter = Counter()                           # Reason -> blocks evicted for it
        self.blocks: OrderedDict[int, CachedBlock] = OrderedDict()   # least recently used first
        self.evicted = 0
        self.evictions: OrderedDict[int, Eviction] = OrderedDict()   # hash -> its latest eviction, oldest first
        self.log_bound = EVICTION_LOG

    def __len__(self) -> int:
        return len(self.blocks)

    def match(self, ids, hashes: list[int], limit: int) -> list[CachedBlock]:
        """The cached blocks of `ids`' longest cached prefix, at most `limit` positions (whole blocks)."""
        found = []
        for i, h in enumerate(hashes[:max(0, limit) // self.block_size]):
            block = self.blocks.get(h)
            # the tokens are compared too (as nano-vLLM does): a 64-bit hash collision is never a hit
            if block is None or block.tokens != tuple(ids[i * self.block_size:(i + 1) * self.block_size]):
                break
            found.append(block)
        return found

    def hold(self, blocks) -> None:
        """A running request holds `blocks`: they are not evicted until it releases them."""
        for block in blocks:
            block.refs += 1
            block.ended = None   # used again: its eviction, if any, is a plain one
            self.blocks.move_to_end(block.hash)

    def release(self, blocks) -> None:
        """The request no longer holds `blocks` (a chain, first block first); the tail becomes the least recent."""
        for block in reversed(blocks):
            if block.refs <= 0:
                raise ValueError(f"block {block.id} is released more often than it was held")
            block.refs -= 1
            if block.hash in self.blocks:
                self.blocks.move_to_end(block.hash)

    def insert(self, h: int, tokens, kv, by: str = "") -> CachedBlock | None:
        """The block named `h` (kept already, or a new one whose KV `kv()` copies); None when there is no room:
        the budget is full of blocks that running requests hold. `by`: the inserting request's label, written
        in the eviction log when its block takes another's room."""
        block = self.blocks.get(h)
        if block is not None:
            self.blocks.move_to_end(h)
            return block
        if self.capacity == 0 or (len(self.blocks) >= self.capacity and not self._evict_one(by)):
            return None
        block = self.blocks[h] = CachedBlock(h, tuple(int(t) for t in tokens), kv())
        self.evictions.pop(h, None)   # cached again: its eviction is no longer why it is missing
        return block

    def retain(self, hashes, session: str, ttl_s: float | None) -> int:
        """Hold the cached blocks of `hashes` (a chain, first block first) for `session` until `ttl_s` seconds from
        now (a hold already longer is kept); past the held share the oldest holds are released. Returns the blocks
        held now for this call (0: none cached, no TTL, or no share)."""
        if not ttl_s or ttl_s <= 0 or self.held_most == 0:
            return 0
        now, mine = self.clock(), []
        for h in reversed(list(hashes)):   # the chain's beginning is held last: the newest hold, released last
            block = self.blocks.get(h)
            if block is None:
                continue
            until = max(now + ttl_s, block.hold.until if block.hold is not None else now)
            block.hold, block.ended = Hold(session, now, until), None
            self.holds.pop(h, None)
            self.holds[h] = block
            mine.append(h)
        while len(self.holds) > self.held_most:
            self._end_hold(next(iter(self.holds.values())), Reason.SHARE)
        return sum(h in self.holds for h in mine)

    def _end_hold(self, block: CachedBlock, why: Reason) -> None:
        self.holds.pop(block.hash, None)
        block.hold, block.ended = None, why

    def expire(self) -> None:
        """End the session holds whose TTL has run out (their blocks become evictable as any other)."""
        now = self.clock()
        for block in [b for b in self.holds.values() if b.hold.until <= now]:
            self._end_hold(block, Reason.EXPIRED)

    def _evict_one(self, by: str) -> bool:
        self.expire()
        # least recently used first: a block no session holds, then (pressure) a held one
        victim = next((b for b in self.blocks.values() if b.refs == 0 and b.hold is None), None)
        if victim is None:
            victim = next((b for b in self.blocks.values() if b.refs == 0), None)
        if victim is None:
            return False
        h = victim.hash
        if victim.hold is not None:
            reason, session = Reason.PRESSURE, victim.hold.session
            self.holds.pop(h, None)
        else:
            reason, session = victim.ended or Reason.LRU, ""
        del self.blocks[h]
        self.evicted += 1
        self.by_reason[reason] += 1
        self.evictions.pop(h, None)
        self.evictions[h] = Eviction(h, self.clock(), by, victim.id, reason, session)
        while len(self.evictions) > self.log_bound:
            self.evictions.popitem(last=False)
        return True

    def held(self) -> int:
        return sum(b.refs > 0 for b in self.blocks.values())

    def held_positions(self) -> int:
        """Positions sessions hold now (a hold whose TTL ran out is not counted); it changes nothing, so another
        thread (/metrics) may read it while the loop runs."""
        now = self.clock()
        return sum((h := b.hold) is not None and h.until > now for b in list(self.holds.values())) * self.block_size

    def chain_state(self, hashes) -> dict:
        """Where the blocks of `hashes` (a session's chain) are now: {"held", "evictable", "evicted": {reason: n},
        "missing"}: held for a session, cached and evictable, evicted (by the log's reason), or neither on record."""
        now = self.clock()
        out = {"held": 0, "evictable": 0, "evicted": {}, "missing": 0}
        for h in hashes:
            block, gone = self.blocks.get(h), self.evictions.get(h)
            if block is not None:
                out["held" if block.hold is not None and block.hold.until > now else "evictable"] += 1
            elif gone is not None:
                out["evicted"][gone.reason.value] = out["evicted"].get(gone.reason.value, 0) + 1
            else:
                out["missing"] += 1
        return out
