"""The Gradio app: Generate, Tokens, Compare, Experiments, Lesson and Serve tabs over one source per name.

    demo = build_demo(Engine(create_backend("torch", "tiny")))   # one fixed engine (tests)
    demo = build_demo(SourceRegistry.for_model(None))            # every backend, each loaded on first use
    demo.launch(**launch_kwargs())     # the page's look (css, theme, head) + the live channel's route

This package and app.py are the only modules that import gradio. Nothing loads at build time: the
page is served at once, and the model info line says what is loading, what is ready, or which backend
failed and why (the dropdowns still list the others). Modules: common.py (shared pieces), machine_gate.py
(the app-wide CPU gate: local runs share the CPU slots, a Serve workload holds them alone), generate_layout.py
(+ generate_handlers.py: its handlers, module-level functions; session.py: a browser session's run; live/: the run
drawn in the browser, the live channel),
tokens_tab.py, compare_tab.py, experiments_tab.py, lesson_tab.py, serve_tab.py (+ serve_layout, serve_views,
serve_job), export_folder.py (a session's downloads), zerogpu.py (on ZeroGPU: the torch backend's runs as
spaces.GPU calls), forms.py (a tab's inputs as one dataclass, read from Gradio's dict inputs); the long runs
are playground/jobs.py's BackgroundJob;
sources live in playground/registry.py.
API names: /generate, /stop, /top_k, /metrics, /tokens, /model_info, /compare, /experiment,
/cancel_experiment, /lesson_next, /lesson_prev, /lesson_run, /lesson_stop, /serve, /serve_replay, /serve_stop, /serve_sweep.

Left out: authentication and per-user quotas; the queue's limits and the CPU gate are the only guards.
"""
from __future__ import annotations

import html

import gradio as gr

from ..compare import ANSWERS_CSS
from ..registry import SourceRegistry, as_registry
from ..serve.room import Room
from .session import Session
from ..source import Capabilities, Origin
from ..tokens import TOKEN_CSS
from .common import ASSETS, CPU_QUEUE, GENERATE_CONCURRENCY, SourceUnavailable, error_html, source
from .compare_tab import compare_tab
from .experiments_tab import experiments_tab
from .chat_layout import CHAT_CSS, wire_chat
from .generate_layout import generate_tab, wire_generate
from .lesson_tab import lesson_tab
from .live import LIVE_CSS, app_kwargs, live_head
from .presenter import PRESENT_CSS, presenter_head, presenter_switch
from .machine_gate import gate_cpu_events
from .serve_tab import serve_tab
from .tokens_tab import tokens_tab
from .zerogpu import WAITING, zero_gpu

__all__ = ["GENERATE_CONCURRENCY", "SourceRegistry", "app_kwargs", "build_demo", "launch_kwargs", "page_kwargs"]


def source_line(step_source) -> str:
    """One line of Markdown about a step source: model, where it runs, context, KV formula, what it lacks."""
    i = step_source.info
    context = "not given by the source" if i.context_window is None else f"{i.context_window:,} tokens"
    k = i.kv_shape
    kv = ("missing (the model's shape is unknown)" if k is None else
          f"2×{k.layers} layers×{k.kv_heads} kv heads×{k.head_dim} head dim×seq_len×{k.bytes_per_element} bytes")
    line = f"**Model** {i.model} · **backend** {i.describe()} · **context** {context} · **KV formula** {kv}"
    missing = step_source.capabilities.missing()
    if i.origin == Origin.REMOTE:
        line += " · times measured at this client as each streamed event arrives"
    note = getattr(step_source, "top_k_note", None)
    if note:
        missing = [f"top-k probabilities: {note}" if m == Capabilities.LABELS["top_k"] else m for m in missing]
    return line + (f" · **not given by this source**: {', '.join(missing)}" if missing else "")


def make_model_info(registry: SourceRegistry):
    def model_info(backend=None):
        for line in registry.loading(backend):
            yield f"Loading… {line}"
        try:
            yield html.escape(source_line(source(registry, backend)), quote=False)
        except SourceUnavailable as exc:
            yield error_html(str(exc))
    return model_info


def open_lesson_tab(request: gr.Request):
    """A deep link into the lesson (?lesson=N) opens its tab."""
    return gr.Tabs(selected="lesson") if request and request.query_params.get("lesson") else gr.skip()


# the machine's own fonts: Gradio's default fetches Google Fonts, which an offline room cannot reach (and the
# page's console then logs errors)
THEME = gr.themes.Default(text_size="lg", font=["ui-sans-serif", "system-ui", "sans-serif"],
                          font_mono=["ui-monospace", "Consolas", "monospace"])


def page_kwargs() -> dict:
    """The page's look, which Gradio 6 takes at launch (`demo.launch(**page_kwargs())`, or mount_gradio_app's same
    keywords), not from gr.Blocks: the css, the theme, and the head (Plotly.js, live/*.js: Generate draws in the
    browser; presenter.js: presenter mode's chart fonts)."""
    css = TOKEN_CSS + ANSWERS_CSS + LIVE_CSS + PRESENT_CSS + CHAT_CSS + ((ASSETS / "style.css").read_text() if (ASSETS / "style.css").exists() else "")
    return {"css": css, "theme": THEME, "head": live_head() + presenter_head()}


def launch_kwargs(routes=()) -> dict:
    """Everything `demo.launch` takes besides host and port: the page's look (page_kwargs) and the app's
    (app_kwargs: the live channel's route, and `routes`, e.g. the OpenAI-compatible endpoint's, ahead of it)."""
    kwargs = app_kwargs()
    kwargs["routes"] = [*routes, *kwargs["routes"]]
    return {**page_kwargs(), "app_kwargs": kwargs}


def build_demo(engine, room: Room | None = None, remote=None) -> gr.Blocks:
    """`engine`: an Engine (the backend dropdowns then offer only its backend), an SourceRegistry, or a
    callable `get_engine(backend_name) -> Engine` (wrapped in a registry over available_backends()).
    `room` (serve.room.Room, one per app): the machine gate (the CPU slots, a workload's turn alone), the engine
    loop that batches Generate's runs on its backend with the endpoint's requests, and the record of its client
    traffic that the Serve tab's Watch view and the Lesson's "You are the workload" draw (None: the app serves no
    endpoint); a room of its own when not given: a gate, no loop (each local Generate run takes a CPU slot of its
    own), no traffic. `remote`: the record of Generate's runs on remote servers (serve.remote_record.RemoteRecord:
    --endpoint), which the Serve tab's Watch view draws; None: not recorded."""
    registry = as_registry(engine)
    room = room or Room()
    with gr.Blocks(title="LLM Serving Playground",   # its css, theme and head come at launch: page_kwargs
                   delete_cache=(1800, 3600)) as demo:   # Gradio's copies of exports: gone after an hour
        session = gr.State(Session(), delete_callback=Session.close)
        presenter_switch()   # in the top-right corner, on every tab; presenter.js reads it and ?present=1
        gr.Markdown("# LLM Serving Playground\nA real model answers token by token; the charts show what "
                    "the server did for each token: one prefill over the prompt, then one decode step per token.",
                    elem_id="page-header")
        if zero_gpu():
            gr.Markdown(WAITING, elem_id="zero-gpu-note")
        info = gr.Markdown("Loading the model…", elem_classes="model-info", elem_id="model-info")
        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Generate", id="generate"):
                c = generate_tab(registry)
            tokens_tab(registry, c.prompt, c.chat, c.backend)
            compare_tab(registry, c.prompt)
            experiments_tab(registry)
            lesson = lesson_tab(registry, room)
            serving = serve_tab(registry, room, session, remote)
        generate = wire_generate(c, registry, session, room, remote)
        chatting = wire_chat(c, c.conversation, registry, session, room, remote)
        model_info = make_model_info(registry)
        demo.load(model_info, c.backend, info, api_name="model_info", concurrency_limit=None)
        demo.load(open_lesson_tab, None, tabs, api_visibility="private", queue=False)
        demo.load(lesson.opened, lesson.inputs, lesson.outputs, api_visibility="private", js=lesson.keys_js,
                  concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE)
        c.backend.change(model_info, c.backend, info, api_visibility="private", concurrency_limit=None)
        gate_cpu_events(demo, CPU_QUEUE, room.gate, skip=[*serving, generate, *chatting])   # CPU slots; a Serve workload alone
    return demo
