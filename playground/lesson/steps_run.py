"""Lesson steps 1-3: tokens, one token at a time, prefill then decode (one short run serves 2 and 3).

Each step is `step_x(lesson, report) -> StepResult`; see the package docstring for the table.
Left out: layout (ui/lesson_tab.py) and slow-motion replay, which the page does from the recorded Steps
(replaying never slows the run being measured).
"""
from __future__ import annotations

import html

from ..charts import plot_step_latency, plot_timeline, plot_top_k
from ..config import GenerationSettings
from ..measure import follow
from ..prompts import SHORT_QUESTION
from ..run_view import chip_html, chips_html, format_seconds
from ..tokens import compare, hf_view, render_chips_html, tiktoken_view, visible
from .lesson_step import RULE_OF_THUMB, SEED_SENTENCE, StepResult
from ..trace import Phase

ANSWER_TOKENS = 24   # step 2's budget: about a second on the bundled model with a 2-core CPU
TOP_SHOWN = 5        # step 2's candidates drawn: each bar labelled on a projector at 1024x768


# --- 1: tokens

def step_tokens(lesson, report, text: str = SEED_SENTENCE) -> StepResult:
    source = lesson.source
    report(0.1, "tokenizing")
    views = [tiktoken_view()]
    if source.tokenizer is not None:
        views.insert(0, hf_view(source.tokenizer, name=f"model ({source.info.model})"))
    c = compare(text, views)
    model_tokens = len(source.encode(c.text))   # the model's own count, from its tokenizer or its server
    cl100k = c.counts["cl100k_base"]
    guess = c.words * RULE_OF_THUMB
    numbers = {"words": c.words, "model_tokens": model_tokens, "cl100k_tokens": cl100k,
               "tokens_per_word_rule": RULE_OF_THUMB, "rule_of_thumb": guess}
    blocks = "".join(f'<h4 class="tok-title">{html.escape(name)} · {len(spans)} tokens</h4>'
                     f"{render_chips_html(spans, text=c.text)}" for name, spans in c.spans.items())
    notes = [] if source.tokenizer is not None else [
        f"{source.info.name} has no tokenizer here: its count comes from the server; chips show cl100k only"]
    takeaway = (f"{c.words} words → {model_tokens} tokens for {source.info.model}; {cl100k} for cl100k_base, "
                f"OpenAI's GPT-4 tokenizer. The rule of thumb ({RULE_OF_THUMB:g} tokens a word) says {guess:.1f}. "
                f"Models read tokens, and providers bill them.")
    return StepResult(1, "It works in tokens", takeaway, numbers, html=blocks, notes=notes)


# --- 2: one token at a time

def answer_run(lesson, report):
    """Step 2's run (greedy, the France question), made once and shared with steps 3 and 4."""
    if "trace" not in lesson.shared:
        settings = GenerationSettings(max_new_tokens=ANSWER_TOKENS)
        trace = follow(lesson.source.run(SHORT_QUESTION, settings), report, lambda step: report(
            (step.index + 1) / ANSWER_TOKENS, f"token {step.index + 1}: {step.text!r}"))
        if report.cancelled:
            return trace
        lesson.shared["trace"] = trace
    return lesson.shared["trace"]


def step_decode(lesson, report) -> StepResult:
    trace = answer_run(lesson, report)
    n = trace.output_tokens
    m = trace.metrics()
    numbers = {"output_tokens": n, "steps": len(trace.steps), "decode_tps": m.decode_tps}
    takeaway = f"This {n}-token answer took {len(trace.steps)} prediction steps, each reading all the tokens before it."
    figures, notes = {}, []
    with_top = [s for s in trace.steps if s.top and s.prob is not None and not s.special and s.text.strip()]
    if with_top:   # the least sure pick shows best that each step is a choice among candidates
        doubt = min(with_top, key=lambda s: s.prob)
        runner = next((c for c in doubt.top if c.token_id != doubt.token_id), None)
        numbers.update(unsure_step=doubt.index, unsure_prob=doubt.prob, runner_up_prob=runner.prob if runner else None)
        takeaway += (f" At step {doubt.index} the model gave “{visible(doubt.text.encode())}” {doubt.prob:.0%}"
                     + (f" and “{visible(runner.text.encode())}” {runner.prob:.0%}" if runner else "")
                     + "; greedy decoding picks the likelier.")
        figures["top_k"] = plot_top_k(trace, doubt.index, limit=TOP_SHOWN)
    else:
        notes.append(f"{trace.backend} gives no top-k probabilities: the candidates are missing")
    if m.decode_tps:
        takeaway += f" It decoded {m.decode_tps:.1f} tokens/s."
    chips = chips_html([chip_html(s) for s in trace.steps])
    return StepResult(2, "One token at a time", takeaway, numbers, figures, chips, notes)


# --- 3: prefill, then decode

def step_prefill(lesson, report) -> StepResult:
    trace = answer_run(lesson, report)
    m = trace.metrics()
    numbers = {"prompt_tokens": m.prompt_tokens, "ttft_s": m.ttft, "tpot_s": m.tpot, "e2e_s": m.e2e,
               "prefill_share": m.ttft / m.e2e if m.ttft and m.e2e else None}
    figures = {"timeline": plot_timeline(trace), "latency": plot_step_latency(trace)}
    takeaway = (f"Prefill read {m.prompt_tokens} prompt tokens in one pass. The first token came after "
                f"{format_seconds(m.ttft or 0)} (TTFT, time to first token).")
    if m.tpot is not None:
        takeaway += (f" Each later token (a decode step) averaged {format_seconds(m.tpot)}."
                     f" The first cost {m.ttft / m.tpot:.1f}× as much.")
    notes = roofline_figure(lesson.source, trace, report, figures, numbers)
    return StepResult(3, "Prefill, then decode", takeaway, numbers, figures, notes=notes)


def roofline_figure(source, trace, report, figures: dict, numbers: dict) -> list[str]:
    """Why: the run's Steps on the roofline (the machine's ceilings measured here, once per process), added to
    `figures` and `numbers`; returns the notes (estimated for a server, missing when the model's shape is unknown)."""
    from ..charts.roofline import plot_roofline
    from ..roofline import machine_ceilings, roofline_model, trace_points
    model = roofline_model(source)
    if model is None:
        return [f"the roofline needs the model's shape; {source.info.name} does not say it: missing"]
    report(0.9, "measuring the machine's ceilings (matmul peak, memory bandwidth)")
    ceilings = machine_ceilings(cancel=report.event)
    if ceilings.cancelled:
        return ["the roofline was cancelled while the ceilings were measured: missing"]
    points = trace_points(trace, model.shape, model.storage, ceilings)
    figures["roofline"] = plot_roofline(points, ceilings, "Why decode is slow: this run on the roofline"
                                        + (" (estimated)" if model.estimated else ""), model.label)
    for phase in Phase:   # measured over predicted: above 1, what the roofline leaves out
        ratios = sorted(p.ratio for p in points if p.phase == phase)
        if ratios:
            numbers[f"{phase}_measured_over_roofline"] = ratios[len(ratios) // 2]
    return [f"the roofline is {model.label}"] if model.estimated else []
