"""The Serve tab's components: workload editor, two scheduler pickers, the batching pool, outputs, sweeps.

    out, form, sweep_form, buttons = layout(registry)   # inside a gr.Blocks

`form` names ServeForm's components by field, `sweep_form` SweepForm's (forms.py: the handlers read one dict);
`out` names every output (serve_views.OUTPUTS). Left out: handlers (serve_tab.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from urllib.parse import urlsplit

import gradio as gr

from ..charts.serve import watch_placeholder
from ..serve.traffic import endpoint_text
from ..ports import only_this_machine
from ..prompts import LONG_ANSWER_QUESTION, SUMMARIZE_INSTRUCTION
from ..serve.cost import DEFAULT_USD_PER_HOUR
from ..serve.presets import PRESETS
from ..serve.room import CLIENT_SHARE
from ..serve import MAX_REQUESTS, SCHEDULERS
from ..serve.batching import BatchConfig
from ..serve.setup import WorkloadForm
from ..serve.sweeps import CHUNK_SIZES
from ..serve.workload import ARRIVALS
from .serve_job import DEFAULT_SLO
from .common import backend_dropdown, caption, described_dropdown, long_document
from .remote_watch import servers_text
from .serve_views import CLASS_HEADERS, REQUEST_HEADERS

# each column of a per-class table as wide as its header in presenter mode's 20 px text (px; Gradio takes no
# em): sized to the data, "class" read "cla…" at 1400 px; the table scrolls sideways in a half-width column
CLASS_WIDTHS = [90, 120] + [200] * 7
NONE = "(none)"
# The default workload: questions whose answers run to the budget (LONG_ANSWER_QUESTION) and documents to summarize,
# arriving at about 3x one at a time's capacity on the default backend (a 2-core CPU), so one at a time falls
# behind while batching keeps up.
NEW_TOKENS, DEFAULT_RATE = 64, 2.0
ALONE = ("⚠️ A workload has the machine to itself: other CPU work (Generate, Compare, Experiments, the engine loop "
         "that serves the endpoint's clients) waits until it ends, since on 2 shared cores any other run would change "
         "every figure. One workload at a time; "
         f"at most {MAX_REQUESTS} requests and 60,000 tokens (prompts + new tokens) per workload.")
PRESENTER_ONLY = ("This room is served ({served}): a run here would stall everyone's requests, so only the presenter "
                  "may start one, with the presenter key (the app's PLAYGROUND_PRESENTER_KEY) typed below. An attendee "
                  "runs a workload of their own on the source “this app's endpoint” instead: it takes nothing alone "
                  "and joins the engine loop as one more client, taking turns with everyone else{share} (its figures "
                  "are shared ones).")
SHARED_DRAW_EVERY = 5   # a run sharing the room's loop redraws its Gantt, tables and charts every fifth second
SHARE = (", with a client's share of the room: at most {share} of its requests in flight at once, the rest waiting "
         "their turn on this page, and each yielding to the room's people (priority 1: the engine admits and reads "
         "their prompts first; its timeline and charts redraw every {every} s, on the room's cores)")
SLOTS = ("On ONNX Runtime each admitted request holds one KV slot: a run of positions in one buffer per layer, as "
         "long as the longest request needs. vLLM pages the cache in blocks through a block table; the CPU attention "
         "kernel here (GroupQueryAttention) has none, so a slot is the unit. A request that finds every slot held "
         "waits; the memory map below each Gantt shows who holds which slot, growing with each token.")
KV_MEMORY = ("Prefix caching keeps KV in blocks of 16 positions named by a hash chain of their tokens: a request "
             "whose beginning was computed before copies those blocks into its slot and prefills only the rest. A KV "
             "budget stands for a smaller memory, as on a full GPU: requests take blocks as they grow, and when none "
             "is left the most recently admitted one is preempted (its KV dropped) and recomputed later. A preset "
             "builds its own workload (your request count, rate and seed) and sets A's and B's settings itself.")
def clients_text(reach: list[str]) -> str:
    """How to send your own request, at the address the page really answers on (`reach`: ports.room_urls; []
    where unknown); a page on loopback alone says that the room cannot reach it, and how to change that.

    >>> text = clients_text(["http://192.168.1.20:7860", "http://10.0.0.5:7860"])
    >>> 'base_url="http://192.168.1.20:7860/v1"' in text, "`http://10.0.0.5:7860`" in text
    (True, True)
    >>> "only this machine" in clients_text(["http://127.0.0.1:7860"])
    True
    """
    base = f"{reach[0]}/v1" if reach else "http://HOST:PORT/v1"
    where = ""
    if reach and all(only_this_machine(urlsplit(u).hostname or "") for u in reach):
        where = (f"It listens on `{reach[0]}`: only this machine can reach it; start it with `--host 0.0.0.0` to "
                 "serve a room on its network. ")
    elif reach:
        where = "Attendees open " + " or ".join(f"`{u}`" for u in reach) + " (the same network). "
    return (f"This app also answers OpenAI-compatible requests (`--openai-api`). {where}Send your own from a "
            f"terminal, e.g. `curl {base}/chat/completions -H 'Content-Type: application/json' -d "
            "'{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"stream\": true}'`, or the "
            f"OpenAI SDK with `base_url=\"{base}\"`. Every client's request joins one continuous batch; each "
            "appears here as it arrives (short or long by its prompt: up to 256 tokens is short).")


INTRO = ("## Many different requests, one engine\nA workload of short questions and long documents arrives at one "
         "engine. Each row of the chart is one request: **waiting** (arrived, not yet admitted), **prefill** "
         "(reading its prompt, in passes where the scheduler chunks it), **decode** (one token per step), and how it "
         "ended. Run the same workload on a second scheduler to see what batching changes. TTFT: time to first token; "
         "TPOT: time per output token after the first; E2E: arrival to last token.")


@dataclass
class ServeForm(WorkloadForm):
    """The Serve tab's inputs: /serve's, in this order (the workload, the two schedulers and their sources, the
    batching pool's settings)."""
    scheduler_a: str
    source_a: str
    scheduler_b: str
    source_b: str
    slots: float
    chunk: float
    max_batch_tokens: float
    blocks: float
    manager: str
    preset: str = NONE             # KV memory (our batching): a preset workload, A's and B's prefix caching and budget
    prefix_cache_a: bool = False
    prefix_cache_b: bool = False
    kv_budget_a: float = 0
    kv_budget_b: float = 0
    presenter_key: str = ""        # while the room is served, only the presenter's key starts a run (Room.alone_refused)


@dataclass
class ReplayForm(ServeForm):
    """/serve_replay's inputs: the Serve form's, then the file replayed instead of its drawn workload."""
    trace_file: str | None = None  # a workload.json or a trace (serve/run.py's replay_file); None: none chosen


@dataclass
class SweepForm:
    """The sweeps' inputs: /serve_sweep's, in this order."""
    kind: str
    scheduler: str
    source: str
    sizes: str
    new_tokens: float
    rates: str
    requests: float
    ttft: float
    tpot: float
    chunks: str = ",".join(map(str, CHUNK_SIZES))   # the prefill-chunk sweep's sizes (our batching)
    presenter_key: str = ""   # as ServeForm's


def scheduler_dropdown(label: str, value: str, none: bool = False, **kw) -> gr.Dropdown:
    """The schedulers by short name, the picked one's description as info. `none`: "(none)" (no second run)."""
    names = ([NONE] if none else []) + list(SCHEDULERS)
    return described_dropdown(names, value, label,
                              lambda name: SCHEDULERS[name].label if name in SCHEDULERS else "no second run", **kw)


def default_batching(registry) -> str:
    """Scheduler B's default: the batching scheduler of the default source (transformers' manager on torch)."""
    return "batching-torch" if registry.default == "torch" else "batching"


def _columns(out):
    with gr.Row():
        for side, name in (("a", "A"), ("b", "B")):
            with gr.Column():
                setattr(out, f"gantt_{side}", gr.Plot(label=f"{name}: every request", elem_id=f"serve-gantt-{side}"))
                setattr(out, f"classes_{side}", gr.Dataframe(headers=CLASS_HEADERS, interactive=False,
                                                             label=f"{name}: p50/p95 per class", wrap=True,
                                                             elem_classes="pg-scroll-table",
                                                             column_widths=CLASS_WIDTHS))
                setattr(out, f"throughput_{side}", gr.Plot(label=f"{name}: throughput over time"))
                setattr(out, f"kv_{side}", gr.Plot(label=f"{name}: KV cache in use"))
                setattr(out, f"kv_map_{side}", gr.Plot(label=f"{name}: KV memory map", elem_id=f"serve-kv-map-{side}"))
                setattr(out, f"itl_{side}", gr.Plot(label=f"{name}: inter-token latency, prefill chunks marked",
                                                    elem_id=f"serve-itl-{side}"))
    with gr.Accordion("Every request: waiting, TTFT, TPOT, E2E", open=False):
        with gr.Row():
            out.requests_a = gr.Dataframe(headers=REQUEST_HEADERS, interactive=False, label="A", wrap=True,
                                          elem_classes="pg-scroll-table")
            out.requests_b = gr.Dataframe(headers=REQUEST_HEADERS, interactive=False, label="B", wrap=True,
                                          elem_classes="pg-scroll-table")


def _sweeps(registry, out, form, served: str = ""):
    with gr.Accordion("Sweeps: batch size (concurrent decodes), arrival rate (latency vs throughput), prefill chunk "
                      "(TTFT vs ITL)", open=False, elem_id="serve-sweeps"):
        caption("Batch size: 1, 2, 4, 8, 16 requests decoding at once (EOS ignored); expected: each request slows, "
                "the total rises. Rate: the lesson's mix at each rate (Poisson), with goodput under your SLO. Prefill "
                "chunk: the preset \"a long document among chatters\" on our batching at each chunk size. Expected: a larger "
                "chunk reads the document in fewer iterations (its TTFT falls) but holds each iteration that carries "
                "one for longer (the dotted line, the ITL p95 of tokens that waited for a chunk, rises); the ITL p95 "
                "over every token rises only while enough tokens wait for a chunk to reach its top 5%. The sentence "
                "under the chart says which way this run went.")
        with gr.Row():
            form.kind = gr.Radio([("batch size", "batch"), ("arrival rate", "rate"), ("prefill chunk", "chunk")],
                                 value="batch", label="Sweep", elem_id="serve-sweep-kind")
            form.scheduler = scheduler_dropdown("Scheduler", default_batching(registry))
            form.source = backend_dropdown(registry, "Source (one at a time, concurrent)")
        with gr.Row():
            form.sizes = gr.Textbox("1,2,4,8,16", label="Batch sizes")
            form.new_tokens = gr.Slider(4, 256, 64, step=4, label="Tokens each request decodes")
            form.rates = gr.Textbox("0.25,0.5,1,2", label="Rates (requests/s)")
            form.requests = gr.Slider(2, MAX_REQUESTS, 8, step=1, label="Requests per rate")
            form.ttft = gr.Number(DEFAULT_SLO[0], label="SLO: TTFT ≤ (s; 0: no limit)", elem_id="serve-sweep-slo-ttft",
                                  minimum=0)   # the same SLO as the tab's goodput (one source: DEFAULT_SLO)
            form.tpot = gr.Number(DEFAULT_SLO[1], label="SLO: TPOT ≤ (s; 0: no limit)", elem_id="serve-sweep-slo-tpot",
                                  minimum=0)
            form.chunks = gr.Textbox(SweepForm.chunks, label="Prefill chunks (prompt tokens per iteration)",
                                     elem_id="serve-sweep-chunks")
        form.presenter_key = presenter_key_box(served, "serve-sweep-presenter-key")
        run = gr.Button("Run sweep", elem_id="serve-sweep-run")
        out.sweep_plot = gr.Plot(label="Sweep", elem_id="serve-sweep-plot")
        out.sweep_roofline = gr.Plot(label="The batch-size sweep on the roofline", visible=False,
                                     elem_id="serve-sweep-roofline")
        gr.Markdown("**What a token costs on this machine**: the machine's price per hour over the output tokens "
                    "it makes per hour, one at a time, batched at 8 (the batch-size sweep above) and with "
                    "speculative decoding (a Generate run): batching and speculation are why tokens are cheap.")
        with gr.Row():
            price = gr.Number(DEFAULT_USD_PER_HOUR, label="Machine price, USD per hour (an assumption)",
                              minimum=0, elem_id="cost-usd-per-hour")
            cost = gr.Button("Work out what a token costs", elem_id="cost-run")
        out.token_cost = gr.Markdown(elem_id="token-cost")
    return run, price, cost


def _clients(out, traffic, remote=None):
    """The endpoint's own clients, live (only when the app serves the OpenAI-compatible endpoint), and the page's
    runs on remote servers (`remote`: --endpoint): the buttons, the line counting every state, then the timeline at
    the page's full width, so a projector's first screen of the panel shows it (presenter mode at 1024x768); how
    to send a request and the endpoint's limits come after."""
    title = ("Requests from clients: the OpenAI-compatible endpoint, live" if traffic is not None or remote is None
             else "Requests from this page to the remote servers, live")
    with gr.Accordion(title, open=True, visible=traffic is not None or remote is not None, elem_id="serve-clients"):
        with gr.Row():
            watch = gr.Button("Watch the clients' requests", variant="primary", elem_id="serve-watch")
            unwatch = gr.Button("Stop watching", elem_id="serve-unwatch")
        out.clients_status = gr.Markdown(elem_id="serve-clients-status")
        # drawn, out of sight, when the tab opens: the page loads and starts Plotly (about a second of its main
        # thread on 2 cores) then, not in a watch's first update
        gr.Plot(watch_placeholder("Plotly, loaded"), elem_id="serve-plotly-preload", show_label=False,
                container=False)
        out.clients_gantt = gr.Plot(label="Clients: every request", elem_id="serve-clients-gantt")
        gr.Markdown("**Each client's share** (since you started watching): its requests, the output tokens it got "
                    "(a decode step each) and its waits for a KV slot, the longest first", visible=traffic is not None)
        out.clients_shares = gr.HTML(elem_id="serve-clients-shares", padding=True, visible=traffic is not None)
        out.clients_kv_map = gr.Plot(label="Clients: KV memory map", elem_id="serve-clients-kv-map")
        out.clients_classes = gr.Dataframe(headers=CLASS_HEADERS, interactive=False, column_widths=CLASS_WIDTHS,
                                           label="Clients: p50/p95 per class (since you started watching)", wrap=True)
        gr.Markdown("**Clients: requests refused** (since you started watching)")
        out.clients_refused = gr.HTML(elem_id="serve-clients-refused", padding=True)
        gr.Markdown("**The page's requests to remote servers: the client's times beside the server's own figures**",
                    visible=remote is not None)
        out.clients_server = gr.HTML(elem_id="serve-clients-server", padding=True, visible=remote is not None)
        with gr.Row():
            export = gr.Button("Download the watch as a Perfetto trace", elem_id="serve-clients-export")
            out.clients_download = gr.File(label="Clients since you started watching: Chrome Trace Events (open at "
                                           "ui.perfetto.dev) and their sessions as session lines (replayable)",
                                           file_count="multiple", interactive=False, elem_id="serve-clients-download")
        if traffic is not None or remote is None:
            caption(clients_text(traffic.reach if traffic is not None else []))
        out.clients_limits = gr.Markdown(servers_text(remote) if traffic is None and remote is not None else None,
                                         elem_id="serve-clients-limits")
        if traffic is not None:   # on each page load (no API of its own)
            gr.on(None, lambda: endpoint_text(traffic.endpoint), None, out.clients_limits, api_visibility="private",
                  queue=False)
        out.clients_since = gr.State(None)   # the watch's start, on the record's clock
    return watch, unwatch, export


def _workload(form):
    """The workload editor: how many requests, how they arrive, the two classes (ServeForm's first fields)."""
    with gr.Row():
        form.n = gr.Slider(1, MAX_REQUESTS, 16, step=1, label="Requests", elem_id="serve-requests")
        form.arrival = gr.Radio(list(ARRIVALS), value="poisson", label="Arrivals", elem_id="serve-arrival")
        form.rate = gr.Number(DEFAULT_RATE, label="Rate (requests/s, fixed or Poisson)", elem_id="serve-rate")
        form.seed = gr.Number(0, precision=0, label="Seed (order and arrivals)", elem_id="serve-seed")
    with gr.Accordion("Request classes: prompt, max new tokens, share of the mix", open=False):
        with gr.Row():
            with gr.Column():
                form.short_prompt = gr.Textbox(LONG_ANSWER_QUESTION, label="Short: prompt", lines=2,
                                               elem_id="serve-short-prompt")
                form.short_tokens = gr.Slider(1, 256, NEW_TOKENS, step=1, label="Short: max new tokens")
                form.short_share = gr.Slider(0, 1, 0.8, step=0.05, label="Short: share")
            with gr.Column():
                form.long_prompt = gr.Textbox(SUMMARIZE_INSTRUCTION + long_document(),
                                              label="Long: prompt (cut to the context window)", lines=4,
                                              max_lines=8, elem_id="serve-long-prompt")
                form.long_tokens = gr.Slider(1, 256, NEW_TOKENS, step=1, label="Long: max new tokens")
                form.long_share = gr.Slider(0, 1, 0.2, step=0.05, label="Long: share")


def _schedulers(registry, form):
    """Scheduler A and B with their sources, then the batching pool's settings."""
    with gr.Row():
        form.scheduler_a = scheduler_dropdown("Scheduler A", "one-at-a-time", elem_id="serve-scheduler-a")
        form.source_a = backend_dropdown(registry, "Source of A", elem_id="serve-source-a")
        form.scheduler_b = scheduler_dropdown("Scheduler B (the same workload)", default_batching(registry),
                                              none=True, elem_id="serve-scheduler-b")
        form.source_b = backend_dropdown(registry, "Source of B", elem_id="serve-source-b")
    with gr.Accordion("Continuous batching: KV slots and prefill chunks", open=False):
        caption(SLOTS)
        with gr.Row():
            form.slots = gr.Slider(1, 32, BatchConfig.slots, step=1, label="KV slots (requests held at once)",
                                   elem_id="serve-slots")
            form.chunk = gr.Slider(16, 1024, BatchConfig.prefill_chunk, step=16,
                                   label="Prompt tokens read per iteration (chunked prefill)", elem_id="serve-chunk")
        caption("transformers' manager (scheduler batching-torch, on the torch backend): its paged KV block pool")
        with gr.Row():
            form.max_batch_tokens = gr.Slider(16, 1024, 256, step=16,
                                              label="Max tokens per forward pass (longer prompts: chunked)")
            form.blocks = gr.Number(0, precision=0, label="KV blocks of 32 tokens (0: just enough for the workload)")
            form.manager = gr.Radio(["fifo", "prefill_first"], value="fifo", label="The manager's scheduler")


def _kv_memory(form, out):
    """The KV-memory presets, A's and B's prefix caching and KV budget (our batching)."""
    with gr.Accordion("KV memory: presets, prefix caching, a KV budget (our batching)", open=False,
                      elem_id="serve-kv-memory"):
        caption(KV_MEMORY)
        with gr.Row():
            form.preset = gr.Dropdown([NONE, *PRESETS], value=NONE, label="Preset workload (A and B differ by one "
                                      "setting)", elem_id="serve-preset")
            form.prefix_cache_a = gr.Checkbox(False, label="A: prefix caching", elem_id="serve-prefix-cache-a")
            form.prefix_cache_b = gr.Checkbox(False, label="B: prefix caching", elem_id="serve-prefix-cache-b")
            form.kv_budget_a = gr.Number(0, precision=0, minimum=0, label="A: KV budget (positions; 0: none)",
                                         elem_id="serve-kv-budget-a")
            form.kv_budget_b = gr.Number(0, precision=0, minimum=0, label="B: KV budget (positions; 0: none)",
                                         elem_id="serve-kv-budget-b")
        out.preset_about = gr.Markdown(elem_id="serve-preset-about")


def presenter_key_box(served: str, elem_id: str, share: int | None = None) -> gr.Textbox:
    """The presenter's key box (a form's last field), shown with who may run, while the room is `served` only
    (`share`: the requests an attendee's run has in flight at once, Room.joined_share; None: a run not held to one,
    as a sweep, whose batch sizes are its lesson)."""
    if served:
        caption(PRESENTER_ONLY.format(served=served, share=SHARE.format(share=share, every=SHARED_DRAW_EVERY) if share else ""))
    return gr.Textbox("", label="Presenter key", type="password", max_lines=1, visible=bool(served), elem_id=elem_id)


def _run_and_status(out, form, served: str = "", share: int = CLIENT_SHARE):
    """Run and Stop (over them, while the room is `served`, who may press Run and the presenter's key box), the
    status and lesson lines, the pool, the SLO boxes and the goodput; returns the buttons."""
    form.presenter_key = presenter_key_box(served, "serve-presenter-key", share)
    form.trace_file = gr.File(label="Or replay a file instead (.json, .jsonl)", file_types=[".json", ".jsonl"],
                              type="filepath", elem_id="serve-trace-file")
    gr.Markdown("The file replaces the workload above: a workload.json, Mooncake lines with or without AIPerf's "
                "session fields (.jsonl), a Weka trace or an ATIF trajectory (.json). A session's turns wait for each "
                "other, at the trace's own pace.")
    with gr.Row():
        run = gr.Button("Run", variant="primary", elem_id="serve-run")
        replay = gr.Button("Replay the file", elem_id="serve-replay")
        stop = gr.Button("Stop", variant="stop", elem_id="serve-stop")
    out.status = gr.Markdown(elem_classes="status", elem_id="serve-status")
    out.lesson = gr.Markdown(elem_id="serve-lesson")
    out.pool = gr.Markdown(elem_id="serve-pool")
    with gr.Row(equal_height=True):
        slo_ttft = gr.Number(DEFAULT_SLO[0], label="SLO: TTFT ≤ (s; 0: no limit)", elem_id="serve-slo-ttft", minimum=0)
        slo_tpot = gr.Number(DEFAULT_SLO[1], label="SLO: TPOT ≤ (s; 0: no limit)", elem_id="serve-slo-tpot", minimum=0)
        out.goodput = gr.Markdown(elem_id="serve-goodput")
    out.session_timeline = gr.Plot(label="Sessions (a replayed trace, A and B): each turn, and in each gap its blocks",
                                   elem_id="serve-session-timeline")
    return run, replay, stop, [slo_ttft, slo_tpot]


def layout(registry, traffic=None, remote=None, served: str = "", share: int = CLIENT_SHARE):
    out, form, sweep_form = SimpleNamespace(), SimpleNamespace(), SimpleNamespace()
    with gr.Tab("Serve", id="serve"):
        gr.Markdown(INTRO)
        caption(ALONE)
        _workload(form)
        _schedulers(registry, form)
        _kv_memory(form, out)
        run, replay, stop, slo = _run_and_status(out, form, served, share)
        _columns(out)
        out.download = gr.File(label="Results: JSON per run, an HTML report", file_count="multiple", interactive=False)
        sweep, price, cost = _sweeps(registry, out, sweep_form, served)
        watch, unwatch, export = _clients(out, traffic, remote)
    return out, form, sweep_form, SimpleNamespace(run=run, replay=replay, stop=stop, sweep=sweep, slo=slo, watch=watch,
                                                     unwatch=unwatch, export=export, price=price, cost=cost)
