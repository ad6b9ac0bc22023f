"""Quantize a cached fp32 export into a sibling cache folder (called by onnx_export.exported_dir).

    quantize_int8(fp32, target)   # dynamic int8 MatMuls (ONNX Runtime's quantize_dynamic)
    quantize_int4(fp32, target)   # 4-bit block weights (MatMulNBits), 8-bit LM head

Both write into a staging folder and seal it as onnx_export does for the export itself.
Figures on SmolLM2-135M (3 prompts x 64 tokens, teacher-forced next-token agreement with fp32):
int8 per-channel 0.91, int8 with the LM head and embedding left fp32 0.925 (and no faster);
int4 with the head 8-bit 0.915, head 4-bit 0.90, head fp32 0.92 (but ~40% slower decode);
asymmetric int4 0.88; int8 compute (accuracy_level 4) vs fp32 compute made no difference.

Left out: static (calibrated) quantization, and quantizing the embedding lookup.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from .onnx_cache import MARKER, MODEL_FILE, say, seal, staging

PER_CHANNEL = True  # int8: one scale per output channel: same speed here, text closer to fp32's than per-tensor
INT4_BLOCK = 32     # int4: weights per block, each with its own fp32 scale (symmetric; llama.cpp's Q4_0 uses 32)
QUANT_SUFFIX = {None: "", "int8": "-int8-pc" if PER_CHANNEL else "-int8", "int4": f"-int4-b{INT4_BLOCK}-h8"}

# --- int8 and int4

def quantize_int8(fp32: Path, target: Path, progress=None) -> None:
    """Dynamic int8 (ONNX Runtime's quantize_dynamic): every MatMul, Gather and the like its integer-op
    registry knows, weights symmetric per output channel, activations uint8 with a zero point, scaled per call.

    Weights are int8 where the CPU has AVX-512 VNNI, uint8 otherwise (AVX2's u8 x u8 kernel); a MatMul whose
    weights are computed (the tied LM head's Transpose) is quantized too (MatMulConstBOnly off)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    vnni = has_avx512_vnni()
    say(progress, 0.75, "quantizing to int8 (about 20 s, once)",
         f"int8 dynamic quantization ({'avx512_vnni' if vnni else 'avx2'}) of {fp32} into {target}")
    work = staging(target)
    work.mkdir(parents=True)
    quantize_dynamic(fp32 / MODEL_FILE, work / MODEL_FILE, per_channel=PER_CHANNEL, reduce_range=False,
                     weight_type=QuantType.QInt8 if vnni else QuantType.QUInt8,
                     extra_options={"WeightSymmetric": True, "ActivationSymmetric": False,
                                    "MatMulConstBOnly": False})
    _copy_side_files(fp32, work)
    seal(work, target, {"source": str(fp32), "kind": "int8", "vnni": vnni, "per_channel": PER_CHANNEL})


def quantize_int4(fp32: Path, target: Path, progress=None) -> None:
    """Layer MatMul weights to symmetric 4-bit blocks, the LM head to 8-bit blocks (MatMulNBits, int8
    compute with VNNI: accuracy_level 4); the embedding lookup stays fp32.

    The head gets 8 bits as llama.cpp keeps output.weight wider than Q4: a 4-bit head decoded at about
    the same speed here but agreed less often with fp32's next token.
    """
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    from onnxruntime.transformers.onnx_model import OnnxModel

    from .onnx_graph import untie_lm_head

    say(progress, 0.75, "quantizing to int4 (a few seconds, once)", f"int4 weight quantization of {fp32} into {target}")
    work = staging(target)
    work.mkdir(parents=True)
    model = onnx.load(str(fp32 / MODEL_FILE))
    head = untie_lm_head(model)
    # the bits go in the config: ONNX Runtime 1.23 (the newest for Python 3.10) has no `bits` argument
    passes = [(4, {"nodes_to_exclude": [head] if head else []})]
    if head:
        passes.append((8, {"nodes_to_include": [head]}))
    for bits, nodes in passes:
        config = DefaultWeightOnlyQuantConfig(block_size=INT4_BLOCK, is_symmetric=True, accuracy_level=4, bits=bits)
        q = MatMulNBitsQuantizer(model, block_size=INT4_BLOCK, is_symmetric=True, accuracy_level=4,
                                 algo_config=config, **nodes)
        q.process()
        model = q.model.model
    OnnxModel(model).prune_graph()  # the Transpose that fed the tied head
    onnx.save(model, str(work / MODEL_FILE))
    _copy_side_files(fp32, work)
    seal(work, target, {"source": str(fp32), "kind": "int4", "block_size": INT4_BLOCK, "accuracy_level": 4,
                            "lm_head_bits": 8 if head else None})


def _copy_side_files(fp32: Path, staging: Path) -> None:
    for p in fp32.iterdir():  # config, generation config, tokenizer
        if p.is_file() and not p.name.startswith(("model", MARKER)) and not (staging / p.name).exists():
            shutil.copy2(p, staging / p.name)


def has_avx512_vnni() -> bool:
    try:
        return "avx512_vnni" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
