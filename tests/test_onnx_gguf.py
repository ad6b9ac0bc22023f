"""onnx-gguf4: the GGUF's own blocks through MatMulNBits. Block mapping (synthetic and the bundled file's real
blocks), the activation modes' accuracy, the KV buffer that grows in place, the cache, and the bench yardsticks."""
from __future__ import annotations

import doctest
import json

import numpy as np
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType as QType
from gguf.quants import dequantize, quantize
from onnx import TensorProto, helper

from playground import bench_peer
from playground.backends import create_backend, gguf_blocks, onnx_gguf, onnx_nbits
from playground.backends.gguf_blocks import llama_row_order, q4_1_as_nbits, q8_0_as_nbits
from playground.backends.onnx_nbits import nbits_nodes

RNG = np.random.default_rng(0)


def run_nbits(weight, x: np.ndarray, mode: str) -> np.ndarray:
    """y = x . weight^T through the same nodes the rewrite emits, in a one-op-group graph."""
    n, k = weight.shape
    nodes, inits = nbits_nodes("t", "x", weight, "y", mode)
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "s", n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.astype(np.float32)})[0]


def one_hot(k: int) -> np.ndarray:
    return np.eye(k, dtype=np.float32)[None]      # [1, K, K]: row i picks input i, so y = w^T exactly


@pytest.mark.parametrize("module", [gguf_blocks, onnx_nbits, onnx_gguf, bench_peer])
def test_docstring_examples(module):
    assert doctest.testmod(module).failed == 0


# --- the block mapping on synthetic blocks (gguf-py quantizes, we rearrange, ONNX Runtime multiplies)

@pytest.mark.parametrize("qtype, convert, mode", [(QType.Q4_1, q4_1_as_nbits, "fp32"), (QType.Q8_0, q8_0_as_nbits, "fp32"),
                                                  (QType.Q4_1, q4_1_as_nbits, "int8x2")])
def test_one_hot_rows_give_gguf_py_dequantization(qtype, convert, mode):
    n, k = 48, 96
    raw = quantize(RNG.standard_normal((n, k)).astype(np.float32), qtype)
    weight = convert(raw, n, k)
    expected = dequantize(raw, qtype)
    assert np.array_equal(weight.dequantize(), expected)
    got = run_nbits(weight, one_hot(k), mode)[0]
    if mode == "fp32":
        assert np.array_equal(got, expected.T)   # bit for bit
    else:   # int8 arithmetic, then fp32 scales: a rounding or two
        np.testing.assert_allclose(got, expected.T, rtol=1e-5, atol=1e-7)


def test_int8x2_is_near_fp32_where_one_pass_int8_is_not():
    n, k = 64, 576
    weight = q4_1_as_nbits(quantize(RNG.standard_normal((n, k)).astype(np.float32), QType.Q4_1), n, k)
    x = (RNG.standard_normal((1, 3, k)) * np.exp(RNG.standard_normal(k))).astype(np.float32)   # heavy tails
    exact = x.astype(np.float64) @ weight.dequantize().T.astype(np.float64)
    err = {m: np.abs(run_nbits(weight, x, m) - exact).max() / np.abs(exact).max() for m in ("fp32", "int8", "int8x2")}
    assert err["fp32"] < 1e-5 and err["int8x2"] < 1e-3 and err["int8x2"] < err["int8"] / 20, err


def test_row_order_is_transformers_reverse_permutation():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    for n, heads in ((576, 9), (192, 3)):   # SmolLM2's q and k projections
        rows = np.arange(n * 2).reshape(n, 2)
        expected = LlamaTensorProcessor()._reverse_permute_weights(rows, heads, heads)
        assert np.array_equal(rows[llama_row_order(n, heads)], expected)
        assert not np.array_equal(rows, expected)


def test_unknown_activation_mode_is_refused():
    with pytest.raises(ValueError, match="activation modes"):
        onnx_gguf.plan_of({"qkv": "int4"})


def test_a_model_that_is_not_a_gguf_is_refused():
    with pytest.raises(ValueError, match="GGUF"):
        create_backend("onnx-gguf4", "tiny", device="cpu")


# --- bench yardsticks

def test_llama_bench_row_names_make_llama_when_missing(monkeypatch):
    from playground import llamacpp

    def missing(name):
        raise llamacpp.LlamaCppMissing(f"{name} is not installed: {llamacpp.INSTALL_HINT}")
    monkeypatch.setattr(llamacpp, "llama_binary", missing)
    row = bench_peer.llama_bench_row()
    assert row["backend"] == "llama.cpp" and "make llama" in row["error"] and "decode_tps" not in row
    json.dumps(row)


def test_ratios_are_taken_against_llama_cpp():
    llama = {"decode_tps": 100.0, "prefill_s": 4.0}
    rows = [{"backend": "a", "engine_decode_tps": 50.0, "engine_ttft_s": 0.05}, {"backend": "b", "error": "x"}]
    out = bench_peer.ratios_row(llama, {"matmul_peak_gflops": 100.0}, rows, [{"backend": "a", "prefill_s": 2.0}],
                                {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                 "num_attention_heads": 4, "vocab_size": 100})
    assert out["a"]["decode_x"] == 0.5 and out["a"]["prefill_x"] == 2.0 and out["a"]["ttft_ms"] == 50.0
    assert 0 < out["a"]["prefill_pct_of_peak"] < 100
    assert out["b"] == {"decode_x": None, "prefill_x": None, "ttft_ms": None}


def test_matmul_peak_is_measured():
    row = bench_peer.matmul_peak_row(m=128, k=256, n=256, repeats=2)
    assert row["matmul_peak_gflops"] >= row["matmul_median_gflops"] > 0


def test_fidelity_is_perfect_against_itself_and_not_against_a_perturbed_copy(tmp_path, monkeypatch):
    import torch

    from playground import backends, bench_fidelity

    ref = bench_fidelity.write_reference(tmp_path / "ref.npy", tokens=24, model="tiny", reference="torch")
    same = bench_fidelity.fidelity_row("torch", tmp_path / "ref.npy", model="tiny")
    assert same["top1_agreement_with_fp32"] == 1.0 and same["mean_kl_from_fp32_nats"] < 1e-6
    assert same["perplexity"] == pytest.approx(ref["perplexity"], rel=1e-5) and same["fidelity_tokens"] == 24

    real = backends.create_backend("torch", "tiny", device="cpu")
    noise = torch.Generator().manual_seed(0)

    class Noisy:   # the same model with logits jittered: the figures must notice
        tokenizer = real.tokenizer

        def prefill(self, ids):
            logits, state = real.prefill(ids)
            return logits + torch.randn(logits.shape, generator=noise), state

        def decode(self, token, state):
            logits, state = real.decode(token, state)
            return logits + torch.randn(logits.shape, generator=noise), state
    monkeypatch.setattr(backends, "create_backend", lambda *a, **k: Noisy())
    noisy = bench_fidelity.fidelity_row("noisy", tmp_path / "ref.npy", model="tiny")
    assert noisy["top1_agreement_with_fp32"] < 1.0 and noisy["mean_kl_from_fp32_nats"] > 0.01
