"""The Generate tab: type a prompt, pick a backend, watch tokens stream as chips while charts show the run.

While a run streams, the only output that changes is `stream`: the run's StepStream (step_stream.py), whose
updates Gradio sends as appends of the new steps (O(new steps) per update, at most one per 50 ms).
The browser draws chips, the answer, live metrics and the four charts from it (live/*.js with live/view.py, given to
Blocks(head=…), fed by a JavaScript-only .change): the server builds no HTML and no figure per token.
The other outputs hold constant values during the run (a skipped output costs Gradio more than a
repeated one) and get their final values at the end: status, answer text, metrics, exports; the end
line of the stream carries the four full figures of charts/run.py, which the page then shows.
Each browser session keeps its own `Session` (ui/session.py) in gr.State, so two tabs never mix runs;
Stop cancels the Gradio event and the run, keeping the partial trace. The first use of a backend loads
it in a worker thread while the status line says what it is doing. A local run takes one of the
machine's CPU slots (the app's MachineGate, saying so while it waits); a run on a remote server takes none.
With speculative decoding on (k, n-gram size), the run is SpeculativeEngine's on the same backend: the
same Steps, each saying whether its token was a draft accepted or replaced, so the page colours the chips
by it; at the end the metrics panel adds passes, acceptance and the speedup against a plain run of the
same prompt from the session's earlier runs (run_view.speculation_html), missing until there is one.
The accordion "why" draws the last run's Steps on the roofline (playground/roofline.py: the machine's
ceilings measured once, in a CPU slot, then FLOPs and bytes per Step) when asked.
API names: /generate and /stop (outputs named by OUTPUTS), /top_k, /metrics, /roofline.

Left out: authentication and per-user quotas; the queue's limits and the CPU gate are the only guards.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace

import gradio as gr

from ..charts.run import top_k_spec, whole_json
from ..config import MAX_NEW_TOKENS_LIMIT, coerce_settings
from ..source import SourceError
from ..run_view import metrics_html, speculation_html, status_line
from ..serve.engine_loop import page_client
from ..serve.room import Room
from ..source import Origin
from .common import (CPU_QUEUE, DEFAULT_USD_PER_M_INPUT, DEFAULT_USD_PER_M_OUTPUT, FRANCE, GENERATE_CONCURRENCY,
                     OPEN_QUESTION, SUMMARIZE, SourceUnavailable, backend_dropdown, caption, loading_line,
                     long_document, reread_text, source, warn)
from .forms import form_inputs, read_form
from .live.view import CHIPS_HTML, LIVE_METRICS_ID, RUNNING_STATUS, chart_html, prefill_status, step_picker_html
from .machine_gate import MachineGate
from .session import UPDATE_INTERVAL, WATCHED_INTERVAL, Session
from .zerogpu import cost_line, zero_gpu

OUTPUTS = ("stream", "status", "text", "metrics", "files")   # /generate and /stop return these, in this order
LIVE_METRICS = metrics_html(None, element_id=LIVE_METRICS_ID)   # live/metrics.js fills it while the run streams
# On Generate, a page whose metrics end below the window scrolls its status to the top: the status, chips and
# metrics then show together (a long prompt's box and the controls put them below the fold at 1400x1000)
INTO_VIEW = """() => { const status = document.querySelector('#status'), metrics = document.querySelector('#metrics');
  if (status && metrics && metrics.getBoundingClientRect().bottom > window.innerHeight)
    window.scrollBy({top: status.getBoundingClientRect().top - 48, behavior: 'instant'}); }"""
CONTROL_PX = 210   # a control's narrowest width: two a row in the side column at 1400 px, one at 1024 px


@dataclass
class GenerateForm:
    """The Generate tab's inputs: /generate's, in this order (the order the layout makes them)."""
    prompt: str
    temperature: float
    top_k: float
    top_p: float
    seed: str
    max_new_tokens: float
    chat: bool
    price_in: float
    price_out: float
    backend: str
    speculate: bool
    spec_k: float
    spec_ngram: float


def parse_seed(seed) -> int | None:
    """'' -> None (a random seed each run); '42' -> 42; anything else -> ValueError naming the field."""
    text = "" if seed is None else str(seed).strip()
    try:
        return int(text) if text else None
    except ValueError:
        raise ValueError(f"seed must be a whole number (or empty for random), got {text!r}") from None


class GenerateHandlers:
    """Generate's handlers: generate (a run, streamed), stop, top_k (the top-k chart at a step), metrics. `c` names
    the components: GenerateForm's fields and `session` (the keys of generate's dict input), and the outputs
    (OUTPUTS, the keys of every update). `room`: the app's Room (serve/room.py), whose engine loop batches the
    Generate runs of its backend with every other request (`loop_for(backend)`); a local run it does not batch
    takes a CPU slot of its machine gate. `remote`: the record of the runs on remote servers (serve.remote_record.RemoteRecord: the
    Serve tab's Watch view draws it); None: not recorded."""

    def __init__(self, registry, c, room: Room, remote=None):
        self.registry, self.c, self.gate, self.room, self.remote = registry, c, room.gate, room, remote

    def live(self, stream, batch) -> dict:   # constant but the stream (Gradio's diff sends only new lines) and the
        c = self.c                             # status, which says "reading the prompt" until the first token
        text = stream.add(batch)
        status = RUNNING_STATUS if stream.packed else prefill_status(stream.head["prompt_tokens"])
        return {c.stream: text, c.status: status, c.text: "", c.metrics: LIVE_METRICS, c.files: None}

    def refused(self, message: str) -> dict:
        """A click refused before its run started (an empty prompt, a source that failed to load): the warning, and
        the view emptied (an empty stream clears the page's chips and charts: live/stream.js), so that no earlier
        run's chips and figures stand under it as if they were this click's."""
        c = self.c
        return {c.stream: "", c.status: warn(message), c.text: "", c.metrics: metrics_html(None), c.files: None}

    def final(self, session: Session, prices, stream=None) -> dict:
        """The last update of a run (`stream`: a handler's own; default: the session's latest)."""
        c, stream = self.c, stream or session.stream
        trace = stream.trace
        update = {c.stream: session.finish_stream(stream), c.status: status_line(trace), c.text: trace.text,
                  c.metrics: metrics_html(trace, *prices) + speculation_html(trace, session.earlier)}
        if stream is session.stream:   # a run superseded by a later one of this session leaves the files to it
            update[c.files] = session.export()
        return update

    def generate(self, values: dict):
        c = self.c
        form, session, clicked = read_form(GenerateForm, c, values), values[c.session], time.perf_counter()
        for line in self.registry.loading(form.backend):
            yield {c.status: loading_line(line)}
        try:
            engine, settings = self._source(form)
        except (SourceUnavailable, ValueError, TypeError) as exc:
            yield self.refused(str(exc))
            return
        loop = None if form.speculate else self.room.loop_for(engine.info.name)
        alone = alone_reason(engine, self.room, form.speculate)
        if loop is not None:
            try:
                text, ids = engine.prompt_ids(form.prompt, settings)
            except (ValueError, TypeError) as exc:
                yield self.refused(str(exc))
                return
            if len(ids) + settings.max_new_tokens <= loop.capacity:
                def start():
                    return loop.run(ids, settings, prompt=form.prompt, text=text, backend=engine.info.name,
                                    client=page_client(f"{id(session):x}"))
                yield from self.stream(start, engine, form, session, loop=loop)
                return
            alone = (f"{len(ids):,} prompt tokens and {settings.max_new_tokens:,} new ones do not fit the engine "
                     f"loop's slots ({loop.capacity:,} positions each): this run takes a CPU slot alone")
        yield from self._alone(engine, settings, form, session, clicked=clicked, note=alone)

    def _source(self, form: GenerateForm):
        """(the source the form names, speculative when asked; its settings); SourceUnavailable, ValueError."""
        engine = source(self.registry, form.backend)
        if form.speculate:
            engine = speculative(engine, form.spec_k, form.spec_ngram)
        settings = coerce_settings(temperature=form.temperature, top_k=form.top_k, top_p=form.top_p,
                                   seed=parse_seed(form.seed), max_new_tokens=form.max_new_tokens,
                                   chat=bool(form.chat))
        return engine, settings

    def _alone(self, engine, settings, form: GenerateForm, session: Session, *, clicked: float, note: str):
        """A run outside the engine loop: a local one waits for a CPU slot of its own; a remote server's joins the
        record the Watch view draws when it is one of the servers given to the app."""
        local, gate, remote = engine.info.origin != Origin.REMOTE, self.gate, self.remote
        while local and not gate.enter_shared(timeout=1.0):
            yield {self.c.status: f"Waiting for a CPU slot: the machine's {gate.slots} are busy (or a Serve "
                                  "workload runs alone)…"}
        queued = time.perf_counter() - clicked

        def start():
            run = engine.run(form.prompt, settings)
            if remote is None or local or form.backend not in remote.servers:
                return run
            return remote.add(run, page_client(f"{id(session):x}"), clicked, server=form.backend)
        try:
            yield from self.stream(start, engine, form, session, note=note, queued=queued if local else None)
        finally:
            if local:
                gate.leave_shared()

    def stream(self, start, engine, form: GenerateForm, session: Session, *, loop=None, note: str = "",
               queued: float | None = None):
        """Start the run (`start()`) and stream it; `loop`: the engine loop it joined (the page then says while
        it waits for a KV slot how many are ahead); `queued`: seconds it waited for a CPU slot."""
        c = self.c
        try:
            run = start()
        except (ValueError, TypeError, SourceError) as exc:   # SourceError: a server refused or failed
            yield self.refused(str(exc))
            return
        if queued is not None:
            run.trace.queued = queued
        pace = UPDATE_INTERVAL if loop is None else room_interval(loop)
        own, batches = session.start(run, pace)   # this run's: another handler of the session may start one meanwhile
        try:
            yield from self._follow(run, own, batches, loop)
        finally:   # the handler was closed (event cancelled, tab gone): stop the run too
            if not run.trace.finished:
                run.cancel()   # this handler's own run (the session may have started another since)
        update = self.final(session, (form.price_in, form.price_out), own)
        if note:
            update[c.status] += f" · {note}"
        if zero_gpu() and loop is None:   # which backend ran it, and what the GPU call asked of the visitor's quota
            update[c.status] += " · " + cost_line(engine, own.trace.settings)
        yield update

    def _follow(self, run, own, batches, loop):
        """The run's live updates: its head, its wait for a turn in the engine loop, then its Steps in batches."""
        yield self.live(own, [])   # the head: the page clears the last run's view at once
        waited = False
        for line in waiting_lines(loop, run):
            yield {self.c.status: line}
            waited = True
        if waited:
            yield self.live(own, [])   # its turn came: the status says it reads the prompt
        for batch in batches:   # the Steps made since the last update (the run has its own thread)
            if run.trace.finished:
                break                 # the last steps go out with the final update, never after Stop's
            yield self.live(own, batch)

    def stop(self, price_in, price_out, session: Session):
        if session.run is None:
            return {self.c.status: warn("nothing is running")}
        session.stop()
        return self.final(session, (price_in, price_out))

    def top_k(self, step, session: Session):
        return whole_json(top_k_spec(session.trace, step))

    def metrics(self, price_in, price_out, session: Session):
        trace = session.trace
        if trace is None or not trace.finished:
            return metrics_html(trace, price_in, price_out, element_id=None if trace is None else LIVE_METRICS_ID)
        return metrics_html(trace, price_in, price_out) + speculation_html(trace, session.earlier)


def make_handlers(registry, c, room: Room, remote=None):
    """GenerateHandlers' generate, stop, top_k and metrics (the order wire_generate connects them in)."""
    h = GenerateHandlers(registry, c, room, remote)
    return h.generate, h.stop, h.top_k, h.metrics


WAIT_POLL_S = 0.25   # how often a run waiting in the engine loop's queue looks at how many are ahead
WAIT_REPEAT_POLLS = 8   # polls without a change after which the page is sent its waiting line again
# the longest a run in a busy engine loop goes between two updates of its page: as long as a page whose live channel
# reads the steps waits for one
ROOM_INTERVAL_MAX = WATCHED_INTERVAL


def room_interval(loop):
    """The least time between two updates of a run in the engine loop, as a function of the requests in the loop:
    50 ms alone (as a run on its own), n x 50 ms beside n - 1 others, at most ROOM_INTERVAL_MAX. A room's pages
    then get about 20 updates a second between them, however many they are, so Gradio's work per update does not
    take the cores the engine's passes need; the first Step of a run is never held back (BackgroundRun). A page in
    a browser reads each Step as it is made through its live channel (ui/live/channel.py) whatever this interval.

    >>> from types import SimpleNamespace as NS
    >>> [round(room_interval(NS(in_flight=lambda: n))(), 3) for n in (0, 1, 4, 24)]
    [0.05, 0.05, 0.2, 1.0]
    """
    return lambda: min(ROOM_INTERVAL_MAX, UPDATE_INTERVAL * max(1, loop.in_flight()))


def waiting_lines(loop, run, repeat: int = WAIT_REPEAT_POLLS):
    """The status lines of a run waiting for its turn in the engine loop (`loop` None: no wait): the line when it
    changes, and the same line again after `repeat` polls without a change (a yield is where Gradio finds a page
    gone), so a room of waiting pages costs Gradio an update per change, not one each WAIT_POLL_S.

    >>> from types import SimpleNamespace as NS
    >>> class Run:   # its turn after 20 polls; 3 ahead for the first 5, then none
    ...     polls = 0
    ...     started = property(lambda self: self.polls >= 20)
    ...     def ahead(self): return 3 if self.polls < 5 else 0
    ...     def wait_turn(self, timeout): self.polls += 1
    >>> lines = list(waiting_lines(NS(slots=8, paused=False, in_flight=lambda: 9), Run(), repeat=8))
    >>> [line.split(":")[1].split(" in ")[0] for line in lines]
    [' 3 requests ahead of you', ' 0 requests ahead of you', ' 0 requests ahead of you']
    """
    shown, polls = None, 0
    while loop is not None and not run.started:
        line = waiting_line(loop, run)
        if line != shown or polls >= repeat:
            yield line
            shown, polls = line, 0
        run.wait_turn(WAIT_POLL_S)
        polls += 1


def waiting_line(loop, run) -> str:
    """The status while a run waits in the engine loop's queue: how many are ahead, and what the loop holds.

    >>> from types import SimpleNamespace as NS
    >>> loop = NS(slots=8, paused=False, in_flight=lambda: 11)
    >>> waiting_line(loop, NS(ahead=lambda: 2))
    "Waiting for your turn: 2 requests ahead of you in the engine's queue; it runs 8 at once (11 in it now)…"
    >>> waiting_line(NS(slots=8, paused=True, in_flight=lambda: 1), NS(ahead=lambda: 0))[:61]
    'Waiting for your turn: a Serve workload has the machine alone'
    """
    if loop.paused:
        return ("Waiting for your turn: a Serve workload has the machine alone (its figures need it); the engine's "
                "queue goes on when it ends…")
    ahead = run.ahead()
    if ahead is None:
        return "Reading the prompt…"
    return (f"Waiting for your turn: {ahead} request{'s' * (ahead != 1)} ahead of you in the engine's queue; it "
            f"runs {loop.slots} at once ({loop.in_flight()} in it now)…")


def alone_reason(engine, room, speculate: bool) -> str:
    """Why a local Generate run does not join the engine loop ('' for a remote server, or without a loop)."""
    if room is None or room.backend is None or engine.info.origin == Origin.REMOTE:
        return ""
    if speculate:
        return "speculative decoding runs on its own (the engine loop decodes one token a pass)"
    return (f"{engine.info.name} runs on its own: the engine loop batches {room.backend}'s requests, the "
            "endpoint's and the page's")


def speculative(engine, k, ngram):
    """`engine`'s backend driven by SpeculativeEngine (k proposals, n-gram size); SourceUnavailable saying why not."""
    from ..speculative import Speculation, SpeculativeEngine
    backend = getattr(engine, "backend", None)
    if backend is None or not getattr(backend, "verifies", False):
        raise SourceUnavailable(f"speculative decoding needs a local backend with a verify pass (one forward pass "
                                f"over several tokens on the KV cache); {engine.info.name} has none: untick it or "
                                "pick a local backend")
    try:
        return SpeculativeEngine(backend, Speculation(k=int(k), ngram=int(ngram)))
    except (TypeError, ValueError) as exc:
        raise SourceUnavailable(str(exc)) from exc


def roofline_handler(registry, gate: MachineGate):
    """/roofline: (figure, text) of the session's last finished run on the roofline, or (None, why not). A local
    run's points are measured here; a server's run (of the bundled model) is estimated from the model's config and
    the client-side times, and labelled so."""
    from ..charts.roofline import plot_roofline
    from ..roofline import machine_ceilings, roofline_model, trace_points, why_text

    def roofline(backend, session: Session):
        trace = session.trace
        if trace is None or not trace.finished:
            return None, warn("generate first: the roofline is drawn from a finished run")
        try:
            engine = source(registry, backend)
        except SourceUnavailable:
            engine = None
        model = None if engine is None else roofline_model(engine)
        if model is None or engine.info.name != trace.backend:
            return None, warn(f"the roofline needs the run's source ({trace.backend}) selected above, running a "
                              "model whose shape is known here (a local backend, or a server of the bundled model)")
        if not gate.enter_shared(timeout=30.0):
            return None, warn("the machine's CPU slots are busy: try again in a moment")
        try:
            ceilings = machine_ceilings()   # measured once per process (a few seconds)
        finally:
            gate.leave_shared()
        points = trace_points(trace, model.shape, model.storage, ceilings)
        title = "This run on the roofline" + (" (estimated)" if model.estimated else "")
        fig = plot_roofline(points, ceilings, title, f"{trace.model} · {trace.backend} · {model.label}")
        return fig, why_text(points).replace("\n", "  \n") + (
            f"  \nPoints: {model.label}. Predicted: max(FLOPs / peak, bytes / bandwidth), from the model's shape and "
            "the ceilings measured here; the gap above 1x is what the roofline leaves out (launches, norms, attention, "
            "sampling" + (", and for a server the network and its machine, which may not be this one)." if
                          model.estimated else ")."))

    return roofline


# --- layout

def generate_tab(registry) -> SimpleNamespace:
    """Prompt, presets, backend, sampling controls, then the live outputs; returns the components by name."""
    c = SimpleNamespace()
    with gr.Row():
        with gr.Column(scale=3):
            c.prompt = gr.Textbox(label="Prompt", value=FRANCE, lines=4, max_lines=12, elem_id="prompt")
            with gr.Row():
                france = gr.Button(f"Preset: {FRANCE}", size="sm")
                summarize = gr.Button("Preset: summarize a long document", size="sm")
            with gr.Row():
                quote = gr.Button("Preset: the long document, then its start again (speculation can copy)",
                                  size="sm", elem_id="preset-quote")
                question = gr.Button("Preset: a short open question (nothing to copy)", size="sm",
                                     elem_id="preset-question")
            with gr.Row():
                c.generate = gr.Button("Generate", variant="primary", elem_id="generate")
                c.stop = gr.Button("Stop", variant="stop", elem_id="stop")
            c.status = gr.Markdown(elem_classes="status", elem_id="status")
            # the run's essentials under its status, beside the controls: on screen with them after Generate
            gr.HTML(CHIPS_HTML, label="Output tokens", elem_id="chips", padding=True)
            c.metrics = gr.HTML(metrics_html(None), elem_id="metrics", padding=True)
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
    """Wire the tab's events; returns the generate handler (it joins the engine loop of `room` or takes a CPU slot of
    its gate itself; a remote run is kept in `remote`'s record: see make_handlers)."""
    c.session = session
    generate, stop, top_k, metrics = make_handlers(registry, c, room, remote)
    gate = room.gate
    outputs = [getattr(c, name) for name in OUTPUTS]
    event = c.generate.click(generate, form_inputs(GenerateForm, c, states=[session]), outputs, api_name="generate",
                             concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE)
    c.stop.click(stop, [c.price_in, c.price_out, session], outputs, api_name="stop",
                 cancels=[event], concurrency_limit=None)
    c.stream.change(None, c.stream, None, js="(text) => { window.pgLive && window.pgLive.apply(text); }")
    c.generate.click(None, None, None, js=INTO_VIEW)
    c.roofline_button.click(roofline_handler(registry, gate), [c.backend, session], [c.roofline_plot, c.roofline_text],
                            api_name="roofline", concurrency_limit=1)
    c.topk_button.click(top_k, [c.topk_step, session], c.topk_figure, api_name="top_k", concurrency_limit=None)
    gr.on([c.price_in.change, c.price_out.change], metrics, [c.price_in, c.price_out, session], c.metrics,
          api_name="metrics", concurrency_limit=None)
    return generate
