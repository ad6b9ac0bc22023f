"""`--model` with an architecture transformers 4.57 does not know: NanoChat (`model_type` "nanochat", added in
transformers 5). A tiny random one is built here, saved as a folder, and run on `torch` and on `onnx`
(exported by torch.onnx: attention stays as exported, since it is not a plain Llama)."""
from __future__ import annotations

import onnx
import pytest

from playground.backends import create_backend
from playground.backends import onnx_export
from playground.config import GenerationSettings
from playground.engine import Engine

GREEDY = GenerationSettings(max_new_tokens=12, chat=False)


@pytest.fixture
def nanochat_dir(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from playground.tiny import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    config = AutoConfig.for_model("nanochat", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                  max_position_embeddings=256, bos_token_id=tok.bos_token_id,
                                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():   # weights scaled up, so greedy tokens vary (a random tiny model repeats one token)
        for p in model.parameters():
            p.mul_(4.0)
    folder = tmp_path / "tiny-nanochat"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_a_model_newer_than_transformers_4_57_loads_exports_and_runs(nanochat_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    traces = {}
    for name in ("torch", "onnx"):
        backend = create_backend(name, str(nanochat_dir), device="cpu", dtype="float32")
        assert backend.config.model_type == "nanochat"
        traces[name] = trace = Engine(backend).generate("The KV cache grows", GREEDY)
        assert len(trace.steps) == GREEDY.max_new_tokens
        assert [s.kv_bytes for s in trace.steps] == [trace.kv_shape.formula_bytes(s.seq_len) for s in trace.steps]
    assert traces["onnx"].output_ids == traces["torch"].output_ids
    assert len(set(traces["torch"].output_ids)) > 1   # the tokens vary, so agreeing means something
    graph = onnx.load(str(backend.folder / onnx_export.MODEL_FILE)).graph
    assert "GroupQueryAttention" not in {n.op_type for n in graph.node}   # not a Llama: attention as exported
    assert backend.generate_reference(traces["onnx"].prompt_ids, 12) == traces["onnx"].output_ids
