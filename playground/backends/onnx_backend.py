"""ONNX Runtime backend on CPU: the torch.onnx export (fp32, int8 dynamic or int4 weight quantization) driven step by step.

The step loop calls `onnxruntime.InferenceSession` directly: each step binds `input_ids`, `attention_mask`,
`position_ids` and the previous step's `present.*` OrtValues (as `past_key_values.*`) with IO binding, so the
cache is never copied through numpy between steps. The exported graph keeps only the last position's logits (see onnx_export.py), so
prefill does not spend a (prompt x vocab) matmul on rows nobody reads. The cache size is measured
from the shapes and element types of the present tensors ONNX Runtime hands back.

Left out: GPU execution providers (CUDA runs the torch backend), and a preallocated cache that grows
in place; the exported graph concatenates, so each step allocates the cache afresh.
"""
from __future__ import annotations

import logging
import math
import os
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort

from .base import Backend, eos_ids_of, kv_shape_of
from .onnx_export import MODEL_FILE, exported_dir

log = logging.getLogger(__name__)
ELEMENT_BYTES = {"tensor(float)": 4, "tensor(float16)": 2, "tensor(bfloat16)": 2, "tensor(int8)": 1,
                 "tensor(uint8)": 1, "tensor(double)": 8}


def physical_cores() -> int:
    """Physical cores, but never more than the CPUs this process may run on (taskset, a container's cpuset)."""
    try:
        import psutil
        cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:
        cores = os.cpu_count() or 1
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    return max(1, min(cores, allowed))


SPIN_ENV = "PLAYGROUND_ORT_SPIN"
SPIN_US = 50   # how long a decode session's idle worker spins for the next node (see session_options)


def spinning(env: dict | None = None) -> bool:
    """Whether a decode session's threads busy-wait between nodes: PLAYGROUND_ORT_SPIN, on unless "0".

    A decode step is ~900 small nodes in ~10 ms; a worker that sleeps between them has to be woken for each
    one (~25 % of a step measured on this 2-core machine), and llama.cpp's own threads spin too. "0" gives
    the cores back between nodes, for a machine shared with other busy work.

    >>> spinning({}), spinning({SPIN_ENV: "0"}), spinning({SPIN_ENV: "1"})
    (True, False, True)
    """
    value = (os.environ if env is None else env).get(SPIN_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{SPIN_ENV} is 1 (threads spin while a decode runs: the default) or 0; got {value!r}")
    return value == "1"


def session_options(spin: bool = False) -> ort.SessionOptions:
    """Threads = physical cores, all graph optimizations, sequential. Worker threads spin between nodes only in a
    session made with `spin` (one that decodes: many small nodes back to back) and where PLAYGROUND_ORT_SPIN
    allows, for at most SPIN_US at a time, and only while a run is on. Measured on this 2-core machine (the
    default graph, interleaved): one stream ~100 tok/s spinning against ~78 without; two streams at once ~120
    together with a 20-50 us spin, as without spinning, but ~107 with ONNX Runtime's default spin, whose
    waiting workers hold the cores the other run needs; and spinning on past a run's end took a core from the
    prefill chunk our batching runs next in another session (a decode step then a 128-token chunk: 229 ms,
    against 219 with spinning stopped at the run's end)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = physical_cores()
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    spins = spin and spinning()
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spins else "0")
    if spins:   # a worker waits SPIN_US for the next node before it sleeps (ONNX Runtime's default: much longer)
        so.add_session_config_entry("session.intra_op.spin_duration_us", str(SPIN_US))
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    # spinning stops when the run returns: an idle session's pool never takes a core from the next session's run
    so.add_session_config_entry("session.force_spinning_stop", "1")
    return so


class OnnxState:
    """The cache after a step: one OrtValue per `present.*` output, in past-input order, and its length."""
    __slots__ = ("past", "length")

    def __init__(self, past: list, length: int):
        self.past, self.length = past, length


class OnnxBackend(Backend):
    device = "cpu"

    def __init__(self, folder: Path, model_name: str, quant: str | None = None, io_binding: bool = True):
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        self.folder, self.model_name, self.io_binding = Path(folder), model_name, io_binding
        self.name, self.dtype = (f"onnx-{quant}", quant) if quant else ("onnx", "float32")
        self.threads = physical_cores()   # ONNX Runtime intra-op threads (see session_options)
        self.session = ort.InferenceSession(str(self.folder / MODEL_FILE), session_options(spin=True),
                                            providers=["CPUExecutionProvider"])
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.config = config = AutoConfig.from_pretrained(self.folder)   # the model's shape (layers, sizes)
        try:
            gen = GenerationConfig.from_pretrained(self.folder)
        except OSError:
            gen = None
        self.eos_token_ids = eos_ids_of(SimpleNamespace(generation_config=gen), self.tokenizer)
        self.context_window = int(getattr(config, "max_position_embeddings", 2048))
        self.kv_shape = kv_shape_of(config, 4)  # int8/int4 quantize weights; the cache stays float32
        inputs = {i.name: i for i in self.session.get_inputs()}
        self.past_names = [n for n in inputs if n.startswith("past_key_values.")]
        self.output_names = ["logits"] + [n.replace("past_key_values.", "present.") for n in self.past_names]
        self.has_position_ids = "position_ids" in inputs
        # [1, kv_heads, 0, head_dim]: the empty cache a prefill starts from
        self._empty = [np.zeros([1, *inputs[n].shape[1:2], 0, *inputs[n].shape[3:]], np.float32)
                       for n in self.past_names]
        self._reference = None

    @classmethod
    def load(cls, spec: str | None = None, quant: str | None = None, progress=None, cache_dir: Path | None = None,
             **kwargs) -> "OnnxBackend":
        """Export (once) and open the model for `spec`; a cached graph ONNX Runtime cannot load is rebuilt."""
        from .export_input import export_input

        source, model_name = export_input(spec, cache_dir)
        folder = exported_dir(source, quant=quant, cache_dir=cache_dir, progress=progress)
        log.info("ONNX model cached in %s (delete that folder to clear it)", folder)
        try:
            return cls(folder, model_name, quant, **kwargs)
        except Exception as exc:  # noqa: BLE001 - garbled protobuf, truncated weights, ...
            log.warning("cached ONNX model in %s failed to load (%s: %s); rebuilding", folder,
                        type(exc).__name__, exc)
            folder = exported_dir(source, quant=quant, cache_dir=cache_dir, progress=progress, rebuild=True)
            return cls(folder, model_name, quant, **kwargs)

    # --- the step loop

    def prefill(self, input_ids):
        return self._forward(np.asarray([input_ids], dtype=np.int64), self._empty, 0)

    def extend(self, input_ids, state: OnnxState):
        """Each step binds new present tensors, so the kept prefix state is never written to."""
        return self._forward(np.asarray([input_ids], dtype=np.int64), state.past, state.length)

    def decode(self, token_id, state: OnnxState):
        return self._forward(np.asarray([[token_id]], dtype=np.int64), state.past, state.length)

    def _forward(self, ids: np.ndarray, past: list, past_len: int, session=None, every_position: bool = False):
        import torch

        session = session or self.session
        rows = slice(None) if every_position else -1
        total = past_len + ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64)}
        if self.has_position_ids:
            feeds["position_ids"] = np.arange(past_len, total, dtype=np.int64)[None]
        if not self.io_binding:  # plain run: presents come back as numpy copies and are fed back in
            outs = session.run(self.output_names, {**feeds, **dict(zip(self.past_names, past))})
            return torch.from_numpy(outs[0][0, rows]), OnnxState(outs[1:], total)
        io = session.io_binding()
        for name, value in feeds.items():
            io.bind_cpu_input(name, value)
        for name, value in zip(self.past_names, past):
            if isinstance(value, np.ndarray):
                io.bind_cpu_input(name, value)
            else:
                io.bind_ortvalue_input(name, value)
        for name in self.output_names:
            io.bind_output(name, "cpu")
        session.run_with_iobinding(io)
        outs = io.get_outputs()
        logits = torch.from_numpy(np.array(outs[0].numpy()[0, rows], dtype=np.float32))
        return logits, OnnxState(outs[1:], total)

    # --- speculative decoding: every position's logits, and a cache cut back

    verifies = True
    VERIFY_SOURCE = MODEL_FILE   # the graph whose all-logits sibling verifies (onnx-gguf4: its decode graph)

    @cached_property
    def verify_session(self) -> ort.InferenceSession:
        """The same graph without the last-position slice (onnx_graph.all_logits_graph), opened on first use."""
        from .onnx_graph import all_logits_graph
        return ort.InferenceSession(str(all_logits_graph(self.folder / self.VERIFY_SOURCE)), session_options(spin=True),
                                    providers=["CPUExecutionProvider"])

    def verify(self, input_ids, state: OnnxState):
        return self._forward(np.asarray([input_ids], dtype=np.int64), state.past, state.length,
                             self.verify_session, every_position=True)

    def rollback(self, state: OnnxState, length: int) -> OnnxState:
        """The graph concatenates, so the kept positions are copied out (as every step copies the cache)."""
        def cut(v):
            a = v if isinstance(v, np.ndarray) else v.numpy()
            return np.ascontiguousarray(a[:, :, :length])
        return OnnxState([cut(v) for v in state.past], length)

    def kv_cache_bytes(self, state: OnnxState) -> int:
        return sum(int(v.nbytes) if isinstance(v, np.ndarray) else math.prod(v.shape()) * ELEMENT_BYTES[v.data_type()]
                   for v in state.past)

    # --- the yardstick: a bare greedy loop on its own session, the cache fed back through numpy

    def generate_reference(self, input_ids, max_new_tokens, streamer=None):
        """Greedy ids from the same exported file in a second session, run without IO binding: every step's
        presents come back as numpy arrays and go in again as the next pasts (what a plain
        `InferenceSession.run` caller does). No sampler, Steps or detokenizing: what the engine is measured
        against. `streamer` gets the prompt, then each token, as transformers' streamers do."""
        import torch

        if self._reference is None:  # opens a second session: only bench and tests pay for it
            self._reference = ort.InferenceSession(str(self.folder / MODEL_FILE), session_options(),
                                                   providers=["CPUExecutionProvider"])
        if streamer is not None:
            streamer.put(torch.tensor([input_ids]))
        past, ids, out = list(self._empty), list(input_ids), []
        while True:
            total = past[0].shape[2] + len(ids)
            feeds = {"input_ids": np.asarray([ids], np.int64), "attention_mask": np.ones((1, total), np.int64),
                     **dict(zip(self.past_names, past))}
            if self.has_position_ids:
                feeds["position_ids"] = np.arange(total - len(ids), total, dtype=np.int64)[None]
            logits, *past = self._reference.run(self.output_names, feeds)
            out.append(int(logits[0, -1].argmax()))
            if streamer is not None:
                streamer.put(torch.tensor(out[-1:]))
            if len(out) == max_new_tokens or out[-1] in self.eos_token_ids:
                if streamer is not None:
                    streamer.end()
                return out
            ids = out[-1:]
