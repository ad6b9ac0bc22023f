"""PyTorch backend: CUDA when present (with a synchronize before each timestamp), CPU otherwise.

The cache is transformers' DynamicCache; its size is measured by summing the bytes of every key and
value tensor it holds, on whatever device they live.

Left out: static caches and torch.compile; both would speed decoding but hide the growing cache.
"""
from __future__ import annotations

import copy

import torch
from transformers import DynamicCache

from ..models import LoadedModel
from .base import Backend, eos_ids_of, kv_shape_of

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class TorchBackend(Backend):
    name = "torch"

    def __init__(self, loaded: LoadedModel, device: str, dtype: str):
        self.loaded, self.model, self.tokenizer = loaded, loaded.model, loaded.tokenizer
        self.device, self.dtype = device, dtype
        self.model_name = loaded.name
        self.config = config = self.model.config   # the model's shape (layers, sizes)
        self.context_window = int(getattr(config, "max_position_embeddings", 2048))
        self.eos_token_ids = eos_ids_of(self.model, self.tokenizer)
        self.kv_shape = kv_shape_of(config, torch.tensor([], dtype=DTYPES[dtype]).element_size())

    @torch.inference_mode()
    def prefill(self, input_ids):
        cache = DynamicCache()
        ids = torch.tensor([input_ids], device=self.device)
        out = self.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1].float(), out.cache

    @torch.inference_mode()
    def extend(self, input_ids, state):
        cache = copy.deepcopy(state)   # DynamicCache grows in place: the kept prefix must stay as it was
        ids = torch.tensor([input_ids], device=self.device)
        out = self.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1].float(), out.cache

    @torch.inference_mode()
    def decode(self, token_id, state):
        ids = torch.tensor([[token_id]], device=self.device)
        out = self.model(input_ids=ids, cache=state, use_cache=True)
        return out.logits[0, -1].float(), out.cache

    verifies = True

    @torch.inference_mode()
    def verify(self, input_ids, state):
        """Every position's logits: the speculative verify pass, on the live DynamicCache (grown in place)."""
        ids = torch.tensor([input_ids], device=self.device)
        out = self.model(input_ids=ids, cache=state, use_cache=True)
        return out.logits[0].float(), out.cache

    def cache_length(self, state) -> int:
        return state.get_seq_length()

    def rollback(self, state, length):
        state.crop(length - state.get_seq_length())   # DynamicCache drops that many last positions in place
        return state

    def kv_cache_bytes(self, state) -> int:
        return sum(t.numel() * t.element_size() for layer in state.layers for t in (layer.keys, layer.values)
                   if t is not None)

    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    @torch.inference_mode()
    def generate_reference(self, input_ids, max_new_tokens, streamer=None):
        ids = torch.tensor([input_ids], device=self.device)
        out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                  do_sample=False, streamer=streamer, pad_token_id=min(self.eos_token_ids))
        return out[0, len(input_ids):].tolist()
