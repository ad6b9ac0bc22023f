"""What every server the remote source watches must do, against a real one: llama.cpp's llama-server on the
bundled GGUF (fixture `llama_server`), or the server at PLAYGROUND_TEST_ENDPOINT (scripts/vllm_gpu.sh sets it
to vLLM serving the same model). The llama.cpp-only figures are in test_remote_llama.py."""
from __future__ import annotations

import os
import threading

import pytest

from playground.config import GenerationSettings
from playground.remote import RemoteSource

pytestmark = [pytest.mark.server, pytest.mark.integration]

FRANCE = "What is the capital of France?"
SEED_SENTENCE = "Serving LLMs is not like serving web apps."


@pytest.fixture(scope="module")
def remote(request):
    url = os.environ.get("PLAYGROUND_TEST_ENDPOINT")
    return RemoteSource(url or request.getfixturevalue("llama_server").url)


def long_run(remote, tokens: int):
    """A run from exact ids that ignores EOS, so it lasts `tokens` tokens."""
    return remote.run_ids(remote.encode(SEED_SENTENCE), GenerationSettings(max_new_tokens=tokens), ignore_eos=True)


def test_the_server_says_what_it_is_and_what_it_can_give(remote):
    assert remote.kind.name in ("llama.cpp", "vllm") and remote.info.origin == "remote"
    assert remote.info.context_window and remote.info.kv_shape is not None   # the bundled model's shape
    assert remote.capabilities.missing() == ["measured KV-cache bytes", "runs without a KV cache"]


def test_the_seed_sentence_is_11_tokens_without_bos(remote):
    ids = remote.encode(SEED_SENTENCE)
    assert len(ids) == 11 and ids == remote.tokenizer(SEED_SENTENCE, add_special_tokens=False)["input_ids"]


def test_a_streamed_run_carries_ids_probabilities_and_top_k(remote):
    trace = remote.run(FRANCE, GenerationSettings(max_new_tokens=8)).wait()
    assert trace.server["usage"]["prompt_tokens"] == len(trace.prompt_ids) and "warnings" not in trace.server
    assert all(isinstance(s.token_id, int) and 0 < s.prob <= 1 and len(s.top) == 5 for s in trace.steps)
    assert all(s.token_id == s.top[0].token_id for s in trace.steps)                  # greedy: the argmax
    assert trace.metrics().ttft > 0 and all(b.time > a.time for a, b in zip(trace.steps, trace.steps[1:]))
    assert trace.server["token_count_source"] == "logprobs: one entry per token"


def test_the_streamed_answer_equals_the_non_streamed_one(remote):
    settings = GenerationSettings(max_new_tokens=12)
    streamed = remote.run(FRANCE, settings).wait().text
    reply = remote.client.post_json("/v1/chat/completions", {"model": remote.model, "max_tokens": 12,
                                     **remote.kind.sampling(settings),
                                     "messages": [{"role": "user", "content": FRANCE}]})
    assert streamed == reply["choices"][0]["message"]["content"]


def test_the_servers_figures_are_sampled_while_the_request_runs(remote):
    trace = long_run(remote, 24).wait()
    during = [s for s in trace.server["samples"] if s["when"] == "during the run"]
    assert during and during[0]["running"] >= 1
    if remote.kind.name == "vllm":
        assert 0 < during[0]["kv_pool_used_share"] <= 1


def test_two_requests_at_once_are_served_side_by_side(remote):
    runs = [long_run(remote, 24), long_run(remote, 24)]
    threads = [threading.Thread(target=r.wait) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    a, b = (r.trace for r in runs)
    assert a.metrics().output_tokens == b.metrics().output_tokens == 24
    assert a.steps[0].wall_ns < b.steps[-1].wall_ns and b.steps[0].wall_ns < a.steps[-1].wall_ns   # overlapping


def test_stop_mid_stream_ends_the_run(remote):
    run = long_run(remote, 400)
    for step in run:
        if step.index == 2:
            run.cancel()
    assert run.trace.stop_reason == "cancelled" and 3 <= len(run.trace.steps) < 400


def test_an_exact_id_run_ignores_eos_and_runs_to_its_budget(remote):
    trace = long_run(remote, 16).wait()
    assert trace.stop_reason == "length" and trace.metrics().output_tokens == 16
    assert trace.server["usage"]["prompt_tokens"] == 11
