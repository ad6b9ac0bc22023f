"""Many requests in one ONNX Runtime call: a pool of KV slots, a batched decode step, one prompt's chunk.

    kv = KVSlots(backend, slots=8, capacity=1024)        # per layer and K/V: [slots, kv_heads, capacity, head_dim]
    logits = decode_rows(backend, kv, tokens, lengths)   # tokens[r] fed to slot r (r < n): logits [n, vocab]
    logits = prefill_chunk(backend, kv, slot, ids, length)  # ids read onto slot's first `length` positions: [vocab]
    kv.move(src, dst, length); kv.swap(a, b, length_a, length_b)   # what keeps the decoding rows packed
    block = kv.read(slot, start, n); kv.write(slot, start, block)  # positions out of a slot and back (prefix cache)

GroupQueryAttention (in every onnx and onnx-gguf4 graph, see onnx_fuse.py) takes each row's own cache
length from a right-padded attention_mask (seqlens_k = the row's sum - 1) and writes each new position in
place when past and present are the same buffer (as OnnxGgufBackend does for one request). So a batched
decode step binds the pool's first n rows, kv[0:n] -- one contiguous view, the slot being the outer
dimension -- as both past and present: one call, one row per request, each at its own position. The
decode graph's rows do not interact (its activations are quantized per row), so each row's logits are
bit-identical to the same request decoded alone.

A prompt is read into one slot (the view kv[s:s+1]) by the prefill graph, in chunks. GroupQueryAttention
refuses several sequences in one call once a chunk has past context ("batch_size must be 1 when
sequence_length > 1 and past context is given"), so each prefilling request is a call of its own.
Which graph ran is named in GRAPHS: the int8 decode graph was measured fastest for 1-16 decoding rows,
the fp32-activation prefill graph for prompt chunks (onnx_gguf.py); the plain `onnx` backend has one graph.

Left out: a block table (CPU GroupQueryAttention has none, so a slot is one contiguous run of positions
and every slot has the same capacity), growing the pool (it is sized once), and the torch backend
(transformers' manager batches there: serve/batching_torch.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .onnx_cache import MARKER

DECODE_GRAPH, PREFILL_GRAPH = "decode graph", "prefill graph"


def graphs(backend) -> dict[str, ort.InferenceSession]:
    """{graph name: session}: onnx-gguf4 has a decode and a prefill graph; plain onnx one graph for both."""
    decode = backend.session
    return {DECODE_GRAPH: decode, PREFILL_GRAPH: getattr(backend, "prefill_session", decode)}


def check_batchable(backend) -> None:
    """ValueError unless `backend` runs an ONNX graph whose attention is GroupQueryAttention."""
    session = getattr(backend, "session", None)
    if not isinstance(session, ort.InferenceSession) or not hasattr(backend, "past_names"):
        raise ValueError(f"continuous batching on ONNX Runtime needs an onnx backend; {backend.name} is not one")
    if not fused_attention(Path(backend.folder)):
        raise ValueError(f"{backend.name}'s graph has no GroupQueryAttention, so its rows cannot have their own lengths")


def fused_attention(folder: Path) -> bool:
    """Whether the fp32 export under this graph (its folder, or the one it was rewritten from) fused attention."""
    for _ in range(3):   # a quantized or rewritten graph's marker names the fp32 folder it came from
        try:
            info = json.loads((folder / MARKER).read_text())
        except (OSError, ValueError):
            return False
        if "fused_attention" in info:
            return bool(info["fused_attention"])
        folder = Path(info.get("source", ""))
    return False


def kv_dims(backend) -> list[tuple[int, int]]:
    """(kv_heads, head_dim) of each past input, from the graph's own input shapes."""
    return [(e.shape[1], e.shape[3]) for e in backend._empty]


def position_bytes(backend) -> int:
    """Bytes one position of one slot takes (every layer's K and V, float32)."""
    return sum(h * d * 4 for h, d in kv_dims(backend))


class KVSlots:
    """The KV pool: one float32 buffer per past input, [slots, kv_heads, capacity, head_dim]; slot s is row s.

    Positions past a slot's length are never read (the attention mask stops at it), so a freed slot is
    not cleared. Lengths live with the requests (the scheduler's bookkeeping); this holds the memory."""

    def __init__(self, backend, slots: int, capacity: int):
        self.arrays = [np.zeros((slots, h, capacity, d), np.float32) for h, d in kv_dims(backend)]
        self.position_bytes = position_bytes(backend)
        self.bindings: dict = {}   # (graph, first row, rows) -> (IO binding with the views bound, logits array)

    @property
    def slots(self) -> int:
        return self.arrays[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.arrays[0].shape[2]

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays)

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy slot src's first `length` positions into slot dst."""
        for a in self.arrays:
            a[dst, :, :length] = a[src, :, :length]

    def read(self, slot: int, start: int, n: int) -> list[np.ndarray]:
        """A copy of slot `slot`'s positions start..start+n-1: one [kv_heads, n, head_dim] array per past input."""
        return [a[slot, :, start:start + n].copy() for a in self.arrays]

    def write(self, slot: int, start: int, block: list[np.ndarray]) -> None:
        """Put `block` (as `read` gives it) at slot `slot`'s positions from `start`."""
        for a, b in zip(self.arrays, block):
            a[slot, :, start:start + b.shape[1]] = b

    def swap(self, a: int, b: int, length_a: int, length_b: int) -> None:
        """Exchange two slots' contents (their first length_a and length_b positions)."""
        for arr in self.arrays:
            held = arr[a, :, :length_a].copy()
            arr[a, :, :length_b] = arr[b, :, :length_b]
            arr[b, :, :length_a] = held


def _binding(backend, kv: KVSlots, graph: str, first: int, rows: int):
    """The IO binding of `graph` with kv[first:first+rows] bound as past and present (made once, then reused)."""
    key = (graph, first, rows)
    if key not in kv.bindings:
        session = graphs(backend)[graph]
        io, logits = session.io_binding(), np.zeros((rows, 1, vocab_size(backend)), np.float32)
        io.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
        for past, present, array in zip(backend.past_names, backend.output_names[1:], kv.arrays):
            view = ort.OrtValue.ortvalue_from_numpy(array[first:first + rows])   # contiguous: no copy
            io.bind_ortvalue_input(past, view)
            io.bind_ortvalue_output(present, view)   # the same buffer: written in place
        kv.bindings[key] = session, io, logits
    return kv.bindings[key]


def vocab_size(backend) -> int:
    return int(getattr(backend, "vocab_size", 0) or backend.config.vocab_size)


def _mask(lengths: list[int], width: int) -> np.ndarray:
    """Right-padded attention mask: row r has ones for its first lengths[r] positions."""
    mask = np.zeros((len(lengths), width), np.int64)
    for r, n in enumerate(lengths):
        mask[r, :n] = 1
    return mask


def decode_rows(backend, kv: KVSlots, tokens: list[int], lengths: list[int]) -> np.ndarray:
    """Feed tokens[r] to slot r, whose cache holds lengths[r] positions (r < n); logits [n, vocab].

    One call of the decode graph; each slot's cache grows by one position, written in place."""
    n = len(tokens)
    if not 0 < n <= kv.slots or len(lengths) != n:
        raise ValueError(f"a decode step takes 1-{kv.slots} rows with one length each; got {n} and {len(lengths)}")
    if min(lengths) < 1 or max(lengths) + 1 > kv.capacity:
        raise ValueError(f"row lengths must be 1-{kv.capacity - 1} (the slots' capacity); got {min(lengths)}-"
                         f"{max(lengths)}")
    session, io, logits = _binding(backend, kv, DECODE_GRAPH, 0, n)
    io.bind_cpu_input("input_ids", np.asarray(tokens, np.int64)[:, None])
    io.bind_cpu_input("attention_mask", _mask([n + 1 for n in lengths], max(lengths) + 1))
    if backend.has_position_ids:
        io.bind_cpu_input("position_ids", np.asarray(lengths, np.int64)[:, None])
    session.run_with_iobinding(io)
    return logits[:, 0]


def prefill_chunk(backend, kv: KVSlots, slot: int, ids: list[int], length: int) -> np.ndarray:
    """Read `ids` onto slot `slot`, whose cache holds `length` positions; the last position's logits [vocab]."""
    if not ids or length + len(ids) > kv.capacity:
        raise ValueError(f"a chunk must be 1 or more tokens within the slot's {kv.capacity} positions; "
                         f"got {len(ids)} after {length}")
    session, io, logits = _binding(backend, kv, PREFILL_GRAPH, slot, 1)
    total = length + len(ids)
    io.bind_cpu_input("input_ids", np.asarray([ids], np.int64))
    io.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
    if backend.has_position_ids:
        io.bind_cpu_input("position_ids", np.arange(length, total, dtype=np.int64)[None])
    session.run_with_iobinding(io)
    return logits[0, 0]
