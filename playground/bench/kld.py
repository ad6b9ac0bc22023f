"""Fidelity the standard way: our backends scored exactly as `llama-perplexity --kl-divergence` scores llama.cpp,
on the same token ids and chunks, with llama.cpp's own row beside them (`make bench`'s kld rows).

    python -m playground.bench kld                          # llama.cpp's row, then ours (every backend)
    python -m playground.bench kld onnx-gguf4 onnx-gguf4-int8   # just those (and the reference)

llama.cpp's row: `llama-quantize --allow-requantize <bundled Q4_1> f32.gguf F32` (the same blocks, dequantized)
is its base; `llama-perplexity -c 256 -f TEXT --kl-divergence-base base.kld` on f32.gguf writes the base's
token ids and log-probabilities, then `llama-perplexity -c 256 --kl-divergence-base base.kld --kl-divergence`
on the Q4_1 file scores Q4_1 against them. TEXT is two kinds of text: the long document (prose) and
docs/serving.md (technical markdown), ~3,600 tokens, 14 chunks of 256.

Ours: the token ids and chunks read back from llama.cpp's base file (its tokenizer's ids, so the very same
positions), each chunk from an empty cache, with a BOS first where the GGUF asks for one, as llama.cpp does.
In a chunk of n_ctx = 256 only the second half is scored: position j in [128, 255) predicts token j + 1, 127
positions a chunk. We prefill the chunk's first 129 ids (the logits at 128) and decode the rest one id at a
time, the path generation takes. `onnx` fp32 (the same blocks, dequantized) is our base, written in
llama.cpp's own compressed form (compress: uint16 log-probabilities over the top 16 nats), and every
figure comes from the same formulas as llama-perplexity's (score, summary): Same top p and its ±
sqrt(p (1 - p) / (n - 1)), mean KLD and its ±, the 99th percentile (metrics.percentile: linear between ranks,
llama.cpp's rule, in double precision where llama.cpp rounds the rank in float) and median of the KLD, PPL(Q) /
PPL(base) and its ±. A cross-check row scores onnx fp32 against llama.cpp's own F32 base: near zero when the ids,
the chunks and the weights line up.

The peer on ONNX Runtime, ONNX Runtime GenAI (genai.py: its builder's int4 graph of the same GGUF), is scored as
llama.cpp's Q4_1 is: against llama.cpp's own F32 base, on the same ids and chunks, its logits read from its
Generator through the same prefill-then-decode path (a fresh generator a chunk). Where it cannot run here, its
row says `skipped` and why.

The gate (peer_gate, each backend row's `targets_met`): a backend is at least as faithful as llama.cpp when its
Same top p is not below llama.cpp's minus llama.cpp's ±, and its mean KLD is not above llama.cpp's by more
than 10 %. Fidelity does not depend on the machine's load: these rows are valid on a busy machine.

Left out: Δp statistics and the per-chunk table (llama-perplexity prints them; not needed for the gate).
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backends.onnx_gguf import LEVERS
from ..metrics import percentile
from .process import row_in_subprocess
from .genai import GENAI
from .rows import ROOT, Row, say


@dataclass(frozen=True, kw_only=True)
class KldRow(Row):
    """One backend scored as `llama-perplexity --kl-divergence` scores llama.cpp, on its ids and chunks (kld.py):
    llama.cpp's own row (Q4_1 against its F32), the cross-check (onnx fp32 against llama.cpp's F32) and ours
    (against onnx fp32), with llama.cpp's formulas; ours carry the gate against llama.cpp's row (kld.peer_gate).

    >>> KldRow(backend="llama.cpp", error="llama-perplexity is not installed").to_json()
    {'kld': 'llama-perplexity --kl-divergence', 'backend': 'llama.cpp', 'error': 'llama-perplexity is not installed'}
    """

    OPTIONAL = ("arithmetic", "cpu_variant", "targets", "targets_met", "error", "skipped")
    ON_ERROR = ("kld", "backend")

    kld: str = field(default="llama-perplexity --kl-divergence", init=False)
    backend: str
    arithmetic: str | None = None         # what the backend's matmuls do to the activations
    reference: str | None = None          # what it is scored against
    chunks: int | None = None
    n_ctx: int | None = None              # a chunk's tokens; its second half is scored
    texts: list[str] | None = None
    positions: int | None = None          # chunks x (n_ctx - 1 - n_ctx / 2)
    same_top_p_pct: float | None = None   # % of positions whose argmax equals the reference's
    same_top_p_pm_pct: float | None = None   # its ± (llama.cpp's: sqrt(p (1 - p) / (n - 1)))
    mean_kld: float | None = None         # nats
    mean_kld_pm: float | None = None
    kld_p99: float | None = None
    kld_median: float | None = None
    ppl: float | None = None
    ppl_base: float | None = None
    ppl_ratio: float | None = None        # PPL(Q) / PPL(base)
    ppl_ratio_pm: float | None = None
    cpu_variant: str | None = None        # llama.cpp's row: the libggml-cpu variant that loaded
    targets: dict[str, str] | None = None
    targets_met: dict[str, bool | None] | None = None   # kld.peer_gate: at least as faithful as llama.cpp
    seconds: float | None = None
    error: str | None = None
    skipped: str | None = None            # a peer that cannot run here (ONNX Runtime GenAI), and why


N_CTX = 256
REFERENCE = "onnx"
TEXTS = ("assets/long_document.txt", "docs/serving.md")   # prose, then technical markdown
KLD_CUTOFF = -16.0   # llama.cpp keeps log-probabilities above max - 16 nats; its KLD sums over p_log_base > -16
SAME_TOP_SLACK, KLD_SLACK = 1.0, 1.10   # the gate: llama.cpp's Same top p minus 1 x its ±; 110 % of its mean KLD


def kld_text() -> str:
    """The scored text: the long document, then docs/serving.md."""
    return "\n\n".join((ROOT / name).read_text(encoding="utf-8") for name in TEXTS)


# --- llama.cpp's base file and its compressed log-probabilities

def record_width(n_vocab: int) -> int:
    """uint16s a position takes in llama.cpp's base file: 2 floats (scale, min log-prob), then the vocab, even.

    >>> record_width(49152), record_width(5)
    (49156, 10)
    """
    return 2 * ((n_vocab + 1) // 2) + 4


def compress(logits: np.ndarray) -> np.ndarray:
    """llama-perplexity's base record of each row of logits [n, vocab] (its `log_softmax(..., uint16_t *)`):
    float32 scale and min log-prob in the first 4 uint16s, then round((logit - min) / scale) per token, where
    min = max(smallest logit, largest - 16) and a logit at or below min is 0. Log-probabilities in, the same out
    (the encoding is shift-invariant).

    >>> rec = compress(np.array([[0.0, -1.0, -20.0]], np.float32))
    >>> rec.shape, rec[0, 4:].tolist()
    ((1, 8), [65535, 61439, 0, 0])
    >>> np.round(decompress(rec, 3).astype(float), 4).tolist()   # log-softmax of [0, -1, -20], the last one floored at -16
    [[-0.3133, -1.3133, -16.3133]]
    """
    logits = np.atleast_2d(np.asarray(logits, np.float32))
    n, vocab = logits.shape
    top = logits.max(axis=1)
    low = np.maximum(logits.min(axis=1), top - np.float32(16))
    log_sum_exp = np.log(np.exp(logits - top[:, None]).sum(axis=1, dtype=np.float64)).astype(np.float32)
    min_log_prob = (low - top - log_sum_exp).astype(np.float32)
    scale = ((top - low) / np.float32(65535)).astype(np.float32)
    out = np.zeros((n, record_width(vocab)), np.uint16)
    head = np.stack([scale, min_log_prob], axis=1).astype(np.float32)
    out[:, :4] = head.view(np.uint16).reshape(n, 4)
    safe = np.where(scale > 0, scale, np.float32(1))
    inv = (np.float32(1) / safe).astype(np.float32)
    q = np.rint(inv[:, None] * (logits - low[:, None])).astype(np.float32)
    q = np.where((logits > low[:, None]) & (scale[:, None] > 0), np.clip(q, 0, 65535), 0)
    out[:, 4:4 + vocab] = q.astype(np.uint16)
    return out


def decompress(records: np.ndarray, n_vocab: int) -> np.ndarray:
    """The base log-probabilities [n, vocab] (float32) of compressed records: scale x q + min log-prob."""
    records = np.atleast_2d(records)
    head = np.ascontiguousarray(records[:, :4]).view(np.float32)
    scale, min_log_prob = head[:, 0], head[:, 1]
    return (scale[:, None] * records[:, 4:4 + n_vocab].astype(np.float32) + min_log_prob[:, None]).astype(np.float32)


def read_base(path: Path) -> dict:
    """llama-perplexity's `--kl-divergence-base` file: n_ctx, n_vocab, n_chunk, the tokens [n_chunk x n_ctx]
    (before any BOS is put in), and the records [n_chunk x (n_ctx - 1 - n_ctx / 2), width] (a read-only map)."""
    with open(path, "rb") as f:
        if f.read(8) != b"_logits_":
            raise ValueError(f"{path} is not a llama-perplexity base file (no _logits_ magic)")
        n_ctx, n_vocab, n_chunk = (int(x) for x in np.frombuffer(f.read(12), np.int32))
    offset = 20 + 4 * n_ctx * n_chunk
    tokens = np.fromfile(path, np.int32, count=n_ctx * n_chunk, offset=20)
    positions = n_chunk * (n_ctx - 1 - n_ctx // 2)
    records = np.memmap(path, np.uint16, "r", offset=offset, shape=(positions, record_width(n_vocab)))
    return {"n_ctx": n_ctx, "n_vocab": n_vocab, "n_chunk": n_chunk, "tokens": tokens, "records": records}


def scored_next_tokens(tokens: np.ndarray, n_ctx: int) -> np.ndarray:
    """The ids the scored positions predict, chunk after chunk: tokens[first + 1 .. n_ctx - 1] of each.

    >>> scored_next_tokens(np.arange(16), 8).tolist()   # 2 chunks of 8: positions 4..6 predict 5..7
    [5, 6, 7, 13, 14, 15]
    """
    chunks = np.asarray(tokens).reshape(-1, n_ctx)
    return chunks[:, n_ctx // 2 + 1:].reshape(-1)


# --- llama.cpp's formulas

def score(logits: np.ndarray, records: np.ndarray, next_tokens: np.ndarray) -> dict[str, np.ndarray]:
    """Per position, as llama-perplexity's `log_softmax(..., base_log_prob, tok, kld)`: the KLD of the current
    logits [n, vocab] from the compressed base (over base log-probs > -16), whether both argmaxes agree (first
    maximum each; the base's on its decompressed values), the current NLL and the base's NLL of the next id.

    >>> base = compress(np.log(np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1]], np.float32)))
    >>> s = score(np.log(np.array([[0.7, 0.2, 0.1], [0.4, 0.5, 0.1]])), base, np.array([0, 1]))
    >>> (np.round(s["kld"], 4) + 0).tolist(), s["same_top"].tolist()
    ([0.0, 0.0223], [True, False])
    >>> np.round(s["nll"], 4).tolist(), np.round(s["nll_base"], 4).tolist()
    ([0.3567, 0.6931], [0.3567, 0.9163])
    """
    logits = np.atleast_2d(np.asarray(logits, np.float64))
    n_vocab = logits.shape[1]
    top = logits.max(axis=1, keepdims=True)
    log_p = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    base = decompress(records, n_vocab).astype(np.float64)
    rows = np.arange(len(logits))
    kept = base > KLD_CUTOFF
    kld = np.where(kept, np.exp(base) * (base - log_p), 0.0).sum(axis=1)
    return {"kld": kld, "same_top": logits.argmax(axis=1) == base.argmax(axis=1),
            "nll": -log_p[rows, next_tokens], "nll_base": -base[rows, next_tokens]}


def mean_and_uncertainty(total: float, total2: float, count: int) -> tuple[float, float]:
    """llama-perplexity's mean and its standard error from a sum and a sum of squares (0 at 10 values or fewer).

    >>> mean_and_uncertainty(10.0, 26.0, 4)   # 4 values: too few for an uncertainty
    (2.5, 0.0)
    """
    if count < 1:
        return 0.0, 0.0
    f = total / count
    df = total2 / count - f * f
    return f, math.sqrt(df / (count - 1)) if df > 0 and count > 10 else 0.0


def same_top_p(same: int, count: int) -> tuple[float, float]:
    """Same top p and its ± as llama-perplexity prints them, in %: p and sqrt(p (1 - p) / (count - 1)).

    >>> [round(x, 2) for x in same_top_p(1694, 1778)]   # 1,694 of 1,778 positions: 95.28 ± 0.50 %
    [95.28, 0.5]
    """
    p = same / count
    return 100 * p, 100 * math.sqrt(p * (1 - p) / (count - 1))


def summary(scored: dict[str, np.ndarray]) -> dict:
    """llama-perplexity's final statistics of per-position scores (score()), with its formulas.

    >>> kld = np.linspace(0.0, 0.02, 200)
    >>> s = summary({"kld": kld, "same_top": np.arange(200) % 20 != 0, "nll": np.full(200, 2.0),
    ...              "nll_base": np.full(200, 1.9)})
    >>> s["positions"], s["same_top_p_pct"], s["same_top_p_pm_pct"], s["kld_p99"], s["mean_kld"]
    (200, 95.0, 1.545, 0.0198, 0.01)
    >>> s["ppl_ratio"]   # exp(2.0 - 1.9)
    1.10517
    """
    kld = np.asarray(scored["kld"], np.float64)
    count = len(kld)
    nll, nll_base = np.asarray(scored["nll"], np.float64), np.asarray(scored["nll_base"], np.float64)
    log_ppl = mean_and_uncertainty(nll.sum(), (nll * nll).sum(), count)
    log_ppl_base = mean_and_uncertainty(nll_base.sum(), (nll_base * nll_base).sum(), count)
    cov = 0.0
    if count >= 10:
        cov = ((nll * nll_base).sum() / count - (nll.sum() / count) * (nll_base.sum() / count)) / (count - 1)
    ratio_log = log_ppl[0] - log_ppl_base[0]
    ratio_unc = math.sqrt(max(0.0, log_ppl[1] ** 2 + log_ppl_base[1] ** 2 - 2 * cov))
    mean_kld = mean_and_uncertainty(kld.sum(), (kld * kld).sum(), count)
    ordered = np.sort(kld.astype(np.float32))
    median = (0.5 * (ordered[count // 2] + ordered[count // 2 - 1]) if count % 2 == 0 else ordered[count // 2])
    same, same_pm = same_top_p(int(np.sum(scored["same_top"])), count)
    return {"positions": count, "same_top_p_pct": round(same, 3), "same_top_p_pm_pct": round(same_pm, 3),
            "mean_kld": float(f"{mean_kld[0]:.4g}"), "mean_kld_pm": float(f"{mean_kld[1]:.3g}"),
            "kld_p99": float(f"{percentile(ordered, 99):.4g}"), "kld_median": float(f"{float(median):.4g}"),
            "ppl": round(math.exp(log_ppl[0]), 4), "ppl_base": round(math.exp(log_ppl_base[0]), 4),
            "ppl_ratio": round(math.exp(ratio_log), 5), "ppl_ratio_pm": float(f"{math.exp(ratio_log) * ratio_unc:.3g}")}


def parse_llama_kld(log: str) -> dict:
    """llama-perplexity --kl-divergence's final statistics, under summary()'s keys (what it does not print: None).

    >>> parse_llama_kld('''Mean PPL(Q)                   :  10.123456 ±   0.250000
    ... Mean PPL(base)                :  10.000000 ±   0.240000
    ... Mean PPL(Q)/PPL(base)         :   1.012346 ±   0.002000
    ... Mean    KLD:   0.003620 ±   0.000100
    ... 99.0%   KLD:   0.040000
    ... Median  KLD:   0.001000
    ... Same top p: 95.276 ± 0.503 %''')["same_top_p_pct"]
    95.276
    """
    number = r"(-?[\d.]+(?:e-?\d+)?)"

    def find(pattern: str, group: int = 1):
        m = re.search(pattern, log)
        return float(m.group(group)) if m else None
    return {"positions": None,
            "same_top_p_pct": find(rf"Same top p:\s*{number}"), "same_top_p_pm_pct": find(rf"Same top p:\s*{number}\s*±\s*{number}", 2),
            "mean_kld": find(rf"Mean\s+KLD:\s*{number}"), "mean_kld_pm": find(rf"Mean\s+KLD:\s*{number}\s*±\s*{number}", 2),
            "kld_p99": find(rf"99\.0%\s+KLD:\s*{number}"), "kld_median": find(rf"Median\s+KLD:\s*{number}"),
            "ppl": find(rf"Mean PPL\(Q\)\s*:\s*{number}"), "ppl_base": find(rf"Mean PPL\(base\)\s*:\s*{number}"),
            "ppl_ratio": find(rf"Mean PPL\(Q\)/PPL\(base\)\s*:\s*{number}"),
            "ppl_ratio_pm": find(rf"Mean PPL\(Q\)/PPL\(base\)\s*:\s*{number}\s*±\s*{number}", 2)}


# --- the gate

GATE = {"same_top_p": "not below llama.cpp's Same top p minus its ±",
        "mean_kld": "not above llama.cpp's mean KLD by more than 10 %"}


def peer_gate(ours: dict, llama: dict) -> dict[str, bool | None]:
    """Whether a backend is at least as faithful as llama.cpp (GATE), from both rows' summary() figures; None
    where a figure is missing.

    >>> llama = {"same_top_p_pct": 95.28, "same_top_p_pm_pct": 0.50, "mean_kld": 0.00362}
    >>> peer_gate({"same_top_p_pct": 95.39, "mean_kld": 0.00397}, llama)   # the int8 variant: KLD 9.7 % above
    {'same_top_p': True, 'mean_kld': True}
    >>> peer_gate({"same_top_p_pct": 94.7, "mean_kld": 0.0040}, llama)    # 0.58 below; 10.5 % above
    {'same_top_p': False, 'mean_kld': False}
    >>> peer_gate({"same_top_p_pct": 99.0, "mean_kld": None}, llama)
    {'same_top_p': True, 'mean_kld': None}
    """
    floor = (None if llama.get("same_top_p_pct") is None or llama.get("same_top_p_pm_pct") is None
             else llama["same_top_p_pct"] - SAME_TOP_SLACK * llama["same_top_p_pm_pct"])
    ceiling = None if llama.get("mean_kld") is None else KLD_SLACK * llama["mean_kld"]
    return {"same_top_p": None if floor is None or ours.get("same_top_p_pct") is None
            else ours["same_top_p_pct"] >= floor - 1e-9,
            "mean_kld": None if ceiling is None or ours.get("mean_kld") is None else ours["mean_kld"] <= ceiling + 1e-12}


# --- llama.cpp's row

def run_llama(work: Path, gguf: Path | None = None, threads: int | None = None, timeout: float = 1800) -> tuple[KldRow, Path | None]:
    """llama.cpp's row (Q4_1 scored against its own F32, see the module doc) and its base file; or an error row
    and None."""
    from ..llamacpp import LlamaCppMissing, llama_env
    from .peer import llama_tool, physical_cores
    from .quiet import loaded_cpu_variant

    threads = threads or physical_cores()
    t = time.perf_counter()
    try:
        quantize, gguf = llama_tool("llama-quantize", gguf)
        perplexity, _ = llama_tool("llama-perplexity", gguf)
    except (LlamaCppMissing, FileNotFoundError) as exc:
        return KldRow(backend="llama.cpp", error=str(exc)), None
    text, f32, base = work / "kld-text.txt", work / "f32.gguf", work / "base.kld"
    text.write_text(kld_text(), encoding="utf-8")
    steps = [[str(quantize), "--allow-requantize", str(gguf), str(f32), "F32"],
             [str(perplexity), "-m", str(f32), "-f", str(text), "-c", str(N_CTX), "-t", str(threads),
              "--kl-divergence-base", str(base)],
             [str(perplexity), "-m", str(gguf), "-c", str(N_CTX), "-t", str(threads),
              "--kl-divergence-base", str(base), "--kl-divergence"]]
    for cmd in steps:
        try:
            out = subprocess.run(cmd, env=llama_env(), capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return KldRow(backend="llama.cpp", error=f"{Path(cmd[0]).name} failed ({type(exc).__name__})"), None
        if out.returncode != 0:
            return KldRow(backend="llama.cpp", error=f"{Path(cmd[0]).name} exited {out.returncode}: "
                                                     f"{(out.stderr or out.stdout).strip()[-300:]}"), None
    log = out.stdout + out.stderr
    figures = parse_llama_kld(log)
    info = read_base(base)
    figures["positions"] = int(info["n_chunk"] * (info["n_ctx"] - 1 - info["n_ctx"] // 2))
    return KldRow(backend="llama.cpp", arithmetic=f"{gguf.name} (its Q8 activations) vs the same blocks in F32",
                  reference="llama.cpp F32 (llama-quantize F32 of the same file)", chunks=info["n_chunk"],
                  n_ctx=info["n_ctx"], texts=list(TEXTS), cpu_variant=loaded_cpu_variant(log), **figures,
                  seconds=round(time.perf_counter() - t, 1)), base


# --- ours

def gguf_adds_bos(gguf: Path | None = None) -> tuple[bool, int | None]:
    """(whether llama.cpp puts a BOS first in each chunk, the BOS id), from the GGUF's tokenizer metadata."""
    import gguf as gguf_lib

    from ..models import bundled_gguf_path

    reader = gguf_lib.GGUFReader(str(gguf or bundled_gguf_path()))

    def value(key: str):
        field = reader.fields.get(key)
        return None if field is None else field.parts[field.data[0]][0]
    add, bos = value("tokenizer.ggml.add_bos_token"), value("tokenizer.ggml.bos_token_id")
    return bool(add), None if bos is None else int(bos)


def as_array(logits) -> np.ndarray:
    """A step's logits as float32 numpy, flat: a backend's torch tensor or a peer's array.

    >>> as_array([[1, 2]]).dtype, as_array(np.zeros((1, 1, 3))).shape
    (dtype('float32'), (3,))
    """
    if hasattr(logits, "cpu"):
        logits = logits.float().cpu().numpy()
    return np.asarray(logits, np.float32).reshape(-1)


def chunk_logits(backend, tokens: np.ndarray, n_ctx: int, bos: int | None = None):
    """Yield the backend's logits (float32 [vocab]) at every scored position, chunk after chunk: prefill of the
    chunk's first n_ctx / 2 + 1 ids, then one decode per id (see the module doc). `bos`: put first in each chunk.
    Anything with a backend's prefill(ids) and decode(id, state) will do (the GenAI peer too)."""
    first = n_ctx // 2
    for chunk in np.asarray(tokens).reshape(-1, n_ctx):
        ids = [int(x) for x in chunk]
        if bos is not None:
            ids[0] = bos
        logits, state = backend.prefill(ids[:first + 1])
        for j in range(first, n_ctx - 1):
            yield as_array(logits)
            if j + 1 < n_ctx - 1:
                logits, state = backend.decode(ids[j + 1], state)


def _bos(base: dict) -> int | None:
    add, bos = gguf_adds_bos()
    return bos if add else None


def write_reference(base_path: Path, out: Path, model: str | None = None, reference: str = REFERENCE) -> KldRow:
    """The reference's (onnx fp32's) compressed records at every scored position, to `out` (.npy); its row is
    the cross-check: onnx fp32 scored against llama.cpp's own F32 base."""
    from ..backends import create_backend

    base = read_base(base_path)
    backend = create_backend(reference, model, device="cpu")
    t = time.perf_counter()
    positions = len(base["records"])
    records = np.lib.format.open_memmap(out, mode="w+", dtype=np.uint16, shape=(positions, record_width(base["n_vocab"])))
    logits_all = []
    for i, logits in enumerate(chunk_logits(backend, base["tokens"], base["n_ctx"], _bos(base))):
        records[i] = compress(logits[None, :base["n_vocab"]])[0]
        logits_all.append(logits[:base["n_vocab"]])
    records.flush()
    scored = score_in_blocks(np.asarray(logits_all), base["records"], scored_next_tokens(base["tokens"], base["n_ctx"]))
    return KldRow(backend=reference, arithmetic="fp32 (the same blocks, dequantized): the cross-check",
                  reference="llama.cpp F32 (its base file)", chunks=base["n_chunk"], n_ctx=base["n_ctx"],
                  texts=list(TEXTS), **summary(scored), seconds=round(time.perf_counter() - t, 1))


def score_in_blocks(logits, records, next_tokens, block: int = 128) -> dict[str, np.ndarray]:
    """score() over row blocks (a base of ~2k positions x 49k ids would not fit in memory as float64 at once)."""
    parts = [score(logits[i:i + block], records[i:i + block], next_tokens[i:i + block])
             for i in range(0, len(records), block)]
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def backend_row(name: str, base_path: Path, reference: Path, llama: dict | None = None,
                model: str | None = None) -> KldRow:
    """Backend `name` scored against the reference's records (write_reference), on the base file's ids and
    chunks; with llama.cpp's figures, the gate (peer_gate). `name`: a backend, or an onnx-gguf4 lever (levers.py)."""
    from .levers import open_lever

    base = read_base(base_path)
    ref = np.load(reference, mmap_mode="r")
    backend = open_lever(name, model)
    t = time.perf_counter()
    n_vocab, next_tokens = base["n_vocab"], scored_next_tokens(base["tokens"], base["n_ctx"])
    logits = np.stack([row[:n_vocab] for row in chunk_logits(backend, base["tokens"], base["n_ctx"], _bos(base))])
    figures = summary(score_in_blocks(logits, ref, next_tokens))
    gate = peer_gate(figures, llama) if llama else None
    return KldRow(backend=name, arithmetic=BACKEND_ARITHMETIC.get(name),
                  reference=f"{REFERENCE} (fp32, the same blocks)", chunks=base["n_chunk"], n_ctx=base["n_ctx"],
                  texts=list(TEXTS), **figures, targets=dict(GATE) if gate else None, targets_met=gate,
                  seconds=round(time.perf_counter() - t, 1))


def peer_row(base_path: Path, llama: dict | None = None) -> KldRow:
    """ONNX Runtime GenAI's graph scored as llama.cpp's Q4_1 is: against llama.cpp's own F32 base (its records), on
    its ids and chunks; with llama.cpp's figures, the gate; `skipped` and why where it cannot run here."""
    from .genai import RECIPE, GenaiSkipped, open_peer, version

    peer = open_peer()
    if isinstance(peer, GenaiSkipped):
        return KldRow(backend=GENAI, skipped=str(peer))
    base = read_base(base_path)
    t = time.perf_counter()
    n_vocab, next_tokens = base["n_vocab"], scored_next_tokens(base["tokens"], base["n_ctx"])
    try:
        logits = np.stack([row[:n_vocab] for row in chunk_logits(peer, base["tokens"], base["n_ctx"], _bos(base))])
    except RuntimeError as exc:   # onnxruntime_genai raises RuntimeError on a failed run
        return KldRow(backend=GENAI, skipped=f"its run failed here ({exc})")
    figures = summary(score_in_blocks(logits, base["records"], next_tokens))
    gate = peer_gate(figures, llama) if llama else None
    return KldRow(backend=GENAI, arithmetic=f"{GENAI} {version()}: its builder's {' '.join(RECIPE)} graph "
                                            "(weights quantized again from the dequantized GGUF)",
                  reference="llama.cpp F32 (its base file), as llama.cpp's Q4_1 is scored", chunks=base["n_chunk"],
                  n_ctx=base["n_ctx"], texts=list(TEXTS), **figures, targets=dict(GATE) if gate else None,
                  targets_met=gate, seconds=round(time.perf_counter() - t, 1))


BACKEND_ARITHMETIC = {"onnx-gguf4": "the default: int8 layers (llama.cpp's arithmetic), int8x2 head",
                      "onnx-gguf4-int8": "int8 activations in every matmul (llama.cpp's arithmetic)",
                      "onnx-gguf4-int8x2": "int8x2 activations throughout (the exact variant)",
                      "onnx-gguf4-fp32": "fp32 activations throughout",
                      **{f"onnx-gguf4-{lever}": f"the default, lever {lever}: {text}" for lever, text in LEVERS.items()}}


def kld_rows(names: list[str], model: str | None = None) -> list[dict]:
    """llama.cpp's row, the cross-check, one row per backend, then ONNX Runtime GenAI's (each in its own process),
    printed as they come."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="playground-kld-") as tmp:
        work = Path(tmp)
        llama, base = run_llama(work)
        rows.append(say(llama))
        if base is None:
            return rows
        reference = work / "reference.npy"
        rows.append(say(row_in_subprocess("kld", "--base", str(base), "--reference", str(reference), label=REFERENCE)))
        peer = json.dumps({k: rows[0].get(k) for k in ("same_top_p_pct", "same_top_p_pm_pct", "mean_kld")})
        if "error" not in rows[-1]:   # ours are scored against the reference's records
            for name in [n for n in names if n != REFERENCE]:
                rows.append(say(row_in_subprocess("kld", name, "--base", str(base), "--compare", str(reference),
                                                  "--llama", peer, label=name)))
        rows.append(say(row_in_subprocess("kld", GENAI, "--base", str(base), "--llama", peer, label=GENAI)))
    return rows


def main(argv: list[str]) -> None:
    """`python -m playground.bench kld [NAMES]`: llama.cpp's row, the cross-check and one row per backend (each in
    its own process); with --reference or --compare, that one row in this process."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench kld", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"backends (default: every ONNX variant of the bundled GGUF); {GENAI} "
                                            "with --base alone: its row against llama.cpp's F32")
    p.add_argument("--base", type=Path, help="llama-perplexity's --kl-divergence-base file (ids, chunks)")
    p.add_argument("--reference", type=Path, help="write onnx fp32's records there (one row, this process)")
    p.add_argument("--compare", type=Path, help="score the one backend named against the records there")
    p.add_argument("--llama", type=json.loads, default=None, help="llama.cpp's figures (JSON), for the gate")
    args = p.parse_args(argv)
    if args.reference:
        say(write_reference(args.base, args.reference))
    elif args.names == [GENAI] and args.base:
        say(peer_row(args.base, args.llama))
    elif args.compare:
        say(backend_row(args.names[0], args.base, args.compare, args.llama))
    else:
        from ..backends import BACKENDS
        kld_rows(args.names or [n for n in BACKENDS if n.startswith("onnx-gguf4")])
