"""What only llama.cpp's llama-server gives (fixture `llama_server`, conftest): its per-request timings, /slots,
a fresh prefill on request, and the prefill/depth experiments and Compare on it. (What every server must do:
test_remote_server.py.)"""
from __future__ import annotations

import time

import pytest

from playground.compare import compare_backends, explain
from playground.config import GenerationSettings
from playground.experiments.registry import EXPERIMENTS
from playground.remote import RemoteSource

pytestmark = [pytest.mark.server, pytest.mark.integration]

FRANCE = "What is the capital of France?"
SEED_SENTENCE = "Serving LLMs is not like serving web apps."


@pytest.fixture(scope="module")
def remote(llama_server):
    return RemoteSource(llama_server.url)


def long_run(remote, tokens: int):
    """A run from exact ids that ignores EOS, so it lasts `tokens` tokens."""
    return remote.run_ids(remote.encode(SEED_SENTENCE), GenerationSettings(max_new_tokens=tokens), ignore_eos=True)


def test_the_server_is_described_from_its_own_endpoints(remote, llama_server):
    info = remote.info
    assert info.name == f"llama.cpp @ 127.0.0.1:{llama_server.port}" and info.origin == "remote"
    assert info.context_window == 2048 and info.dtype == "Q4_1"           # -c 4096 over 2 slots
    assert (info.kv_shape.layers, info.kv_shape.kv_heads, info.kv_shape.head_dim) == (30, 3, 64)
    assert remote.capabilities.missing() == ["measured KV-cache bytes", "runs without a KV cache"]
    with pytest.raises(ValueError, match="serves a context window of 2048 tokens"):
        remote.run_ids([67] * 2048, GenerationSettings(max_new_tokens=1))   # refused before it is sent


def test_a_streamed_run_carries_the_servers_own_timings(remote):
    trace = remote.run(FRANCE, GenerationSettings(max_new_tokens=8)).wait()
    assert len(trace.prompt_ids) == 37 and trace.server["prompt_ids_source"] == "server /tokenize"
    timings = trace.server["timings"]
    assert timings["predicted_n"] == trace.metrics().output_tokens
    assert timings["prompt_n"] + timings["cache_n"] == 37 and timings["prompt_ms"] > 0


def test_slots_are_sampled_while_the_request_runs(remote):
    trace = long_run(remote, 24).wait()
    during = [s for s in trace.server["samples"] if s["when"] == "during the run"]
    assert len(during[0]["slots"]) == 2 and any(slot["processing"] for slot in during[0]["slots"])


def test_stop_mid_stream_ends_the_run_and_frees_the_servers_slot(remote):
    run = long_run(remote, 400)
    for step in run:
        if step.index == 2:
            run.cancel()
    assert run.trace.stop_reason == "cancelled" and 3 <= len(run.trace.steps) < 400
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        slots = remote.client.get_json("/slots")
        if not any(slot["is_processing"] for slot in slots):
            break
        time.sleep(0.2)
    assert not any(slot["is_processing"] for slot in slots)


def test_an_exact_id_run_ignores_eos_and_prefills_afresh_each_time(remote):
    for _ in range(2):   # the same ids twice: the second is not served from the prompt cache
        trace = long_run(remote, 16).wait()
        assert trace.stop_reason == "length" and trace.metrics().output_tokens == 16
        assert trace.server["timings"]["prompt_n"] == 11 and trace.server["timings"]["cache_n"] == 0


def test_with_reuse_prefix_a_repeat_of_exact_ids_is_served_from_the_servers_prompt_cache(llama_server):
    """As a replayed trace needs it (the sessions bench row): llama-server's prompt cache as it ships."""
    source = RemoteSource(llama_server.url, figure_interval=0, reuse_prefix=True)
    ids = source.encode(SEED_SENTENCE + " A sentence of its own, so no other test's prompt is cached.")
    first, second = (source.run_ids(ids, GenerationSettings(max_new_tokens=4), ignore_eos=True).wait()
                     for _ in range(2))
    assert first.server["timings"]["prompt_n"] + first.server["timings"]["cache_n"] == len(ids)
    assert second.server["timings"]["cache_n"] >= len(ids) - 1   # all but the last prompt token reused
    assert second.server["timings"]["prompt_n"] + second.server["timings"]["cache_n"] == len(ids)


def test_the_prefill_and_depth_experiments_run_on_the_server(remote):
    sweep = EXPERIMENTS["prefill"].run(remote, {"min_length": 8, "max_length": 64, "points": 3, "repeats": 1})
    assert [p.length for p in sweep.points] == [8, 23, 64] and all(p.median > 0 for p in sweep.points)
    depth = EXPERIMENTS["depth"].run(remote, {"prompt_tokens": 16, "new_tokens": 8})
    assert len(depth.latency) == 8 and depth.kv_bytes == [None] * 8 and all(depth.kv_formula_bytes)
    with pytest.raises(ValueError, match="runs without a KV cache"):
        EXPERIMENTS["cache"].run(remote, {"prompt_tokens": 16, "new_tokens": 4})


def test_compare_shows_where_the_server_and_the_local_model_part_and_why(remote, smol_engine):
    """Same chat template, same 37 prompt ids: where the greedy answers part, it is a near-tie that the
    two runtimes' arithmetic (Q4_1 kernels against the float32 dequantization) breaks differently."""
    c = compare_backends(FRANCE, GenerationSettings(max_new_tokens=16), smol_engine, remote)
    assert c.a.prompt_ids == c.b.prompt_ids and len(c.a.prompt_ids) == 37
    if c.first_divergence is not None:
        k = c.first_divergence
        mine, theirs = c.a.steps[k], c.b.steps[k]
        assert theirs.token_id in [cand.token_id for cand in mine.top]     # a close second, not noise
        assert mine.token_id in [cand.token_id for cand in theirs.top]
        assert "same prompt ids" in explain(c) and f"At output token {k}" in explain(c)
    same_ids = [t.run_ids(c.a.prompt_ids, GenerationSettings(max_new_tokens=16)).wait() for t in (smol_engine, remote)]
    assert [s.token_id for s in same_ids[1].steps] == [s.token_id for s in c.b.steps]   # chat == the same ids
