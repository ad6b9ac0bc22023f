"""Speculative decoding (prompt lookup): lossless against plain decoding, counted, rolled back, backing off."""
from __future__ import annotations

import doctest

import numpy as np
import pytest
import torch

from playground import speculative
from playground.backends.base import Backend
from playground.config import GenerationSettings
from playground.engine import Engine
from playground.speculative import BACKOFF_MAX, Speculation, SpeculativeEngine, propose

REPEATS = "the cat sat on the mat and the cat sat on the mat and the dog sat on the mat and the cat"
GREEDY = GenerationSettings(max_new_tokens=40, temperature=0.0)


def test_docstring_examples():
    assert doctest.testmod(speculative).failed == 0


@pytest.mark.parametrize("ids, k, ngram, expected", [
    ([1, 2, 3, 9, 1, 2], 4, 2, [3, 9, 1, 2]),
    ([1, 2, 3, 9, 1, 2], 2, 2, [3, 9]),
    ([4, 1, 2, 3, 9, 1, 2], 4, 3, [3, 9, 1, 2]),   # no 3-gram match: the 2-gram's
    ([7], 4, 3, []),
    ([1, 2, 3, 4], 4, 3, []),
])
def test_propose_known_answers(ids, k, ngram, expected):
    assert propose(ids, k, ngram) == expected


def test_settings_are_range_checked(tiny_backend):
    with pytest.raises(ValueError, match="between 1 and 8"):
        SpeculativeEngine(tiny_backend, Speculation(k=9))
    with pytest.raises(ValueError, match="n-gram"):
        SpeculativeEngine(tiny_backend, Speculation(ngram=0))


def check_counts(trace):
    """The trace's counts agree with its steps: every accepted token is a Step, passes are the passes."""
    counts, steps = trace.speculation, trace.steps
    assert counts["accepted"] == sum(s.draft == "accepted" for s in steps)
    assert counts["proposed"] >= counts["accepted"] + sum(s.draft == "replaced" for s in steps)
    assert counts["passes"] == len({s.forward_pass for s in steps}) == steps[-1].forward_pass + 1
    assert [s.index for s in steps] == list(range(len(steps)))
    for p in {s.forward_pass for s in steps} - {steps[-1].forward_pass}:   # the kept cache after each pass
        last = max(s.index for s in steps if s.forward_pass == p)       # holds every token before its last one
        assert {s.seq_len for s in steps if s.forward_pass == p} == {len(trace.prompt_ids) + last}
    if trace.kv_shape is not None:
        assert all(s.kv_bytes == trace.kv_shape.formula_bytes(s.seq_len) for s in steps)


@pytest.mark.slow
@pytest.mark.parametrize("engine_fixture", ["tiny_engine", "tiny_onnx_engine"])
def test_greedy_speculation_gives_plain_greedy_tokens_in_fewer_passes(engine_fixture, request):
    plain = request.getfixturevalue(engine_fixture)
    spec = SpeculativeEngine(plain.backend, Speculation(k=4, ngram=2, row_cost=0))
    expected = plain.generate(REPEATS, GREEDY)
    trace = spec.generate(REPEATS, GREEDY)
    assert trace.output_ids == expected.output_ids
    assert trace.speculation["accepted"] > 0 and trace.speculation["passes"] < len(trace.steps)
    check_counts(trace)
    assert plain.generate(REPEATS, GREEDY).speculation == {}   # the plain engine records none


@pytest.mark.slow
def test_seeded_sampling_draws_the_plain_runs_tokens(tiny_engine):
    """One draw per output token from the same seeded generator: the same tokens as plain sampling."""
    spec = SpeculativeEngine(tiny_engine.backend, Speculation(k=4, ngram=1, row_cost=0))
    for seed in (1, 2, 3):
        settings = GenerationSettings(max_new_tokens=30, temperature=0.7, seed=seed)
        trace = spec.generate(REPEATS, settings)
        assert trace.output_ids == tiny_engine.generate(REPEATS, settings).output_ids
        check_counts(trace)


@pytest.mark.slow
def test_off_is_plain_decoding(tiny_engine):
    off = SpeculativeEngine(tiny_engine.backend, Speculation(enabled=False))
    trace = off.generate(REPEATS, GREEDY)
    assert trace.output_ids == tiny_engine.generate(REPEATS, GREEDY).output_ids
    assert {s.draft for s in trace.steps} == {None} and trace.speculation == {}


@pytest.mark.slow
@pytest.mark.parametrize("engine_fixture", ["tiny_engine", "tiny_onnx_engine"])
def test_rollback_leaves_the_cache_as_if_the_rejected_tokens_were_never_read(engine_fixture, request):
    b = request.getfixturevalue(engine_fixture).backend
    ids = b.tokenizer(REPEATS, add_special_tokens=False)["input_ids"]
    _, state = b.prefill(ids[:-2])
    rows, state = b.verify([ids[-2], 5, 6, 7], state)   # three junk tokens after a real one
    assert tuple(rows.shape) == (4, b.config.vocab_size)
    state = b.rollback(state, len(ids) - 1)
    assert b.cache_length(state) == len(ids) - 1
    after_rollback, _ = b.decode(ids[-1], state)
    clean, _ = b.prefill(ids)
    unrolled_rows, unrolled = b.verify([ids[-2], 5, 6, 7], b.prefill(ids[:-2])[1])
    junk_read, _ = b.decode(ids[-1], unrolled)            # what forgetting to roll back would give
    assert float((after_rollback - clean).abs().max()) < 1e-4
    assert float((junk_read - clean).abs().max()) > 1e-3
    assert float((rows - unrolled_rows).abs().max()) == 0.0
    assert float((rows[0] - b.prefill(ids[:-1])[0]).abs().max()) < 1e-4   # row 0: the token after ids[-2]


# --- a counting model: the next token is a function of the whole context, so a cache that kept a rejected
#     token would change the answer; it records every pass and what was rolled back

class CountingBackend(Backend):
    name, device, dtype, model_name, verifies = "counting", "cpu", "float32", "counting", True
    context_window, eos_token_ids = 4096, frozenset()

    def __init__(self, tokenizer, vocab: int, rule):
        self.tokenizer, self.vocab, self.rule, self.kv_shape = tokenizer, vocab, rule, None
        self.passes = []   # ("prefill" | "decode" | "verify", tokens read)

    def _logits(self, context):
        out = torch.full((self.vocab,), -10.0)
        out[self.rule(context)] = 10.0
        return out

    def prefill(self, input_ids):
        self.passes.append(("prefill", len(input_ids)))
        return self._logits(list(input_ids)), list(input_ids)

    def decode(self, token_id, state):
        self.passes.append(("decode", 1))
        return self._logits(state + [token_id]), state + [token_id]

    def verify(self, input_ids, state):
        self.passes.append(("verify", len(input_ids)))
        new = state + list(input_ids)
        return torch.stack([self._logits(new[:len(state) + i + 1]) for i in range(len(input_ids))]), new

    def rollback(self, state, length):
        return state[:length]

    def cache_length(self, state):
        return len(state)

    def kv_cache_bytes(self, state):
        return 8 * len(state)

    def generate_reference(self, input_ids, max_new_tokens, streamer=None):
        raise NotImplementedError


def run_counting(tiny_backend, rule, prompt_ids, tokens=40, spec=Speculation(k=4, ngram=2, row_cost=0)):
    backend = CountingBackend(tiny_backend.tokenizer, 300, rule)
    plain = Engine(backend).run_ids(prompt_ids, GenerationSettings(max_new_tokens=tokens, temperature=0.0)).wait()
    backend.passes.clear()
    engine = SpeculativeEngine(backend, spec)
    trace = engine.run_ids(prompt_ids, GenerationSettings(max_new_tokens=tokens, temperature=0.0)).wait()
    return plain, trace, backend.passes


def test_a_copying_model_takes_k_plus_one_tokens_a_pass(tiny_backend):
    """The model copies the prompt's cycle, so every proposal is right: k + 1 tokens each verify pass."""
    cycle = [11, 12, 13, 14, 15, 16, 17]
    plain, trace, passes = run_counting(tiny_backend, lambda ctx: cycle[(cycle.index(ctx[-1]) + 1) % 7], cycle * 3)
    assert trace.output_ids == plain.output_ids
    # 40 tokens: 1 from prefill, 5 a pass for 7 passes, and the last 4 from a pass of 3 proposals (the budget)
    assert passes[1:] == [("verify", 5)] * 7 + [("verify", 4)]
    assert trace.speculation["accepted"] == trace.speculation["proposed"] == 4 * 7 + 3
    assert len(trace.steps) == 40 and trace.speculation["passes"] == 9


def test_failing_proposals_back_off_and_are_rolled_back(tiny_backend):
    """The model writes a de Bruijn sequence (every token recurs, no pair of tokens twice), so every proposal
    fails at its first token; after each failure the engine decodes plainly for 1, 2, 4 ... steps."""
    text = [20 + t for t in de_bruijn(10, 2)]
    plain, trace, passes = run_counting(tiny_backend, lambda ctx: text[len(ctx)], text[:20], tokens=60)
    assert trace.output_ids == plain.output_ids      # a cache that kept a rejected token would differ here
    assert trace.speculation["accepted"] == 0 and {s.draft for s in trace.steps} <= {None, "replaced"}
    verifies = [i for i, (kind, _) in enumerate(passes) if kind == "verify"]
    gaps = np.diff(verifies) - 1                # plain decode steps between two failed verifies
    assert list(gaps) == [1, 2, 4, 8, 16, 16] == [min(BACKOFF_MAX, 2 ** i) for i in range(6)]   # not 59 verifies
    check_counts(trace)


def de_bruijn(k: int, n: int) -> list[int]:
    """The de Bruijn sequence B(k, n): every length-n word over range(k) exactly once (cyclically)."""
    a, seq = [0] * k * n, []

    def db(t, p):
        if t > n:
            if n % p == 0:
                seq.extend(a[1:p + 1])
            return
        a[t] = a[t - p]
        db(t + 1, p)
        for j in range(a[t - p] + 1, k):
            a[t] = j
            db(t + 1, t)
    db(1, 1)
    return seq


def test_budget_and_context_are_never_passed(tiny_backend):
    cycle = [11, 12, 13]
    for tokens in (1, 2, 3, 7):
        plain, trace, passes = run_counting(tiny_backend, lambda ctx: cycle[(cycle.index(ctx[-1]) + 1) % 3],
                                            cycle * 3, tokens=tokens)
        assert trace.output_ids == plain.output_ids and len(trace.steps) == tokens
        assert all(n <= tokens for kind, n in passes if kind == "verify")


# --- the experiment (headless: python -m playground.experiments speculative --out DIR)

@pytest.mark.slow
def test_experiment_compares_with_plain_decoding_on_the_same_backend(tiny_engine):
    from playground.experiments.registry import EXPERIMENTS

    spec = EXPERIMENTS["speculative"]
    result = spec.run(tiny_engine, {"new_tokens": 12, "k": 3, "ngram": 2})
    assert [p.preset for p in result.presets] == ["reread", "quote", "summary", "question"]
    for p in result.presets:
        assert p.same_tokens and p.first_difference is None      # greedy, torch fp32: lossless
        assert 1 <= p.tokens_per_pass <= 4 and p.passes <= p.output_tokens
        assert p.accepted <= p.proposed and p.speedup is not None and p.speedup > 0
    reread = result.presets[0]
    assert reread.accepted > 0 and reread.tokens_per_pass > 1   # the document read again: copying pays
    assert set(result.summary()) == {"reread", "quote", "summary", "question"}
    assert "Speculative" in spec.plot(result).layout.title.text
    with pytest.raises(ValueError, match="between 1 and 8"):
        spec.values({"k": 9})


def test_experiment_refuses_a_source_without_a_verify_pass(tiny_engine):
    from types import SimpleNamespace

    from playground.experiments.speculative import run_speculative

    remote = SimpleNamespace(info=SimpleNamespace(name="llama.cpp @ host"))
    with pytest.raises(ValueError, match="llama.cpp @ host has none"):
        run_speculative(remote)


@pytest.mark.slow
def test_verify_agreement_counts_where_two_paths_differ(tiny_engine):
    from playground.speculative import verify_agreement

    b = tiny_engine.backend
    ids = b.tokenizer(REPEATS, add_special_tokens=False)["input_ids"]
    assert verify_agreement(b, ids, rows=3) == (0, len(ids) - 2)     # torch fp32: the same choices

    class Flipped:   # a verify path that always picks another token: every position differs
        def __getattr__(self, name):
            return getattr(b, name)

        def verify(self, input_ids, state):
            rows, state = b.verify(input_ids, state)
            return -rows, state
    assert verify_agreement(Flipped(), ids, rows=3) == (len(ids) - 2, len(ids) - 2)


# --- onnx-gguf4 on the bundled model: the default backend (integration)

@pytest.fixture(scope="module")
def gguf4():
    from playground.backends import create_backend
    return create_backend("onnx-gguf4", None, device="cpu")


@pytest.mark.integration
def test_gguf4_rollback_is_setting_the_length(gguf4):
    """Rolled back, the buffers answer as if the junk was never read: bit for bit whatever the junk was; a
    one-row verify is decode bit for bit; several rows at once differ from it by kernel rounding only."""
    from playground.measure import exact_length_ids

    ids = exact_length_ids(gguf4.tokenizer, 120)

    def after(junk, roll=True):
        _, state = gguf4.prefill(ids[:100])
        _, state = gguf4.verify(ids[100:101] + junk, state)
        if roll:
            state = gguf4.rollback(state, 101)
            assert gguf4.cache_length(state) == 101
        return gguf4.decode(ids[101], state)[0]

    _, state = gguf4.prefill(ids[:100])
    decoded = gguf4.decode(ids[101], gguf4.decode(ids[100], state)[1])[0]
    assert float((after([5, 6, 7]) - after([8, 9, 10])).abs().max()) == 0.0
    assert float((after([]) - decoded).abs().max()) == 0.0
    # int8 in every layer at 4 rows against 1: measured 0.27 (AVX-512 VNNI; with int8 in attention alone, 0.098 on
    # AVX2-only and 0.115 on AVX-512 VNNI)
    assert float((after([5, 6, 7]) - decoded).abs().max()) < 0.5
    assert float((after([5, 6, 7], roll=False) - decoded).abs().max()) > 1.0       # junk read: measured 28
    with pytest.raises(ValueError, match="roll"):
        gguf4.rollback(state, 500)


def teacher_forced_logits(backend, ids: list[int], rows: int) -> np.ndarray:
    """The logits of every position after ids[0], teacher-forced on `ids`: `rows` tokens a pass, by decode
    (rows=0) or by the verify pass (rows >= 1), as `speculative.verify_agreement` reads them."""
    fed = ids[1:-1]   # each fed token's row predicts the next id
    _, state = backend.prefill(ids[:1])
    out = []
    for at in range(0, len(fed), max(rows, 1)):
        if rows:
            logits, state = backend.verify(fed[at:at + rows], state)
        else:
            logits, state = backend.decode(fed[at], state)
        logits = np.asarray(logits, dtype=np.float64)
        out.extend(logits.reshape(-1, logits.shape[-1]))
    return np.stack(out)


@pytest.mark.integration
def test_gguf4_verify_pass_chooses_as_decode_on_the_bench_text(gguf4):
    """Verify runs the decode graph's all-logits sibling (int8 activations, as decode), several rows a pass, on
    200 tokens of the bench text. At one row a pass it runs decode's kernels: the same logits, bit for bit. At
    five, ONNX Runtime's int8 kernels for several rows sum in another order than for one (and pick their code by
    CPU at run time), so a near-tie may flip: each position where verify's top token differs from decode's must
    be one where decode's top two are within NEAR_TIE logits, and at most 5 % of positions.
    Measured (5 rows) with every layer in int8 (the default's plan): AVX-512 + AVX512-VNNI EPYC 7 of 199, at decode
    margins of 0.0015-0.25 logits (largest logit difference 1.40), one row bit-identical. With int8 in attention
    alone: AVX2-only 0 of 199, AVX-512 VNNI 2 of 199 at margins under 0.015 (largest difference 0.61).
    (The prefill graph's fp32 activations as verifier: 2 of 199 on AVX2, hence the decode graph.)"""
    from playground.bench.fidelity import text_ids

    near_tie = 0.5   # logits: the scale of the int8 paths' difference on a near-top logit (measured: above)
    ids = text_ids(gguf4.tokenizer, 201)
    decode = teacher_forced_logits(gguf4, ids, rows=0)
    assert decode.shape == (199, gguf4.vocab_size)
    assert np.array_equal(teacher_forced_logits(gguf4, ids, rows=1), decode)   # one row: decode's kernels
    verify = teacher_forced_logits(gguf4, ids, rows=5)
    chosen, by_verify = decode.argmax(-1), verify.argmax(-1)
    differ = np.nonzero(chosen != by_verify)[0]
    at = np.arange(len(decode))
    margins = decode[at, chosen] - decode[at, by_verify]
    print(f"verify vs decode top-1 differ at {len(differ)} of {len(decode)} positions; decode's margins there: "
          f"{np.round(margins[differ], 4).tolist()}; largest logit difference {np.abs(verify - decode).max():.3f}")
    assert all(margins[i] < near_tie for i in differ), margins[differ]
    assert len(differ) <= 0.05 * len(decode)


@pytest.mark.slow
def test_bench_row_reports_speedups_against_the_targets():
    from playground.bench.speculative import TARGETS, speculative_row

    row = speculative_row(model="tiny", backend="torch", new_tokens=8, repeats=1).to_json()
    assert row["bench"] == "speculative" and row["backend"] == "torch"
    assert set(row["presets"]) == {"reread", "quote", "summary", "question"}
    assert set(row["targets_met"]) == set(TARGETS) and row["summary_speedup"] is not None
    assert row["targets_met"]["summary_speedup"] == (row["summary_speedup"] >= 1.5)
    assert row["verify_vs_decode_top1_differ"] == {"positions": 199, "differ": 0}
    cost = row["verify_pass"]
    assert cost["rows"] == 5 and cost["row_cost"] == pytest.approx(
        max(0.0, (cost["verify_ms"] / cost["decode_ms"] - 1) / 4), abs=0.01)
    for name, preset in row["presets"].items():   # the bounds: tokens per pass, less the verify rows' cost
        assert preset["bound_speedup_free_verify"] == round(preset["tokens_per_pass"], 2)
        assert preset["bound_speedup_at_row_cost"] <= preset["bound_speedup_free_verify"]
        assert (name in row["beyond_bound"]) == (preset["speedup"] > 1.1 * preset["bound_speedup_free_verify"])


@pytest.mark.integration
def test_gguf4_the_generate_tabs_copy_preset_gets_drafts_accepted(gguf4):
    """The Generate tab's preset that promises "speculation can copy" (the document, then its start again):
    greedy on the bundled model, 64 tokens, k = 4 and n-gram 3 as the tab's defaults, with the verify row's
    cost fixed at the policy's starting value (0.5 of a decode step) so the proposals do not follow the
    machine's load. The model copies only after a few tokens: its first proposals fail, and a policy that
    never forgot them stopped proposing (0 of 3 accepted, 64 passes). Measured (AVX-512 VNNI): 15 of 29
    accepted, 64 tokens in 49 passes; with the cost measured in the run, 22 of 48 in 42."""
    from playground.prompts import reread_text
    from playground.speculative import Lookahead, Speculation, SpeculativeEngine
    from playground.ui.common import long_document

    settings = GenerationSettings(max_new_tokens=64, temperature=0.0, chat=False)
    spec = Speculation(k=4, ngram=3, row_cost=Lookahead.FIRST_ROW_COST)
    trace = SpeculativeEngine(gguf4, spec).run(reread_text(long_document()), settings).wait()
    counts = trace.speculation
    print(f"copy preset: {counts['accepted']} of {counts['proposed']} accepted, "
          f"{trace.output_tokens} tokens in {counts['passes']} passes")
    assert counts["accepted"] >= 10 and counts["passes"] <= 0.85 * trace.output_tokens
