"""The step loop on a tiny in-process Llama: records, KV bytes, sampling, cancellation, bad input."""
import itertools

import pytest
import torch

from playground.config import GenerationSettings
from playground.engine import Engine
from playground.sampling import Detokenizer
from tests.fakes import SlowBackend
from tests.helpers import wait_for

GREEDY8 = GenerationSettings(max_new_tokens=8)


@pytest.mark.slow
def test_one_step_per_token_with_phases_and_growing_cache(tiny_engine):
    trace = tiny_engine.generate("The capital of France", GREEDY8)
    steps = trace.steps
    assert len(steps) == 8 and trace.stop_reason == "length"
    assert [s.index for s in steps] == list(range(8))
    assert steps[0].phase == "prefill" and {s.phase for s in steps[1:]} == {"decode"}
    p = len(trace.prompt_ids)
    assert [s.seq_len for s in steps] == list(range(p, p + 8))
    times = [s.time for s in steps]
    assert times == sorted(times) and times[0] > 0
    assert steps[0].latency == pytest.approx(steps[0].time)
    for a, b in zip(steps, steps[1:]):
        assert b.latency == pytest.approx(b.time - a.time)


# The torch backend's Steps on the varied tiny model as transformers 4.57 made them (recorded before the move to
# transformers 5): "Why is the sky blue?" in the chat template, 16 greedy tokens.
STEPS_4_57 = [275, 376, 384, 369, 381, 154, 297, 332, 398, 344, 372, 150, 59, 326, 303, 196]


def test_torch_steps_are_those_transformers_4_57_made(varied_engine):
    trace = varied_engine.generate("Why is the sky blue?", GenerationSettings(max_new_tokens=16))
    assert trace.output_ids == STEPS_4_57
    assert [(s.seq_len, s.kv_bytes) for s in trace.steps] == [(29 + i, 512 * (29 + i)) for i in range(16)]


@pytest.mark.slow
def test_kv_bytes_measured_equal_the_formula_at_every_step(tiny_engine):
    trace = tiny_engine.generate("KV cache", GenerationSettings(max_new_tokens=12))
    shape = trace.kv_shape
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.bytes_per_element) == (2, 2, 16, 4)
    for s in trace.steps:
        assert s.kv_bytes == 2 * 2 * 2 * 16 * s.seq_len * 4 == shape.formula_bytes(s.seq_len)


def test_top_candidates_are_a_sorted_distribution(tiny_engine):
    trace = tiny_engine.generate("hello", GenerationSettings(max_new_tokens=3, top_candidates=7))
    for s in trace.steps:
        probs = [c.prob for c in s.top]
        assert len(probs) == 7 and probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-6
        assert s.token_id == s.top[0].token_id and s.prob == pytest.approx(probs[0])  # greedy = argmax


@pytest.mark.slow
def test_greedy_stream_equals_plain_generate(tiny_engine):
    trace = tiny_engine.generate("Prefill reads the prompt", GenerationSettings(max_new_tokens=10))
    assert trace.output_ids == tiny_engine.backend.generate_reference(trace.prompt_ids, 10)


@pytest.mark.slow
def test_seeded_sampling_is_reproducible_and_seeds_differ(tiny_engine):
    s = GenerationSettings(max_new_tokens=16, temperature=1.5, top_k=50, top_p=0.95, seed=11)
    a, b = (tiny_engine.generate("tokens", s).output_ids for _ in range(2))
    others = {tuple(tiny_engine.generate("tokens", s.with_(seed=k)).output_ids) for k in range(4)}
    assert a == b
    assert len(others) > 1


def test_top_k_one_sampling_is_greedy(tiny_engine):
    sampled = tiny_engine.generate("cost", GenerationSettings(max_new_tokens=6, temperature=1.0, top_k=1, seed=0))
    greedy = tiny_engine.generate("cost", GenerationSettings(max_new_tokens=6))
    assert sampled.output_ids == greedy.output_ids
    assert all(s.sample_prob == pytest.approx(1.0) for s in sampled.steps)   # top-1: a sure draw
    assert [s.prob for s in sampled.steps] == pytest.approx([s.prob for s in greedy.steps])  # the model's own
    assert all(s.prob < 0.5 for s in sampled.steps)   # a random tiny model is far from sure of anything


def test_stops_at_eos(tiny_backend):
    eos = next(iter(tiny_backend.eos_token_ids))
    original = tiny_backend.decode

    def decode_then_force_eos(token, state):
        logits, state = original(token, state)
        forced = torch.full_like(logits.clone(), -1e9)
        forced[eos] = 0.0
        return forced, state

    tiny_backend.decode = decode_then_force_eos
    try:
        trace = Engine(tiny_backend).generate("stop", GenerationSettings(max_new_tokens=20))
    finally:
        del tiny_backend.decode
    assert trace.stop_reason == "eos" and len(trace.steps) == 2 and trace.steps[-1].special


def test_cancel_stops_within_one_step_and_keeps_the_partial_trace(tiny_engine):
    run = tiny_engine.run("a long answer", GenerationSettings(max_new_tokens=200))
    decodes = []
    original = tiny_engine.backend.decode
    for step in run:
        if step.index == 4:
            run.cancel()
            tiny_engine.backend.decode = lambda *a: decodes.append(1) or original(*a)
    del tiny_engine.backend.decode
    assert run.trace.stop_reason == "cancelled" and len(run.trace.steps) == 5
    assert decodes == []  # no forward pass ran after the cancel


def test_closing_the_stream_cancels(tiny_engine):
    run = tiny_engine.run("close me", GenerationSettings(max_new_tokens=100))
    it = iter(run)
    next(it), next(it)
    it.close()
    assert run.trace.stop_reason == "cancelled" and len(run.trace.steps) == 2


def test_fake_clock_gives_exact_metrics(tiny_backend):
    ticks = itertools.count()
    engine = Engine(tiny_backend, clock=lambda: float(next(ticks)))  # t0=0, tokenized=1, tokens at 2,3,...
    m = engine.generate("clock", GenerationSettings(max_new_tokens=5)).metrics()
    assert (m.ttft, m.e2e, m.tpot, m.itl, m.decode_tps) == (2.0, 6.0, 1.0, (1.0,) * 4, 1.0)
    assert m.output_tokens == 5 and m.prefill_tps == pytest.approx(m.prompt_tokens / 2.0)


def test_chat_template_and_raw_mode(tiny_engine):
    text, ids = tiny_engine.prompt_ids("hi", GenerationSettings())
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    raw_text, raw_ids = tiny_engine.prompt_ids("hi", GenerationSettings(chat=False))
    assert raw_text == "hi" and len(raw_ids) < len(ids)
    sys_text, _ = tiny_engine.prompt_ids("hi", GenerationSettings(system_prompt="Be brief."))
    assert sys_text.startswith("<|im_start|>system\nBe brief.<|im_end|>")


@pytest.mark.parametrize("prompt,needle", [
    ("", "empty"), ("   \n\t ", "empty"), (None, "must be text"), (b"bytes", "must be text"),
    ("bad \ud800 surrogate", "surrogate"), ("x" * 300_000, "characters"),
])
def test_bad_prompts_raise_clear_value_errors(tiny_engine, prompt, needle):
    with pytest.raises(ValueError, match=needle):
        tiny_engine.run(prompt, GREEDY8)


def test_prompt_over_the_context_window_says_both_numbers(tiny_engine):
    with pytest.raises(ValueError, match=r"prompt is \d+ tokens; the model's context window is 512"):
        tiny_engine.run("tokens " * 600, GREEDY8)


def test_out_of_range_settings_are_refused_before_any_work(tiny_engine):
    with pytest.raises(ValueError, match="temperature"):
        tiny_engine.run("hi", GenerationSettings(temperature=-1))


@pytest.mark.slow
def test_generation_stops_when_the_context_is_full(tiny_engine):
    trace = tiny_engine.generate("tokens " * 250, GenerationSettings(max_new_tokens=2000, chat=False))
    assert trace.stop_reason in ("context", "eos")
    assert trace.steps[-1].seq_len + 1 <= 512


@pytest.mark.parametrize("text", ["a😀b", "中文字符", "👨‍👩‍👧‍👦 family", "e\u0301 and ﷽", "tab\tnew\nline"])
def test_detokenizer_pieces_never_split_a_character(tiny_backend, text):
    tok = tiny_backend.tokenizer
    ids = tok(text, add_special_tokens=False)["input_ids"]
    detok = Detokenizer(tok, tok("Hello", add_special_tokens=False)["input_ids"])
    pieces = [detok.add(i) for i in ids]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    # the tiny vocabulary knows no non-ASCII character whole: each spans several byte tokens
    assert ("" in pieces) == any(ord(c) > 127 for c in text)


def test_background_run_keeps_step_timing_free_of_a_slow_consumer(tiny_backend):
    """The UI draws charts between updates; with the run in its own thread, the step loop never waits for that
    drawing (so no step's latency holds it): here the page is still drawing its first batch when the run ends."""
    from playground.jobs import BackgroundRun

    engine = Engine(SlowBackend(tiny_backend, pause=0.005))   # ~5 ms a step
    background = BackgroundRun(engine.run("slow page", GenerationSettings(max_new_tokens=20)))
    batches = iter(background)
    first = next(batches)   # the page draws it, and takes as long as it likes
    trace = background.run.trace
    wait_for(lambda: trace.finished, timeout=60, message="the run to end while its page is still drawing")
    rest = list(batches)
    assert first + [s for b in rest for s in b] == trace.steps and trace.stop_reason == "length"
    assert len(rest) == 1   # the steps made meanwhile come in one batch


def test_background_run_cancel_stops_within_one_step(tiny_engine):
    from playground.jobs import BackgroundRun

    background = BackgroundRun(tiny_engine.run("stop me", GenerationSettings(max_new_tokens=2000, chat=False)))
    first = next(iter(background))
    background.stop(wait=5)
    assert not background.thread.is_alive() and background.run.trace.stop_reason == "cancelled"
    assert len(first) >= 1 and len(background.run.trace.steps) < 2000


@pytest.mark.slow
def test_whole_number_temperature_and_top_p_are_accepted(tiny_engine):
    """Regression (found by the fuzz test): temperature=1 as an int passed validation, then transformers'
    warper refused it ("has to be a strictly positive float")."""
    s = GenerationSettings(max_new_tokens=3, temperature=1, top_p=1, top_k=5, seed=0)
    assert len(tiny_engine.generate("int settings", s).steps) == 3
    assert len(tiny_engine.generate("int settings", s.with_(temperature=2, top_p=0.5)).steps) == 3


def test_background_run_stops_when_its_consumer_is_gone(tiny_backend):
    """Regression: a handler dropped by Gradio without being closed left its run generating to the end."""
    from playground.jobs import BackgroundRun

    engine = Engine(SlowBackend(tiny_backend, pause=0.005))
    background = BackgroundRun(engine.run("gone", GenerationSettings(max_new_tokens=2000)), lease=0.2)
    it = iter(background)
    next(it)                      # the consumer takes one batch, then never asks again (nor closes)
    background.thread.join(30)
    trace = background.run.trace
    assert trace.stop_reason == "cancelled" and len(trace.steps) < 2000


def test_cuda_choices_without_a_gpu(monkeypatch, tiny_backend):
    """What this machine can check of the CUDA path: CUDA is picked when present (torch backend, fp16),
    and a CUDA backend synchronizes before a timestamp is taken."""
    import torch

    import playground.backends as backends

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert backends.default_device() == "cuda" and backends.default_backend_name() == "torch"
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: synced.append(1))
    monkeypatch.setattr(tiny_backend, "device", "cuda")
    tiny_backend.synchronize()
    assert synced == [1]
    monkeypatch.setattr(tiny_backend, "device", "cpu")
    tiny_backend.synchronize()
    assert synced == [1]


@pytest.mark.slow
def test_each_timestamp_follows_a_synchronize(monkeypatch, tiny_backend):
    import time as _time

    events = []
    monkeypatch.setattr(tiny_backend, "synchronize", lambda: events.append("sync"))
    engine = Engine(tiny_backend, clock=lambda: events.append("clock") or _time.perf_counter())
    engine.generate("sync", GenerationSettings(max_new_tokens=3))
    assert events == ["clock", "clock"] + ["sync", "clock"] * 3   # t0, tokenized, then one pair per token


# --- what a step records: measured, not computed

class PaddedCacheBackend:
    """The tiny backend with a cache that reserves `reserve` positions beyond what it holds (as a static or
    paged cache does): the bytes measured from its tensors differ from the formula for seq_len."""

    def __init__(self, backend, reserve: int = 40):
        self._backend, self.reserve = backend, reserve

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def _pad(self, logits, cache):
        shape = self._backend.kv_shape
        spare = torch.zeros(2 * shape.layers, shape.kv_heads, self.reserve, shape.head_dim)
        return logits, (cache, spare)

    def prefill(self, ids):
        return self._pad(*self._backend.prefill(ids))

    def decode(self, token, state):
        return self._pad(*self._backend.decode(token, state[0]))

    def kv_cache_bytes(self, state):
        cache, spare = state
        return self._backend.kv_cache_bytes(cache) + spare.numel() * spare.element_size()


def test_kv_bytes_are_what_the_runtime_holds_not_the_formula(tiny_backend):
    trace = Engine(PaddedCacheBackend(tiny_backend)).generate("KV cache", GenerationSettings(max_new_tokens=5))
    shape = trace.kv_shape
    reserve = 2 * shape.layers * shape.kv_heads * 40 * shape.head_dim * 4
    for s in trace.steps:
        assert s.kv_bytes == shape.formula_bytes(s.seq_len) + reserve != shape.formula_bytes(s.seq_len)


def test_torch_kv_bytes_sum_the_cache_tensors_whatever_their_length(tiny_backend):
    from transformers import DynamicCache
    cache = DynamicCache()
    for layer in range(2):   # 100 positions held, while the formula for 3 tokens would say 3
        cache.update(torch.zeros(1, 2, 100, 16), torch.zeros(1, 2, 100, 16), layer)
    assert tiny_backend.kv_cache_bytes(cache) == 2 * 2 * (2 * 100 * 16 * 4)


class EndlessBackend(PaddedCacheBackend):
    """The tiny backend in a 24-token context window, with no end-of-sequence token at all."""
    context_window = 24
    eos_token_ids = frozenset()

    def __init__(self, backend):
        super().__init__(backend, reserve=0)


@pytest.mark.slow
def test_a_full_context_window_ends_the_run(tiny_backend):
    engine = Engine(EndlessBackend(tiny_backend))
    _, ids = engine.prompt_ids("The capital of France", GenerationSettings(chat=False))
    trace = engine.generate("The capital of France", GenerationSettings(max_new_tokens=100, chat=False))
    assert trace.stop_reason == "context" and len(trace.steps) == 24 - len(ids)
    assert trace.steps[-1].seq_len == 23   # the last token made fills position 24: no room to feed it back
    with pytest.raises(ValueError, match="context window is 24 tokens"):
        engine.run("word " * 30, GenerationSettings(chat=False))


@pytest.mark.slow
def test_an_unseeded_sampled_run_is_replayed_from_its_export(tiny_engine):
    import json
    first = tiny_engine.generate("replay me", GenerationSettings(max_new_tokens=12, temperature=1.2, top_p=0.9))
    exported = json.loads(first.to_json())
    assert exported["settings"]["seed"] is None and isinstance(exported["seed"], int)   # drawn, then recorded
    assert {"backend", "dtype", "threads", "cpu", "versions"} <= set(exported["replay"])
    settings = GenerationSettings(**{**exported["settings"], "seed": exported["seed"]})
    again = tiny_engine.generate(exported["prompt"], settings)
    assert again.output_ids == first.output_ids


def test_run_ids_reads_exactly_the_ids_given_and_can_ignore_eos(tiny_backend):
    engine = Engine(tiny_backend)
    ids = engine.encode("Prefill reads the prompt once.")
    eos = next(iter(tiny_backend.eos_token_ids))
    forced = Engine(EosEveryStep(tiny_backend, eos))
    assert forced.run_ids(ids, GenerationSettings(max_new_tokens=6)).wait().stop_reason == "eos"
    trace = forced.run_ids(ids, GenerationSettings(max_new_tokens=6), ignore_eos=True).wait()
    assert trace.stop_reason == "length" and trace.output_ids == [eos] * 6 and trace.prompt_ids == ids


@pytest.mark.slow
def test_a_run_without_cache_rereads_the_context_and_gives_the_same_tokens(tiny_engine):
    ids = tiny_engine.encode("The KV cache grows with every token.")
    cached = tiny_engine.run_ids(ids, GenerationSettings(max_new_tokens=6), ignore_eos=True).wait()
    uncached = tiny_engine.run_ids(ids, GenerationSettings(max_new_tokens=6), ignore_eos=True,
                                   use_cache=False).wait()
    assert uncached.output_ids == cached.output_ids and not uncached.use_cache
    assert all(s.kv_bytes is None for s in uncached.steps)   # no cache kept: nothing measured, not zero


class EosEveryStep(PaddedCacheBackend):
    def __init__(self, backend, eos):
        super().__init__(backend, reserve=0)
        self.eos = eos

    def _pad(self, logits, cache):
        logits = logits.clone()
        logits[self.eos] = logits.max() + 50
        return super()._pad(logits, cache)


@pytest.mark.slow
def test_a_cached_prefix_gives_the_same_tokens_and_stays_reusable(tiny_engine):
    from playground.engine import common_prefix
    settings = GenerationSettings(max_new_tokens=6, system_prompt="You answer questions about serving models.")
    _, a = tiny_engine.prompt_ids("What is prefill?", settings)
    _, b = tiny_engine.prompt_ids("What is decode?", settings)
    shared = common_prefix(a, b)
    assert 5 < len(shared) < min(len(a), len(b))
    prefix = tiny_engine.cache_prefix(shared)
    for prompt in ("What is prefill?", "What is decode?", "What is prefill?"):   # the prefix is reused, unchanged
        plain = tiny_engine.generate(prompt, settings)
        cached = tiny_engine.run(prompt, settings, prefix=prefix).wait()
        assert cached.output_ids == plain.output_ids and cached.cached_tokens == len(shared)
        assert [s.kv_bytes for s in cached.steps] == [s.kv_bytes for s in plain.steps]
    other = tiny_engine.run("Unrelated", GenerationSettings(max_new_tokens=2, chat=False), prefix=prefix).wait()
    assert other.cached_tokens == 0   # a prompt that does not start with the prefix is read whole
