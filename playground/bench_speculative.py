"""The speculative row of `make bench`: prompt-lookup speculative decoding against plain decoding, same backend.

    python -m playground.bench_speculative               # one JSON row: the bundled model on its default backend
    python -m playground.bench_speculative --model tiny  # the tiny model (what the tests run)

Method, in one process: the `speculative` experiment (experiments/speculative.py) with k = 4, n-gram 3,
96 new tokens, greedy, 2 repeats alternating plain and speculative per preset, median decode tok/s of
each (from the Steps); presets `summary` (summarize the long document, the issue's preset), `reread`
(the document, then its first sentence again, raw: the model continues by copying) and `question` (a
short open question). Per preset: tokens per forward pass, acceptance rate, speedup (speculative /
plain decode tok/s) and whether both chose the same tokens. Then, teacher-forced on 200 tokens of the
bench text (bench_fidelity.text_ids): how often the verify pass's top token differs from decode's.

Targets (issue 26): summary speedup >= 1.5, question speedup >= 0.95; `targets_met` says which are met.

Left out: sampling; other k and n-gram sizes (the experiment's CLI takes them).
"""
from __future__ import annotations

import json
import sys
import time

from .bench_batch import targets_met, targets_text

TARGETS = {"summary_speedup": (">=", 1.5), "question_speedup": (">=", 0.95)}
K, NGRAM, NEW_TOKENS, REPEATS, AGREEMENT_TOKENS = 4, 3, 96, 2, 200


def speculative_row(model: str | None = None, backend: str | None = None, new_tokens: int = NEW_TOKENS,
                    repeats: int = REPEATS) -> dict:
    from .backends import create_backend, default_backend_name
    from .bench_fidelity import text_ids
    from .engine import Engine
    from .experiments.speculative import run_speculative
    from .speculative import verify_agreement

    engine = Engine(create_backend(backend or default_backend_name("cpu", model), model, device="cpu"))
    result = run_speculative(engine, K, NGRAM, new_tokens, repeats)
    row = {"bench": "speculative", "backend": engine.backend.name, "k": K, "ngram": NGRAM,
           "new_tokens": new_tokens, "repeats": repeats, "presets": result.summary()}
    for p in result.presets:
        row["presets"][p.preset].update(plain_decode_tps=_round(p.plain_decode_tps), proposed=p.proposed,
                                        spec_decode_tps=_round(p.spec_decode_tps), accepted=p.accepted,
                                        passes=p.passes, output_tokens=p.output_tokens)
        row[f"{p.preset}_speedup"] = None if p.speedup is None else round(p.speedup, 2)
    differ, compared = verify_agreement(engine.backend, text_ids(engine.tokenizer, AGREEMENT_TOKENS + 1))
    row["verify_vs_decode_top1_differ"] = {"positions": compared, "differ": differ}
    row["targets"], row["targets_met"] = targets_text(TARGETS), targets_met(row, TARGETS)
    return row


def _round(v, digits: int = 2):
    return None if v is None else round(v, digits)


def main(argv: list[str]) -> None:
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench_speculative")
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)   # bench.py's row_in_subprocess passes a name
    p.add_argument("--model", default=None)
    p.add_argument("--backend", default=None)
    p.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    p.add_argument("--repeats", type=int, default=REPEATS)
    args = p.parse_args(argv)
    start = time.perf_counter()
    row = speculative_row(args.model, args.backend, args.new_tokens, args.repeats)
    row["bench_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
