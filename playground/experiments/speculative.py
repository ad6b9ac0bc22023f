"""Speculative decoding by prompt lookup against plain decoding: the same prompt, the same backend, one after the other.

    result = run_speculative(engine, k=4, ngram=3, new_tokens=96)
    result.presets[0].speedup, result.presets[0].tokens_per_pass, result.presets[0].acceptance

Presets: where it shines (`reread`: raw text, the long document then its first sentence again, so the
model continues by copying what it read), a prompt that looks copyable and is not (`quote`: raw text, the
document then the start of a list of its key sentences "quoted word for word"; the bundled 135M model
writes sentences of its own there, and few drafts match), the lesson's case (`summary`: summarize the long document,
chat template; a small model paraphrases more than it copies) and where it does not (`question`: a
short open question, nothing to copy). Each preset runs plain (Engine) then speculative
(SpeculativeEngine on the same backend), greedy, `repeats` times alternating; decode tok/s of each is
the median over repeats, measured from the Steps (metrics.decode_tps). `same_tokens` says whether the
two runs chose the same tokens (greedy speculation is lossless on the verify pass's arithmetic; on
onnx-gguf4 a near-tie can flip where the multi-row verify pass and the one-row decode differ).

Left out: remote sources (no verify pass: ValueError naming the source); sampling (the Generate tab's).
"""
from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass, field

from ..config import GenerationSettings
from ..speculative import PassCounts
from ..measure import Progress, ProgressFn, follow, warm_up
from ..prompts import OPEN_QUESTION, QUOTE_END, long_document, long_prompt
from ..trace import StopReason
from ..units import times
from .common import ResultBase, RunInfo

PRESETS = ("reread", "quote", "summary", "question")
REREAD_TOKENS = 32   # the document's first tokens, read again at the end of the prompt


@dataclass
class PresetMeasure(PassCounts):
    preset: str
    prompt_tokens: int
    output_tokens: int
    passes: int                  # forward passes of the speculative run (prefill included)
    proposed: int
    accepted: int
    plain_decode_tps: float | None   # median over repeats
    spec_decode_tps: float | None
    same_tokens: bool            # the two runs chose the same tokens
    first_difference: int | None     # index of the first differing token (None: none)
    text: str                    # the speculative run's text

    @property
    def speedup(self) -> float | None:
        if self.plain_decode_tps and self.spec_decode_tps:
            return self.spec_decode_tps / self.plain_decode_tps
        return None


@dataclass
class SpeculativeComparison(ResultBase):
    NAME = "speculative"
    info: RunInfo
    k: int
    ngram: int
    new_tokens: int
    repeats: int
    presets: list[PresetMeasure] = field(default_factory=list)
    cancelled: bool = False
    elapsed: float = 0.0

    def summary(self) -> dict:
        return {p.preset: {"tokens_per_pass": round(p.tokens_per_pass, 3),
                           "acceptance": None if p.acceptance is None else round(p.acceptance, 3),
                           "speedup": None if p.speedup is None else round(p.speedup, 3),
                           "same_tokens": p.same_tokens} for p in self.presets}

    def findings(self) -> list[str]:
        out = [_preset_words(p) for p in self.presets]
        if out:
            out.append(f"speculative: up to {self.k} tokens proposed a pass, copied from where the last "
                       f"{self.ngram} tokens appeared before; decode speed is the median of {self.repeats} "
                       f"run{'s' if self.repeats != 1 else ''} each way")
        return out


def _preset_words(p: PresetMeasure) -> str:
    def tps(v):
        return "not measured" if v is None else f"{v:,.1f} tokens/s"
    speed = f" ({times(p.speedup)} plain's speed)" if p.speedup else ""
    accepted = "no proposal made" if p.acceptance is None else \
        f"{p.accepted} of {p.proposed} proposed tokens accepted ({p.acceptance:.0%})"
    same = "the same tokens as plain decoding" if p.same_tokens else \
        f"the tokens differ from plain decoding from token {p.first_difference}"
    per_pass = "no forward pass counted" if p.tokens_per_pass is None else \
        f"{p.tokens_per_pass:.2f} tokens a forward pass"
    return (f"{p.preset}: decode {tps(p.spec_decode_tps)} speculative against {tps(p.plain_decode_tps)} plain"
            f"{speed} · {per_pass} · {accepted} · {same}")


def preset_run(engine, preset: str, new_tokens: int):
    """A Run of `preset` on `engine` (greedy, `new_tokens` at most)."""
    settings = GenerationSettings(max_new_tokens=new_tokens, temperature=0.0)
    if preset == "reread":
        ids = engine.encode(long_document())
        room = max(REREAD_TOKENS, engine.backend.context_window - new_tokens - REREAD_TOKENS - 1)
        return engine.run_ids(ids[:room] + ids[:REREAD_TOKENS], settings)
    if preset == "quote":
        end = engine.encode(QUOTE_END)
        ids = engine.encode(long_document())
        return engine.run_ids(ids[:max(16, engine.backend.context_window - new_tokens - len(end) - 1)] + end, settings)
    if preset == "summary":   # cut by tokens to fit a small context window (short_long.long_prompt)
        prompt = long_prompt(engine.tokenizer, engine.backend.context_window, new_tokens)[0]
    else:
        prompt = OPEN_QUESTION
    return engine.run(prompt, settings)


def run_speculative(source, k: int = 4, ngram: int = 3, new_tokens: int = 96, repeats: int = 1,
                    presets: tuple[str, ...] = PRESETS, progress: ProgressFn | None = None,
                    cancel: threading.Event | None = None) -> SpeculativeComparison:
    from ..speculative import Speculation, SpeculativeEngine

    backend = getattr(source, "backend", None)
    if backend is None or not backend.verifies:
        raise ValueError(f"speculative decoding needs a local backend with a verify pass; "
                         f"{source.info.name} has none")
    spec = SpeculativeEngine(backend, Speculation(k=k, ngram=ngram))
    report = Progress(progress, cancel)
    result = SpeculativeComparison(RunInfo.of(source), k, ngram, new_tokens, repeats)
    warm_up(source)
    warm_up(spec)
    total = len(presets) * repeats * 2
    for p, preset in enumerate(presets):
        tps = {"plain": [], "speculative": []}
        traces = {}
        for r in range(repeats):
            for e, (label, engine) in enumerate((("plain", source), ("speculative", spec))):
                if report.cancelled:
                    break
                done = (p * repeats + r) * 2 + e
                traces[label] = trace = follow(preset_run(engine, preset, new_tokens), report, lambda step, d=done: report(
                    (d + (step.index + 1) / new_tokens) / total, f"{preset}, {label}: token {step.index + 1}"))
                tps[label].append(trace.metrics().decode_tps)
        if report.cancelled or len(traces) < 2:
            break
        plain, sp = traces["plain"].output_ids, traces["speculative"].output_ids
        first = next((i for i, (a, b) in enumerate(zip(plain, sp)) if a != b),
                     None if len(plain) == len(sp) else min(len(plain), len(sp)))
        counts = traces["speculative"].speculation
        result.presets.append(PresetMeasure(
            preset, len(traces["speculative"].prompt_ids), len(sp), counts["passes"], counts["proposed"],
            counts["accepted"], _median(tps["plain"]), _median(tps["speculative"]), first is None, first,
            traces["speculative"].text))
    result.cancelled = report.cancelled
    result.elapsed = report.elapsed()
    report(1.0, StopReason.CANCELLED if result.cancelled else "done")
    return result


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
