"""The Generate tab's layout and wiring: type a prompt, pick a backend, watch tokens stream as chips while charts
show the run.

    c = generate_tab(registry)                      # the components by name (inside a gr.Tab)
    generate = wire_generate(c, registry, session, room, remote)   # its events, to generate_handlers.py's functions

The handlers are module-level functions of generate_handlers.py, given the tab (`GenerateTab`: the components, the
registry, the app's Room, the remote record). While a run streams, the only output that changes is `stream`: the
run's StepStream (step_stream.py), whose updates Gradio sends as appends of the new steps. The browser draws chips,
the answer, live metrics and the four charts from it (live/*.js with live/view.py, given to Blocks(head=…), fed
by a JavaScript-only .change): the server builds no HTML and no figure per token. Each browser session keeps its
own `Session` (ui/session.py) in gr.State, so two tabs never mix runs; Stop cancels the Gradio event and the run,
keeping the partial trace. The first use of a backend loads it in a worker thread while the status line says what
it is doing. A local run joins the room's engine loop, or takes one of the machine's CPU slots (the room's
MachineGate, saying so while it waits); a run on a remote server takes none. With speculative decoding on (k,
n-gram size), the run is SpeculativeEngine's on the same backend: the same Steps, each saying whether its token
was a draft accepted or replaced, so the page colours the chips by it; at the end the metrics panel adds passes,
acceptance and the speedup against a plain run of the same prompt from the session's earlier runs
(run_view.speculation_html), missing until there is one. The accordion "why" draws the last run's Steps on the
roofline (playground/roofline.py: the machine's ceilings measured once, in a CPU slot, then FLOPs and bytes per
Step) when asked. "Send as a chat turn" sends the prompt as the next turn of a conversation, whose controls and view
are an accordion under the metrics (chat_layout.py).
API names: /generate and /stop (outputs named by OUTPUTS), /top_k, /metrics, /roofline.

Left out: the handlers (generate_handlers.py); authentication and per-user quotas (the queue's limits and the
CPU gate are the only guards).
"""
from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import gradio as gr

from ..config import MAX_NEW_TOKENS_LIMIT
from ..run_view import metrics_html
from ..serve.room import Room
from .chat_layout import chat_section, send_button
from .common import (CPU_QUEUE, DEFAULT_USD_PER_M_INPUT, DEFAULT_USD_PER_M_OUTPUT, FRANCE, GENERATE_CONCURRENCY,
                     OPEN_QUESTION, SUMMARIZE, backend_dropdown, caption, long_document, reread_text)
from .forms import form_inputs
from .generate_handlers import OUTPUTS, GenerateForm, GenerateTab, generate, metrics, roofline, stop, top_k
from .live.view import CHIPS_HTML, chart_html, step_picker_html

# On Generate, a page whose metrics end below the window scrolls its status to the top: the status, chips and
# metrics then show together (a long prompt's box and the controls put them below the fold at 1400x1000)
INTO_VIEW = """() => { const status = document.querySelector('#status'), metrics = document.querySelector('#metrics');
  if (status && metrics && metrics.getBoundingClientRect().bottom > window.innerHeight)
    window.scrollBy({top: status.getBoundingClientRect().top - 48, behavior: 'instant'}); }"""
CONTROL_PX = 210   # a control's narrowest width: two a row in the side column at 1400 px, one at 1024 px
SPECULATES = " · speculative, runs alone"   # a preset that ticks speculative decoding says so on its button
SPECULATION_PATH = ("The two presets marked “speculative” tick Speculative decoding: such a run takes a CPU slot of "
                    "its own and never joins the engine loop that batches the room's requests, where the app runs "
                    "one; the Watch view and the Lesson count it as alone. Untick it after the preset to run plain.")



def generate_tab(registry) -> SimpleNamespace:
    """Prompt, presets, backend, sampling controls, then the live outputs; returns the components by name."""
    c = SimpleNamespace()
    with gr.Row():
        with gr.Column(scale=3):
            c.prompt = gr.Textbox(label="Prompt", value=FRANCE, lines=4, max_lines=12, elem_id="prompt")
            with gr.Row():
                france = gr.Button(f"Preset: {FRANCE}", size="sm")
                summarize = gr.Button("Preset: summarize a long document", size="sm")
            with gr.Row():   # each says, before the click, that it ticks speculative decoding (a run apart)
                quote = gr.Button(f"Preset: the long document, then its start again (speculation can copy){SPECULATES}",
                                  size="sm", elem_id="preset-quote")
                question = gr.Button(f"Preset: a short open question (nothing to copy){SPECULATES}", size="sm",
                                     elem_id="preset-question")
            caption(SPECULATION_PATH)
            with gr.Row():
                c.generate = gr.Button("Generate", variant="primary", elem_id="generate")
                c.stop = gr.Button("Stop", variant="stop", elem_id="stop")
                c.chat_send = send_button()   # the prompt as a turn of the conversation below (chat_layout.py)
            c.status = gr.Markdown(elem_classes="status", elem_id="status")
            # the run's essentials under its status, beside the controls: on screen with them after Generate
            gr.HTML(CHIPS_HTML, label="Output tokens", elem_id="chips", padding=True)
            c.metrics = gr.HTML(metrics_html(None), elem_id="metrics", padding=True)
            c.conversation = chat_section()
        with gr.Column(scale=2):
            # made in GenerateForm's order (/generate's), placed below in the column's order
            c.temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)", render=False)
            c.top_k = gr.Slider(0, 100, value=0, step=1, label="Top-k (0 = off)", min_width=CONTROL_PX, render=False)
            c.top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p (1 = off)", min_width=CONTROL_PX,
                                render=False)
            c.seed = gr.Textbox("", label="Seed (empty = random)", max_lines=1, min_width=CONTROL_PX, render=False)
            c.max_new_tokens = gr.Slider(1, MAX_NEW_TOKENS_LIMIT, value=64, step=1, label="Max new tokens",
                                         elem_id="max-new-tokens", min_width=CONTROL_PX, render=False)
            c.chat = gr.Checkbox(value=True, label="Apply the chat template", render=False)
            c.price_in = gr.Number(DEFAULT_USD_PER_M_INPUT, label="USD per 1M input tokens (for the estimate)",
                                   elem_id="price-in", min_width=CONTROL_PX, render=False)
            c.price_out = gr.Number(DEFAULT_USD_PER_M_OUTPUT, label="USD per 1M output tokens (for the estimate)",
                                    elem_id="price-out", min_width=CONTROL_PX, render=False)
            c.backend = backend_dropdown(registry, elem_id="backend",
                                         info="the first use of a backend loads it (ONNX: export once, ~1 min)")
            c.temperature.render()
            # two controls a row where they fit side by side (at 1400 px), one a row below that (1024 px):
            # side by side in a narrow column, "Top-p (1 = off)" took four lines and "2048" left its box
            with gr.Row():
                c.top_k.render()
                c.top_p.render()
            with gr.Row():
                c.seed.render()
                c.max_new_tokens.render()
            c.chat.render()
            c.speculate = gr.Checkbox(value=False, label="Speculative decoding", elem_id="speculate",
                                      info="draft from the text so far, verify in one pass")
            with gr.Accordion("Speculative decoding's settings", open=False, elem_id="speculation-settings"):
                with gr.Row():
                    c.spec_k = gr.Slider(1, 8, value=4, step=1, label="k: proposals per pass at most")
                    c.spec_ngram = gr.Slider(1, 8, value=3, step=1, label="n-gram size matched")
                caption("Drafts come from the text so far (prompt lookup); one forward pass verifies them. "
                        "Local backends only. Greedy and seeded sampling give the tokens plain decoding gives; "
                        "run the same prompt with it off to measure the speedup.")
            with gr.Row():
                c.price_in.render()
                c.price_out.render()
    france.click(lambda: FRANCE, None, c.prompt, api_visibility="private", queue=False)
    summarize.click(lambda: SUMMARIZE + long_document(), None, c.prompt, api_visibility="private", queue=False)
    # raw text (no chat template): the model goes on with the document's start, copying what it read
    quote.click(lambda: (reread_text(long_document()), False, True), None, [c.prompt, c.chat, c.speculate],
                api_visibility="private", queue=False)
    question.click(lambda: (OPEN_QUESTION, True, True), None, [c.prompt, c.chat, c.speculate], api_visibility="private",
                   queue=False)
    c.stream = gr.Textbox(label="Step stream", elem_id="stream", elem_classes="pg-hidden", lines=2, max_lines=2,
                          interactive=False, container=False)   # read by live/stream.js, never shown
    c.text = gr.Textbox(label="Answer (plain text)", lines=3, max_lines=8, interactive=False, elem_id="answer")
    gr.HTML(chart_html("timeline"), elem_id="timeline", padding=True)
    caption("One request over time: the grey bar is its wait for a turn in the engine's queue (runs the engine "
            "loop batches); the orange prefill reads the whole prompt and yields the first token; each blue bar is "
            "one decode step that yields one more token, teal where other requests shared its forward pass.")
    with gr.Row():
        with gr.Column():
            gr.HTML(chart_html("latency"), elem_id="latency", padding=True)
            caption("Time each token took (log scale): the first includes prefill, the rest are decode steps.")
        with gr.Column():
            gr.HTML(chart_html("kv"), elem_id="kv", padding=True)
            caption("Bytes held in the KV cache after each step, measured from the real tensors; the dashed "
                    "line is the formula, an estimate.")
    with gr.Row():
        with gr.Column(scale=3):
            gr.HTML(chart_html("topk"), elem_id="topk", padding=True)
            caption("The most likely next tokens at the chosen step; the orange bar is the one picked.")
        with gr.Column(scale=1):
            gr.HTML(step_picker_html(), elem_id="step-picker", padding=True)
            c.files = gr.File(label="Download the trace (JSON, CSV)", file_count="multiple", interactive=False)
    with gr.Accordion("Why is decode slow? This run on the roofline", open=False):
        c.roofline_button = gr.Button("Draw the last run's roofline", size="sm")
        c.roofline_text = gr.Markdown()
        c.roofline_plot = gr.Plot(show_label=False)
    c.topk_step = gr.Number(0, visible=False)      # /top_k's input and output (API only: the page draws top-k)
    c.topk_figure = gr.JSON(visible=False)
    c.topk_button = gr.Button(visible=False)
    return c


def wire_generate(c: SimpleNamespace, registry, session, room: Room, remote=None):
    """Wire the tab's events to generate_handlers.py's functions, given the tab (GenerateTab); returns the generate
    handler (it joins the engine loop of `room` or takes a CPU slot of its gate itself; a remote run is kept in
    `remote`'s record)."""
    c.session = session
    tab = GenerateTab(c, registry, room, remote)
    on_generate = partial(generate, tab)
    outputs = [getattr(c, name) for name in OUTPUTS]
    event = c.generate.click(on_generate, form_inputs(GenerateForm, c, states=[session]), outputs,
                             api_name="generate", concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE)
    c.stop.click(partial(stop, tab), [c.price_in, c.price_out, session], outputs, api_name="stop",
                 cancels=[event], concurrency_limit=None)
    c.stream.change(None, c.stream, None, js="(text) => { window.pgLive && window.pgLive.apply(text); }")
    c.generate.click(None, None, None, js=INTO_VIEW)
    c.roofline_button.click(partial(roofline, tab), [c.backend, session], [c.roofline_plot, c.roofline_text],
                            api_name="roofline", concurrency_limit=1)
    c.topk_button.click(top_k, [c.topk_step, session], c.topk_figure, api_name="top_k", concurrency_limit=None)
    gr.on([c.price_in.change, c.price_out.change], metrics, [c.price_in, c.price_out, session], c.metrics,
          api_name="metrics", concurrency_limit=None)
    return on_generate
