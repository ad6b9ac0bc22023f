"""The thin adapter between transformers 5's continuous-batching manager and this project.

transformers' manager (`generation/continuous_batching/`: paged KV cache, FIFO and prefill-first
schedulers, chunked prefill, a CPU memory answer from psutil, logits only where a token is read) does the
scheduling and the forward passes. What is changed here, and why:

1. Timestamps where tokens are made. `TimedRequestState` (a RequestState) reports, on an event
   queue, each status change (admission = leaving PENDING, for PREFILLING when the prompt takes several
   passes, for DECODING when it fits one) and each token the moment
   `update_batch` hands it over, right after the batch's forward pass, in the manager's thread.
2. Stop criteria. A request stops at any of the model's EOS ids, at exactly max_new_tokens, or at the
   context window, and says which (`next_token.stop_reason`), as the Engine does.
3. The loop. `TimedManager._generation_loop_body` is the library's (prepare, forward, update) plus one
   "batch" event per forward pass: its requests, their query tokens, and the blocks in use after it.
4. The configuration. Prefix sharing is off (a finished request's blocks go back to the pool, as the
   pool's figures assume), async double-buffering and CUDA graphs are off, and flash attention is not
   switched to: the Engine's own attention (sdpa) runs on the paged cache.

Left out: CUDA graphs and compilation, sampling and logits processors (greedy argmax only), CPU offloading
of a preempted request (the pool is sized for the whole workload: batching_torch.py).
"""
from __future__ import annotations

import copy
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import ContinuousBatchingConfig
from transformers.generation.continuous_batching.cache import PagedAttentionCache
from transformers.generation.continuous_batching.continuous_api import BackgroundThreadStatus, ContinuousBatchingManager
from transformers.generation.continuous_batching.distributed import DistributedHelper
from transformers.generation.continuous_batching.initialization import resolve_continuous_batching_config
from transformers.generation.continuous_batching.requests import RequestState, RequestStatus
from transformers.generation.continuous_batching.utils import logger as cb_logger
from ..next_token import stop_reason

# leaving PENDING: admitted into a batch (the library marks a request whose prompt fits the pass DECODING at once)
ADMITTED = (RequestStatus.PREFILLING, RequestStatus.DECODING)
IDLE_WAIT = 0.02   # seconds the idle manager waits for a new request before it looks again


def batching_config(block_size: int, num_blocks: int | None = None, max_batch_tokens: int | None = None,
                    scheduler: str = "fifo") -> ContinuousBatchingConfig:
    """The manager's configuration: blocks of `block_size` tokens, none of the GPU-only or sharing features."""
    return ContinuousBatchingConfig(page_size=block_size, num_blocks=num_blocks, max_batch_tokens=max_batch_tokens,
                                    scheduler_type=scheduler, allow_block_sharing=False, use_async_batching=False,
                                    use_cuda_graph=False, auto_switch_to_flash=False, max_blocks_per_request=0)


def left_alone_pool(model, block_size: int = 32) -> tuple[int, int]:
    """(num_blocks, max_batch_tokens) the manager would pick by itself on this machine (up to 90% of free memory).

    Sized as the library sizes it, with the cache tensor on the meta device: nothing is allocated."""
    config = model.config.get_text_config()
    cb = resolve_continuous_batching_config(config, batching_config(block_size), None, False, torch.device("cpu"))
    cache = PagedAttentionCache(config, cb, "meta", DistributedHelper(None, None), model.dtype,
                                model_supports_logits_to_keep=True)
    return cache.num_blocks, cache.max_batch_tokens


def blocks_in_use(cache) -> int:
    """Whole-model blocks allocated in the paged cache now."""
    per_block = sum(a.bytes_per_block for a in cache.cache_allocators.values())
    return cache.num_blocks - int(cache.compute_free_capacity(relative=False)) // per_block


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

    def update_and_check_completion(self, token_id: int, logprob: float | None = None) -> bool:
        if self.status != RequestStatus.DECODING:
            return False
        now, wall_ns = time.perf_counter(), time.time_ns()
        self.generated_tokens.append(token_id)
        self.tokens_to_process = [token_id]
        reason = stop_reason(token_id, made=len(self.generated_tokens), length=self.position_offset + 1,
                             eos=self.eos_ids, max_new_tokens=self.max_new_tokens, window=self.context_window)
        self.events.put(("token", self, token_id, now, wall_ns, reason))
        if reason:
            self.status = RequestStatus.FINISHED
        return reason is not None


class TimedManager(ContinuousBatchingManager):
    """The library's manager with timed requests and one event per forward pass."""

    def __init__(self, model, generation_config, cb_config: ContinuousBatchingConfig, events: queue.SimpleQueue):
        super().__init__(model, generation_config, cb_config)
        self.events, self.in_pass = events, False   # in_pass: a forward pass is running (not stalled, just slow)

    def submit(self, request_id: str, ids: list[int], max_new_tokens: int, eos_ids: frozenset,
               context_window: int) -> None:
        self.input_queue.put(TimedRequestState(request_id=request_id, initial_tokens=list(ids),
                                               max_new_tokens=max_new_tokens, eos_ids=frozenset(eos_ids),
                                               context_window=context_window, events=self.events))
        self._wake_up_loop.set()

    def _generation_loop_body(self, bp, bootstrapping: bool) -> bool:
        if not bp.prepare_next_batch():
            status = self.background_thread_status.tp_status
            if status == BackgroundThreadStatus.HARD_STOP or (
                    status == BackgroundThreadStatus.FLUSH_AND_STOP and not bp.has_pending_requests()):
                return False
            self._wake_up_loop.wait(timeout=IDLE_WAIT)
            self._wake_up_loop.clear()
            return True
        start, self.in_pass = time.perf_counter(), True
        # a request reads its prompt (a chunk of it) until it has made its first token
        batch = [(f.state, f.query_length, not f.state.generated_tokens) for f in bp.inputs_and_outputs.requests_in_batch]
        try:
            self._generation_step()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            bp.update_batch()
        finally:
            self.in_pass = False
        self.events.put(("batch", start, time.perf_counter(), batch, blocks_in_use(bp.cache)))
        return True


_models: dict[int, Any] = {}
_lock = threading.Lock()


def paged_model(model):
    """A copy of `model` that shares its weights (no second copy of the parameters), for the manager to run on:
    whatever it sets on the model (its attention, its state) leaves the Engine's own model as it was."""
    with _lock:
        if id(model) not in _models:
            shared = {id(p): p for p in model.parameters()}
            _models[id(model)] = copy.deepcopy(model, memo=shared).eval()
        return _models[id(model)]


class quiet_manager_log:
    """The manager logs a warning per cancelled request still waiting (no blocks to free): keep it quiet."""

    def __enter__(self):
        self.level = cb_logger.level
        cb_logger.setLevel(logging.ERROR)

    def __exit__(self, *exc):
        cb_logger.setLevel(self.level)
