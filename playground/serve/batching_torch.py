"""Continuous batching on the local torch backend, through transformers' own manager (batching_torch_adapter.py).

    scheduler = BatchingScheduler(torch_engine, PoolConfig(max_batch_tokens=256, scheduler="fifo"))
    result = scheduler.run(workload)            # result.pool: the block pool as sized; result.batches: each pass

Requests enter the manager at their arrival times; its scheduler admits them into a batch (admission =
the request leaves PENDING), prefills long prompts in chunks of at most `max_batch_tokens`, and decodes
all running requests together, one forward pass per step, over a paged KV cache. The block pool is
sized here: by default just large enough for every request of the workload at once (the library
raises if a step leaves no free block), never the "up to 90% of free memory" it picks by itself; the
result shows both. KV in use over time = blocks allocated after each pass, of the pool's total.

Greedy only. Tokens equal the Engine's (same weights, argmax) except where a batched fp32 path
reorders a sum and a near-tie flips; tests/serve/test_serve_batching_torch.py measures how often.

Left out: sampling, CUDA graphs, and the library's own answer to a full pool (it sets a request back to waiting,
its cache dropped, to be read again): the pool here holds the whole workload.
"""
from __future__ import annotations

import math
import queue
from dataclasses import asdict, dataclass, replace

from transformers import GenerationConfig

from ..sampling import Detokenizer
from ..next_token import sampled_step
from ..trace import StopReason, Trace
from .batching_torch_adapter import (ADMITTED, RequestStatus, TimedManager, batching_config, left_alone_pool,
                                     paged_model, quiet_manager_log)
from .records import BatchStep
from .schedulers import Scheduler, progress_line, request_ids, settings_for
from .sessions import Releases

MAX_POOL_BLOCKS = 4096        # the most this scheduler asks for
STALL_AFTER = 60.0            # seconds with requests in the manager, no event and no pass running: an error


@dataclass(frozen=True)
class PoolConfig:
    block_size: int = 32             # tokens per KV block (the manager's default)
    num_blocks: int | None = None    # None: enough for every request of the workload at once
    max_batch_tokens: int = 256      # tokens per forward pass; a longer prompt is prefilled in chunks of this size
    scheduler: str = "fifo"          # "fifo" (running decodes first) | "prefill_first" (split prefills first)

    def blocks_for(self, lengths: list[int]) -> int:
        """Blocks for requests of these total lengths (prompt + new tokens) at once, with the library's slack."""
        return sum(math.ceil(n / self.block_size) + 2 for n in lengths) + 1


class BatchingScheduler(Scheduler):
    name, label = "batching-torch", "continuous batching (transformers' manager, paged KV; torch)"

    def __init__(self, source, pool: PoolConfig | None = None):
        super().__init__(source)
        backend = getattr(source, "backend", None)
        if getattr(backend, "model", None) is None or backend.name != "torch":
            raise ValueError("transformers' continuous-batching manager runs on the local torch backend; pick torch "
                             "as its source (on ONNX Runtime, the scheduler 'batching' batches)")
        self.backend, self.pool = backend, pool or PoolConfig()
        if self.pool.scheduler not in ("fifo", "prefill_first"):
            raise ValueError(f"the manager's scheduler must be fifo or prefill_first, got {self.pool.scheduler!r}")
        if not 1 <= self.pool.max_batch_tokens <= 4096 or not 4 <= self.pool.block_size <= 256:
            raise ValueError("max batch tokens must be 1-4096 and the block size 4-256 (the manager's least page)")

    def _run(self, result, clock, report):
        b, records = self.backend, {f"req_{r.request.id}": r for r in result.records}
        prompts = {}
        for record in result.records:
            try:
                prompts[record.request.id] = request_ids(self.source, record.request)
            except ValueError as exc:
                record.stop_reason, record.error, record.finished = StopReason.ERROR, str(exc), record.arrival
        lengths = [len(prompts[r.request.id][1]) + r.request.max_new_tokens for r in result.records if r.request.id in prompts]
        pool = self.pool if self.pool.num_blocks else replace(self.pool, num_blocks=self.pool.blocks_for(lengths))
        if pool.num_blocks > MAX_POOL_BLOCKS:
            raise ValueError(f"the workload needs {pool.num_blocks} KV blocks at once; the most is {MAX_POOL_BLOCKS}")
        model = paged_model(b.model)
        alone = left_alone_pool(model, pool.block_size)
        bytes_per_block = b.kv_shape.formula_bytes(pool.block_size)
        result.pool = {**asdict(pool), "bytes_per_block": bytes_per_block, "left_alone_num_blocks": alone[0],
                       "left_alone_max_batch_tokens": alone[1], "left_alone_bytes": alone[0] * bytes_per_block}
        result.kv_unit, result.kv_total = "blocks", pool.num_blocks
        result.kv_note = f"paged KV blocks allocated, of the pool's {pool.num_blocks} ({pool.block_size} tokens each)"
        config = GenerationConfig(max_new_tokens=max(r.request.max_new_tokens for r in result.records), do_sample=False,
                                  eos_token_id=model.generation_config.eos_token_id, pad_token_id=min(b.eos_token_ids))
        events = queue.SimpleQueue()
        manager = TimedManager(model, config, batching_config(pool.block_size, pool.num_blocks, pool.max_batch_tokens,
                                                              pool.scheduler), events)
        clock.restart(result)   # the requests arrive on a clock that starts once the manager can take them
        self._live, self._detok, self._last_event = {}, {}, clock.now()
        pending = sorted((r for r in result.records if r.request.id in prompts), key=lambda r: r.arrival)
        releases = Releases(result.records)
        with quiet_manager_log():
            manager.start()
            try:
                while not report.cancelled:
                    for r in releases.take_due(pending, clock.now()):
                        ids = prompts[r.request.id][1]
                        r.prompt_tokens = len(ids)
                        manager.submit(f"req_{r.request.id}", ids, r.request.max_new_tokens,
                                       frozenset() if r.request.ignore_eos else b.eos_token_ids, b.context_window)
                    if not pending and all(r.stop_reason for r in result.records):
                        break
                    if not manager.is_running():
                        raise RuntimeError("the continuous-batching manager stopped unexpectedly")
                    if manager.in_pass:
                        self._last_event = clock.now()   # slow (a loaded CPU), not stuck
                    elif clock.now() - self._last_event > STALL_AFTER and any(
                            r.prompt_tokens is not None and not r.stop_reason for r in result.records):
                        raise RuntimeError(f"the batching manager made no progress for {STALL_AFTER:.0f} s: its KV "
                                           f"pool ({pool.num_blocks} blocks) is too small for these requests: "
                                           "give it more blocks")
                    first = releases.next(pending)
                    wait = min(max(first[1] - clock.now(), 0.001), 0.05) if first else 0.05
                    self._drain(events, wait, records, prompts, result, clock)
                    report(*progress_line(result))
            finally:
                for rid, record in records.items():
                    if record.stop_reason is None:
                        manager.cancel_request(rid)   # freed at the manager's next step
                manager.stop(block=True, timeout=60)
                self._drain(events, 0, records, prompts, result, clock)
                for state, record in self._live.values():
                    record.error = record.error or state.error

    def _drain(self, events, wait, records, prompts, result, clock) -> None:
        try:
            event = events.get(timeout=wait) if wait else events.get_nowait()
        except queue.Empty:
            return
        self._last_event = clock.now()
        while event is not None:
            getattr(self, f"_on_{event[0]}")(*event[1:], records=records, prompts=prompts, result=result, clock=clock)
            try:
                event = events.get_nowait()
            except queue.Empty:
                event = None

    def _on_status(self, state, old, new, t, records, prompts, result, clock):
        record = records[state.request_id]
        if old == RequestStatus.PENDING and new in ADMITTED:
            record.admitted = clock.since(t)
            request = record.request
            text, ids = prompts[request.id]
            b = self.backend
            record.trace = Trace(request.prompt, text, ids, settings_for(request), f"{b.name} · continuous batching",
                                 b.device, b.dtype, b.model_name, b.kv_shape, ignore_eos=request.ignore_eos)
            self._live[request.id] = (state, record)
            self._detok[request.id] = Detokenizer(b.tokenizer, ids)
        elif new == RequestStatus.FAILED:
            record.stop_reason, record.finished = StopReason.ERROR, clock.since(t)
            if record.trace is not None:
                record.trace.stop_reason = StopReason.ERROR

    def _on_token(self, state, token, t, wall_ns, reason, records, prompts, result, clock):
        record = records[state.request_id]
        steps, detok = record.trace.steps, self._detok[record.request.id]
        at = clock.since(t) - record.admitted
        sampled_step(steps, token, detok, time=at, latency=at - (steps[-1].time if steps else 0.0),
                     seq_len=len(record.trace.prompt_ids) + len(steps), wall_ns=wall_ns)
        if reason:
            record.stop_reason = record.trace.stop_reason = reason
            record.finished = clock.since(t)

    def _on_batch(self, start, end, batch, used, records, prompts, result, clock):
        prefill = [(state, n) for state, n, is_prefill in batch if is_prefill]
        for state, n in prefill:
            records[state.request_id].chunks.append((clock.since(start), clock.since(end), n))
        result.batches.append(BatchStep(clock.since(start), clock.since(end), len(batch), sum(n for _, n in prefill),
                                        len(batch) - len(prefill), used))
        result.kv.append((clock.since(end), used))
