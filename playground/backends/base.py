"""The interface a runtime implements so the engine can drive it one token at a time.

A backend owns a model and its tokenizer and knows three moves: `prefill` (read the whole prompt,
fill a fresh KV cache, return the last position's logits), `decode` (feed one token, extend the
cache), and `kv_cache_bytes` (measure the cache it holds); `extend` (read several tokens onto a kept
cache, leaving it reusable) is what prefix caching needs; `verify` (read several tokens onto the live
cache, returning every position's logits) and `rollback` (forget the cache's positions past a length)
are what speculative decoding needs (speculative.py). Logits come back as a 1-D float32 torch
tensor on the CPU or the model's device; sampling is the engine's job, not the backend's.

`prefill` on a longer id list with the cache thrown away is also how a run without a KV cache is
measured (the whole context recomputed at every step).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..trace import KVShape


class Backend(ABC):
    name: str             # "torch" | "onnx" | "onnx-int8" | "onnx-int4" | "onnx-gguf4" ...
    device: str           # "cpu" | "cuda"
    dtype: str            # "float32" | "float16" | "bfloat16" | "int8" | "int4" | "q4_1"
    model_name: str
    tokenizer: Any        # a transformers tokenizer
    context_window: int   # max positions the model accepts
    eos_token_ids: frozenset[int]
    kv_shape: KVShape
    config: Any           # the model's transformers config (layers, sizes): what cost models read

    @abstractmethod
    def prefill(self, input_ids: list[int]) -> tuple[Any, Any]:
        """(logits[vocab] of the last position, cache state) after reading input_ids into a fresh cache."""

    @abstractmethod
    def decode(self, token_id: int, state: Any) -> tuple[Any, Any]:
        """(logits[vocab], new cache state) after feeding one token."""

    def extend(self, input_ids: list[int], state: Any) -> tuple[Any, Any]:
        """(logits of the last position, new state) after reading input_ids onto an existing cache: a prompt
        whose start is already cached (prefix caching). `state` itself is left as it was, to be reused."""
        raise NotImplementedError(f"{self.name} cannot continue from a cached prefix")

    verifies = False   # True where `verify` and `rollback` are implemented (speculative decoding)

    def verify(self, input_ids: list[int], state: Any) -> tuple[Any, Any]:
        """(logits[len(input_ids), vocab] of every position, new state) after reading input_ids onto the live
        cache in one forward pass: row i scores the token after input_ids[i]. `state` is consumed, as by decode."""
        raise NotImplementedError(f"{self.name} cannot verify several tokens in one pass")

    def cache_length(self, state: Any) -> int:
        """Positions the cache of `state` holds."""
        return state.length

    def rollback(self, state: Any, length: int) -> Any:
        """The cache holding only its first `length` positions, as if nothing after them had been read."""
        raise NotImplementedError(f"{self.name} cannot roll its cache back")

    @abstractmethod
    def kv_cache_bytes(self, state: Any) -> int:
        """Bytes held by the real cache tensors of `state` (measured, not computed from a formula)."""

    def synchronize(self) -> None:
        """Block until queued device work is done, so a timestamp means 'the token is available'."""

    @abstractmethod
    def generate_reference(self, input_ids: list[int], max_new_tokens: int, streamer=None) -> list[int]:
        """Greedy new token ids from the runtime's own plain `generate()`: the yardstick for tests and bench."""

    def describe(self) -> str:
        return f"{self.name} · {self.device} · {self.dtype}"


def eos_ids_of(model, tokenizer) -> frozenset[int]:
    """Stop tokens as the model's generation config says (what plain `generate()` stops on)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return frozenset(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}


def kv_shape_of(config, bytes_per_element: int) -> KVShape:
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return KVShape(config.num_hidden_layers, getattr(config, "num_key_value_heads", None) or heads,
                   head_dim, bytes_per_element)
