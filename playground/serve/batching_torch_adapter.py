"""The thin adapter between transformers 4.57's continuous-batching manager and this project.

transformers' manager (`generation/continuous_batching/`: paged KV cache, FIFO and prefill-first
schedulers, chunked prefill) does the scheduling and the forward passes. What is changed here, and why:

1. CPU memory sizing. `PagedAttentionMemoryHandler.get_available_memory` asks only an accelerator
   (`get_device_and_memory_breakdown` gives total None on CPU, and the subtraction raises TypeError,
   even when `num_blocks` and `max_batch_tokens` are given, since it still checks the footprint).
   `patch_cpu_memory_sizing()` answers from psutil (available RAM) when there is no accelerator total;
   on CUDA the library's own answer stands. The pool is then sized explicitly (batching_torch.py).
2. Timestamps where tokens are made. `TimedRequestState` (a RequestState) reports, on an event
   queue, each status change (admission = leaving PENDING) and each token the moment
   `update_batch` hands it over, right after the batch's one device sync, in the manager's thread.
3. Stop criteria. The library compares each token with one `eos_token_id` (a list never matches, and a
   GenerationConfig without one disables EOS), and stops one decode step late (its own comment: "this
   logic seems one token off": the max_new_tokens+1-th token is computed, then dropped). Here a request
   stops at any of the model's EOS ids or at exactly max_new_tokens, as the Engine does.
4. The loop. `TimedManager._inner_generation_loop` is the library's CPU path (prepare, forward, update)
   plus one "batch" event per forward pass; when idle it blocks on the input queue for up to 20 ms
   instead of spinning (the library's idle loop busy-waits, holding a core and the GIL).
5. The LM head. `_generation_step` computes logits only at the positions whose token is read (the
   library computes them for every prompt position of a prefill pass, then drops all but one).

Left out: CUDA graphs (the library itself refuses them in 4.57), sampling and logits processors
(greedy argmax only).
"""
from __future__ import annotations

import copy
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import psutil
import torch
from transformers.generation.continuous_batching import cache as cb_cache
from transformers.generation.continuous_batching.continuous_api import ContinuousBatchingManager
from transformers.generation.continuous_batching.requests import (RequestState, RequestStatus,
                                                                  get_device_and_memory_breakdown)
from transformers.generation.continuous_batching.requests import logger as cb_logger
from ..next_token import stop_reason

PREFILLING = (RequestStatus.PREFILLING, RequestStatus.PREFILLING_SPLIT)
IDLE_WAIT = 0.02   # seconds the idle manager waits on its input queue


def patch_cpu_memory_sizing() -> None:
    """Make the manager's memory sizing answer on CPU (psutil's available RAM); idempotent."""
    handler = cb_cache.PagedAttentionMemoryHandler
    if getattr(handler.get_available_memory, "playground_cpu", False):
        return
    original = handler.get_available_memory

    def get_available_memory(max_memory_percent: float = 1.0) -> int:
        _, total, _, _ = get_device_and_memory_breakdown()
        if total is None:   # CPU: the library only knows accelerators' totals
            return int(psutil.virtual_memory().available * max_memory_percent)
        return original(max_memory_percent)
    get_available_memory.playground_cpu = True
    handler.get_available_memory = staticmethod(get_available_memory)


def left_alone_pool(model, block_size: int = 32, max_memory_percent: float = 0.9) -> tuple[int, int]:
    """(num_blocks, max_batch_tokens) the manager would pick by itself on this machine (up to 90% of free memory)."""
    patch_cpu_memory_sizing()
    c = model.config
    heads = c.num_attention_heads
    page = (getattr(c, "head_dim", None) or c.hidden_size // heads) * (getattr(c, "num_key_value_heads", None) or heads)
    handler = cb_cache.PagedAttentionMemoryHandler(block_size, page, 1, c.num_hidden_layers,
                                                   c.hidden_size + c.vocab_size, 1)
    return handler.compute_num_blocks_and_max_batch_tokens(max_memory_percent, model.dtype)


@dataclass
class TimedRequestState(RequestState):
    eos_ids: frozenset = frozenset()   # every stop token of the model (empty: run to max_new_tokens)
    context_window: int = 2**31
    events: Any = None                 # queue.SimpleQueue the scheduler drains

    @property
    def status(self) -> RequestStatus:
        return self._status

    @status.setter
    def status(self, value: RequestStatus) -> None:
        old = self._status
        RequestState.status.fset(self, value)
        self.events.put(("status", self, old, value, time.perf_counter()))

    def update_with_token(self, token_id: int) -> bool:
        if self.status != RequestStatus.DECODING:
            return False
        now, wall_ns = time.perf_counter(), time.time_ns()
        self.static_outputs.append(token_id)
        reason = stop_reason(token_id, made=len(self.static_outputs), length=self.position_offset + 1,
                             eos=self.eos_ids, max_new_tokens=self.max_new_tokens, window=self.context_window)
        self.events.put(("token", self, token_id, now, wall_ns, reason))
        if reason:
            self.status = RequestStatus.FINISHED
        return reason is not None


class TimedManager(ContinuousBatchingManager):
    """The library's manager with timed requests, one event per forward pass, and a blocking idle wait."""

    def __init__(self, model, generation_config, events: queue.SimpleQueue):
        super().__init__(model, generation_config, streaming=False)
        self.events, self.in_pass = events, False   # in_pass: a forward pass is running (not stalled, just slow)

    def submit(self, request_id: str, ids: list[int], max_new_tokens: int, eos_ids: frozenset,
               context_window: int) -> None:
        self.input_queue.put(TimedRequestState(request_id=request_id, prompt_ids=list(ids), full_prompt_ids=list(ids),
                                               max_new_tokens=max_new_tokens, eos_ids=frozenset(eos_ids),
                                               context_window=context_window, events=self.events))

    def _inner_generation_loop(self, bp) -> None:
        if not bp.prepare_next_batch():
            self._wait_for_requests(bp)
            return
        start, self.in_pass = time.perf_counter(), True
        batch = [(state, len(state.prompt_ids), state.status in PREFILLING) for state in bp.requests_in_batch]
        try:
            self._generation_step(bp)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            bp.update_batch()
        finally:
            self.in_pass = False
        used = bp.cache.num_blocks - bp.cache.get_num_free_blocks()
        self.events.put(("batch", start, time.perf_counter(), batch, used))

    def _generation_step(self, bp) -> None:
        """The library's step (forward, then greedy argmax), with the LM head only where a token is read.

        The library computes logits for every position of the pass (a 256-token prefill chunk: 256 rows of
        49k x 576 for SmolLM2, ~27% of the chunk's FLOPs) and keeps one row per request; here the model is
        asked for those rows only (`logits_to_keep`), and each argmax goes where `update_batch` reads it.
        """
        batch = bp.get_model_kwargs()
        read = batch["logits_indices"]
        read = read[read >= 0]
        with torch.no_grad():
            logits = self.model(**batch, logits_to_keep=read).logits   # [1, len(read), vocab]
        bp.output_ids[0, read] = logits[0].argmax(-1).to(bp.output_ids.dtype)

    def _wait_for_requests(self, bp) -> None:
        try:
            state = self.input_queue.get(timeout=IDLE_WAIT)
        except queue.Empty:
            return
        if state is not None:
            bp.scheduler.add_waiting_request(state)


_models: dict[int, Any] = {}
_lock = threading.Lock()


def paged_model(model):
    """A copy of `model` that shares its weights (no second copy of the parameters) but attends with
    transformers' `sdpa_paged` (the paged-cache attention), so the Engine's own model is left as it was."""
    with _lock:
        if id(model) not in _models:
            shared = {id(p): p for p in model.parameters()}
            paged = copy.deepcopy(model, memo=shared)
            paged.set_attn_implementation("sdpa_paged")
            _models[id(model)] = paged.eval()
        return _models[id(model)]


class quiet_manager_log:
    """The manager logs a warning per cancelled request still waiting (no blocks to free): keep it quiet."""

    def __enter__(self):
        self.level = cb_logger.level
        cb_logger.setLevel(logging.ERROR)

    def __exit__(self, *exc):
        cb_logger.setLevel(self.level)
