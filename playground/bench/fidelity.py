"""How closely each backend follows onnx fp32 on a fixed text (llama-perplexity style), for `make bench`.

    python -m playground.bench fidelity                  # fp32 reference, then one row per backend
    python -m playground.bench fidelity onnx-gguf4       # just that backend (and the reference)

Teacher forcing: every backend reads the same `FIDELITY_TOKENS` ids of the long document (repeated to
length by `exact_length_ids`, so the second and later copies are easier to predict than the first):
one prefill of the first id, then one decode per id, exactly the path generation takes. At every
position it gives a next-token distribution; per backend we report

  - top1_agreement_with_fp32: share of positions whose argmax equals onnx fp32's
  - mean_kl_from_fp32_nats: mean over positions of KL(p_fp32 || p_backend), natural log
  - perplexity: exp(mean negative log-likelihood of the text's actual next ids)
  - first_copy_*: agreement and KL over the first copy of the document alone (~800 positions), where
    the model cannot copy from its context: the harder, more telling part

The fp32 log-probabilities (positions x vocab float32, ~0.4 GB for 2,000 tokens of a 49k vocabulary)
go to a temporary .npy that each backend's process reads back, one process per backend as the rest of
the bench does. Figures are deterministic for a backend on a machine (no timing involved).

Left out: the int8 / int4 weight variants' calibration (they are measured as they are).
"""
from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .process import row_in_subprocess
from .rows import Row, say


@dataclass(frozen=True)
class FidelityRow(Row):
    """Teacher-forced agreement with onnx fp32 on the bench text (fidelity.fidelity_row); the reference's own
    row (fidelity.write_reference) has no first-copy figures.

    >>> FidelityRow("onnx", 24, 1.0, 0.0, 3.2, seconds=0.5).to_json()
    {'backend': 'onnx', 'fidelity_tokens': 24, 'top1_agreement_with_fp32': 1.0, 'mean_kl_from_fp32_nats': 0.0, \
'perplexity': 3.2, 'seconds': 0.5}
    """

    OPTIONAL = ("first_copy_tokens", "first_copy_top1_agreement", "first_copy_mean_kl_nats")

    backend: str
    fidelity_tokens: int
    top1_agreement_with_fp32: float
    mean_kl_from_fp32_nats: float
    perplexity: float
    first_copy_tokens: int | None = None
    first_copy_top1_agreement: float | None = None
    first_copy_mean_kl_nats: float | None = None
    seconds: float = 0.0


FIDELITY_TOKENS = 2000
REFERENCE = "onnx"


def text_ids(tokenizer, tokens: int = FIDELITY_TOKENS) -> list[int]:
    """`tokens` ids of the long document, repeated as needed."""
    from ..measure import exact_length_ids
    return exact_length_ids(tokenizer, tokens)


def document_tokens(tokenizer) -> int:
    """Length of one copy of the document: positions past it can be predicted by copying."""
    from ..prompts import long_document
    return len(tokenizer(long_document(), add_special_tokens=False)["input_ids"])


def teacher_forced_logprobs(backend, ids: list[int]):
    """Yield log-softmax float32 [vocab] predicting ids[i + 1], for i = 0 .. len(ids) - 2."""
    import torch

    logits, state = backend.prefill(ids[:1])
    for i in range(1, len(ids)):
        yield torch.log_softmax(logits.float(), dim=-1).cpu().numpy()
        if i + 1 < len(ids):
            logits, state = backend.decode(ids[i], state)


def write_reference(path: Path, tokens: int = FIDELITY_TOKENS, model: str | None = None,
                    reference: str = REFERENCE) -> FidelityRow:
    """Write the reference's (fp32's) log-probabilities over the text to `path` (.npy); return its own row."""
    from ..backends import create_backend

    backend = create_backend(reference, model, device="cpu")
    ids = text_ids(backend.tokenizer, tokens)
    t = time.perf_counter()
    out, nll = None, 0.0
    for i, row in enumerate(teacher_forced_logprobs(backend, ids)):
        if out is None:
            out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(len(ids) - 1, len(row)))
        out[i] = row
        nll -= float(row[ids[i + 1]])
    out.flush()
    return FidelityRow(reference, len(ids), 1.0, 0.0, round(math.exp(nll / (len(ids) - 1)), 4),
                       seconds=round(time.perf_counter() - t, 1))


def fidelity_row(name: str, reference: Path, model: str | None = None) -> FidelityRow:
    """Compare backend `name` with the fp32 log-probabilities stored at `reference`."""
    from ..backends import create_backend

    ref = np.load(reference, mmap_mode="r")
    backend = create_backend(name, model, device="cpu")
    ids = text_ids(backend.tokenizer, ref.shape[0] + 1)
    first_copy = document_tokens(backend.tokenizer) - 1   # positions predicted before the text repeats
    t = time.perf_counter()
    agree, kl, nll = np.zeros(len(ids) - 1, bool), np.zeros(len(ids) - 1), 0.0
    for i, row in enumerate(teacher_forced_logprobs(backend, ids)):
        p_log = np.asarray(ref[i])
        agree[i] = row.argmax() == p_log.argmax()
        kl[i] = np.sum(np.exp(p_log) * (p_log - row), dtype=np.float64)
        nll -= float(row[ids[i + 1]])
    return FidelityRow(name, len(ids), round(float(agree.mean()), 4), float(f"{kl.mean():.3g}"),
                       round(math.exp(nll / len(kl)), 4),
                       first_copy_tokens=min(first_copy, len(kl)) + 1,   # the same on the unrepeated text alone
                       first_copy_top1_agreement=round(float(agree[:first_copy].mean()), 4),
                       first_copy_mean_kl_nats=float(f"{kl[:first_copy].mean():.3g}"),
                       seconds=round(time.perf_counter() - t, 1))


def fidelity_rows(names: list[str], tokens: int = FIDELITY_TOKENS) -> list[dict]:
    """The fp32 reference row, then one row per other backend, each backend in its own process (printed
    as they come)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="playground-fidelity-") as tmp:
        reference = Path(tmp) / "fp32_logprobs.npy"
        rows.append(say(row_in_subprocess("fidelity", "--reference", str(reference), "--tokens", str(tokens),
                                          label=REFERENCE)))
        if "error" in rows[-1]:
            return rows   # nothing to compare with
        for name in [n for n in names if n != REFERENCE]:
            rows.append(say(row_in_subprocess("fidelity", name, "--compare", str(reference), label=name)))
    return rows


def main(argv: list[str]) -> None:
    """`python -m playground.bench fidelity [NAMES]`: the reference, then one row per backend (each in its own
    process); with --reference PATH or --compare PATH, that one row in this process."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench fidelity", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="backends (default: every backend)")
    p.add_argument("--tokens", type=int, default=FIDELITY_TOKENS)
    p.add_argument("--reference", type=Path, help="write fp32's log-probabilities there (one row, this process)")
    p.add_argument("--compare", type=Path, help="compare the one backend named with the log-probabilities there")
    args = p.parse_args(argv)
    if args.reference:
        say(write_reference(args.reference, args.tokens))
    elif args.compare:
        say(fidelity_row(args.names[0], args.compare))
    else:
        from .backends import DEFAULT_BACKENDS
        fidelity_rows(args.names or DEFAULT_BACKENDS, args.tokens)
