"""The Generate tab's handlers: module-level functions of the tab (`GenerateTab`) and Gradio's dict inputs.

    tab = GenerateTab(c, registry, room, remote)   # the components by name, the sources, the app's Room, …
    for update in generate(tab, values): ...       # /generate: {component: value} updates, the last one final
    stop(tab, price_in, price_out, session)        # /stop; top_k(step, session), metrics(…), roofline(tab, …)

A click on Generate goes: `generate` reads the form; a run on the backend the room's engine loop batches, once
loaded, goes straight to `join_loop` (the prompt's ids, then `EngineLoop.run`: submitted to the room's loop);
any other local run waits for a CPU slot of the room's machine gate (`run_alone`); a run on a server takes none
(and, on a server the app watches, joins `remote`'s record). `follow` then streams the run: the Session starts
it (its Steps go into the run's StepStream as they are made, once each, in the run's thread), and the handler
sends the stream's text at most every UPDATE_INTERVAL (longer in a busy loop: `room_interval`) until the run
ends, then the final update. While a run waits for a slot in the loop, the status says how many are ahead.

While a run streams, the only output that changes is `stream` (Gradio's diff sends only its new lines); the
others hold constant values until the end (a skipped output costs Gradio more than a repeated one): status,
answer text, metrics, exports; the stream's end line carries the four figures of charts/run.py. With
speculative decoding on (k, n-gram size), the run is SpeculativeEngine's on the same backend, on its own.

Left out: the layout and the wiring (generate_layout.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace

from ..charts.run import top_k_spec, whole_json
from ..config import coerce_settings
from ..run_view import metrics_html, speculation_html, status_line
from ..serve.engine_loop import page_client
from ..serve.room import Room
from ..serve.traffic import AloneReason
from ..source import Origin, SourceError
from ..wait_parts import MACHINE, waiting_words
from .common import SourceUnavailable, loading_line, source, warn
from .forms import read_form
from .live.view import LIVE_METRICS_ID, RUNNING_STATUS, prefill_status
from .session import UPDATE_INTERVAL, WATCHED_INTERVAL, Session
from .zerogpu import cost_line, zero_gpu

OUTPUTS = ("stream", "status", "text", "metrics", "files")   # /generate and /stop return these, in this order
LIVE_METRICS = metrics_html(None, element_id=LIVE_METRICS_ID)   # live/metrics.js fills it while the run streams
WAIT_POLL_S = 0.25   # how often a run waiting in the engine loop's queue looks at how many are ahead
WAIT_REPEAT_POLLS = 8   # polls without a change after which the page is sent its waiting line again
# the longest a run in a busy engine loop goes between two updates of its page: as long as a page whose live channel
# reads the steps waits for one
ROOM_INTERVAL_MAX = WATCHED_INTERVAL
WRITER_GRACE_S = 2.0   # at a run's end, the longest its handler waits for the run's thread to add its last Steps


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


@dataclass(frozen=True)
class GenerateTab:
    """What Generate's handlers act on. `c` names the components: GenerateForm's fields and `session` (the keys of
    generate's dict input), and the outputs (OUTPUTS, the keys of every update). `room`: the app's Room
    (serve/room.py), whose engine loop batches the Generate runs of its backend with every other request; a local
    run it does not batch takes a CPU slot of its machine gate. `remote`: the record of the runs on remote servers
    (serve.remote_record.RemoteRecord: the Serve tab's Watch view draws it); None: not recorded."""
    c: SimpleNamespace
    registry: object
    room: Room
    remote: object = None


def parse_seed(seed) -> int | None:
    """'' -> None (a random seed each run); '42' -> 42; anything else -> ValueError naming the field."""
    text = "" if seed is None else str(seed).strip()
    try:
        return int(text) if text else None
    except ValueError:
        raise ValueError(f"seed must be a whole number (or empty for random), got {text!r}") from None


def form_settings(form: GenerateForm):
    """The form's sampling settings (GenerationSettings); ValueError or TypeError naming a bad field."""
    return coerce_settings(temperature=form.temperature, top_k=form.top_k, top_p=form.top_p,
                           seed=parse_seed(form.seed), max_new_tokens=form.max_new_tokens, chat=bool(form.chat))


# --- /generate

def generate(tab: GenerateTab, values: dict):
    """/generate: the run the form asks for, streamed (a dict of updates by component each time)."""
    c = tab.c
    form, session, clicked = read_form(GenerateForm, c, values), values[c.session], time.perf_counter()
    loop = None if form.speculate else tab.room.ready_for(form.backend)   # the room's loop, loaded: no wait
    if loop is None:
        for line in tab.registry.loading(form.backend):
            yield {c.status: loading_line(line)}
    try:
        engine = loop.engine if loop is not None else form_source(tab.registry, form)
        settings = form_settings(form)
    except (SourceUnavailable, ValueError, TypeError) as exc:
        yield refused(c, str(exc))
        return
    if loop is None and not form.speculate:
        loop = tab.room.loop_for(engine.info.name)   # the room's loop, once loaded, when it batches this backend
    note = alone_reason(engine, tab.room, form.speculate)
    why = (AloneReason.SPECULATIVE if form.speculate else AloneReason.OTHER_BACKEND) if note else None
    if loop is not None:
        try:
            text, ids = engine.prompt_ids(form.prompt, settings)
        except (ValueError, TypeError) as exc:
            yield refused(c, str(exc))
            return
        if len(ids) + settings.max_new_tokens <= loop.capacity:
            yield from join_loop(tab, loop, form, session, settings, (text, ids))
            return
        note = (f"{len(ids):,} prompt tokens and {settings.max_new_tokens:,} new ones do not fit the engine loop's "
                f"slots ({loop.capacity:,} positions each): this run takes a CPU slot alone")
        why = AloneReason.TOO_LONG
    yield from run_alone(tab, engine, form, session, settings, clicked=clicked, note=note, why=why)


def form_source(registry, form: GenerateForm):
    """The source the form names, driven by SpeculativeEngine when asked; SourceUnavailable saying why not."""
    engine = source(registry, form.backend)
    return speculative(engine, form.spec_k, form.spec_ngram) if form.speculate else engine


def join_loop(tab: GenerateTab, loop, form: GenerateForm, session: Session, settings, prompt: tuple):
    """Submit the run (`prompt`: its text as templated, its token ids) to the room's engine loop, the page's session
    one client of it, and stream it."""
    text, ids = prompt
    try:
        run = loop.run(ids, settings, prompt=form.prompt, text=text, backend=loop.engine.info.name,
                       client=page_client(f"{id(session):x}"))
    except (ValueError, TypeError) as exc:   # ValueError: the loop closed
        yield refused(tab.c, str(exc))
        return
    yield from follow(tab, run, loop.engine, form, session, loop=loop)


def run_alone(tab: GenerateTab, engine, form: GenerateForm, session: Session, settings, *, clicked: float,
              note: str, why: AloneReason | None = None):
    """A run outside the engine loop: a local one waits for a CPU slot of its own, and where the room records its
    traffic and the run left its loop (`why`), joins that record counted as alone; a remote server's joins the
    record the Watch view draws when it is one of the servers given to the app."""
    local, gate, remote = engine.info.origin != Origin.REMOTE, tab.room.gate, tab.remote
    while local and not gate.enter_shared(timeout=1.0):
        yield {tab.c.status: f"Waiting for a CPU slot: the machine's {gate.slots} are busy (or a Serve workload "
                             "runs alone)…"}
    queued = time.perf_counter() - clicked
    try:
        try:
            run = engine.run(form.prompt, settings)
            if local and why is not None and tab.room.traffic is not None:   # the room's run, outside its loop
                run = tab.room.traffic.alone(run, page_client(f"{id(session):x}"), clicked, why)
            if remote is not None and not local and form.backend in remote.servers:
                run = remote.add(run, page_client(f"{id(session):x}"), clicked, server=form.backend)
        except (ValueError, TypeError, SourceError) as exc:   # SourceError: a server refused or failed
            yield refused(tab.c, str(exc))
            return
        if local:
            run.trace.queued = queued   # its wait for a CPU slot
        yield from follow(tab, run, engine, form, session, note=note)
    finally:
        if local:
            gate.leave_shared()


def follow(tab: GenerateTab, run, engine, form: GenerateForm, session: Session, *, loop=None, note: str = ""):
    """Stream a started run to the page, then its final update. `loop`: the engine loop it joined (while it waits
    for a KV slot the page says how many are ahead)."""
    c = tab.c
    pace = UPDATE_INTERVAL if loop is None else room_interval(loop)
    own, background = session.start(run, pace)   # this run's: another handler of the session may start one meanwhile
    try:
        yield live(c, own)   # the head: the page clears the last run's view at once
        waited = False
        for line in waiting_lines(loop, run):
            yield {c.status: line}
            waited = True
        if waited:
            yield live(c, own)   # its turn came: the status says it reads the prompt
        paused = False
        # Steps were made since the last update (the run's thread added them to the stream); in the loop, also a
        # wake-up each WAIT_POLL_S without one, so a run the machine's holder paused mid-answer says so
        for batch in background.batches(idle=None if loop is None else WAIT_POLL_S):
            if run.trace.finished:
                break                 # the last steps go out with the final update, never after Stop's
            if not batch:
                if loop.paused != paused:
                    paused = loop.paused
                    yield {c.status: paused_line(loop)} if paused else live(c, own)
                continue
            paused = False
            yield live(c, own)
        background.wait_ended(WRITER_GRACE_S)   # the run's thread has added its last Steps
    finally:   # the handler was closed (event cancelled, tab gone): stop the run too
        if not run.trace.finished:
            run.cancel()   # this handler's own run (the session may have started another since)
    update = final(c, session, (form.price_in, form.price_out), own)
    if note:
        update[c.status] += f" · {note}"
    if zero_gpu() and loop is None:   # which backend ran it, and what the GPU call asked of the visitor's quota
        update[c.status] += " · " + cost_line(engine, own.trace.settings)
    yield update


def live(c, stream) -> dict:
    """An update while the run streams: constant but the stream (Gradio's diff sends only its new lines) and the
    status, which says "reading the prompt" until the first token. The Steps are in the stream already: the run's
    thread adds each as it is made (Session.start)."""
    status = RUNNING_STATUS if stream.packed else prefill_status(stream.head["prompt_tokens"],
                                                                   stream.head["prefill_chunk"])
    return {c.stream: stream.text, c.status: status, c.text: "", c.metrics: LIVE_METRICS, c.files: None}


def refused(c, message: str) -> dict:
    """A click refused before its run started (an empty prompt, a source that failed to load): the warning, and
    the view emptied (an empty stream clears the page's chips and charts: live/stream.js), so that no earlier
    run's chips and figures stand under it as if they were this click's."""
    return {c.stream: "", c.status: warn(message), c.text: "", c.metrics: metrics_html(None), c.files: None}


def final(c, session: Session, prices, stream=None) -> dict:
    """The last update of a run (`stream`: a handler's own; default: the session's latest)."""
    stream = stream or session.stream
    trace = stream.trace
    update = {c.stream: session.finish_stream(stream), c.status: status_line(trace), c.text: trace.text,
              c.metrics: metrics_html(trace, *prices) + speculation_html(trace, session.earlier)}
    if stream is session.stream:   # a run superseded by a later one of this session leaves the files to it
        update[c.files] = session.export()
    return update


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
    ...     def waiting_for(self): return "no free slot"
    ...     def wait_turn(self, timeout): self.polls += 1
    >>> lines = list(waiting_lines(NS(slots=8, paused=False, in_flight=lambda: 9), Run(), repeat=8))
    >>> [line.split("; ")[1].split(" in ")[0] for line in lines]
    ['3 requests ahead of you', 'none ahead of you (9', 'none ahead of you (9']
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
    """The status while a run waits in the engine loop's queue: what it waits for (the batcher's latest plan, or the
    loop's pause: wait_parts.waiting_words), how many are ahead, and what the loop holds.

    >>> from types import SimpleNamespace as NS
    >>> loop = NS(slots=8, paused=False, in_flight=lambda: 11)
    >>> waiting_line(loop, NS(ahead=lambda: 2, waiting_for=lambda: "no free slot"))
    "Waiting for a KV slot: all 8 are held; 2 requests ahead of you in the engine's queue (11 in it now)…"
    >>> waiting_line(NS(slots=8, paused=True, in_flight=lambda: 1), NS(ahead=lambda: 0, waiting_for=lambda: None))[:63]
    'Waiting for the machine: a Serve workload has the machine alone'
    """
    ahead = run.ahead()
    if ahead is None and not loop.paused:
        return "Reading the prompt…"
    return waiting_words(MACHINE if loop.paused else run.waiting_for(), ahead, loop.slots, loop.in_flight())


def paused_line(loop) -> str:
    """The status of a run in the engine loop while the loop waits for the machine (work that needs it alone holds
    it): its answer stops until then.

    >>> from types import SimpleNamespace as NS
    >>> paused_line(NS(slots=8, in_flight=lambda: 3))[:70]
    'Waiting for the machine: a Serve workload has the machine alone (its f'
    """
    return waiting_words(MACHINE, 0, loop.slots, loop.in_flight())


def alone_reason(engine, room: Room, speculate: bool) -> str:
    """Why a local Generate run does not join the engine loop ('' for a remote server, or without a loop)."""
    if room.backend is None or engine.info.origin == Origin.REMOTE:
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


# --- the other events

def stop(tab: GenerateTab, price_in, price_out, session: Session):
    """/stop: cancel the session's run; its final update (the partial trace kept)."""
    if session.run is None:
        return {tab.c.status: warn("nothing is running")}
    session.stop()
    return final(tab.c, session, (price_in, price_out))


def top_k(step, session: Session):
    """/top_k: the top-k chart's spec at `step` of the session's run."""
    return whole_json(top_k_spec(session.trace, step))


def metrics(price_in, price_out, session: Session):
    """/metrics: the metrics panel at these prices."""
    trace = session.trace
    if trace is None or not trace.finished:
        return metrics_html(trace, price_in, price_out, element_id=None if trace is None else LIVE_METRICS_ID)
    return metrics_html(trace, price_in, price_out) + speculation_html(trace, session.earlier)


def roofline(tab: GenerateTab, backend, session: Session):
    """/roofline: (figure, text) of the session's last finished run on the roofline, or (None, why not). A local
    run's points are measured here; a server's run (of the bundled model) is estimated from the model's config and
    the client-side times, and labelled so."""
    from ..charts.roofline import plot_roofline
    from ..roofline import machine_ceilings, roofline_model, trace_points, why_text

    trace = session.trace
    if trace is None or not trace.finished:
        return None, warn("generate first: the roofline is drawn from a finished run")
    try:
        engine = source(tab.registry, backend)
    except SourceUnavailable:
        engine = None
    model = None if engine is None else roofline_model(engine)
    if model is None or engine.info.name != trace.backend:
        return None, warn(f"the roofline needs the run's source ({trace.backend}) selected above, running a "
                          "model whose shape is known here (a local backend, or a server of the bundled model)")
    gate = tab.room.gate
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
