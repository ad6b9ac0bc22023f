"""Why decode is slow: the machine's two ceilings, measured here, and each Step's FLOPs and bytes.

    ceilings = machine_ceilings()            # matmul peak (FLOP/s) and memory bandwidth (bytes/s), measured once
    shape, storage = ModelShape.of(backend.config), storage_of(backend)
    cost = prefill_cost(shape, storage, 512)  # FLOPs and bytes of one 512-token prefill
    ceilings.predict(cost)                    # the roofline's time: max(flops / peak, bytes / bandwidth)
    points = trace_points(trace, shape, storage, ceilings)   # one RooflinePoint per Step, measured beside predicted

The ceilings are measured on the spot, with the model's thread count (ONNX Runtime intra-op threads =
physical cores): the peak as ONNX Runtime's fp32 MatMul [256, 1024] x [1024, 1024] (bench/peer.py's
matmul_peak_row, smaller), the bandwidth as ONNX Runtime's ReduceSum over a 256 MiB fp32 tensor (one
streaming read of memory that no cache holds). Each takes the best of repeats within a time budget and
stops between repeats once `cancel` is set; a complete measurement is cached per process and thread count.

The counts, from the model's shape (layers L, hidden h, intermediate i, heads H, kv_heads Hkv, head_dim d,
vocab V):
  per layer, matrix weights  Pl = h·H·d (q) + 2·h·Hkv·d (k, v) + H·d·h (o) + 3·h·i (gate, up, down)
  LM head                    Ph = V·h (tied to the embedding in SmolLM2; the graphs keep only the last
                             position's logits, so it runs once per sequence, not once per prompt token)
  FLOPs = 2·L·Pl·rows + 2·Ph·sequences + 2·2·L·H·d·(positions attended, summed over rows)
  bytes = L·Pl·(layer bytes per weight) + Ph·(head bytes per weight) + KV read (2·L·Hkv·d·seq_len·bytes/element)
A prefill of n tokens attends 1 + 2 + … + n positions (causal); a decode row at seq_len attends seq_len.
The weights' bytes are as the backend stores them: onnx-gguf4 keeps the GGUF's own blocks (Q4_1: 32
weights in 20 bytes for layer matrices; Q8_0: 32 in 34 bytes for the head), onnx fp32 4 bytes a weight,
torch its dtype.

Left out: norms, rotary embedding, softmax and activations' traffic (small beside the matrices), the
embedding lookup (one row per token), caches between the levels of memory, and kernel launch overhead --
which is why a decode step of a 135M model on 2 cores takes longer than its roofline says.
"""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Iterable

from .trace import Phase

MiB = 1 << 20
PEAK_SHAPE = (256, 1024, 1024)            # m, k, n of the MatMul probe
STREAM_BYTES = 256 * MiB                  # the bandwidth probe's tensor
PEAK_METHOD = "ONNX Runtime fp32 MatMul [{m}x{k}]·[{k}x{n}], best of {r} runs, {t} threads (measured here)"
BANDWIDTH_METHOD = "ONNX Runtime ReduceSum over a {mib} MiB fp32 tensor, best of {r} reads, {t} threads (measured here)"


# --- the machine's two ceilings

@dataclass(frozen=True)
class Ceilings:
    """Measured here: the matmul peak and the memory bandwidth, with how each was measured."""
    peak_flops: float          # FLOP/s
    bandwidth: float           # bytes/s
    threads: int
    peak_method: str
    bandwidth_method: str
    seconds: float             # how long the measuring took
    cancelled: bool = False    # stopped early: the figures are from fewer repeats (or 0.0: none ran)

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the two roofs meet: left of it memory-bound, right of it compute-bound."""
        return self.peak_flops / self.bandwidth

    def predict(self, cost: "StepCost") -> float:
        """The roofline's time in seconds (a prediction): max(FLOPs / peak, bytes / bandwidth)."""
        return max(cost.flops / self.peak_flops, cost.bytes / self.bandwidth)

    def bound(self, cost: "StepCost") -> str:
        return "compute" if cost.intensity >= self.ridge else "memory"


def _session(nodes, inputs, outputs, initializers, threads: int):
    import onnxruntime as ort
    from onnx import helper

    from .backends.onnx_graph import make_model

    graph = helper.make_graph(nodes, "probe", inputs, outputs, initializers)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    model = make_model(graph, {"": 17})
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _best_time(session, feed: dict, budget_s: float, cancel: threading.Event | None, max_runs: int = 50):
    """(best seconds, timed runs) of `session` on `feed`: one untimed run, then runs until the budget is spent
    (at least 2), `max_runs` is reached or `cancel` is set (checked before every run; (inf, 0) when set at once)."""
    deadline = time.perf_counter() + budget_s
    if cancel is not None and cancel.is_set():
        return float("inf"), 0
    session.run(None, feed)
    best, runs = float("inf"), 0
    while runs < max_runs and (runs < 2 or time.perf_counter() < deadline):
        if cancel is not None and cancel.is_set():
            break
        start = time.perf_counter()
        session.run(None, feed)
        best, runs = min(best, time.perf_counter() - start), runs + 1
    return best, runs


def measure_peak(threads: int, budget_s: float = 1.0, cancel: threading.Event | None = None,
                 shape: tuple[int, int, int] = PEAK_SHAPE) -> tuple[float, str]:
    """(FLOP/s, method) of ONNX Runtime's fp32 MatMul with `threads` threads; 0.0 when cancelled before a run."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    m, k, n = shape
    rng = np.random.default_rng(0)
    session = _session([helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                       [numpy_helper.from_array(rng.standard_normal((k, n), dtype=np.float32), "w")], threads)
    best, runs = _best_time(session, {"x": rng.standard_normal((m, k), dtype=np.float32)}, budget_s, cancel)
    return (2 * m * k * n / best if runs else 0.0), PEAK_METHOD.format(m=m, k=k, n=n, r=runs, t=threads)


def measure_bandwidth(threads: int, budget_s: float = 1.0, cancel: threading.Event | None = None,
                      nbytes: int = STREAM_BYTES) -> tuple[float, str]:
    """(bytes/s, method) of one ONNX Runtime ReduceSum over an `nbytes` fp32 tensor (a streaming read)."""
    import numpy as np
    from onnx import TensorProto, helper

    n = nbytes // 4
    session = _session([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [], threads)
    x = np.ones(n, np.float32)    # written once, so every page is real memory before the timed reads
    best, runs = _best_time(session, {"x": x}, budget_s, cancel)
    return (4 * n / best if runs else 0.0), BANDWIDTH_METHOD.format(mib=4 * n // MiB, r=runs, t=threads)


_CACHE: dict[int, Ceilings] = {}
_CACHE_LOCK = threading.Lock()


def model_threads() -> int:
    """The model's thread count: ONNX Runtime's intra-op threads (physical cores, see onnx_backend)."""
    from .backends.onnx_backend import physical_cores
    return physical_cores()


def machine_ceilings(threads: int | None = None, cancel: threading.Event | None = None,
                     budget_s: float = 1.5, refresh: bool = False) -> Ceilings:
    """The two ceilings with `threads` threads (default: the model's), measured once per process; a cancelled
    measurement is returned with `cancelled=True` and not cached. Takes about 2 x `budget_s` seconds."""
    threads = threads or model_threads()
    with _CACHE_LOCK:
        if not refresh and threads in _CACHE:
            return _CACHE[threads]
        start = time.perf_counter()
        peak, peak_method = measure_peak(threads, budget_s, cancel)
        bandwidth, bandwidth_method = measure_bandwidth(threads, budget_s, cancel)
        cancelled = cancel is not None and cancel.is_set()
        ceilings = Ceilings(peak, bandwidth, threads, peak_method, bandwidth_method, time.perf_counter() - start,
                            cancelled)
        if not cancelled:
            _CACHE[threads] = ceilings
        return ceilings


# --- what a step costs, from the model's shape and the backend's storage

@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def of(cls, config) -> "ModelShape":
        """From a transformers config (a backend's `config`)."""
        heads = config.num_attention_heads
        return cls(config.num_hidden_layers, config.hidden_size, config.intermediate_size, heads,
                   getattr(config, "num_key_value_heads", None) or heads,
                   getattr(config, "head_dim", None) or config.hidden_size // heads, config.vocab_size)

    @property
    def layer_params(self) -> int:
        """Matrix weights of one layer: q, k, v, o projections and the gated MLP."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return h * q + 2 * h * kv + q * h + 3 * h * self.intermediate

    @property
    def head_params(self) -> int:
        return self.vocab * self.hidden

    def kv_elements(self, seq_len: int) -> int:
        """K and V elements of `seq_len` positions over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * seq_len


@dataclass(frozen=True)
class Storage:
    """How a backend stores what a step reads: bytes per weight (layer matrices, LM head) and per KV element."""
    label: str
    layer_bytes: float
    head_bytes: float
    kv_bytes: float


Q4_1, Q8_0 = 20 / 32, 34 / 32        # gguf_blocks.Q4_1_BYTES, Q8_0_BYTES per block of 32 weights
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def gguf_storage(kv_bytes: float) -> Storage:
    """The bundled GGUF's own blocks (what onnx-gguf4 keeps and llama.cpp reads), with a KV cache of `kv_bytes`."""
    return Storage("GGUF blocks: Q4_1 layers (20 B / 32), Q8_0 head (34 B / 32)", Q4_1, Q8_0, kv_bytes)


def storage_of(backend) -> Storage:
    """The weights as `backend` stores them, and its KV cache's element size."""
    kv = backend.kv_shape.bytes_per_element
    if backend.name.startswith("onnx-gguf4"):
        return gguf_storage(kv)
    if backend.name == "onnx-int8":
        return Storage("int8 weights (1 B, scales left out)", 1, 1, kv)
    if backend.name == "onnx-int4":
        return Storage("int4 blocks of 32 (0.5 B + fp32 scale)", 0.5 + 4 / 32, 0.5 + 4 / 32, kv)
    size = DTYPE_BYTES.get(backend.dtype, 4)
    return Storage(f"{backend.dtype} weights ({size} B)", size, size, kv)


@dataclass(frozen=True)
class StepCost:
    flops: float
    weight_bytes: float
    kv_bytes: float

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (arithmetic intensity)."""
        return self.flops / self.bytes


def _cost(shape: ModelShape, storage: Storage, rows: int, sequences: int, attended: int, kv_read: int) -> StepCost:
    flops = (2 * shape.layers * shape.layer_params * rows + 2 * shape.head_params * sequences
             + 2 * 2 * shape.layers * shape.heads * shape.head_dim * attended)
    weights = shape.layers * shape.layer_params * storage.layer_bytes + shape.head_params * storage.head_bytes
    return StepCost(flops, weights, shape.kv_elements(kv_read) * storage.kv_bytes)


def prefill_cost(shape: ModelShape, storage: Storage, tokens: int, past: int = 0) -> StepCost:
    """One pass reading `tokens` prompt tokens after `past` cached ones (causal attention, last logits only)."""
    attended = tokens * past + tokens * (tokens + 1) // 2
    return _cost(shape, storage, tokens, 1, attended, past + tokens)


def decode_cost(shape: ModelShape, storage: Storage, seq_lens: Iterable[int]) -> StepCost:
    """One decode pass, one row per sequence; row r's cache holds seq_lens[r] positions after the step."""
    seq_lens = list(seq_lens)
    return _cost(shape, storage, len(seq_lens), len(seq_lens), sum(seq_lens), sum(seq_lens))


# --- a Trace on the roofline

@dataclass(frozen=True)
class RooflinePoint:
    phase: Phase
    rows: int                  # rows of the forward pass (prefill: prompt tokens; decode: the batch)
    seq_len: int               # positions in the cache after the pass
    flops: float
    bytes: float
    measured_s: float          # the Step's measured time (TTFT for prefill, the step latency for decode)
    predicted_s: float         # the roofline's prediction
    bound: str                 # "memory" | "compute": which roof the prediction sits under

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    @property
    def achieved_flops(self) -> float:
        """FLOP/s measured: the counted FLOPs over the measured time."""
        return self.flops / self.measured_s

    @property
    def ratio(self) -> float:
        """Measured over predicted time (1: the roofline explains it; above: overhead it leaves out)."""
        return self.measured_s / self.predicted_s


def point(phase: str, cost: StepCost, rows: int, seq_len: int, measured_s: float, ceilings: Ceilings) -> RooflinePoint:
    return RooflinePoint(phase, rows, seq_len, cost.flops, cost.bytes, measured_s, ceilings.predict(cost),
                         ceilings.bound(cost))


def trace_points(trace, shape: ModelShape, storage: Storage, ceilings: Ceilings) -> list[RooflinePoint]:
    """One point per forward pass: the first is the prefill of the prompt (measured: TTFT), the others decode steps
    (measured: their latency; a step of a batch of `rows` counts every row at this row's seq_len; a speculative
    verify pass counts a row per token it made, its Steps' latencies summed)."""
    prompt = len(trace.prompt_ids)
    points = []
    for step, latency, made in _passes(trace.steps):
        if latency is None or latency <= 0:
            continue
        seq = step.seq_len if step.seq_len is not None else prompt + step.index
        if step.index == 0:
            points.append(point(Phase.PREFILL, prefill_cost(shape, storage, prompt), prompt, prompt, latency, ceilings))
        else:
            rows = step.rows or made
            points.append(point(Phase.DECODE, decode_cost(shape, storage, [seq] * rows), rows, seq, latency, ceilings))
    return points


def _passes(steps):
    """(first Step, summed latency, tokens made) per forward pass: a speculative pass (Step.forward_pass) makes
    several tokens, timed as one pass; its rows are at least the tokens it made (the rejected proposals after the
    first replaced token are not in the Steps). Other Steps are one pass each."""
    out = []
    for step in steps:
        last = out[-1] if out else None
        made_by = getattr(step, "forward_pass", None)   # records without the field: one pass each
        if last and made_by is not None and made_by == getattr(last[0], "forward_pass", None):
            out[-1] = (last[0], last[1] + step.latency, last[2] + 1)
        else:
            out.append((step, step.latency, 1))
    return out


MEASURED_HERE = "this run's Steps, timed here; FLOPs and bytes from the model's shape and the backend's storage"
ESTIMATED = "estimated from the model's config and the client-side times (a server: its steps are not timed here)"
SERVER_STORAGE = Storage("GGUF blocks as the bundled model ships (Q4_1 layers, Q8_0 head), f16 KV: assumed for a "
                         "server", Q4_1, Q8_0, 2)


@dataclass(frozen=True)
class RooflineModel:
    """What puts a source's steps on the roofline: the model's shape, how its weights are stored, and a label
    saying whether the points are measured here or estimated (a server's run timed at the client)."""
    shape: ModelShape
    storage: Storage
    label: str
    estimated: bool


def roofline_model(source) -> RooflineModel | None:
    """A local backend's shape and storage (measured), a server's from its model's config when the server runs the
    bundled model (estimated: client-side times, the bundled file's storage assumed), else None (nothing known)."""
    backend = getattr(source, "backend", None)
    if backend is not None and getattr(backend, "config", None) is not None:
        return RooflineModel(ModelShape.of(backend.config), storage_of(backend), MEASURED_HERE, False)
    config = getattr(getattr(source, "copy", None), "config", None)
    if config is not None:
        return RooflineModel(ModelShape.of(config), SERVER_STORAGE, ESTIMATED, True)
    return None


def sweep_points(sweep, shape: ModelShape, storage: Storage, ceilings: Ceilings, prompt_tokens: int) -> list[RooflinePoint]:
    """The Serve tab's batch-size sweep on the roofline: one decode point per batch size, `concurrency` rows at the
    middle of the decode (prompt + half the new tokens), measured: the median TPOT (one step serves the batch).

    >>> from types import SimpleNamespace as NS
    >>> shape, storage = ModelShape(2, 64, 128, 4, 2, 16, 100), Storage("fp32", 4, 4, 4)
    >>> ceilings = Ceilings(1e10, 1e9, 1, "", "", 0.0)
    >>> sweep = NS(kind="batch", settings={"new_tokens": 8}, points=[NS(concurrency=1, tpot_s=0.01),
    ...            NS(concurrency=8, tpot_s=0.02), NS(concurrency=4, tpot_s=None)])
    >>> [(p.rows, p.seq_len, round(p.intensity, 2)) for p in sweep_points(sweep, shape, storage, ceilings, 10)]
    [(1, 14, 0.51), (8, 14, 3.54)]
    """
    seq = prompt_tokens + int(sweep.settings.get("new_tokens", 0)) // 2
    return [point(Phase.DECODE, decode_cost(shape, storage, [seq] * p.concurrency), p.concurrency, seq, p.tpot_s, ceilings)
            for p in sweep.points if p.tpot_s]


def why_text(points: list[RooflinePoint]) -> str:
    """Two lines for people: the prefill and the median decode step, measured beside predicted.

    >>> p = RooflinePoint(Phase.DECODE, 1, 9, 2e8, 1e8, 0.03, 0.01, "memory")
    >>> why_text([p])
    'decode (median of 1 steps): measured 30.0 ms, predicted 10.0 ms (memory-bound): 3.0x the roofline'
    """
    lines = []
    for p in (q for q in points if q.phase == Phase.PREFILL):
        lines.append(f"prefill of {p.rows} tokens: measured {p.measured_s * 1e3:.1f} ms, predicted "
                     f"{p.predicted_s * 1e3:.1f} ms ({p.bound}-bound): {p.ratio:.1f}x the roofline")
    decode = [q for q in points if q.phase == Phase.DECODE]
    if decode:
        measured, predicted = (statistics.median(getattr(q, k) for q in decode) for k in ("measured_s", "predicted_s"))
        lines.append(f"decode (median of {len(decode)} steps): measured {measured * 1e3:.1f} ms, predicted "
                     f"{predicted * 1e3:.1f} ms ({decode[0].bound}-bound): {measured / predicted:.1f}x the roofline")
    return "\n".join(lines)
