"""Two engines, one prompt: both traces, their speed side by side, and how far their tokens agree.

    c = compare_backends("Why is the sky blue?", GenerationSettings(max_new_tokens=32), onnx, int8)  # two sources
    c.rows()                  # [{"backend": "onnx", "ttft": 0.21, "decode_tps": 40.1, ...}, {...}]
    c.agreement, c.first_divergence   # e.g. 0.84, 27 (None when every position matches)

The runs are sequential, never concurrent, so neither steals cores from the other; on a shared
machine the order still matters a little (caches warm up), which is why the bench repeats runs.

Token agreement is position by position: after the first divergence the two texts usually drift
apart entirely, so a low share means "diverged early", not "mostly different tokens".
Left out: comparing sampled runs (agreement is only meaningful for greedy, or with one seed).
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import GenerationSettings
from .trace import Trace


def token_agreement(a: list[int], b: list[int]) -> tuple[float, int | None]:
    """(share of positions holding the same token, first differing position or None).

    Positions are counted up to the longer run: tokens one run has and the other lacks disagree.
    >>> token_agreement([1, 2, 3, 4], [1, 2, 5, 4])
    (0.75, 2)
    >>> token_agreement([1, 2], [1, 2, 3])
    (0.6666666666666666, 2)
    """
    n = max(len(a), len(b))
    if n == 0:
        return 1.0, None
    same = [i < len(a) and i < len(b) and a[i] == b[i] for i in range(n)]
    first = next((i for i, s in enumerate(same) if not s), None)
    return sum(same) / n, first


@dataclass
class Comparison:
    prompt: str
    settings: GenerationSettings
    a: Trace
    b: Trace
    agreement: float             # share of identical tokens, position by position
    first_divergence: int | None  # index of the first differing output token; None = identical

    @property
    def traces(self) -> tuple[Trace, Trace]:
        return self.a, self.b

    def rows(self) -> list[dict]:
        """One row per run, for a side-by-side table (times in seconds, None where undefined)."""
        out = []
        for t in self.traces:
            m = t.metrics()
            out.append({"backend": t.backend, "device": t.device, "dtype": t.dtype, "tokens": m.output_tokens,
                        "ttft": m.ttft, "tpot": m.tpot, "decode_tps": m.decode_tps, "e2e": m.e2e,
                        "kv_bytes": m.kv_bytes, "stop_reason": t.stop_reason})
        return out


def compare_backends(prompt: str, settings: GenerationSettings | None, source_a, source_b) -> Comparison:
    """Run the same prompt and settings on source_a, then on source_b; compare what came out."""
    settings = (settings or GenerationSettings()).validate()
    a = source_a.run(prompt, settings).wait()
    b = source_b.run(prompt, settings).wait()
    share, first = token_agreement(a.output_ids, b.output_ids)
    return Comparison(prompt, settings, a, b, share, first)
