"""ONNX nodes that compute y = x . w^T from a GGUF's blocks with `MatMulNBits`, in one of three activation modes.

    nodes, initializers = nbits_nodes("/model/layers.0/mlp/down_proj", x, weight, y, "int8x2")

For Q4_1 blocks (w = d*q + m) the product splits in two. In the fp32 and int8x2 modes, exactly:
    x.w = sum_b d_b ((q_b - 8) . x_b)   +   sum_b (m_b + 8 d_b) sum(x_b)
          MatMulNBits, default zero point 8   FusedMatMul(AveragePool(x, 32), 32 (m + 8d) [N, K/32], transB)
d*(q - 8) and m + 8d are exact in fp32 (checked per matrix; else zero point 0 and m are used), so one-hot
rows still give gguf-py's d*q + m bit for bit (one rounding of the same real number); the symmetric
form is the kernel's faster path. The block means (AveragePool, one node) times 32 m are the block sums
times m exactly: 32 is a power of two.
In the int8 mode (llama.cpp's arithmetic) the kernel's own zero point carries the minimum:
    x.w = sum_b d_b ((q_b - z_b) . x_b)  +   sum_b r_b sum(x_b),   z_b = round(-m_b / d_b) in 0..15,
          MatMulNBits with zero points z      r_b = m_b + z_b d_b: |r_b| <= d_b / 2 wherever the block spans 0
and the remainder's term, 1/32 the size of the layer, is an 8-bit MatMulNBits on the block means (r
rounded to int8 per output row, the means to int8 as the kernel does: a relative error under 1e-2 of a
term whose weights are at most half a step, d/2). The minimums' term in fp32 reads 13 MB a decode
step, as much as a fifth of the weights; the remainder in int8 reads a quarter of that, and the zero
points 1/8 (a decode step 7.5 against 8.2 ms, interleaved, AVX-512 EPYC; batched rows are as fast).
Q8_0 blocks (w = d*q) need only the first part (8-bit, q + 128 against the default zero point 128).

Modes (what MatMulNBits does with the activations x):
  - "fp32"   accuracy level 0: fp32 arithmetic, the fp32 export's numbers up to summation order (~1e-7
             relative), but ONNX Runtime's kernel for it is slow at one row (decode).
  - "int8"   accuracy level 4: x quantized to int8 per block of 32 (scale = max|x_b| / 127), as llama.cpp's
             Q4_1 x Q8_1 kernels do: ~3x faster at one row, ~1e-2 relative error on real activations.
  - "int8x2" level 4 on two rows: hi = x rounded to that same int8 grid (which the kernel then quantizes
             losslessly) and lo = x - hi; their products are summed. Only lo's rounding is left (~1e-4
             relative) for ~1.2x the one-pass time of a layer at one row (~1.4x CPU per token with the split
             nodes); twice the work on long prompts.

  - the levers (LEVERS; measured against the default by `make bench`'s levers row, not backends): the Q4_1
    minimum in MatMulNBits' own zero points alone, no term beside, at accuracy level 4: "fzp" float zero
    points -m/d (ONNX Runtime's CPU kernel leaves such a matrix unpacked and dequantizes all of it to fp32 on
    every call: fp32 arithmetic, slow), "q8zp" 8-bit blocks with integer zero points (up to d/32 dropped, twice
    the weight bytes), "int8nr" the 4-bit zero points with the remainder dropped (up to d/2: what the term is worth);
    and "cat4", the term kept but not beside: the block means appended to the activations (a Concat) and the
    remainders' weights appended to the matrix as 4-bit blocks of their own, so one MatMulNBits computes both
    (its 8-bit MatMulNBits and its Add gone; the remainders rounded to 4 bits per block of 32 of them).

    >>> hi_lo(np.array([[1.0, 0.3, -0.0049]], np.float32))[0].tolist()   # hi on the grid of 1/127
    [[1.0, 0.29921260476112366, -0.007874015718698502]]

Left out: other block sizes than 32.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from .gguf_blocks import BLOCK, NBitsWeight, pack_pairs

MS = "com.microsoft"
LEVEL = {"fp32": 0, "int8": 4, "int8x2": 4, "fzp": 4, "q8zp": 4, "int8nr": 4, "cat4": 4}
GROUPS = ("qkv", "o", "gate_up", "down", "head")   # the MatMulNBits of a layer, and the LM head
MODE_CODES = {"fp32": "f", "int8": "i", "int8x2": "d", "fzp": "z", "q8zp": "e", "int8nr": "n", "cat4": "c"}
HI_LO = "hi_lo"   # an int8x2 MatMulNBits reads `<stem>/hi_lo`: its activation rows, hi rows then lo rows


def plan_of(modes: str | dict | None = None) -> dict[str, str]:
    """{group: activation mode} from one mode for all groups, or a partial mapping (the rest: int8x2).

    >>> plan_tag(plan_of("fp32")), plan_tag(plan_of({"head": "int8"}))
    ('fffff', 'ddddi')
    """
    if modes is None or isinstance(modes, str):
        modes = dict.fromkeys(GROUPS, modes or "int8x2")
    plan = {g: modes.get(g, "int8x2") for g in GROUPS}
    if unknown := {m for m in plan.values() if m not in MODE_CODES}:
        raise ValueError(f"activation modes must be among {sorted(MODE_CODES)}; got {sorted(unknown)}")
    return plan


def plan_tag(plan: dict[str, str]) -> str:
    return "".join(MODE_CODES[plan[g]] for g in GROUPS)


def hi_lo(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy twin of the graph's split, per block of 32 along the last axis (for tests and the doctest)."""
    blocks = x.reshape(*x.shape[:-1], -1, min(BLOCK, x.shape[-1]))
    scale = np.maximum(np.abs(blocks).max(-1, keepdims=True), np.float32(1e-30)) / np.float32(127)
    hi = np.round(blocks / scale) * scale
    return hi.reshape(x.shape), (blocks - hi).reshape(x.shape)


def nbits_nodes(stem: str, x: str, w: NBitsWeight, y: str, mode: str) -> tuple[list, list]:
    """Nodes and initializers computing y = x . w^T from the blocks, x in [batch, seq, K] (see module doc)."""
    n, k = w.shape
    c = _Consts(stem)
    if w.minimums is not None and mode == "cat4":
        means, wide = f"{stem}/block_means", f"{stem}/with_block_means"
        joined, zero_points, k_wide = term_in_blocks(w)
        return [_node("AveragePool", [x], means, kernel_shape=[BLOCK], strides=[BLOCK]),
                helper.make_node("Concat", [x, means], [wide], axis=-1, name=f"{wide}/Concat"),
                helper.make_node("MatMulNBits", [wide, c.add("B", joined.packed), c.add("scales", joined.scales.reshape(-1)),
                                                 c.add("zero_points", zero_points)], [y], name=f"{stem}/MatMulNBits",
                                 domain=MS, K=k_wide, N=n, bits=4, block_size=BLOCK, accuracy_level=LEVEL[mode])
                ], c.initializers
    lever_zero_points = None
    if w.minimums is not None and mode in LEVERS:   # the minimum in the zero points alone, no term beside
        w, lever_zero_points = LEVERS[mode](w)
    ins = [x, c.add("B", w.packed), c.add("scales", w.scales.reshape(-1))]
    if lever_zero_points is not None:
        ins.append(c.add("zero_points", lever_zero_points))
    nodes, minimum_term = [], []
    if w.minimums is not None:
        means = f"{stem}/block_means"
        nodes.append(_node("AveragePool", [x], means, kernel_shape=[BLOCK], strides=[BLOCK]))
        if mode == "int8":
            zero_points, remainder = integer_zero_points(w)
            ins.append(c.add("zero_points", pack_zero_points(zero_points)))
            minimum_term = _int8_term(stem, means, BLOCK * remainder, c)
        else:
            minimums = w.minimums
            shifted = minimums.astype(np.float64) + 8 * w.scales.astype(np.float64)
            if np.array_equal(shifted.astype(np.float32), shifted):   # d*(q - 8) + (m + 8d): zero point 8
                minimums = shifted.astype(np.float32)
            else:                                                      # explicit zero point 0
                ins.append(c.add("zero_points", np.zeros(n * ((k // BLOCK + 1) // 2), np.uint8)))
            minimum_term = [helper.make_node("FusedMatMul", [means, c.add("minimums", BLOCK * minimums)],
                                             [f"{stem}/minimum_term"], name=f"{stem}/minimum_term/FusedMatMul",
                                             domain=MS, transB=1)]
    if mode == "int8x2":
        blocks = f"{stem}/blocks"
        nodes.append(_node("Reshape", [x, c.add("block_shape", np.array([0, 0, k // BLOCK, BLOCK], np.int64))], blocks))
        ins[0] = f"{stem}/{HI_LO}"
        nodes += _hi_lo_nodes(stem, blocks, k, c)
    partial = f"{stem}/MatMulNBits_output" if (minimum_term or mode == "int8x2") else y
    nodes.append(helper.make_node("MatMulNBits", ins, [partial], name=f"{stem}/MatMulNBits", domain=MS, K=k, N=n,
                                  bits=w.bits, block_size=BLOCK, accuracy_level=LEVEL[mode]))
    if mode == "int8x2":   # [B, 2S, N] -> [B, 2, S, N] -> sum of the hi and lo rows
        summed = f"{stem}/hi_plus_lo" if minimum_term else y
        nodes += [_node("Reshape", [partial, c.add("two_rows", np.array([0, 2, -1, n], np.int64))], f"{stem}/rows"),
                  _node("ReduceSum", [f"{stem}/rows", c.add("row_axis", np.array([1], np.int64))], summed, keepdims=0)]
        partial = summed
    if minimum_term:
        nodes += minimum_term + [_node("Add", [partial, f"{stem}/minimum_term"], y)]
    return nodes, c.initializers


def integer_zero_points(w: NBitsWeight) -> tuple[np.ndarray, np.ndarray]:
    """Q4_1's d*q + m as d*(q - z) + r: z = round(-m/d) within the 4-bit codes (uint8 [N, K/32]), r = m + z*d.

    >>> w = NBitsWeight(np.zeros((1, 2, 16), np.uint8), np.float32([[0.5, 0.25]]), np.float32([[-1.7, 1.0]]), 4)
    >>> [a.tolist() for a in integer_zero_points(w)]   # -1.7 = -0.5*3 - 0.2; a block above 0 keeps z = 0
    [[[3, 0]], [[-0.20000004768371582, 1.0]]]
    """
    d, m = w.scales.astype(np.float64), w.minimums.astype(np.float64)
    z = np.clip(np.round(-m / np.where(d == 0, 1, d)), 0, 15)
    return z.astype(np.uint8), (m + z * d).astype(np.float32)


def float_zero_points(w: NBitsWeight) -> tuple[NBitsWeight, np.ndarray]:
    """Lever "fzp": Q4_1's d*q + m as d*(q - z), z = -m/d a float zero point per block (float32 [N * K/32], the
    scales' type; 0 where d = 0). Returns the blocks without minimums and z.

    >>> w = NBitsWeight(np.zeros((1, 1, 16), np.uint8), np.float32([[0.5]]), np.float32([[-1.7]]), 4)
    >>> round(float(float_zero_points(w)[1][0]), 4)
    3.4
    """
    d, m = w.scales.astype(np.float64), w.minimums.astype(np.float64)
    z = np.where(d == 0, 0, -m / np.where(d == 0, 1, d)).astype(np.float32)
    return NBitsWeight(w.packed, w.scales, None, w.bits), z.reshape(-1)


def eight_bit_zero_points(w: NBitsWeight) -> tuple[NBitsWeight, np.ndarray]:
    """Lever "q8zp": Q4_1 as 8-bit blocks, codes 16 q + o, scale d/16 (exact), zero point z = round(-16 m/d) + o
    (o in 0..15 keeps z >= 0): d*q + m = (d/16) (16 q + o - z) + e, |e| <= d/32, and e is dropped.

    >>> w = NBitsWeight(np.zeros((1, 1, 16), np.uint8), np.float32([[0.5]]), np.float32([[-1.7]]), 4)
    >>> w8, z = eight_bit_zero_points(w)
    >>> w8.bits, int(z[0]), float(w8.scales[0, 0] * (w8.codes()[0, 0, 0] + 128 - z[0]))   # -1.7 to within 0.5/32
    (8, 54, -1.6875)
    """
    d, m = w.scales.astype(np.float64), w.minimums.astype(np.float64)
    zr = np.round(-16 * m / np.where(d == 0, 1, d))
    o = np.clip(-zr, 0, 15)
    z = np.clip(zr + o, 0, 255)
    codes = (16 * w.codes() + o[..., None]).astype(np.uint8)
    return NBitsWeight(codes, (w.scales / np.float32(16)).astype(np.float32), None, 8), z.astype(np.uint8).reshape(-1)


def zero_points_only(w: NBitsWeight) -> tuple[NBitsWeight, np.ndarray]:
    """Lever "int8nr": int8's 4-bit zero points z = round(-m/d) with the remainder r = m + z d (up to d/2) dropped:
    what the minimums' term is worth. Returns the blocks without minimums and the packed zero points."""
    return NBitsWeight(w.packed, w.scales, None, w.bits), pack_zero_points(integer_zero_points(w)[0])


def term_in_blocks(w: NBitsWeight) -> tuple[NBitsWeight, np.ndarray, int]:
    """Lever "cat4": Q4_1's d*q + m as d*(q - z) on x plus the remainders' term r on the block means, in one matrix
    of 4-bit blocks over [x, means(x)]: the layer's own blocks with int8's zero points z (integer_zero_points), then
    the term's weights 32 r (a mean times 32 is its block's sum) in blocks of 32 of their own, 4-bit with a scale and
    zero point each (the range taken over the block and 0, so the padding past the last mean is exactly 0). Returns
    (the blocks, no minimums; the packed zero points; K of [x, means]).

    >>> w = NBitsWeight(np.zeros((1, 2, 16), np.uint8), np.float32([[0.5, 0.25]]), np.float32([[-1.7, 1.0]]), 4)
    >>> joined, zp, k = term_in_blocks(w)
    >>> k, joined.packed.shape, joined.scales.shape       # 64 inputs and 2 means; 2 blocks of x, 1 of means
    (66, (1, 3, 16), (1, 3))
    >>> d = joined.dequantize_with(unpack_zero_points(zp, 3))    # 32 r = [-6.4, 32.0], each within half a step
    >>> step = float(joined.scales[0, 2]); [abs(float(v) - t) <= step / 2 + 1e-6 for v, t in zip(d[0, 64:66], [-6.4, 32])]
    [True, True]
    >>> bool((d[0, :64] == 0).all()), bool((d[0, 66:] == 0).all())   # x's blocks d (q - z); the padding exactly 0
    (False, True)
    """
    n, k = w.shape
    z, r = integer_zero_points(w)
    t = BLOCK * r.astype(np.float64)
    means = t.shape[1]
    blocks = -(-means // BLOCK)
    padded = np.zeros((n, blocks * BLOCK))
    padded[:, :means] = t
    padded = padded.reshape(n, blocks, BLOCK)
    low, high = np.minimum(padded.min(-1), 0), np.maximum(padded.max(-1), 0)
    scale = (high - low) / 15
    scale[scale == 0] = 1
    zt = np.clip(np.round(-low / scale), 0, 15)
    q = np.clip(np.round(padded / scale[..., None]) + zt[..., None], 0, 15)
    codes = np.concatenate([w.codes(), q], axis=1).astype(np.uint8)
    scales = np.concatenate([w.scales, scale.astype(np.float32)], axis=1)
    zero_points = np.concatenate([z, zt.astype(np.uint8)], axis=1)
    return NBitsWeight(pack_pairs(codes), scales, None, 4), pack_zero_points(zero_points), k + means


def unpack_zero_points(packed: np.ndarray, blocks: int) -> np.ndarray:
    """pack_zero_points undone for one row of `blocks` blocks: uint8 [1, blocks].

    >>> unpack_zero_points(pack_zero_points(np.array([[3, 7, 1]], np.uint8)), 3).tolist()
    [[3, 7, 1]]
    """
    pairs = np.stack([packed & 15, packed >> 4], axis=-1).reshape(-1)
    return pairs[:blocks].reshape(1, blocks)


def pack_zero_points(z: np.ndarray) -> np.ndarray:
    """uint8 [N, blocks] -> MatMulNBits' 4-bit zero points: two per byte, low nibble first, each row padded."""
    padded = np.zeros((z.shape[0], z.shape[1] + z.shape[1] % 2), np.uint8)
    padded[:, :z.shape[1]] = z
    return pack_pairs(padded).reshape(-1)


LEVERS = {"fzp": float_zero_points, "q8zp": eight_bit_zero_points, "int8nr": zero_points_only}   # mode -> (blocks, zp)


def _int8_term(stem: str, means: str, weights: np.ndarray, c: _Consts) -> list:
    """An 8-bit MatMulNBits y = means . weights^T (weights float32 [N, K'], rounded to int8 per row and block of
    up to 256), at accuracy level 4."""
    n, k = weights.shape
    size = min(256, max(16, 1 << (k - 1).bit_length()))
    padded = np.zeros((n, -(-k // size) * size), np.float32)
    padded[:, :k] = weights
    blocks = padded.reshape(n, -1, size)
    scale = np.abs(blocks).max(-1) / np.float32(127)
    scale[scale == 0] = 1
    codes = (np.round(blocks / scale[..., None]) + 128).astype(np.uint8)
    return [helper.make_node("MatMulNBits", [means, c.add("remainders", codes), c.add("remainder_scales", scale.reshape(-1))],
                             [f"{stem}/minimum_term"], name=f"{stem}/minimum_term/MatMulNBits", domain=MS, K=k, N=n,
                             bits=8, block_size=size, accuracy_level=LEVEL["int8"])]


def reads_hi_lo(node) -> bool:
    """Whether a MatMulNBits node (as nbits_nodes builds it) is int8x2's: it multiplies twice its input's rows."""
    return node.input[0].endswith(f"/{HI_LO}")


def embedding_nodes(stem: str, ids: str, w: NBitsWeight, y: str) -> tuple[list, list]:
    """GatherBlockQuantized rows of 8-bit blocks (Q8_0: d * (q + 128 - 128), exact), ids [B, S] -> y [B, S, K]."""
    n, k = w.shape
    c = _Consts(stem)
    data, scales = c.add("codes", w.packed.reshape(n, k)), c.add("scales", w.scales)
    return [helper.make_node("GatherBlockQuantized", [data, ids, scales], [y], name=f"{stem}/GatherBlockQuantized",
                             domain=MS, gather_axis=0, quantize_axis=1, block_size=BLOCK, bits=w.bits)], c.initializers


def _hi_lo_nodes(stem: str, blocks: str, k: int, c: _Consts) -> list:
    """hi = round(x_b / s_b) * s_b with s_b = max|x_b| / 127 (ONNX Round: half to even, as the kernel), lo = x - hi;
    output [B, 2S, K]: the S hi rows, then the S lo rows."""
    s = f"{stem}/split"
    return [_node("Abs", [blocks], f"{s}/abs"),
            _node("ReduceMax", [f"{s}/abs", c.add("max_axis", np.array([-1], np.int64))], f"{s}/amax0", keepdims=1),
            _node("Max", [f"{s}/amax0", c.add("tiny", np.array(1e-30, np.float32))], f"{s}/amax"),
            _node("Div", [f"{s}/amax", c.add("q_max", np.array(127, np.float32))], f"{s}/scale"),
            _node("Div", [blocks, f"{s}/scale"], f"{s}/scaled"),
            _node("Round", [f"{s}/scaled"], f"{s}/codes"),
            _node("Mul", [f"{s}/codes", f"{s}/scale"], f"{s}/hi"),
            _node("Sub", [blocks, f"{s}/hi"], f"{s}/lo"),
            helper.make_node("Concat", [f"{s}/hi", f"{s}/lo"], [f"{s}/rows"], axis=1, name=f"{s}/Concat"),
            _node("Reshape", [f"{s}/rows", c.add("flat", np.array([0, -1, k], np.int64))], f"{stem}/{HI_LO}")]


def _node(op: str, inputs: list[str], output: str, **attrs):
    return helper.make_node(op, inputs, [output], name=f"{output}/{op}", **attrs)


class _Consts:
    """Initializers named under one stem."""

    def __init__(self, stem: str):
        self.stem, self.initializers = stem, []

    def add(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), f"{self.stem}/{name}"))
        return self.initializers[-1].name
