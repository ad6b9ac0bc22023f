"""The Compare tab: one prompt and settings on two backends, both answers' text with the tokens where they
differ marked, their timelines and per-step latency in one chart, TTFT and decode tok/s side by side, and
whether their tokens agree (compare.py measures and writes the answers' HTML).

The two runs are sequential (compare_backends), in the same CPU queue as Generate, so neither steals
cores from the other. Greedy by default: token agreement means little for sampled runs, so a sampled
comparison uses one seed (0) on both. API name: /compare.
Left out: more than two backends, and repeats (the bench, bench/backends.py, repeats runs).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import gradio as gr

from ..charts.compare import plot_compare
from ..compare import answers_html, compare_backends, explain, finished_line
from ..config import MAX_NEW_TOKENS_LIMIT, coerce_settings
from ..prompts import SHORT_QUESTION
from ..source import SourceError
from .common import (CPU_QUEUE, GENERATE_CONCURRENCY, SourceUnavailable, backend_dropdown, loading_line,
                     source, warn)
from .forms import form_inputs, read_form
from .zerogpu import cost_line, zero_gpu

@dataclass
class CompareForm:
    """The Compare tab's inputs: /compare's, in this order."""
    backend_a: str
    backend_b: str
    prompt: str
    max_new_tokens: float
    temperature: float
    chat: bool


HEADERS = ["backend", "device", "dtype", "tokens", "TTFT (ms)", "decode tok/s", "TPOT (ms)", "E2E (s)", "stop"]


def table(comparison) -> list[list]:
    """One row per run, rounded for reading; empty where a number is undefined (a one-token run has no TPOT)."""
    def r(v, scale=1.0, digits=1):
        return "" if v is None else round(v * scale, digits)
    return [[row["backend"], row["device"], row["dtype"], row["tokens"], r(row["ttft"], 1000), r(row["decode_tps"]),
             r(row["tpot"], 1000), r(row["e2e"], 1, 2), row["stop_reason"]] for row in comparison.rows()]


def agreement_line(comparison) -> str:
    a, b = (t.backend for t in comparison.traces)
    line = f"**Token agreement {comparison.agreement:.0%}** between {a} and {b}"
    if comparison.first_divergence is None:
        return line + ": every output token is identical."
    return line + f": first divergence at output token {comparison.first_divergence}. {explain(comparison)}"


@dataclass
class CompareHandlers:
    """The Compare tab's event: Compare (`compare`, dict inputs keyed by CompareForm's components in `form`), which
    `run` serves from the typed form; updates go by component ({out.status: …}), the rest left as they are."""
    registry: Any
    form: SimpleNamespace
    out: SimpleNamespace

    def compare(self, values: dict):
        yield from self.run(read_form(CompareForm, self.form, values))

    def run(self, f: CompareForm):
        """Load both backends, refuse a bad prompt before either run starts, run A then B, draw both."""
        for name in dict.fromkeys([f.backend_a, f.backend_b]):
            for line in self.registry.loading(name):
                yield {self.out.status: loading_line(line)}
        try:
            sources, settings = self.prepared(f)
        except (SourceUnavailable, ValueError, TypeError, SourceError) as exc:   # SourceError: a server's /tokenize
            yield {self.out.status: warn(str(exc))}
            return
        yield {self.out.status: loading_line(f"running on {f.backend_a}, then on {f.backend_b}…")}
        try:
            c = compare_backends(f.prompt, settings, *sources)
        except Exception as exc:   # noqa: BLE001 - a runtime error in either backend: say so, keep serving
            yield {self.out.status: warn(f"the comparison failed: {type(exc).__name__}: {exc}")}
            return
        yield self.drawn(c, sources, settings)

    def prepared(self, f: CompareForm):
        """(the two sources, the settings), the prompt read by each; SourceUnavailable, ValueError, SourceError."""
        sources = [source(self.registry, name) for name in (f.backend_a, f.backend_b)]
        settings = coerce_settings(max_new_tokens=f.max_new_tokens, temperature=f.temperature, seed=0,
                                   chat=bool(f.chat))
        for each in sources:
            each.prompt_ids(f.prompt, settings)
        return sources, settings

    def drawn(self, c, sources, settings) -> dict:
        status = finished_line(c)
        if zero_gpu():   # which backend ran each side, and what a GPU call asked of the visitor's quota
            status += "".join(f" · {side}: {cost_line(each, settings)}" for side, each in zip("AB", sources))
        return {self.out.figure: plot_compare(c), self.out.table: table(c), self.out.agreement: agreement_line(c),
                self.out.answers: answers_html(c), self.out.status: status}


OUTPUTS = ("figure", "table", "agreement", "answers", "status")   # /compare returns these, in this order


def compare_tab(registry, generate_prompt) -> None:
    with gr.Tab("Compare", id="compare"):
        gr.Markdown("The same prompt and settings on two backends, one after the other: when each token "
                    "arrived, how long each step took, and whether the two runs chose the same tokens. "
                    "TTFT = time to first token (◆ in the chart).")
        form = SimpleNamespace()
        with gr.Row():
            form.backend_a = backend_dropdown(registry, "Backend A", elem_id="compare-a")
            other = next((n for n in registry.names if n != registry.default), registry.default)
            form.backend_b = backend_dropdown(registry, "Backend B", value=other, elem_id="compare-b")   # A: default
        form.prompt = gr.Textbox(label="Prompt (follows the Generate tab's)", value=SHORT_QUESTION, lines=3, max_lines=8)
        with gr.Row():
            form.max_new_tokens = gr.Slider(1, MAX_NEW_TOKENS_LIMIT, value=32, step=1, label="Max new tokens",
                                            elem_id="compare-max-new-tokens")
            form.temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)",
                                         info="above 0: seed 0 on both")
            form.chat = gr.Checkbox(value=True, label="Apply the chat template")
        run = gr.Button("Compare", variant="primary", elem_id="compare-run")
        out = SimpleNamespace(status=gr.Markdown(elem_classes="status", elem_id="compare-status"),
                              agreement=gr.Markdown(elem_id="compare-agreement"),
                              answers=gr.HTML(elem_id="compare-answers", padding=True),
                              figure=gr.Plot(label="Two backends, one prompt", elem_id="compare-plot"),
                              table=gr.Dataframe(headers=HEADERS, label="Measured side by side", interactive=False,
                                                 wrap=True, elem_id="compare-table"))   # wrapped, never cut
    generate_prompt.change(lambda p: p, generate_prompt, form.prompt, api_visibility="private", queue=False)
    run.click(CompareHandlers(registry, form, out).compare, form_inputs(CompareForm, form),
              [getattr(out, name) for name in OUTPUTS],
              api_name="compare", concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE)
