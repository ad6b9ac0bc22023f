"""`onnx-gguf4`: ONNX Runtime on the GGUF's own 4-bit blocks (onnx_gguf.py), with a KV cache that grows in place.

The step loop is OnnxBackend's (IO binding, last-position logits), with two changes. Prefill and decode
run two graphs of the same weights (prefill.onnx and model.onnx: their activation modes differ, see
onnx_gguf.py), in two ONNX Runtime sessions that read and write the same cache. And the cache is one
preallocated buffer per layer and K/V, [1, kv_heads, capacity, head_dim], bound as both the `past`
input and the `present` output, so GroupQueryAttention writes each new position in place (it shares
the buffer when the two pointers are equal) instead of concatenating a fresh copy every step. When a
step would pass the capacity, the buffers are copied into ones `GROW` times larger.

KV bytes: `kv_cache_bytes` reports the bytes of the positions in use (length x bytes per position of
the buffers' real shape and element type), which is what the other backends' caches hold; the
buffer's allocated bytes, capacity included, are `kv_buffer_bytes` (at most GROW x the used part).
Speculative decoding: `verify` reads several tokens onto the live buffers with the decode graph's
all-logits sibling (same kernels as decode, every position's logits), and `rollback` sets the length back.

A decode consumes its state: decoding twice from one state would write both branches into the same
buffer, so it raises instead. `extend` (prefix caching) reads onto a copy, so a kept prefix stays reusable.

A model given as float weights runs on blocks quantized from them once (gguf_quantize.py).

Left out: models that are neither a GGUF of Q4_1 layers nor a llama's float weights (ValueError naming the
model); batches.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .onnx_backend import ELEMENT_BYTES, OnnxBackend, session_options
from .onnx_gguf import PREFILL_FILE, gguf4_dir, variant_plans

log = logging.getLogger(__name__)
FIRST_CAPACITY = 256   # positions allocated at prefill beyond the prompt (rounded up to a multiple of this)
GROW = 2               # capacity factor when the cache fills up


def gguf4_graphs(spec: str | None = None, variant: str = "", progress=None, cache_dir: Path | None = None,
                 rebuild: bool = False) -> tuple[Path, str]:
    """(folder of the rewritten graphs, model name) for model `spec`: exported and rewritten once, then cached.
    A GGUF file brings its own blocks; float weights are quantized to the same block types first
    (gguf_quantize.py). ValueError when neither works (other block types, not a llama)."""
    from ..models import resolve_model_spec
    from .gguf_quantize import quantized_model
    from .onnx_export import exported_dir
    from .export_input import export_input

    source = resolve_model_spec(spec)
    if source.kind == "gguf":
        (hf_dir, model_name), blocks = export_input(spec, cache_dir), source.location
    else:
        quantized = quantized_model(spec, cache_dir, progress)
        hf_dir, blocks, model_name = quantized.folder, quantized.blocks, f"{source.name} (Q4_1 by gguf-py)"
    fp32 = exported_dir(hf_dir, cache_dir=cache_dir, progress=progress)
    return gguf4_dir(fp32, blocks, variant, progress, rebuild=rebuild), model_name


class KVBuffer:
    """The cache after a step: one numpy buffer (and its OrtValue view) per past input, and its length."""
    __slots__ = ("arrays", "bindings", "length", "position_bytes", "spent", "values")

    def __init__(self, arrays: list[np.ndarray], length: int):
        self.arrays, self.length, self.spent = arrays, length, False
        self.values = [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays]  # views: no copy
        self.bindings = {}   # session -> (its IO binding with these buffers bound, logits array): made once
        # bytes one position takes in these buffers, from the OrtValues' real shapes and element types
        self.position_bytes = sum(v.shape()[0] * v.shape()[1] * v.shape()[3] * ELEMENT_BYTES[v.data_type()]
                                  for v in self.values)

    @property
    def capacity(self) -> int:
        return self.arrays[0].shape[2]

    def advanced(self, length: int) -> KVBuffer:
        """The state after a step wrote up to `length` (the same buffers); this one may not be used again."""
        self.spent = True
        nxt = KVBuffer.__new__(KVBuffer)
        nxt.arrays, nxt.values, nxt.bindings, nxt.position_bytes = self.arrays, self.values, self.bindings, \
            self.position_bytes
        nxt.length, nxt.spent = length, False
        return nxt


class OnnxGgufBackend(OnnxBackend):
    def __init__(self, folder: Path, model_name: str, variant: str = ""):
        super().__init__(folder, model_name, quant="gguf4")   # self.session: the decode graph
        self.prefill_session = ort.InferenceSession(str(self.folder / PREFILL_FILE), session_options(),
                                                    providers=["CPUExecutionProvider"])
        self.variant, (self.decode_plan, self.prefill_plan) = variant, variant_plans(variant)
        self.name, self.dtype = "-".join(filter(None, ["onnx-gguf4", variant])), "q4_1"
        self._kv_dims = [(e.shape[1], e.shape[3]) for e in self._empty]   # (kv_heads, head_dim) per input
        self.vocab_size = int(self.session.get_outputs()[0].shape[-1])       # logits [batch, 1, vocab]

    @classmethod
    def load(cls, spec: str | None = None, variant: str = "", progress=None,
             cache_dir: Path | None = None) -> OnnxGgufBackend:
        """Export (once), rewrite with the GGUF's blocks (once) and open; a cache that fails to load is rebuilt."""
        folder, model_name = gguf4_graphs(spec, variant, progress, cache_dir)
        try:
            return cls(folder, model_name, variant)
        except Exception as exc:  # noqa: BLE001 - a garbled cached graph: rebuild it once
            log.warning("cached graph in %s failed to load (%s: %s); rebuilding", folder, type(exc).__name__, exc)
            return cls(gguf4_graphs(spec, variant, progress, cache_dir, rebuild=True)[0], model_name, variant)

    # --- the step loop, writing into the shared buffers

    def prefill(self, input_ids):
        capacity = math.ceil((len(input_ids) + 1) / FIRST_CAPACITY) * FIRST_CAPACITY
        state = KVBuffer([np.zeros((1, h, capacity, d), np.float32) for h, d in self._kv_dims], 0)
        return self._step(self.prefill_session, np.asarray([input_ids], dtype=np.int64), state)

    def extend(self, input_ids, state: KVBuffer):
        """Read input_ids onto a copy of a kept cache (prefix caching): `state` stays as it was, reusable."""
        need = state.length + len(input_ids) + 1
        capacity = math.ceil(need / FIRST_CAPACITY) * FIRST_CAPACITY
        copy = self._copied(state, capacity)
        return self._step(self.prefill_session, np.asarray([input_ids], dtype=np.int64), copy)

    def decode(self, token_id, state: KVBuffer):
        if state.spent:
            raise ValueError("this cache state was already decoded from; continue from the latest state")
        if state.length + 1 > state.capacity:   # full: continue in buffers GROW times larger
            state.spent, state = True, self._copied(state, state.capacity * GROW)
        return self._step(self.session, np.asarray([[token_id]], dtype=np.int64), state)

    # --- speculative decoding: several tokens read onto the live buffers, then the length set back

    def verify(self, input_ids, state: KVBuffer):
        """Every position's logits from the decode graph's all-logits sibling (the decode graph's arithmetic),
        written in place like decode; `rollback` then only sets the length back."""
        if state.spent:
            raise ValueError("this cache state was already decoded from; continue from the latest state")
        need = state.length + len(input_ids)
        if need > state.capacity:
            state.spent, state = True, self._copied(state, max(state.capacity * GROW,
                                                               math.ceil(need / FIRST_CAPACITY) * FIRST_CAPACITY))
        import torch

        session, ids = self.verify_session, np.asarray([input_ids], dtype=np.int64)
        logits = np.zeros((1, len(input_ids), self.vocab_size), np.float32)
        io = session.io_binding()   # fresh each pass: the logits' row count changes
        io.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
        for past, present, value in zip(self.past_names, self.output_names[1:], state.values):
            io.bind_ortvalue_input(past, value)
            io.bind_ortvalue_output(present, value)
        io.bind_cpu_input("input_ids", ids)
        io.bind_cpu_input("attention_mask", np.ones((1, need), np.int64))
        session.run_with_iobinding(io)
        return torch.from_numpy(logits[0]), state.advanced(need)

    def rollback(self, state: KVBuffer, length: int) -> KVBuffer:
        """Positions past `length` stay in the buffer but are never read again (the mask stops at the length)
        and the next step overwrites them: rolling back is setting the length."""
        if not 0 <= length <= state.length:
            raise ValueError(f"cannot roll a cache of {state.length} positions back to {length}")
        return state.advanced(length)

    @staticmethod
    def _copied(state: KVBuffer, capacity: int) -> KVBuffer:
        """New buffers of `capacity` positions holding the first state.length positions of `state`."""
        arrays = []
        for a in state.arrays:
            bigger = np.zeros((*a.shape[:2], capacity, a.shape[3]), a.dtype)
            bigger[:, :, :state.length] = a[:, :, :state.length]
            arrays.append(bigger)
        return KVBuffer(arrays, state.length)

    def _step(self, session, ids: np.ndarray, state: KVBuffer):
        import torch

        total = state.length + ids.shape[1]
        if session not in state.bindings:
            io, logits = session.io_binding(), np.zeros((1, 1, self.vocab_size), np.float32)
            io.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))   # written in place too
            for past, present, value in zip(self.past_names, self.output_names[1:], state.values):
                io.bind_ortvalue_input(past, value)
                io.bind_ortvalue_output(present, value)   # the same buffer: GroupQueryAttention writes in place
            state.bindings[session] = io, logits
        io, logits = state.bindings[session]
        io.bind_cpu_input("input_ids", ids)
        io.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        session.run_with_iobinding(io)
        return torch.from_numpy(logits[0, -1].copy()), state.advanced(total)   # a copy: the next step overwrites

    def kv_cache_bytes(self, state: KVBuffer) -> int:
        """Bytes of the positions in use, from the buffers' real shapes and element type (see module doc)."""
        return state.position_bytes * state.length

    # --- the yardstick: the same session and buffers in a bare greedy loop (no sampling, detokenizing or Steps)

    def generate_reference(self, input_ids, max_new_tokens, streamer=None):
        """Greedy ids from a plain prefill/decode loop: what the engine's instrumentation is measured against.

        A loop that concatenates the cache every step (as the plain `onnx` backend's reference does) would run
        this graph ~2x slower here, so it would measure that loop, not this backend."""
        if streamer is not None:
            streamer.put(input_ids)
        logits, state = self.prefill(input_ids)
        out = []
        while True:
            out.append(int(logits.argmax()))
            if streamer is not None:
                streamer.put(out[-1:])
            if len(out) == max_new_tokens or out[-1] in self.eos_token_ids:
                return out
            logits, state = self.decode(out[-1], state)

    def kv_buffer_bytes(self, state: KVBuffer) -> int:
        """Bytes allocated for the cache, unused capacity included."""
        return sum(int(a.nbytes) for a in state.arrays)
