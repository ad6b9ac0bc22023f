"""ONNX Runtime GenAI as the bench's peer on ONNX Runtime: what its graph is counted as, its place in the interleaved
rounds, the rows where it cannot run (skipped, and why), and, on the bundled model, its builder's graph decoding."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from onnx import TensorProto, helper, numpy_helper, save

import numpy as np

from playground.backends.onnx_cache import cache_key
from playground.bench import genai, interleaved, kld
from playground.bench.genai import GENAI, GenaiRun, GenaiSkipped
from playground.bench.peer import LlamaBenchRow


def nbits_node(name: str, n: int, k: int, zero_points: bool = False, bits: int = 4, block: int = 32):
    inputs = ["a", f"{name}.w", f"{name}.s"] + ([f"{name}.z"] if zero_points else [])
    return helper.make_node("MatMulNBits", inputs, [f"{name}.y"], domain="com.microsoft", N=n, K=k, bits=bits,
                            block_size=block, accuracy_level=4)


def made_graph(path, zero_points: bool = False):
    """A decode graph's shape in small: two layer MatMulNBits, a head with the most outputs, a norm, a KV input."""
    nodes = [nbits_node("q", 8, 64, zero_points), nbits_node("o", 8, 64, zero_points), nbits_node("head", 100, 64),
             helper.make_node("SkipSimplifiedLayerNormalization", ["a", "a", "g"], ["n"], domain="com.microsoft")]
    scales = [numpy_helper.from_array(np.ones(4, np.float32), f"{name}.s") for name in ("q", "o", "head")]
    past = helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT16, [1, 1, None, 8])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 64]), past],
                              [helper.make_tensor_value_info("head.y", TensorProto.FLOAT, [1, 100])], scales)
    save(helper.make_model(graph), str(path))
    return path


def test_the_graph_is_counted_node_by_node_with_its_matmuls_settings(tmp_path):
    path = made_graph(tmp_path / "model.onnx", zero_points=True)
    assert genai.graph_nodes(path) == {"nodes": 4, "ops": {"MatMulNBits": 3, "SkipSimplifiedLayerNormalization": 1}}
    nbits = genai.matmul_nbits(path)
    assert (nbits["count"], nbits["bits"], nbits["block_size"], nbits["with_zero_points"]) == (3, [4], [32], 2)
    # a 4-bit weight, its block's fp32 scale spread over 32, and in the layers a 4-bit zero point too
    assert nbits["layer_bytes_per_weight"] == pytest.approx(0.5 + (4 + 0.5) / 32, abs=1e-4)
    assert nbits["head_bytes_per_weight"] == pytest.approx(0.5 + 4 / 32, abs=1e-4)
    storage = genai.storage(path)
    assert (storage.layer_bytes, storage.head_bytes, storage.kv_bytes) == (nbits["layer_bytes_per_weight"],
                                                                           nbits["head_bytes_per_weight"], 2)


def test_the_graphs_cache_key_carries_genais_version_and_leaves_other_exports_keys_alone(tmp_path, monkeypatch):
    source = tmp_path / "hf"
    source.mkdir()
    (source / "config.json").write_text("{}")
    monkeypatch.setattr(genai, "version", lambda: "0.18.0")
    first = genai.graph_folder(source, tmp_path)
    monkeypatch.setattr(genai, "version", lambda: "0.19.0")
    assert genai.graph_folder(source, tmp_path) != first
    assert first.parent == tmp_path / "onnx" and first.name.endswith("-genai-int4")
    assert cache_key(source, "") == cache_key(source) != cache_key(source, "a builder")


@pytest.fixture
def no_genai(monkeypatch):
    """onnxruntime_genai made unimportable, as where no wheel exists for the Python or the CPU."""
    monkeypatch.setitem(sys.modules, "onnxruntime_genai", None)


def test_without_the_package_its_graph_row_and_kld_row_say_skipped_and_why(no_genai, tmp_path):
    with pytest.raises(GenaiSkipped, match="does not import here"):
        genai.graph_dir(cache_dir=tmp_path)
    row = genai.genai_row().to_json()
    assert set(row) == {"bench", "peer", "version", "skipped"} and row["peer"] == GENAI
    assert "does not import here" in row["skipped"]
    scored = kld.peer_row(tmp_path / "no-base-needed.kld").to_json()   # skipped before any base is read
    assert scored == {"kld": "llama-perplexity --kl-divergence", "backend": GENAI, "skipped": row["skipped"]}
    assert not list(tmp_path.iterdir())   # nothing built, nothing converted


def test_a_builder_that_fails_gives_skipped_with_its_last_words_and_leaves_no_graph(monkeypatch, tmp_path):
    source = tmp_path / "hf"
    source.mkdir()
    (source / "config.json").write_text("{}")
    monkeypatch.setattr("playground.models.gguf_as_hf_dir", lambda path, cache_dir=None: source)

    def failing_builder(cmd, stdout, **kwargs):
        stdout.write("Traceback (most recent call last):\nNotImplementedError: The model is not supported.\n")
        return subprocess.CompletedProcess(cmd, 1)
    monkeypatch.setattr(genai.subprocess, "run", failing_builder)
    with pytest.raises(GenaiSkipped, match="exited 1: .*NotImplementedError: The model is not supported"):
        genai.graph_dir(tmp_path / "model.gguf", cache_dir=tmp_path)
    assert not (tmp_path / "onnx").exists() or not list((tmp_path / "onnx").iterdir())


def fake_llama(repeats):
    return LlamaBenchRow(threads=2, cpu_variant="zen4", configuration="zen4 with repacking", decode_tps=150.0,
                         prompt_s=0.05, prefill_s=1.0)


@pytest.fixture
def tiny_rounds(monkeypatch, tiny_backend):
    monkeypatch.setattr("playground.backends.create_backend", lambda name, device=None: tiny_backend)
    monkeypatch.setattr(interleaved, "llama_bench_row", fake_llama)
    monkeypatch.setattr("playground.roofline.measure_bandwidth", lambda threads, budget_s: (1e8, "fixed"))
    monkeypatch.setattr(interleaved, "validity", lambda loads: {"valid": True})


@pytest.mark.slow
def test_without_the_package_the_interleaved_rounds_say_the_peer_is_skipped_and_why(no_genai, tiny_rounds, capsys):
    row = interleaved.interleaved_rows(["torch"], rounds=1).to_json()
    rounds = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert rounds[0][GENAI] == row[GENAI] and set(row[GENAI]) == {"skipped"}
    assert "does not import here" in row[GENAI]["skipped"]
    assert row["torch"]["decode_tps"] > 0 and "decode_x_genai" not in row["torch"]
    assert row["threads"] == interleaved.physical_cores()


class FixedPeer:
    """A peer whose figures are given: the rounds' arithmetic on them is what is checked."""

    def __init__(self, graph, decode_tps=200.0, prefill_s=0.5):
        self.graph, self.decode_tps, self.prefill = graph, decode_tps, prefill_s
        self.prompts = []

    def run(self, prompt_ids, new_tokens):
        self.prompts.append(list(prompt_ids))
        return GenaiRun(ttft_s=0.02, decode_tps=self.decode_tps, tokens=[7] * new_tokens)

    def prefill_s(self, ids):
        return self.prefill


@pytest.mark.slow
def test_each_engine_is_put_over_llama_bench_and_ours_over_the_peer_within_the_round(tiny_rounds, tmp_path):
    peer = FixedPeer(made_graph(tmp_path / "model.onnx"))
    row = interleaved.interleaved_rows(["torch"], rounds=1, peer=peer).to_json()
    ours, theirs = row["torch"], row[GENAI]
    assert ours["decode_x_genai"] == pytest.approx(ours["decode_tps"] / 200.0, abs=2e-3)
    assert theirs["decode_x"] == pytest.approx(200.0 / 150.0, abs=2e-3)   # over llama-bench's, as ours
    assert theirs["prefill_x"] == pytest.approx(1.0 / 0.5, abs=2e-3)
    assert theirs["nodes"] == 4 and "nodes" not in ours   # torch runs no ONNX graph
    # its bytes a token from its graph's own storage, on the measured bandwidth
    assert theirs["bandwidth_pct"] == pytest.approx(100 * 200.0 * theirs["token_mb"] * 1e6 / 1e8, rel=0.01)
    # the same prompt ids as ours, in the warm-up and the round
    assert len(peer.prompts) == 2 and peer.prompts[0] == peer.prompts[1]


@pytest.mark.integration
def test_the_builders_graph_of_the_bundled_model_decodes_greedy_tokens_to_text():
    try:
        genai.require()
    except GenaiSkipped as exc:
        pytest.skip(str(exc))
    peer = genai.GenaiPeer.open()
    marker = peer.folder / "playground-complete.json"
    sealed = marker.stat().st_mtime_ns
    assert genai.graph_dir() == peer.folder and marker.stat().st_mtime_ns == sealed   # built once, then read
    layers = json.loads((peer.folder / "genai_config.json").read_text())["model"]["decoder"]["num_hidden_layers"]
    ops = genai.graph_nodes(peer.graph)["ops"]
    assert ops["GroupQueryAttention"] == layers and ops["MatMulNBits"] > layers
    prompt = peer.tokenizer.apply_chat_template(messages=json.dumps([{"role": "user", "content": "Name a colour."}]),
                                                add_generation_prompt=True)
    ids = [int(i) for i in peer.tokenizer.encode(prompt)]
    run = peer.run(ids, 8)
    assert 1 <= len(run.tokens) <= 8 and peer.text(run.tokens).strip()
    logits, _ = peer.prefill(ids)   # the kld rows' path gives the logits its greedy choice was made from
    assert int(np.argmax(logits)) == run.tokens[0]
