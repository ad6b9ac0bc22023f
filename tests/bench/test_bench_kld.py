"""kld.py: llama-perplexity --kl-divergence's scoring, reproduced on made-up logits, and the gate against llama.cpp."""
import math

import numpy as np
import pytest

from playground.bench.kld import (compress, decompress, parse_llama_kld, peer_gate, read_base, record_width,
                                  same_top_p, score, score_in_blocks, scored_next_tokens, summary)
from playground.metrics import percentile


def made_up_logits(n=300, vocab=64, seed=0, spread=3.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, vocab)) * spread).astype(np.float32)


def log_softmax(x):
    x = np.asarray(x, np.float64)
    top = x.max(axis=1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=1, keepdims=True))


def test_compressed_log_probs_come_back_within_half_a_step_above_the_cutoff():
    logits = made_up_logits()
    back = decompress(compress(logits), logits.shape[1]).astype(np.float64)
    exact = log_softmax(logits)
    step = (logits.max(axis=1) - np.maximum(logits.min(axis=1), logits.max(axis=1) - 16)) / 65535
    kept = exact > exact.max(axis=1, keepdims=True) - 16
    assert np.all(np.abs(back - exact)[kept] <= (step[:, None] * 0.5 + 1e-5).repeat(exact.shape[1], 1)[kept])


def test_log_probs_more_than_16_nats_down_are_floored_as_llama_cpp_does():
    logits = np.array([[0.0, -5.0, -30.0, -40.0]], np.float32)
    back = decompress(compress(logits), 4)[0]
    lse = math.log(1 + math.exp(-5) + math.exp(-30) + math.exp(-40))
    assert back[2] == back[3] == pytest.approx(-16 - lse, abs=1e-5)   # both at the floor, max - 16
    assert back[1] == pytest.approx(-5 - lse, abs=1e-3)


def test_shifting_the_logits_gives_the_same_records_to_a_step():
    logits = made_up_logits(n=20)
    diff = compress(logits)[:, 4:].astype(int) - compress(log_softmax(logits).astype(np.float32))[:, 4:]
    assert np.abs(diff).max() <= 1   # float32 rounding of the shifted values only


def test_kld_and_nll_match_a_direct_computation_where_nothing_is_cut():
    base_logits, ours = made_up_logits(seed=1, spread=1.0), made_up_logits(seed=2, spread=1.0)
    tokens = np.arange(len(ours)) % ours.shape[1]
    s = score(ours, compress(base_logits), tokens)
    p, q = log_softmax(base_logits), log_softmax(ours)
    direct = (np.exp(p) * (p - q)).sum(axis=1)
    assert np.allclose(s["kld"], direct, atol=2e-4)          # the base's uint16 steps only
    assert np.allclose(s["nll"], -q[np.arange(len(q)), tokens], atol=1e-9)
    assert np.allclose(s["nll_base"], -p[np.arange(len(p)), tokens], atol=2e-4)
    assert np.array_equal(s["same_top"], p.argmax(1) == q.argmax(1))


def test_a_backend_identical_to_its_base_scores_zero_and_all_same_top():
    logits = made_up_logits()
    s = summary(score(logits, compress(logits), logits.argmax(axis=1)))   # ids above the 16-nat floor
    assert s["same_top_p_pct"] == 100.0 and s["same_top_p_pm_pct"] == 0.0
    assert abs(s["mean_kld"]) < 1e-5 and s["ppl_ratio"] == pytest.approx(1.0, abs=1e-4)   # the uint16 steps alone


def test_scoring_in_blocks_equals_scoring_at_once():
    base, ours = made_up_logits(seed=3), made_up_logits(seed=4)
    tokens = np.arange(len(ours)) % 7
    whole, blocks = score(ours, compress(base), tokens), score_in_blocks(ours, compress(base), tokens, block=37)
    for key in whole:
        assert np.allclose(whole[key], blocks[key])


@pytest.mark.parametrize("same, count, p, pm", [(1694, 1778, 95.276, 0.503), (1740, 1778, 97.863, 0.343),
                                                 (1778, 1778, 100.0, 0.0), (50, 101, 49.505, 5.0)])
def test_same_top_p_and_its_plus_minus_are_llama_cpps_formula(same, count, p, pm):
    got = same_top_p(same, count)
    assert got[0] == pytest.approx(p, abs=1e-3) and got[1] == pytest.approx(pm, abs=1e-3)


def test_percentile_interpolates_between_ranks_as_numpy_linear_does():
    values = np.sort(np.random.default_rng(5).random(1778).astype(np.float32))
    for fraction in (0.01, 0.5, 0.9, 0.99, 0.999):
        assert percentile(values, 100 * fraction) == pytest.approx(float(np.percentile(values, 100 * fraction)),
                                                                    rel=1e-4)
    assert percentile(values, 0) == values[0] and percentile(values, 100) == values[-1]


def test_summary_ppl_ratio_and_its_uncertainty():
    rng = np.random.default_rng(6)
    nll_base = rng.random(500) * 3
    nll = nll_base + 0.01 + rng.random(500) * 0.02
    s = summary({"kld": np.full(500, 0.01), "same_top": np.ones(500, bool), "nll": nll, "nll_base": nll_base})
    assert s["ppl_ratio"] == pytest.approx(math.exp(nll.mean() - nll_base.mean()), rel=1e-5)
    # the uncertainty of a mean difference of paired values: the standard error of the differences
    assert s["ppl_ratio_pm"] == pytest.approx(s["ppl_ratio"] * (nll - nll_base).std(ddof=0) / math.sqrt(499), rel=1e-2)
    assert s["kld_p99"] == pytest.approx(0.01) and s["mean_kld_pm"] == pytest.approx(0.0, abs=1e-9)


def test_a_base_file_written_in_llama_cpps_layout_reads_back(tmp_path):
    n_ctx, n_vocab, n_chunk = 8, 5, 2
    tokens = np.arange(n_ctx * n_chunk, dtype=np.int32)
    records = compress(made_up_logits(n=n_chunk * (n_ctx - 1 - n_ctx // 2), vocab=n_vocab))
    path = tmp_path / "base.kld"
    path.write_bytes(b"_logits_" + np.array([n_ctx], np.uint32).tobytes() + np.array([n_vocab, n_chunk], np.int32).tobytes()
                     + tokens.tobytes() + records.tobytes())
    base = read_base(path)
    assert (base["n_ctx"], base["n_vocab"], base["n_chunk"]) == (n_ctx, n_vocab, n_chunk)
    assert np.array_equal(base["tokens"], tokens) and np.array_equal(base["records"], records)
    assert record_width(n_vocab) == records.shape[1] == 10
    assert scored_next_tokens(base["tokens"], n_ctx).tolist() == [5, 6, 7, 13, 14, 15]


def test_a_file_without_the_magic_is_refused(tmp_path):
    (tmp_path / "x").write_bytes(b"nothing here at all")
    with pytest.raises(ValueError, match="_logits_"):
        read_base(tmp_path / "x")


LLAMA_LOG = """\
====== Perplexity statistics ======
Mean PPL(Q)                   :  11.480218 ±   0.343120
Mean PPL(base)                :  11.390051 ±   0.339806
Cor(ln(PPL(Q)), ln(PPL(base))):  99.63%
Mean ln(PPL(Q)/PPL(base))     :   0.007885 ±   0.002112
Mean PPL(Q)/PPL(base)         :   1.007916 ±   0.002128
Mean PPL(Q)-PPL(base)         :   0.090167 ±   0.024420

====== KL divergence statistics ======
Mean    KLD:   0.003620 ±   0.000151
Maximum KLD:   0.181000
99.9%   KLD:   0.090000
99.0%   KLD:   0.032510
Median  KLD:   0.001420

====== Token probability statistics ======
Same top p: 95.276 ± 0.503 %
"""


def test_llama_perplexitys_statistics_are_read_under_our_keys():
    got = parse_llama_kld(LLAMA_LOG)
    assert got == {"positions": None, "same_top_p_pct": 95.276, "same_top_p_pm_pct": 0.503, "mean_kld": 0.00362,
                   "mean_kld_pm": 0.000151, "kld_p99": 0.03251, "kld_median": 0.00142, "ppl": 11.480218,
                   "ppl_base": 11.390051, "ppl_ratio": 1.007916, "ppl_ratio_pm": 0.002128}


@pytest.mark.parametrize("same, kld, met", [
    (94.773, 0.00362, {"same_top_p": True, "mean_kld": True}),      # exactly llama.cpp's minus its ±
    (94.77, 0.00362, {"same_top_p": False, "mean_kld": True}),
    (99.0, 0.003982, {"same_top_p": True, "mean_kld": True}),       # exactly 10 % above
    (99.0, 0.00399, {"same_top_p": True, "mean_kld": False}),
    (None, None, {"same_top_p": None, "mean_kld": None})])
def test_the_gate_is_llama_cpps_same_top_minus_its_plus_minus_and_ten_percent_of_its_kld(same, kld, met):
    llama = {"same_top_p_pct": 95.276, "same_top_p_pm_pct": 0.503, "mean_kld": 0.00362}
    assert peer_gate({"same_top_p_pct": same, "mean_kld": kld}, llama) == met


def test_without_llama_cpps_figures_the_gate_is_unknown_not_passed():
    assert peer_gate({"same_top_p_pct": 100.0, "mean_kld": 0.0}, {}) == {"same_top_p": None, "mean_kld": None}


def write_base(path, tokens, records, n_ctx, n_vocab):
    """A base file in llama-perplexity's layout: magic, n_ctx, n_vocab, n_chunk, the ids, the records."""
    n_chunk = len(tokens) // n_ctx
    path.write_bytes(b"_logits_" + np.array([n_ctx], np.uint32).tobytes()
                     + np.array([n_vocab, n_chunk], np.int32).tobytes()
                     + np.asarray(tokens, np.int32).tobytes() + np.asarray(records, np.uint16).tobytes())


@pytest.mark.integration
def test_our_positions_are_llama_cpps_second_half_of_every_chunk(tmp_path):
    """A base written from whole-prefix prefills at each scored position (another path than prefill + decode):
    scored against it, the backend's prefill-then-decode logits agree everywhere only if the positions line up."""
    from playground.backends import create_backend
    from playground.bench.kld import backend_row

    backend = create_backend("onnx", "tiny", device="cpu")
    n_ctx = 16
    tokens = (np.arange(3 * n_ctx) * 7 + 3) % 200
    rows = []
    for chunk in tokens.reshape(-1, n_ctx):
        for j in range(n_ctx // 2, n_ctx - 1):   # position j predicts chunk[j + 1]
            rows.append(backend.prefill([int(x) for x in chunk[:j + 1]])[0].float().numpy().reshape(-1))
    n_vocab = len(rows[0])
    write_base(tmp_path / "base.kld", tokens, compress(np.stack(rows)), n_ctx, n_vocab)
    np.save(tmp_path / "ref.npy", compress(np.stack(rows)))
    row = backend_row("onnx", tmp_path / "base.kld", tmp_path / "ref.npy", model="tiny").to_json()
    assert row["positions"] == 3 * (n_ctx - 1 - n_ctx // 2) and row["chunks"] == 3
    assert row["same_top_p_pct"] == 100.0 and row["mean_kld"] < 1e-4
    assert "targets_met" not in row   # no llama.cpp figures given: no gate
