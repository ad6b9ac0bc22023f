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
import itertools
import time
from collections import OrderedDict
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


@dataclass(frozen=True)
class Eviction:
    """One block evicted: when (time.time()), what took its room (the inserting request's label; "" unnamed)."""
    hash: int
    at: float
    by: str
    block: int     # the evicted block's id


class PrefixCache:
    def __init__(self, capacity: int, block_size: int = BLOCK_SIZE):
        if capacity < 0 or block_size < 1:
            raise ValueError(f"a prefix cache holds 0 or more blocks of 1 or more positions; got {capacity}, "
                             f"{block_size}")
        self.capacity, self.block_size = int(capacity), int(block_size)
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

    def _evict_one(self, by: str) -> bool:
        for h, block in self.blocks.items():   # least recently used first
            if block.refs == 0:
                del self.blocks[h]
                self.evicted += 1
                self.evictions.pop(h, None)
                self.evictions[h] = Eviction(h, time.time(), by, block.id)
                while len(self.evictions) > self.log_bound:
                    self.evictions.popitem(last=False)
                return True
        return False

    def held(self) -> int:
        return sum(b.refs > 0 for b in self.blocks.values())
