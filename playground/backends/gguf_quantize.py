"""Float weights (a hub id, a saved folder, the tiny model) quantized to the bundled GGUF's block types, so
`onnx-gguf4` runs them: the same 4-bit default whether or not the bundled model package is installed.

    folder, blocks = quantized_model("owner/name")   # <cache>/quantized/<name>-<key>/, made once:
    #   blocks.gguf            every layer matrix Q4_1, the embedding (and an untied head) Q8_0, written by
    #                          gguf-py's own quantizer (gguf.quants.quantize), as llama.cpp would store them
    #   model.safetensors, …   a transformers folder holding exactly those blocks dequantized (plus the float
    #                          norms and the tokenizer): what torch.onnx exports, so the export's weights equal
    #                          the blocks bit for bit, as onnx_gguf.py checks before rewriting

The types are the ones the bundled SmolLM2 GGUF uses per tensor (Q4_1 layers, Q8_0 embedding). gguf-py's
quantizer is llama.cpp's reference arithmetic: the bundled file's 211 Q4_1/Q8_0 tensors, dequantized and
quantized again, give back their own bytes (tests/backends/test_gguf_quantize.py), so a float model that came from
such a file gets its blocks back exactly.

The key hashes every file of the float source by content (size, first and last 4 MiB; models.gguf_content_key),
the gguf version and QUANTIZE_EDITS, so the same weights in another folder or a fresh cache map to one entry.

Left out: architectures other than llama (ValueError, as for a GGUF of other block types), and other block
types (Q4_K, …) than the bundled file's.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import default_cache_dir
from ..models import ModelSource, gguf_content_key, resolve_model_spec
from .gguf_blocks import BLOCK, EMBEDDING, llama_row_order, read_gguf_blocks
from .onnx_cache import is_complete, say, seal, staging

QUANTIZE_EDITS = "q4_1-layers,q8_0-embed-head"   # part of the cache key: change it when the choices below change
BLOCKS_FILE = "blocks.gguf"
LAYER_TENSORS = {   # GGUF name -> transformers parameter under model.layers.<i>.
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj"}
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]   # what a float model needs from the hub


@dataclass(frozen=True)
class QuantizedModel:
    folder: Path   # the transformers folder of the dequantized blocks (what torch.onnx exports)
    blocks: Path   # the GGUF of the blocks (what onnx_gguf.py maps onto MatMulNBits)


def quantizable(config: dict | None) -> str | None:
    """None when a float model's config can take Q4_1/Q8_0 blocks on onnx-gguf4; else why not.

    >>> quantizable({"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536})
    >>> quantizable({"model_type": "gpt2", "hidden_size": 768})
    "model type 'gpt2': onnx-gguf4 maps llama's layers only"
    """
    if not config:
        return "no config.json"
    if config.get("model_type") != "llama":
        return f"model type {config.get('model_type')!r}: onnx-gguf4 maps llama's layers only"
    for key in ("hidden_size", "intermediate_size"):
        if int(config.get(key, 0)) % BLOCK:
            return f"{key} {config.get(key)} is not a multiple of the block size {BLOCK}"
    return None


def float_config(source: ModelSource) -> dict | None:
    """The float model's config.json (a folder's, or a hub id's from the local cache or the hub); None if unknown."""
    try:
        if source.kind == "dir":
            return json.loads((Path(source.location) / "config.json").read_text())
        if source.kind == "hub":
            from huggingface_hub import hf_hub_download
            return json.loads(Path(hf_hub_download(source.location, "config.json")).read_text())
    except Exception:  # noqa: BLE001 - offline with nothing cached, a private repo, a broken file: unknown
        return None
    return None


def float_folder(source: ModelSource, cache_dir: Path | None = None) -> Path:
    """A local folder of the float model: a saved folder as is, a hub id's snapshot, the tiny model saved once."""
    if source.kind == "dir":
        return Path(source.location)
    if source.kind == "hub":
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(source.location, allow_patterns=HUB_FILES))
    if source.kind == "tiny":
        from .export_input import tiny_input_dir
        return tiny_input_dir(Path(cache_dir or default_cache_dir()) / "onnx" / "tiny-source")
    raise ValueError(f"model {source.name!r} is a {source.kind}, not float weights")


def content_key(folder: Path) -> str:
    """12 hex digits from every file's name and content (not its place or mtime), the gguf version and the edits."""
    from importlib.metadata import version

    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and not p.name.startswith("."))
    ident = [[p.name, gguf_content_key(p)] for p in files]
    return hashlib.sha256(json.dumps([ident, version("gguf"), QUANTIZE_EDITS]).encode()).hexdigest()[:12]


def quantized_model(spec: str | None, cache_dir: Path | None = None, progress=None) -> QuantizedModel:
    """The cached quantized copy of float model `spec`, made if missing. ValueError when it cannot be made."""
    source = resolve_model_spec(spec)
    if source.kind == "gguf":
        raise ValueError(f"model {source.name!r} is a GGUF already: onnx-gguf4 reads its own blocks")
    folder = float_folder(source, cache_dir)
    why_not = quantizable(json.loads((folder / "config.json").read_text()))
    if why_not:
        raise ValueError(f"cannot quantize {source.name!r} to Q4_1 blocks: {why_not}")
    name = source.name.replace("/", "--")
    target = Path(cache_dir or default_cache_dir()) / "quantized" / f"{name}-{content_key(folder)}"
    if not is_complete(target, BLOCKS_FILE):
        say(progress, 0.05, "quantizing the float weights to Q4_1 blocks with gguf-py (once, ~10 s for 135M)",
            f"quantizing {folder} to Q4_1/Q8_0 blocks in {target}")
        work = staging(target)
        work.mkdir(parents=True)
        write_quantized(folder, work)
        seal(work, target, {"source": str(folder), "edits": QUANTIZE_EDITS}, required=BLOCKS_FILE)
    return QuantizedModel(target, target / BLOCKS_FILE)


def write_quantized(float_dir: Path, out: Path) -> None:
    """Quantize the float model in `float_dir`: blocks.gguf, and a transformers folder of the dequantized blocks."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(float_dir, dtype=torch.float32)
    write_blocks_gguf(model.state_dict(), model.config, out / BLOCKS_FILE)
    blocks, _ = read_gguf_blocks(out / BLOCKS_FILE)   # read back as the rewrite will: one truth for both files
    params = dict(model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for node, weight in blocks.items():
            params[parameter_of(node)].copy_(torch.from_numpy(weight.dequantize()))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(float_dir).save_pretrained(out)


def parameter_of(node: str) -> str:
    """The transformers parameter an exported node's weight comes from.

    >>> parameter_of("/model/layers.3/mlp/up_proj/MatMul"), parameter_of("lm_head")
    ('model.layers.3.mlp.up_proj.weight', 'lm_head.weight')
    """
    if node == EMBEDDING:
        return "model.embed_tokens.weight"
    if node == "lm_head":
        return "lm_head.weight"
    return node.strip("/").removesuffix("/MatMul").replace("/", ".") + ".weight"


def gguf_tensors(state: dict, config) -> dict[str, tuple[np.ndarray, str]]:
    """{GGUF tensor name: (float32 [N, K] rows in llama.cpp's order, block type)} for a llama state dict.

    attn_q / attn_k rows go into llama.cpp's rope order (its converter's permutation, which
    gguf_blocks.llama_row_order undoes); quantizing is per row, so the order does not change any block.
    """
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads or config.num_attention_heads
    out = {"token_embd.weight": (state["model.embed_tokens.weight"], "Q8_0")}
    if not config.tie_word_embeddings:
        out["output.weight"] = (state["lm_head.weight"], "Q8_0")
    for i in range(config.num_hidden_layers):
        for short, param in LAYER_TENSORS.items():
            w = state[f"model.layers.{i}.{param}.weight"]
            if short in ("attn_q", "attn_k"):
                w = w[np.argsort(llama_row_order(w.shape[0], heads if short == "attn_q" else kv_heads))]
            out[f"blk.{i}.{short}.weight"] = (w, "Q4_1")
    return out


def write_blocks_gguf(state: dict, config, path: Path) -> None:
    """A GGUF holding the layer matrices as Q4_1 and the embedding (and an untied head) as Q8_0, and the
    head counts read_gguf_blocks needs; quantized by gguf-py (`gguf.quants.quantize`)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads or config.num_attention_heads)
    for name, (weight, kind) in gguf_tensors({k: v.float().numpy() for k, v in state.items()}, config).items():
        qtype = gguf.GGMLQuantizationType[kind]
        writer.add_tensor(name, gguf.quants.quantize(np.ascontiguousarray(weight, np.float32), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
