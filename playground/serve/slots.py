"""Who holds which KV slot: the continuous-batching scheduler's block manager (batcher.py drives it).

    table = SlotTable(KVSlots(backend, slots=8, capacity=1024))
    table.add(seq)            # admitted: it takes the next slot, where its prompt is read
    table.start_decoding(seq) # its prompt is read: it joins the decoding group
    table.remove(seq)         # it ended: its slot is free at once
    table.holders()           # [(slot, seq)]: what the KV memory map draws
    budget = KVBudget(2048); budget.blocks_for(40)   # the budget in blocks of 16 positions: 3 for 40 positions

A batched decode step reads the decoding requests' rows as one view, kv[0:d] (onnx_batch.py), so the
table keeps two packed groups: decoding requests in slots 0..d-1, prefilling ones in d..d+p-1. When a
request leaves, the last request of its group moves into its slot (one copy of that request's cache),
and when a decoding one leaves, the prefilling group shifts down by one the same way; a request whose
prompt is read trades places with the first prefilling request (a swap), then joins the decoding group.
`moves` counts the copies: a few per request, against a gather of every row at every step.

>>> from types import SimpleNamespace as S
>>> kv = S(slots=3, move=lambda *a: None, swap=lambda *a: None)
>>> a, b, c = S(id="a", length=5), S(id="b", length=9), S(id="c", length=2)
>>> t = SlotTable(kv); t.add(a), t.add(b)
(0, 1)
>>> t.start_decoding(b); [(s, q.id) for s, q in t.holders()]
[(0, 'b'), (1, 'a')]
>>> _ = t.add(c); t.remove(b); [(s, q.id) for s, q in t.holders()], t.free()
([(0, 'c'), (1, 'a')], 1)

The KV budget (KVBudget) is the positions the scheduler may hold in all, counted in blocks of 16, as a
smaller memory would allow (a GPU whose blocks are full): the slots stay as they are, the budget decides
who may hold them and how far they may grow (batcher.py preempts when it is exhausted).

>>> b = KVBudget(64); b.blocks, b.blocks_for(17), b.take(3), b.free
(4, 2, None, 1)

Left out: the memory itself (backends/onnx_batch.py), the batcher's settings (BatchConfig, batcher.py).
"""
from __future__ import annotations

import math
from .prefix_cache import BLOCK_SIZE


class KVBudget:
    """Blocks of BLOCK_SIZE positions the running requests may hold in all: taken as they grow, given back."""

    def __init__(self, positions: int, block_size: int = BLOCK_SIZE):
        self.block_size, self.blocks, self.used = block_size, positions // block_size, 0

    @property
    def free(self) -> int:
        return self.blocks - self.used

    def blocks_for(self, positions: int) -> int:
        return math.ceil(positions / self.block_size)

    def take(self, n: int) -> None:
        if n > self.free:
            raise ValueError(f"{n} KV blocks asked, {self.free} free")
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n


class SlotTable:
    def __init__(self, kv):
        self.kv, self.decoding, self.prefilling, self.moves = kv, [], [], 0

    def free(self) -> int:
        return self.kv.slots - len(self.decoding) - len(self.prefilling)

    def slot(self, seq) -> int:
        if seq in self.decoding:
            return self.decoding.index(seq)
        return len(self.decoding) + self.prefilling.index(seq)

    def holders(self) -> list[tuple[int, object]]:
        return list(enumerate(self.decoding + self.prefilling))

    def add(self, seq) -> int:
        """Give `seq` the next slot (after every held one); ValueError when none is free."""
        if not self.free():
            raise ValueError(f"all {self.kv.slots} KV slots are held")
        self.prefilling.append(seq)
        return self.slot(seq)

    def start_decoding(self, seq) -> None:
        """`seq`'s prompt is read: it takes the first prefilling slot (swapping) and joins the decoding group."""
        d, j = len(self.decoding), self.prefilling.index(seq)
        if j:
            first = self.prefilling[0]
            self.kv.swap(d, d + j, first.length, seq.length)
            self.prefilling[0], self.prefilling[j] = seq, first
            self.moves += 2
        self.decoding.append(self.prefilling.pop(0))

    def remove(self, seq) -> None:
        """Free `seq`'s slot, moving the last of its group into it (and the prefilling group down, if needed)."""
        group = self.decoding if seq in self.decoding else self.prefilling
        base = 0 if group is self.decoding else len(self.decoding)   # the group's first slot
        i, last = group.index(seq), group.pop()
        if last is not seq:   # the group's last request, in slot base + len(group), fills the hole
            self.kv.move(base + len(group), base + i, last.length)
            group[i] = last
            self.moves += 1
        if group is self.decoding and self.prefilling:   # the prefilling group starts one slot lower now
            tail = self.prefilling.pop()
            self.kv.move(len(self.decoding) + len(self.prefilling) + 1, len(self.decoding), tail.length)
            self.prefilling.insert(0, tail)
            self.moves += 1
