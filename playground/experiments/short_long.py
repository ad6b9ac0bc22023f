"""Short vs long request: a one-line question and a document to summarize, through the real Engine.

    cmp = run_short_vs_long(source)
    cmp.short.ttft, cmp.long.ttft, cmp.summary()["ratios"]["input_tokens"]   # long / short

Both go through the source's `run` with the same settings (greedy, chat template, same token budget), so
the differences come from the input: TTFT, E2E and KV bytes are measured from the Steps; the cost is
an estimate (tokens x an illustrative price per million tokens, labelled so wherever shown). The
document is assets/long_document.txt; on a model with a small context window it is cut (by tokens)
to fit, and `document_truncated` says so.

Left out: queueing and batching (one request at a time).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from ..config import GenerationSettings
from ..metrics import estimate_cost
from ..run_view import format_bytes, format_seconds
from ..measure import Progress, ProgressFn, follow
from ..prompts import SHORT_QUESTION, long_prompt
from .common import ResultBase, RunInfo
from ..units import times, usd
from ..trace import StopReason

# illustrative prices of a small hosted model, USD per million tokens (an estimate, not a quote)
DEFAULT_USD_PER_M_INPUT = 0.15
DEFAULT_USD_PER_M_OUTPUT = 0.60


@dataclass
class RequestMeasure:
    label: str              # "short" | "long"
    input_tokens: int       # after the chat template
    output_tokens: int
    ttft: float | None      # seconds, measured
    e2e: float | None       # seconds, measured
    tpot: float | None
    kv_bytes: int | None    # measured after the last step (None: the source cannot measure it)
    est_cost_usd: float     # estimate: tokens x price
    stop_reason: str | None
    text: str


@dataclass
class ShortLongComparison(ResultBase):
    NAME = "short-long"
    info: RunInfo
    max_new_tokens: int
    usd_per_m_input: float
    usd_per_m_output: float
    short: RequestMeasure | None = None
    long: RequestMeasure | None = None
    document_truncated: bool = False
    cancelled: bool = False
    elapsed: float = 0.0

    def summary(self) -> dict:
        if not (self.short and self.long):
            return {}
        keys = ("input_tokens", "output_tokens", "ttft", "e2e", "kv_bytes", "est_cost_usd")
        ratios = {k: getattr(self.long, k) / getattr(self.short, k)
                  for k in keys if getattr(self.short, k) and getattr(self.long, k) is not None}
        return {"ratios": ratios, "ratio_meaning": "long / short"}

    def findings(self) -> list[str]:
        out = [_request_words(r) for r in (self.short, self.long) if r is not None]
        ratios = self.summary().get("ratios", {})
        if ratios:
            out.append("long ÷ short: " + ", ".join(f"{times(ratios[k])} {RATIO_WORDS[k]}"
                                                    for k in RATIO_WORDS if k in ratios))
        if out:
            out.append(f"estimated cost: tokens × an illustrative price of {usd(self.usd_per_m_input)} per "
                       f"million input and {usd(self.usd_per_m_output)} per million output tokens")
        if self.document_truncated:
            out.append("the document was cut to fit the model's context window")
        return out


RATIO_WORDS = {"input_tokens": "the input tokens", "output_tokens": "the output tokens", "ttft": "the TTFT",
               "e2e": "the end-to-end time", "kv_bytes": "the KV cache", "est_cost_usd": "the estimated cost"}


def _request_words(r: RequestMeasure) -> str:
    """'short request: 35 tokens in, 8 out · TTFT 40 ms · end to end 512 ms · KV cache 1.2 MiB · …'"""
    parts = [f"{r.label} request: {r.input_tokens:,} tokens in, {r.output_tokens:,} out",
             "TTFT " + ("missing" if r.ttft is None else format_seconds(r.ttft)),
             "end to end " + ("missing" if r.e2e is None else format_seconds(r.e2e)),
             "KV cache " + ("not measured" if r.kv_bytes is None else format_bytes(r.kv_bytes)),
             f"estimated cost (USD) {usd(r.est_cost_usd)}"]
    return " · ".join(parts)


def run_short_vs_long(source, max_new_tokens: int = 48, question: str = SHORT_QUESTION,
                      document: str | None = None, usd_per_m_input: float = DEFAULT_USD_PER_M_INPUT,
                      usd_per_m_output: float = DEFAULT_USD_PER_M_OUTPUT, progress: ProgressFn | None = None,
                      cancel: threading.Event | None = None) -> ShortLongComparison:
    settings = GenerationSettings(max_new_tokens=max_new_tokens).validate()
    report = Progress(progress, cancel)
    result = ShortLongComparison(RunInfo.of(source), max_new_tokens, usd_per_m_input, usd_per_m_output)
    text, result.document_truncated = long_prompt(source.tokenizer, source.info.context_window, max_new_tokens,
                                                  document)
    for k, (label, prompt) in enumerate((("short", question), ("long", text))):
        if report.cancelled:
            break
        trace = follow(source.run(prompt, settings), report, lambda step, k=k, label=label: report(
            (k + (step.index + 1) / max_new_tokens) / 2, f"{label} request: token {step.index + 1}"))
        if trace.stop_reason == StopReason.CANCELLED:
            break
        m = trace.metrics()
        setattr(result, label, RequestMeasure(label, m.prompt_tokens, m.output_tokens, m.ttft, m.e2e, m.tpot,
                                              m.kv_bytes, estimate_cost(m, usd_per_m_input, usd_per_m_output),
                                              trace.stop_reason, trace.text))
    result.cancelled = report.cancelled and result.long is None
    result.elapsed = report.elapsed()
    report(1.0, StopReason.CANCELLED if result.cancelled else "done")
    return result
