"""The Generate tab: type a prompt, pick a backend, watch tokens stream as chips while charts show the run.

Handlers are a few lines that loop over the engine and hand its Trace to pure functions (run_view.py
for HTML, charts/run.py for figures). Each browser session keeps its own `Session` (session.py) in
gr.State, so two tabs never mix runs; Stop cancels the Gradio event and the run, keeping the partial
trace. The first use of a backend loads it (ONNX export, GGUF conversion) in a worker thread while the
status line says what it is doing; a backend that failed to load is named in the status line with why.
API names: /generate, /stop, /top_k, /metrics.

Left out: authentication and per-user quotas; the queue's concurrency limit is the only guard.
"""
from __future__ import annotations

import time
from types import SimpleNamespace

import gradio as gr

from ..charts.run import plot_kv_cache, plot_step_latency, plot_timeline, plot_top_k
from ..config import MAX_NEW_TOKENS_LIMIT, coerce_settings
from ..source import SourceError
from ..run_view import chip_html, chips_html, metrics_html, status_line
from ..session import Session
from .common import (CPU_QUEUE, DEFAULT_USD_PER_M_INPUT, DEFAULT_USD_PER_M_OUTPUT, FRANCE, GENERATE_CONCURRENCY,
                     SUMMARIZE, backend_dropdown, caption, engine_or_message, loading_line, long_document, warn)

CHART_INTERVAL = 0.5       # seconds between chart updates while streaming (chips update with every batch)


# --- views of a trace (the outputs of generate and stop, in order)

def view(session: Session, prices, charts: bool = True, final: bool = False) -> tuple:
    trace = session.trace
    last = max(len(trace.steps) - 1, 0)
    figures = ((plot_timeline(trace), plot_step_latency(trace), plot_kv_cache(trace), plot_top_k(trace),
                gr.update(maximum=max(last, 1), value=last)) if charts else (gr.skip(),) * 5)
    return (chips_html(session.chips, running=not final), trace.text, status_line(trace),
            metrics_html(trace, *prices), *figures, session.export() if final else gr.skip())


def status_view(status_html: str) -> tuple:
    return (gr.skip(), gr.skip(), status_html, *(gr.skip(),) * 7)


def error_view(message: str) -> tuple:
    return status_view(warn(message))


# --- handlers

def parse_seed(seed) -> int | None:
    """'' -> None (a random seed each run); '42' -> 42; anything else -> ValueError naming the field."""
    text = "" if seed is None else str(seed).strip()
    try:
        return int(text) if text else None
    except ValueError:
        raise ValueError(f"seed must be a whole number (or empty for random), got {text!r}") from None


def make_handlers(registry):
    def generate(prompt, temperature, top_k, top_p, seed, max_new_tokens, chat, price_in, price_out, backend,
                 session: Session):
        for line in registry.loading(backend):
            yield status_view(loading_line(line))
        engine = engine_or_message(registry, backend)
        if isinstance(engine, str):
            yield error_view(engine)
            return
        try:
            settings = coerce_settings(temperature=temperature, top_k=top_k, top_p=top_p,
                                       seed=parse_seed(seed),
                                       max_new_tokens=max_new_tokens, chat=bool(chat))
            run = engine.run(prompt, settings)
        except (ValueError, TypeError, SourceError) as exc:   # SourceError: a server refused or failed
            yield error_view(str(exc))
            return
        session.start(run)
        shown = time.monotonic()   # first charts after CHART_INTERVAL: the first tokens are not slowed by drawing
        try:
            for batch in session.steps:   # the Steps made since the last update (the run has its own thread)
                session.chips.extend(chip_html(step) for step in batch)
                charts = time.monotonic() - shown >= CHART_INTERVAL
                shown = time.monotonic() if charts else shown
                yield view(session, (price_in, price_out), charts)
        finally:   # the handler was closed (event cancelled, tab gone): stop the run too
            if not run.trace.finished:
                run.cancel()   # this handler's own run (the session may have started another since)
        yield view(session, (price_in, price_out), final=True)

    def stop(price_in, price_out, session: Session):
        if session.run is None:
            return error_view("nothing is running")
        session.stop()
        return view(session, (price_in, price_out), final=True)

    def top_k(step, session: Session):
        return plot_top_k(session.trace, step)

    def metrics(price_in, price_out, session: Session):
        return metrics_html(session.trace, price_in, price_out)

    return generate, stop, top_k, metrics


# --- layout

def generate_tab(registry) -> SimpleNamespace:
    """Prompt, presets, backend, sampling controls, then the live outputs; returns the components by name."""
    c = SimpleNamespace()
    with gr.Row():
        with gr.Column(scale=3):
            c.prompt = gr.Textbox(label="Prompt", value=FRANCE, lines=4, max_lines=12)
            with gr.Row():
                france = gr.Button(f"Preset: {FRANCE}", size="sm")
                summarize = gr.Button("Preset: summarize a long document", size="sm")
            with gr.Row():
                c.generate = gr.Button("Generate", variant="primary", elem_id="generate")
                c.stop = gr.Button("Stop", variant="stop", elem_id="stop")
            c.status = gr.Markdown(elem_classes="status", elem_id="status")
        with gr.Column(scale=2):
            c.backend = backend_dropdown(registry, elem_id="backend",
                                         info="the first use of a backend loads it (ONNX: export once, ~1 min)")
            c.temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
            with gr.Row():
                c.top_k = gr.Slider(0, 100, value=0, step=1, label="Top-k (0 = off)")
                c.top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p (1 = off)")
            with gr.Row():
                c.seed = gr.Textbox("", label="Seed (empty = random)", max_lines=1)
                c.max_new_tokens = gr.Slider(1, MAX_NEW_TOKENS_LIMIT, value=64, step=1, label="Max new tokens",
                                             elem_id="max-new-tokens")
            c.chat = gr.Checkbox(value=True, label="Apply the chat template")
            with gr.Row():
                c.price_in = gr.Number(DEFAULT_USD_PER_M_INPUT, label="USD per 1M input tokens (for the estimate)")
                c.price_out = gr.Number(DEFAULT_USD_PER_M_OUTPUT, label="USD per 1M output tokens (for the estimate)")
    france.click(lambda: FRANCE, None, c.prompt, api_name=False, queue=False)
    summarize.click(lambda: SUMMARIZE + long_document(), None, c.prompt, api_name=False, queue=False)
    with gr.Row():
        c.chips = gr.HTML(chips_html([]), label="Output tokens", elem_id="chips")
        c.text = gr.Textbox(label="Answer (plain text)", lines=6, interactive=False)
    c.metrics = gr.HTML(metrics_html(None), elem_id="metrics")
    c.timeline = gr.Plot(label="Timeline")
    caption("One request over time: the orange prefill reads the whole prompt and yields the first token "
            "(TTFT); each blue bar is one decode step that yields one more token.")
    with gr.Row():
        with gr.Column():
            c.latency = gr.Plot(label="Latency per step")
            caption("Time each token took (log scale): the first includes prefill, the rest are decode steps.")
        with gr.Column():
            c.kv = gr.Plot(label="KV cache")
            caption("Bytes held in the KV cache after each step, measured from the real tensors; the dashed "
                    "line is the formula, an estimate.")
    with gr.Row():
        with gr.Column(scale=3):
            c.topk = gr.Plot(label="Top-k probabilities")
            caption("The most likely next tokens at the chosen step; the orange bar is the one picked.")
        with gr.Column(scale=1):
            c.step = gr.Slider(0, 1, value=0, step=1, label="Step to inspect")
            c.files = gr.File(label="Download the trace (JSON, CSV)", file_count="multiple", interactive=False)
    return c


def wire_generate(c: SimpleNamespace, registry, session) -> None:
    generate, stop, top_k, metrics = make_handlers(registry)
    inputs = [c.prompt, c.temperature, c.top_k, c.top_p, c.seed, c.max_new_tokens, c.chat, c.price_in,
              c.price_out, c.backend, session]
    outputs = [c.chips, c.text, c.status, c.metrics, c.timeline, c.latency, c.kv, c.topk, c.step, c.files]
    event = c.generate.click(generate, inputs, outputs, api_name="generate",
                             concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE)
    c.stop.click(stop, [c.price_in, c.price_out, session], outputs, api_name="stop",
                 cancels=[event], concurrency_limit=None)
    c.step.release(top_k, [c.step, session], c.topk, api_name="top_k", concurrency_limit=None)
    gr.on([c.price_in.change, c.price_out.change], metrics, [c.price_in, c.price_out, session], c.metrics,
          api_name="metrics", concurrency_limit=None)
