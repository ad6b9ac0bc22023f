"""Continuous batching through transformers' manager: the same greedy tokens as each prompt alone, chunked
prefill, the block pool, EOS and the token budget as the Engine has them, cancel that frees everything.

Unit tests use a tiny random Llama whose weights are scaled up so its greedy tokens vary (the plain tiny
model repeats one token, which could not tell a misplaced logit row from a right one); the bundled
model runs under `integration`.
"""
from __future__ import annotations

from dataclasses import replace

import gc
import threading
import time

import psutil
import pytest

from playground.backends.torch_backend import TorchBackend
from playground.config import GenerationSettings
from playground.engine import Engine
from playground.serve import Request, RequestClass, Workload, default_classes
from playground.serve.batching_torch import BatchingScheduler, PoolConfig
from tests.fakes import ThreadSafeFakeSource
from tests.helpers import check_timelines

PROMPTS = ["What is the capital of France?", "Why is the sky blue?", "Name three fruits, please."]


def alone(engine, request, top=2):
    settings = GenerationSettings(max_new_tokens=request.max_new_tokens, top_candidates=top)
    if request.ignore_eos:
        return engine.run_ids(engine.prompt_ids(request.prompt, settings)[1], settings, ignore_eos=True).wait()
    return engine.run(request.prompt, settings).wait()


def agreement(engine, result):
    """(identical requests, requests); a difference must start at a near-tie of the request run alone."""
    same = 0
    for r in result.records:
        ref = alone(engine, r.request)
        got = r.trace.output_ids
        if got == ref.output_ids:
            same += 1
            continue
        i = next(i for i, (a, b) in enumerate(zip(got + [None], ref.output_ids + [None])) if a != b)
        top = ref.steps[i].top
        assert top[0].prob - top[1].prob < 1e-3, f"request {r.request.id} differs at token {i}, not a near-tie"
    return same, len(result.records)


def mixed_workload(engine, arrival="all-at-once", rate=None, n=8, new=12):
    classes = [RequestClass(f"p{i}", p, new, 1.0) for i, p in enumerate(PROMPTS)]
    classes += default_classes(engine, new, {"long": 1.0})[1:]   # the long document, cut to the tiny model's window
    return Workload.build(classes, n, arrival, rate, seed=4)


@pytest.mark.slow
@pytest.mark.parametrize("arrival, rate, manager", [("all-at-once", None, "fifo"), ("poisson", 30.0, "fifo"),
                                                    ("all-at-once", None, "prefill_first")])
def test_batched_greedy_tokens_equal_each_prompt_alone(varied_engine, arrival, rate, manager):
    """Poisson arrivals in real time need not overlap on a busy machine (a request may end before the next
    arrives), so there the first two arrive together: sharing a forward pass is then certain, whatever the load,
    and the later ones still join a batch that is already running."""
    w = mixed_workload(varied_engine, arrival, rate)
    if arrival == "poisson":
        first, second, *rest = w.requests
        w = replace(w, requests=(first, replace(second, arrival=first.arrival), *rest))
    result = BatchingScheduler(varied_engine, PoolConfig(max_batch_tokens=128, scheduler=manager)).run(w)
    check_timelines(result)
    same, total = agreement(varied_engine, result)
    assert same == total   # fp32 on CPU: no near-tie flipped here; a flip would have to be a near-tie (above)
    assert max(b.requests for b in result.batches) > 1   # they really shared forward passes


def test_long_prompts_are_prefilled_in_chunks_of_at_most_max_batch_tokens(varied_engine):
    w = mixed_workload(varied_engine, n=4)
    result = BatchingScheduler(varied_engine, PoolConfig(max_batch_tokens=64)).run(w)
    long = [r for r in result.records if r.request.cls == "long"]
    assert long
    for r in result.records:
        assert sum(n for _, _, n in r.chunks) == r.prompt_tokens and all(n <= 64 for _, _, n in r.chunks)
        assert r.admitted <= r.chunks[0][0] and all(a < b for a, b, _ in r.chunks)
        assert r.chunks[-1][0] <= r.first_token <= r.chunks[-1][1] + 1e-6   # the last chunk's pass makes it
    assert all(len(r.chunks) > 1 for r in long)
    assert max(b.prefill_tokens + b.decode_tokens for b in result.batches) <= 64


def test_the_pool_is_sized_for_the_workload_and_freed_at_the_end(varied_engine):
    w = mixed_workload(varied_engine, n=6)
    result = BatchingScheduler(varied_engine).run(w)
    pool = result.pool
    lengths = [r.prompt_tokens + r.request.max_new_tokens for r in result.records]
    assert pool["num_blocks"] == PoolConfig().blocks_for(lengths) == result.kv_total
    assert pool["left_alone_num_blocks"] > pool["num_blocks"]   # left alone it takes far more
    assert result.kv_unit == "blocks" and 0 < max(v for _, v in result.kv) <= pool["num_blocks"]
    assert result.kv[-1][1] == 0   # every request's blocks are back in the pool


def test_every_eos_id_stops_a_request_as_the_engine_does(varied_engine):
    """The library compares with one eos id (a list never matches); a backend may have several."""
    request = Request(0, "q", PROMPTS[0], 12, 0.0)
    tokens = alone(varied_engine, request).output_ids
    b = varied_engine.backend
    eos_backend = TorchBackend(b.loaded, "cpu", "float32")
    eos_backend.eos_token_ids = frozenset({tokens[3], 0})
    engine = Engine(eos_backend)
    result = BatchingScheduler(engine).run(Workload((request, Request(1, "q", PROMPTS[1], 12, 0.0))))
    ref = alone(engine, request)
    assert ref.stop_reason == "eos" and len(ref.steps) <= 4
    assert result.records[0].stop_reason == "eos" and result.records[0].trace.output_ids == ref.output_ids


def test_a_request_makes_exactly_its_token_budget_and_no_extra_pass(varied_engine):
    """The library computes one decode step past max_new_tokens and drops it; the adapter stops at the budget."""
    result = BatchingScheduler(varied_engine).run(Workload((Request(0, "q", PROMPTS[0], 5, 0.0, ignore_eos=True),)))
    assert result.records[0].output_tokens == 5 and result.records[0].stop_reason == "length"
    assert len(result.batches) == 5   # one prefill pass (the first token) + 4 decode passes


def test_the_paged_copy_shares_the_weights_and_leaves_the_engines_model_alone(varied_engine):
    from playground.serve.batching_torch_adapter import paged_model
    model = varied_engine.backend.model
    paged = paged_model(model)
    assert paged is not model and paged_model(model) is paged
    assert all(a is b for a, b in zip(model.parameters(), paged.parameters()))   # no second copy of the weights
    attention = model.config._attn_implementation
    assert paged.config is not model.config
    try:   # what the manager sets on its copy (the attention it runs) stays off the Engine's model
        paged.set_attn_implementation("eager")
        assert model.config._attn_implementation == attention != paged.config._attn_implementation
    finally:
        paged.set_attn_implementation(attention)


def test_batching_needs_the_torch_backend(tiny_engine):
    with pytest.raises(ValueError, match="torch"):
        BatchingScheduler(ThreadSafeFakeSource())
    with pytest.raises(ValueError, match="fifo or prefill_first"):
        BatchingScheduler(tiny_engine, PoolConfig(scheduler="lifo"))


def run_and_cancel(engine, after_tokens=3):
    w = Workload.build([RequestClass("q", PROMPTS[0], 300, 1.0)], 8, ignore_eos=True)
    cancel, scheduler = threading.Event(), BatchingScheduler(engine)
    result = scheduler.prepare(w)
    thread = threading.Thread(target=scheduler.run, args=(w, None, cancel, result))
    thread.start()
    while sum(r.output_tokens for r in result.records) < after_tokens and thread.is_alive():
        time.sleep(0.005)
    cancel.set()
    thread.join(60)
    return result, thread


@pytest.mark.slow
def test_cancel_stops_every_request_and_the_manager_and_memory_does_not_grow(varied_engine):
    result, thread = run_and_cancel(varied_engine)
    assert not thread.is_alive() and result.cancelled
    assert {r.stop_reason for r in result.records} == {"cancelled"}
    assert all(r.output_tokens < 300 for r in result.records)
    assert not [t for t in threading.enumerate() if "_run_generation_loop" in t.name]
    gc.collect()
    before = psutil.Process().memory_info().rss
    for _ in range(4):
        run_and_cancel(varied_engine)
    gc.collect()
    assert psutil.Process().memory_info().rss - before < 40 * 2**20


@pytest.mark.integration
def test_bundled_model_batched_equals_alone_and_stops_at_im_end(smol_engine):
    """The probe that ran past <|im_end|>: every short answer ends at EOS, token for token as run alone."""
    classes = default_classes(smol_engine, 24)
    w = Workload.build(classes, 6, "poisson", 4.0, seed=0)
    result = BatchingScheduler(smol_engine).run(w)
    check_timelines(result)
    same, total = agreement(smol_engine, result)
    assert same == total
    shorts = [r for r in result.records if r.request.cls == "short"]
    im_end = smol_engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert shorts and all(r.stop_reason == "eos" and r.trace.output_ids[-1] == im_end for r in shorts)
