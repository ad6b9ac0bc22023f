"""A GGUF file's own quantized blocks, rearranged for ONNX Runtime's `MatMulNBits` (no re-quantizing).

Q4_1 (every layer matrix of the bundled SmolLM2): blocks of 32 weights along the input dimension, each
stored as fp16 scale d, fp16 minimum m and 16 bytes of 4-bit q, with w = d*q + m. Q8_0 (its tied
embedding / LM head): fp16 d and 32 int8 q, w = d*q. `MatMulNBits` keeps blocks of 32 too, with
w = scale * (q - zero_point), so the rearranged blocks hold the same numbers:
  - Q4_1 becomes scale = d, zero point 0, plus `minimums` (m) that the graph adds as m . blocksum(x);
  - Q8_0 becomes scale = d, q + 128 with the default zero point 128 (exact: d*(q+128-128) = d*q).

Two traps, handled here: ggml packs element j and j+16 of a block into byte j (low, high nibble), where
`MatMulNBits` packs elements 2j and 2j+1; and transformers' GGUF loader un-permutes the rows of
attn_q/attn_k (llama.cpp's convert permuted them for its rope layout), so those blocks are re-ordered
the same way to line up with the exported graph's weights.

    >>> ggml = np.array([[0x10 * (j % 16) + j % 16 for j in range(16)]], np.uint8)  # q[j] = q[j+16] = j
    >>> nibbles(ggml)[0, :18].tolist()
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1]
    >>> pack_pairs(nibbles(ggml))[0, :2].tolist()   # byte 0 = q0 | q1 << 4, byte 1 = q2 | q3 << 4
    [16, 50]

Left out: other GGUF types (Q4_0, Q4_K, ...) and architectures other than llama.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

BLOCK = 32
Q4_1_BYTES, Q8_0_BYTES = 20, 34        # per block of 32: fp16 d, fp16 m, 16 bytes; fp16 d, 32 int8
LAYER_NODES = {"attn_q": "self_attn/q_proj", "attn_k": "self_attn/k_proj", "attn_v": "self_attn/v_proj",
               "attn_output": "self_attn/o_proj", "ffn_gate": "mlp/gate_proj", "ffn_up": "mlp/up_proj",
               "ffn_down": "mlp/down_proj"}


@dataclass
class NBitsWeight:
    """One [N outputs, K inputs] matrix as MatMulNBits blocks; row n, block b covers inputs 32b..32b+31."""
    packed: np.ndarray            # uint8 [N, K/32, 32*bits/8]
    scales: np.ndarray            # float32 [N, K/32]
    minimums: np.ndarray | None   # float32 [N, K/32] (Q4_1's m) or None (Q8_0)
    bits: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.packed.shape[0], self.packed.shape[1] * BLOCK

    def codes(self) -> np.ndarray:
        """The integer codes minus the zero point, float32 [N, K/32, 32]."""
        if self.bits == 8:
            return self.packed.astype(np.float32) - 128
        low, high = self.packed & 15, self.packed >> 4
        return np.stack([low, high], axis=-1).reshape(*self.packed.shape[:2], BLOCK).astype(np.float32)

    def dequantize(self) -> np.ndarray:
        """float32 [N, K], computed as ggml does (d*q, then + m)."""
        w = self.scales[..., None] * self.codes()
        if self.minimums is not None:
            w = w + self.minimums[..., None]
        return w.reshape(self.shape)

    def dequantize_with(self, zero_points: np.ndarray) -> np.ndarray:
        """float32 [N, K]: d * (q - z) with integer zero points z (uint8 [N, K/32]), as MatMulNBits reads them."""
        return (self.scales[..., None] * (self.codes() - zero_points[..., None])).reshape(self.shape)

    def take_rows(self, order: np.ndarray) -> NBitsWeight:
        mins = None if self.minimums is None else self.minimums[order]
        return NBitsWeight(self.packed[order], self.scales[order], mins, self.bits)

    @staticmethod
    def stack(parts: list[NBitsWeight]) -> NBitsWeight:
        """The rows of several matrices with the same K, one after another (a fused q|k|v or gate|up)."""
        mins = None if parts[0].minimums is None else np.concatenate([p.minimums for p in parts])
        return NBitsWeight(np.concatenate([p.packed for p in parts]), np.concatenate([p.scales for p in parts]),
                           mins, parts[0].bits)


def nibbles(qs: np.ndarray) -> np.ndarray:
    """ggml's 16 bytes per block -> the 32 codes in element order (byte j: low = q[j], high = q[j+16])."""
    return np.concatenate([qs & 15, qs >> 4], axis=-1)


def pack_pairs(q: np.ndarray) -> np.ndarray:
    """32 codes per block -> MatMulNBits' 16 bytes (byte j: low = q[2j], high = q[2j+1])."""
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)


def _fp16(raw: np.ndarray, offset: int) -> np.ndarray:
    return raw[..., offset:offset + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def q4_1_as_nbits(raw: np.ndarray, n: int, k: int) -> NBitsWeight:
    raw = np.asarray(raw, np.uint8).reshape(n, k // BLOCK, Q4_1_BYTES)
    return NBitsWeight(pack_pairs(nibbles(raw[..., 4:])), _fp16(raw, 0), _fp16(raw, 2), 4)


def q8_0_as_nbits(raw: np.ndarray, n: int, k: int) -> NBitsWeight:
    raw = np.asarray(raw, np.uint8).reshape(n, k // BLOCK, Q8_0_BYTES)
    codes = raw[..., 2:].view(np.int8).astype(np.int16) + 128
    return NBitsWeight(codes.astype(np.uint8), _fp16(raw, 0), None, 8)


def llama_row_order(rows: int, heads: int) -> np.ndarray:
    """Indices that put GGUF rows in transformers' order, as its loader's reverse permutation does.

    >>> llama_row_order(8, 1).tolist()   # one head of 8: GGUF interleaves the two rope halves
    [0, 2, 4, 6, 1, 3, 5, 7]
    """
    half = rows // heads // 2
    return np.arange(rows).reshape(heads, half, 2).swapaxes(2, 1).reshape(rows)


EMBEDDING = "/model/embed_tokens/Gather"


def read_gguf_blocks(path: Path) -> tuple[dict[str, NBitsWeight], dict[str, int]]:
    """({exported node name: blocks in the export's row order}, llama hyper-parameters) from a GGUF file.

    Node names are the torch.onnx export's (module paths): '/model/layers.3/mlp/up_proj/MatMul', EMBEDDING for the token
    embedding (when Q8_0) and 'lm_head' for the output (token_embd when tied). Raises ValueError for a
    layer or head type other than Q4_1/Q8_0.
    """
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = {name: f.parts[f.data[0]].tolist() for name, f in reader.fields.items() if f.data}
    if "llama.attention.head_count" not in field:
        raise ValueError(f"{Path(path).name} is not a llama GGUF; onnx-gguf4 maps llama's blocks only")
    heads, kv_heads = field["llama.attention.head_count"][0], field["llama.attention.head_count_kv"][0]
    convert = {"Q4_1": q4_1_as_nbits, "Q8_0": q8_0_as_nbits}
    tensors = {t.name: t for t in reader.tensors}
    nodes_of = {"output.weight" if "output.weight" in tensors else "token_embd.weight": ["lm_head"]}
    if tensors["token_embd.weight"].tensor_type.name == "Q8_0":
        nodes_of.setdefault("token_embd.weight", []).append(EMBEDDING)
    blocks = {}
    for name, t in tensors.items():
        parts = name.split(".")
        if parts[0] == "blk" and parts[2] in LAYER_NODES:
            nodes_of[name] = [f"/model/layers.{parts[1]}/{LAYER_NODES[parts[2]]}/MatMul"]
        if name not in nodes_of:
            continue
        if t.tensor_type.name not in convert:
            raise ValueError(f"{name} is {t.tensor_type.name}; only Q4_1 and Q8_0 blocks map onto MatMulNBits")
        k, n = (int(x) for x in t.shape)
        weight = convert[t.tensor_type.name](t.data, n, k)
        if parts[-2] in ("attn_q", "attn_k"):
            weight = weight.take_rows(llama_row_order(n, heads if parts[-2] == "attn_q" else kv_heads))
        blocks.update(dict.fromkeys(nodes_of[name], weight))
    return blocks, {"heads": heads, "kv_heads": kv_heads}
