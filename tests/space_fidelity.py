"""The 4-bit default's gates, measured by a simulated Space's own Python (tests/space/test_space.py runs it there, in
a venv of requirements.txt only, so on the ONNX Runtime pip resolved for that interpreter):

    <space venv>/bin/python tests/space_fidelity.py MODEL   # prints one JSON object; tests/space/test_space.py asserts

- the graphs: onnx-gguf4's decode and prefill graphs build and load, every MatMulNBits' accuracy level and the
  GroupQueryAttention nodes counted;
- the default's fidelity gate (tests/backends/test_onnx_gguf.py): teacher-forced on TOKENS tokens of the bench text, the
  share of positions where onnx-gguf4 chooses fp32 ONNX's top token, and the mean KL divergence from fp32's
  distribution (nats);
- the batched rows' gate (tests/serve/test_serve_batching.py): the same text decoded one row at a time and as row 0
  of a 4-row batch in the shared KV buffer (rows at different lengths), the share of equal top tokens.

Left out: the gates themselves (the test asserts them, so this script measures and reports only).
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

TOKENS = 300
STARTS = (1, 7, 20, 33)   # row r of the batch holds STARTS[r] - 1 more positions than row 0


def graph_ops(path: Path) -> dict:
    """{"MatMulNBits accuracy_level=L": n, "GroupQueryAttention": n} of one ONNX graph (weights not loaded)."""
    import onnx

    counts = Counter()
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        if node.op_type == "MatMulNBits":
            level = next((a.i for a in node.attribute if a.name == "accuracy_level"), 0)
            counts[f"MatMulNBits accuracy_level={level}"] += 1
        elif node.op_type == "GroupQueryAttention":
            counts["GroupQueryAttention"] += 1
    return dict(sorted(counts.items()))


def measure(model: str) -> dict:
    import numpy as np
    import onnxruntime

    from playground.backends import create_backend
    from playground.backends.onnx_batch import KVSlots, decode_rows, prefill_chunk
    from playground.backends.onnx_gguf import PREFILL_FILE
    from playground.bench.fidelity import teacher_forced_logprobs, text_ids

    start = time.monotonic()
    gguf4 = create_backend("onnx-gguf4", model, device="cpu")
    fp32 = create_backend("onnx", model, device="cpu")
    built = time.monotonic() - start
    ids = text_ids(fp32.tokenizer, TOKENS + max(STARTS))
    ref, got = (np.array(list(teacher_forced_logprobs(b, ids[:TOKENS]))) for b in (fp32, gguf4))
    alone = []
    logits, state = gguf4.prefill(ids[:1])
    for i in range(1, TOKENS):
        logits, state = gguf4.decode(ids[i], state)
        alone.append(int(logits.argmax()))
    kv = KVSlots(gguf4, len(STARTS), 512)
    for slot, n in enumerate(STARTS):
        prefill_chunk(gguf4, kv, slot, ids[:n], 0)
    batched = []
    for i in range(1, TOKENS):
        lengths = [i - 1 + n for n in STARTS]
        batched.append(int(decode_rows(gguf4, kv, [ids[n] for n in lengths], lengths)[0].argmax()))
    return {
        "python": sys.version.split()[0],
        "onnxruntime": onnxruntime.__version__,
        "model": gguf4.model_name,
        "backend": [gguf4.name, gguf4.dtype],
        "decode_plan": gguf4.decode_plan,
        "decode_graph": graph_ops(gguf4.folder / "model.onnx"),
        "prefill_graph": graph_ops(gguf4.folder / PREFILL_FILE),
        "layers": gguf4.config.num_hidden_layers,
        "positions": TOKENS - 1,
        "top1_vs_fp32": float(np.mean(ref.argmax(-1) == got.argmax(-1))),
        "kl_vs_fp32": float(np.mean(np.sum(np.exp(ref) * (ref - got), axis=-1))),
        "batched_vs_alone": float(np.mean(np.array(alone) == np.array(batched))),
        "build_s": round(built, 1),
        "total_s": round(time.monotonic() - start, 1),
    }


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository, as app.py sees it on a Space
    print(json.dumps(measure(sys.argv[1])))
