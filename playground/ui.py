"""The Gradio app: type a prompt, watch tokens stream as chips while charts show what the server did.

    demo = build_demo(Engine(create_backend("torch", "tiny")))   # or a zero-argument engine factory
    demo.launch()

Handlers are a few lines that loop over the engine and hand its Trace to pure functions (run_view.py
for HTML, charts/run.py for figures). Each browser session keeps its own `Session` (session.py) in
gr.State, so two tabs never mix runs; Stop cancels the Gradio event and the run, keeping the partial
trace. Generate runs at most GENERATE_CONCURRENCY at once (others wait in the queue); the light
handlers (stop, top_k, metrics, tokens) have no limit, so Stop is never stuck behind a queue.
API names: /generate, /stop, /top_k, /metrics, /tokens, /model_info.

Left out: authentication and per-user quotas; the queue's concurrency limit is the only guard.
"""
from __future__ import annotations

import html
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from .charts.run import plot_kv_cache, plot_step_latency, plot_timeline, plot_top_k
from .config import MAX_NEW_TOKENS_LIMIT, coerce_settings
from .prompt_tokens import prompt_tokens
from .run_view import chip_html, chips_html, metrics_html, status_line
from .session import Session, export_files
from .tokens import TOKEN_CSS

ASSETS = Path(__file__).resolve().parent.parent / "assets"
GENERATE_CONCURRENCY = 2   # runs at once: 2 CPU cores; more only slows every run (one more queues)
CHART_INTERVAL = 0.35      # seconds between chart updates while streaming (chips update every step)
FRANCE = "What is the capital of France?"
SUMMARIZE = "Summarize the following document in three sentences.\n\n"


def long_document() -> str:
    path = ASSETS / "long_document.txt"
    return path.read_text(encoding="utf-8") if path.exists() else "(assets/long_document.txt is missing)"


# --- views of a trace (the outputs of generate and stop, in order)

def view(session: Session, prices, charts: bool = True, final: bool = False) -> tuple:
    trace = session.trace
    last = max(len(trace.steps) - 1, 0)
    figures = ((plot_timeline(trace), plot_step_latency(trace), plot_kv_cache(trace), plot_top_k(trace),
                gr.update(maximum=max(last, 1), value=last)) if charts else (gr.skip(),) * 5)
    return (chips_html(session.chips, running=not final), trace.text, status_line(trace),
            metrics_html(trace, *prices), *figures, export_files(trace) if final else gr.skip())


def error_html(message: str) -> str:
    return f'<span class="error">⚠️ {html.escape(message, quote=True)}</span>'


def error_view(message: str) -> tuple:
    gr.Warning(message)
    return (gr.skip(), gr.skip(), error_html(message), *(gr.skip(),) * 7)


# --- handlers

def parse_seed(seed) -> int | None:
    """'' -> None (a random seed each run); '42' -> 42; anything else -> ValueError naming the field."""
    text = "" if seed is None else str(seed).strip()
    try:
        return int(text) if text else None
    except ValueError:
        raise ValueError(f"seed must be a whole number (or empty for random), got {text!r}") from None


def make_handlers(get_engine):
    def generate(prompt, temperature, top_k, top_p, seed, max_new_tokens, chat, price_in, price_out,
                 session: Session):
        try:
            settings = coerce_settings(temperature=temperature, top_k=top_k, top_p=top_p,
                                       seed=parse_seed(seed),
                                       max_new_tokens=max_new_tokens, chat=bool(chat))
            run = get_engine().run(prompt, settings)
        except (ValueError, TypeError) as exc:
            yield error_view(str(exc))
            return
        session.start(run)
        shown = 0.0
        try:
            for step in session.steps:
                session.chips.append(chip_html(step))
                charts = time.monotonic() - shown >= CHART_INTERVAL
                shown = time.monotonic() if charts else shown
                yield view(session, (price_in, price_out), charts)
        except Exception:   # noqa: BLE001 - the trace records the error; the status line shows it
            pass
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

    def model_info():
        b = get_engine().backend
        return (f"**Model** {b.model_name} · **backend** {b.describe()} · **context** {b.context_window:,} tokens"
                f" · **KV formula** 2×{b.kv_shape.layers} layers×{b.kv_shape.kv_heads} kv heads×"
                f"{b.kv_shape.head_dim} head dim×seq_len×{b.kv_shape.bytes_per_element} bytes")

    return generate, stop, top_k, metrics, model_info


# --- layout

def caption(text: str) -> None:
    gr.Markdown(text, elem_classes="caption")


def generate_tab() -> SimpleNamespace:
    """Prompt, presets, sampling controls, then the live outputs; returns the components by name."""
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
                c.price_in = gr.Number(0.15, label="USD per 1M input tokens (for the estimate)")
                c.price_out = gr.Number(0.60, label="USD per 1M output tokens (for the estimate)")
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


def tokens_tab(get_engine, prompt, chat):
    """The Tokens tab: the prompt as typed and as the model reads it, model tokenizer vs cl100k_base."""
    def show(text, chat_on):
        try:
            v = prompt_tokens(get_engine(), text, coerce_settings(chat=bool(chat_on)))
        except ValueError as exc:
            return error_html(str(exc)), "", gr.skip()
        return v.summary, v.html, v.figure

    with gr.Tab("Tokens") as tab:
        gr.Markdown("The model never sees words: it reads token ids. Each chip is one token "
                    "(hover for id and bytes; · is a space, ↵ a newline).")
        button = gr.Button("Show the prompt's tokens", variant="secondary")
        summary = gr.Markdown()
        figure = gr.Plot(label="Tokenizers compared")
        chips = gr.HTML()
    gr.on([button.click, tab.select], show, [prompt, chat], [summary, chips, figure], api_name="tokens",
          concurrency_limit=None)


def build_demo(engine) -> gr.Blocks:
    """`engine`: an Engine, or a zero-argument callable returning one (called on first use)."""
    get_engine = engine if callable(engine) else (lambda: engine)
    generate, stop, top_k, metrics, model_info = make_handlers(get_engine)
    css = TOKEN_CSS + ((ASSETS / "style.css").read_text() if (ASSETS / "style.css").exists() else "")
    with gr.Blocks(title="LLM Serving Playground", css=css, theme=gr.themes.Default(text_size="lg")) as demo:
        session = gr.State(Session())
        gr.Markdown("# LLM Serving Playground\nA real model answers token by token; the charts show what "
                    "the server did for each token: one prefill over the prompt, then one decode step per token.")
        info = gr.Markdown("Loading the model…", elem_classes="model-info", elem_id="model-info")
        with gr.Tab("Generate"):
            c = generate_tab()
        tokens_tab(get_engine, c.prompt, c.chat)

        inputs = [c.prompt, c.temperature, c.top_k, c.top_p, c.seed, c.max_new_tokens, c.chat, c.price_in,
                  c.price_out, session]
        outputs = [c.chips, c.text, c.status, c.metrics, c.timeline, c.latency, c.kv, c.topk, c.step, c.files]
        event = c.generate.click(generate, inputs, outputs, api_name="generate",
                                 concurrency_limit=GENERATE_CONCURRENCY, concurrency_id="generate")
        c.stop.click(stop, [c.price_in, c.price_out, session], outputs, api_name="stop",
                     cancels=[event], concurrency_limit=None)
        c.step.release(top_k, [c.step, session], c.topk, api_name="top_k", concurrency_limit=None)
        gr.on([c.price_in.change, c.price_out.change], metrics, [c.price_in, c.price_out, session], c.metrics,
              api_name="metrics", concurrency_limit=None)
        demo.load(model_info, None, info, api_name="model_info", concurrency_limit=None)
    return demo
