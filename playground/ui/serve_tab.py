"""The Serve tab: many different requests share one engine, live, per request, on two schedulers side by side.

Edit the workload (how many requests, the two classes' prompts, budgets and shares, how they arrive),
pick scheduler A (and B for the same workload replayed), Run: the workload runs in a worker thread
holding the machine alone (machine_gate.py) while the handler redraws the Gantt charts, tables and the
lesson sentences about once a second (serve_views.py). Stop cancels every request within one step.
Sweeps (batch size, arrival rate with an SLO, prefill chunk on the interference preset) run from the accordion
below with the same gate.
Below the sweeps, what a token costs on this machine (serve/cost.py): a price per hour over the output tokens
per hour measured by the batch-size sweep and the Generate tab's runs.
API names: /serve, /serve_replay, /serve_stop, /serve_sweep, /token_cost.

Each event leads to a named function: Run to ServeHandlers.serve (start_workload takes the typed ServeForm: its
schedulers and workload from serve_setup), Stop to ServeHandlers.stop, Run sweep to ServeHandlers.sweep
(start_sweep, sweep_plan), the SLO boxes to rejudge; the workers that run in the job's thread are workload_work
and sweep_work. serve/run.py builds and runs the workload, the preset and the sweep, as for the CLI; this file
reads the form, holds the machine and draws.

"Replay the file" (ServeHandlers.replay) replays the chosen file (a workload.json or a trace: serve/run.py's
replay_file) instead of the drawn workload, at the trace's own pace, on the same schedulers; the preset "two agents
with tool gaps" replays a built-in trace (serve/session_preset.py). The sessions of both sides are then drawn as a
timeline (charts/sessions.py): each gap's blocks as our batching measured them when the next turn came, else as each
side's prefix cache alone would keep them (trace_gaps, labelled predicted).

Left out: more than two classes in the editor (a file replays any workload), and a time scale for a replayed
trace (the CLI's --time-scale).
"""
from __future__ import annotations

import html
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import gradio as gr

from ..serve import Workload
from ..serve.batching import BatchConfig
from ..serve.agent_trace import sessions_jsonl
from ..serve.perfetto import watch_json
from ..serve.presets import CACHE_POSITIONS, PRESETS
from ..serve.session_gaps import replay_gaps
from ..serve.trace_import import read_trace
from ..serve.workload import MAX_REQUESTS
from ..serve.run import SweepPlan, measure_preset, replay_file, run_sweep, run_workload, sweep_setup, workload_setup
from ..serve.setup import Pick, pool_config
from ..serve.cost import cost_markdown, measured_rates, token_costs
from ..roofline import machine_ceilings
from .common import (CPU_QUEUE, DEFAULT_USD_PER_M_OUTPUT, GENERATE_CONCURRENCY, SourceUnavailable, loading_line,
                     source, warn)
from .forms import form_inputs, read_form
from ..serve.room import Room
from .machine_gate import MachineGate
from .serve_job import ServeJob
from .serve_layout import DEFAULT_RATE, NONE, SHARED_DRAW_EVERY, ReplayForm, ServeForm, SweepForm, layout
from .remote_watch import watch_view
from .serve_views import (OUTPUTS, clients_view, goodput_markdown, held_line, lesson_text, status_text, sweep_roofline,
                          sweep_view, view)


def registry_source(registry):
    """`get_source` for serve/setup.py: the registry's source by name; ValueError naming what is left to pick."""
    def get(name):
        try:
            return source(registry, name)
        except SourceUnavailable as exc:
            raise ValueError(str(exc)) from exc
    return get


def serve_picks(form: ServeForm) -> list[Pick]:
    """Scheduler A and B (unless "(none)"), each on its source with its side's settings; with a preset, our
    batching twice on A's source (the preset sets what differs). ValueError on a bad setting."""
    pool = pool_config(form.blocks, form.max_batch_tokens, form.manager)
    sides = [BatchConfig(int(form.slots), int(form.chunk), CACHE_POSITIONS if cache else 0, int(budget or 0)).validate()
             for cache, budget in ((form.prefix_cache_a, form.kv_budget_a), (form.prefix_cache_b, form.kv_budget_b))]
    if form.preset in PRESETS:
        return [Pick("batching", form.source_a, side, pool) for side in sides]
    return [Pick(name, src, side, pool) for name, src, side in ((form.scheduler_a, form.source_a, sides[0]),
                                                                (form.scheduler_b, form.source_b, sides[1]))
            if name != NONE]


def serve_setup(registry, form: ServeForm, picks: list[Pick] | None = None) -> tuple[list, Workload]:
    """The schedulers and the workload that the form asks for (serve/run.py builds them); ValueError in words."""
    picks = serve_picks(form) if picks is None else picks
    replay = None
    if getattr(form, "trace_file", None):
        if form.preset in PRESETS:
            raise ValueError("a preset runs its own workload: pick no preset to replay a file")
        replay = lambda source: replay_file(form.trace_file, source)[0]   # noqa: E731
    return workload_setup(picks, registry_source(registry), form, PRESETS.get(form.preset), registry.names,
                          replay=replay)


def session_trace(form: ServeForm, preset=None):
    """The session trace the run replays: the preset's own, or the chosen file's; None for neither, or a
    workload.json. ValueError in words for a file that is not a trace."""
    if preset is not None:
        return preset.trace() if preset.trace is not None else None
    path = getattr(form, "trace_file", None)
    return read_trace(path) if path else None


def trace_gaps(trace, side: BatchConfig) -> list:
    """The trace's session gaps as `side`'s prefix cache alone would keep them (session_gaps.replay_gaps: its budget
    in the trace's blocks, its session share and TTL); [] for no trace or no cache."""
    if trace is None or side.prefix_cache < trace.block_size:
        return []
    return replay_gaps(trace.rows[:MAX_REQUESTS], side.prefix_cache // trace.block_size, side.session_share,
                       side.session_ttl)[0]


def side_configs(schedulers, picks: list[Pick]) -> list[BatchConfig]:
    """Each side's batching settings: its scheduler's own (our batching: a preset's), else what its pick asked."""
    return [s.config if isinstance(getattr(s, "config", None), BatchConfig) else p.batch
            for s, p in zip(schedulers, picks)]


def apply_preset(name: str):
    """A preset picked: our batching on both sides, its request count and arrivals, what it shows."""
    preset = PRESETS.get(name)
    if preset is None:
        return {}
    return {"scheduler_b": "batching", "n": preset.requests, "arrival": "poisson" if preset.rate else "all-at-once",
            "rate": preset.rate or DEFAULT_RATE, "about": f"**{preset.name}**: {preset.about}."}


BUSY = "the machine stayed busy for a minute (another workload or other runs); try again"


def acquire(gate: MachineGate, status):
    """Wait (up to a minute, saying so in `status` updates) for the machine alone; returns whether it was had
    (`had = yield from acquire(gate, out.status)`)."""
    start = time.monotonic()
    while time.monotonic() - start < 60:
        if gate.acquire_alone(timeout=1.0):
            return True
        yield {status: f"⏳ waiting for the machine: other runs are in progress ({time.monotonic() - start:.0f} s)"}
    return False


def workload_work(schedulers, workload: Workload, job: ServeJob) -> None:
    """The worker: `workload` on each scheduler in turn (serve/run.py; one Stop cancels the rest: they did not run),
    drawn live from `job.results`, then what the preset (`job.preset`) measures after both runs."""
    run_workload(schedulers, workload, lambda _: job.report, job.cancel, job.results)
    job.measured = measure_preset(job.preset, schedulers[0].source, job.results, job.report, job.cancel)


def sweep_pick(form: SweepForm) -> Pick:
    """The scheduler a sweep runs: the one picked, except the prefill-chunk sweep, which runs our batching."""
    return Pick("batching" if form.kind == "chunk" else form.scheduler, form.source)


def sweep_plan(registry, form: SweepForm) -> SweepPlan:
    """The sweep the form asks for (serve/run.py makes its scheduler and reads its inputs); ValueError in words."""
    slo = (float(form.ttft) if form.ttft else None, float(form.tpot) if form.tpot else None)
    return sweep_setup(form.kind, sweep_pick(form), registry_source(registry), registry.names, sizes=form.sizes,
                       new_tokens=form.new_tokens, rates=form.rates, slo=slo, chunks=form.chunks,
                       requests=form.requests)


def sweep_work(plan: SweepPlan, job: ServeJob) -> None:
    """The worker: the plan's sweep (serve/run.py), each point drawn live (job.sweeps); the batch-size sweep then
    measures the machine's ceilings for its roofline, while the machine is still this job's alone."""
    job.roofline = None
    sweep = run_sweep(plan, job.report, job.cancel, live=job.sweeps)
    if plan.kind == "batch" and not sweep.cancelled:
        job.report(1.0, "measuring the machine's ceilings for the roofline")
        ceilings = machine_ceilings(cancel=job.cancel)   # cached after the first
        if not ceilings.cancelled:
            job.roofline = sweep_roofline(sweep, plan.scheduler.source, ceilings)


def rejudge(ttft, tpot, job: ServeJob):
    """Goodput under a new SLO, from the stored records of the last run (nothing runs again)."""
    try:
        limits = tuple(None if v in (None, "") or float(v) == 0 else float(v) for v in (ttft, tpot))
        if any(v is not None and not 0 < v < 1e6 for v in limits):
            raise ValueError("an SLO is a number of seconds above 0 (0 or empty: no limit)")
    except (TypeError, ValueError) as exc:
        return warn(str(exc))
    job.slo = limits
    return goodput_markdown([r for r in job.results if r.done], *limits)


@dataclass
class ServeHandlers:
    """The Serve tab's events, one method each: Run (`serve`), Stop (`stop`), Run sweep (`sweep`). `forms` names the
    components: `serve` (ServeForm's), `sweep` (SweepForm's) and `job` (the session's ServeJob State), the keys
    of the dict inputs `serve` and `sweep` read; `start_workload` and `start_sweep` take the typed form."""
    registry: Any
    forms: SimpleNamespace
    out: SimpleNamespace
    gate: MachineGate
    room: Room | None = None   # who may take the machine alone (Room.alone_refused); None: anyone

    def serve(self, values: dict):
        yield from self.start_workload(read_form(ServeForm, self.forms.serve, values), values[self.forms.job])

    def replay(self, values: dict):
        """Replay the chosen file (a workload.json or a trace) on the form's schedulers instead of its workload."""
        form = read_form(ReplayForm, self.forms.serve, values)
        if not form.trace_file:
            yield self.status(warn("Choose a file to replay first: a workload.json, a .jsonl trace, a Weka trace or "
                                   "an ATIF trajectory"))
            return
        yield from self.start_workload(form, values[self.forms.job])

    def sweep(self, values: dict):
        yield from self.start_sweep(read_form(SweepForm, self.forms.sweep, values), values[self.forms.job])

    def start_workload(self, form: ServeForm, job: ServeJob):
        """Build the form's schedulers and workload, wait for the machine alone (or join the room's loop), run them,
        redraw once a second."""
        try:
            picks = serve_picks(form)
        except (ValueError, TypeError) as exc:
            yield self.status(warn(str(exc)))
            return
        joins = self.joins_loop([p.runs_on for p in picks])
        if not joins and (refusal := self.refusal(form.presenter_key)):
            yield refusal
            return
        if not (yield from self.load(job, [p.runs_on for p in picks])):
            return
        try:
            schedulers, workload = serve_setup(self.registry, form, picks)
        except (ValueError, TypeError) as exc:
            yield self.status(warn(str(exc)))
            return
        if joins:
            share_requests(schedulers, self.room.joined_share(form.presenter_key))
        job.preset = PRESETS.get(form.preset)
        try:
            trace = session_trace(form, job.preset)
        except ValueError:   # replay_file read the same file above: a file it took is not refused here
            trace = None
        job.gaps = [] if trace is None else [trace_gaps(trace, c) for c in side_configs(schedulers, picks)]
        if joins or (yield from self.machine_alone()):
            job.run(lambda job: workload_work(schedulers, workload, job), None if joins else self.gate)
            draw = shared_frame if joins else alone_frame
            yield from job.follow(lambda final, tick: draw(job, self.out, tick, final), every=1.0)

    def start_sweep(self, form: SweepForm, job: ServeJob):
        """Make the sweep's scheduler and inputs, wait for the machine alone (or join the room's loop), sweep, redraw
        once a second."""
        joins = self.joins_loop([sweep_pick(form).runs_on])
        if not joins and (refusal := self.refusal(form.presenter_key)):
            yield refusal
            return
        if not (yield from self.load(job, [sweep_pick(form).runs_on])):
            return
        try:
            plan = sweep_plan(self.registry, form)
        except ValueError as exc:
            yield self.status(warn(str(exc)))
            return
        if joins or (yield from self.machine_alone()):
            job.run(lambda job: sweep_work(plan, job), None if joins else self.gate)
            yield from job.follow(lambda final, tick: sweep_view(job, self.out, final), every=1.0)

    def stop(self, job: ServeJob):
        if job.thread is None:
            return self.status(warn("no workload has run in this session"))
        return view(job, self.out, final=True) if job.stop(wait=15) else self.status("still stopping…")

    def status(self, line: str) -> dict:
        return {self.out.status: line}

    def refusal(self, key: str) -> dict | None:
        """The status saying why the person who typed `key` may not take the machine alone (the room is served and
        it is not the presenter's key), before anything loads; None: they may. A run that joins the room's loop
        (joins_loop) takes nothing alone: anyone may start it, as one more client taking turns with the others."""
        why = "" if self.room is None else self.room.alone_refused(key)
        return self.status(warn(why)) if why else None

    def load(self, job: ServeJob, names: list[str]):
        """Load the sources named (their progress in the status line); False when a workload is already running in
        this session (`ok = yield from self.load(job, names)`)."""
        if job.running():
            yield self.status(warn("a workload is already running in this session: Stop it first"))
            return False
        for name in names:
            for line in self.registry.loading(name):
                yield self.status(loading_line(line))
        return not job.running()

    def joins_loop(self, names: list[str]) -> bool:
        """Whether every source named sends its requests through the room's own engine loop (Room.loop_sources: the
        app's own endpoint). Such a workload takes nothing alone: its requests join the loop as one more client's,
        and the machine held alone would keep that loop waiting for it while the run waited for the loop."""
        return self.room is not None and bool(names) and all(n in self.room.loop_sources for n in names)

    def machine_alone(self):
        """Wait for the machine alone (saying so); False, with a warning, when it stayed busy for a minute."""
        if (yield from acquire(self.gate, self.out.status)):
            return True
        yield self.status(warn(BUSY))
        return False


def share_requests(schedulers, share: int | None) -> None:
    """Hold each scheduler that sends to a server (ConcurrentScheduler) to `share` requests in flight at once (the
    rest wait in it, measured as their queue time), each request yielding to the room's (priority 1: the engine
    reads the people's prompts first, serve/plan.py); None: as many as the workload sends, as any request."""
    for scheduler in schedulers:
        if share is not None and hasattr(scheduler, "max_concurrency"):
            scheduler.max_concurrency = min(share, scheduler.max_concurrency or share)
            if hasattr(scheduler.source, "yielding"):
                scheduler.source = scheduler.source.yielding(ATTENDEE_PRIORITY)


def alone_frame(job, out, tick: int, final: bool) -> dict:
    """A run on the machine alone redraws its status, Gantt and tables each second, its other charts every third."""
    return view(job, out, charts=tick % 3 == 0, final=final)


SHARED_NOTE = (" · sharing the room's engine: the timeline, tables and charts redraw every {every} s (drawing them "
               "takes CPU from the room's requests)")


def shared_drawn(tick: int, every: int = SHARED_DRAW_EVERY) -> bool:
    """Whether a shared run's frame `tick` (one a second, from 0) draws the whole view: every `every`-th, from the
    `every`-th (the first seconds have little to draw, and they are the room's requests' first tokens).

    >>> [tick for tick in range(12) if shared_drawn(tick)]
    [4, 9]
    """
    return tick % every == every - 1


def shared_frame(job, out, tick: int, final: bool, every: int = SHARED_DRAW_EVERY) -> dict:
    """A run that joined the room's loop (an attendee's): drawing its figures runs on the server's cores, beside the
    room's requests, so its frames carry the status and lesson lines each second, the whole view when
    `shared_drawn` and at the end."""
    if final or shared_drawn(tick, every):
        return view(job, out, charts=True, final=final)
    note = "" if job.error else html.escape(SHARED_NOTE.format(every=every))
    return {out.status: status_text(job) + note, out.lesson: lesson_text(job)}


ATTENDEE_PRIORITY = 1   # an attendee's Serve run in a served room: its requests yield to the people's
WATCH_FOR = 30 * 60   # seconds a page watches the clients before it stops by itself
CHARTS_EVERY = 10     # the Watch view's frames (one a second) its charts are drawn in: every tenth, and the last
UNSENT = object()


class Frames:
    """What one watch sends each second: an output only when its value differs from the one this watch sent last
    (a line, a table), the charts and the table per class only when drawn (every CHARTS_EVERY-th frame and the last). The page then redraws
    what changed, not every output each second: a chart redrawn is the browser's largest task.

    >>> frames = Frames(every=5)
    >>> [frames.charts() for _ in range(6)]
    [True, False, False, False, False, True]
    >>> frames.changed({"line": "a", "table": {"value": [[1]]}}), frames.changed({"line": "b", "table": {"value": [[1]]}})
    ({'line': 'a', 'table': {'value': [[1]]}}, {'line': 'b'})

    The outputs of one drawing are sent over several frames (`stagger`): the page redraws one chart a second,
    smaller tasks in place of one; all were drawn at the same moment, on one time axis.

    >>> later = [["map"], ["table"]]   # the map with the next frame, the table with the one after
    >>> frames.stagger({"line": "c", "gantt": 1, "map": 2, "table": 3}, later)
    {'line': 'c', 'gantt': 1}
    >>> frames.stagger({"line": "d"}, later), frames.stagger({}, later), frames.stagger({}, later)
    ({'map': 2, 'line': 'd'}, {'table': 3}, {})
    """

    def __init__(self, every: int = CHARTS_EVERY):
        self.every, self.count, self._sent, self._held = every, 0, {}, []

    def stagger(self, updates: dict, later: list[list]) -> dict:
        """`updates` less the outputs in `later`: its i-th list goes out i + 1 frames from now; this frame carries
        what earlier frames held for it (a newer drawing's output replaces what is held for the same frame)."""
        held = self._held.pop(0) if self._held else {}
        for i, keys in enumerate(later):
            part = {key: updates.pop(key) for key in keys if key in updates}
            if part:
                while len(self._held) <= i:
                    self._held.append({})
                self._held[i].update(part)
        return {**held, **updates}

    def charts(self) -> bool:
        """Whether this frame redraws the charts (counting frames)."""
        self.count += 1
        return (self.count - 1) % self.every == 0

    def changed(self, updates: dict) -> dict:
        out = {}
        for key, value in updates.items():
            if isinstance(value, (str, dict)) and self._sent.get(key, UNSENT) == value:
                continue
            if isinstance(value, (str, dict)):
                self._sent[key] = value
            out[key] = value
        return out


class Watches:
    """The Watch view's running watches, by their start t0: Stop watching sets its event, and the watch itself then
    draws its last frame (one event's frames arrive in order: no frame of the watch lands after "Stopped")."""

    def __init__(self):
        self._stops: dict[float, threading.Event] = {}
        self._lock = threading.Lock()

    def start(self, t0: float) -> threading.Event:
        with self._lock:
            return self._stops.setdefault(t0, threading.Event())

    def stop(self, t0: float) -> bool:
        """Ask the watch that started at t0 to end; False when none is running (it ended, or its page reloaded)."""
        with self._lock:
            event = self._stops.get(t0)
        if event is not None:
            event.set()
        return event is not None

    def end(self, t0: float) -> None:
        with self._lock:
            self._stops.pop(t0, None)


def watch_clients(traffic, out, watches: Watches, cancel_after: float = WATCH_FOR, clients_view=clients_view):
    """Redraw the endpoint's clients about once a second, counting time from the moment watching starts (a
    generator: Stop watching, or closing the page, ends it; the start goes to out.clients_since): the lines and
    tables that changed each second, the charts every CHARTS_EVERY seconds (Frames). `clients_view`: how a frame
    is drawn (remote_watch.watch_view's, with the page's remote runs); `traffic` keeps the clock."""
    def watch():
        start, t0 = time.monotonic(), traffic.now()
        stop, frames = watches.start(t0), Frames()
        try:
            while time.monotonic() - start < cancel_after:
                frame = clients_view(traffic, t0, out, charts=frames.charts())
                later = [[out.clients_kv_map], [out.clients_classes]]   # a chart or table a frame, one drawing
                yield {**frames.changed(frames.stagger(frame, later)), out.clients_since: t0}
                if stop.wait(1.0):
                    yield clients_view(traffic, t0, out, final=True)
                    return
            yield {**clients_view(traffic, t0, out, final=True),
                   out.clients_status: "stopped watching after 30 minutes: press Watch again"}
        finally:
            watches.end(t0)
    return watch


def unwatch_clients(traffic, out, watches: Watches, clients_view=clients_view):
    """Stop watching: the running watch draws its last frame itself; a watch that already ended gets it here (the
    requests since the watch started, no longer running)."""
    def unwatch(t0):
        if t0 is None or watches.stop(t0):
            return gr.skip()   # nothing changes here (Gradio reads an empty dict as one value, and refuses it)
        return clients_view(traffic, t0, out, final=True)
    return unwatch


def export_watch(traffic):
    """The Watch view's download: the clients' requests since the watch started as a Perfetto trace and as session
    lines (serve/agent_trace.py: each request's session, the gap before each turn; paths for the gr.File, written to
    the session's folder), or a warning before any watch."""
    def export(t0, job: ServeJob):
        if t0 is None:
            gr.Warning("Press Watch first: the trace holds the requests since you started watching.")
            return None
        watched = traffic.since(t0)
        return job.watch_exports.write({"clients-perfetto.json": watch_json(watched),
                                        "clients-sessions.jsonl": sessions_jsonl(watched)})
    return export


def token_cost(usd_per_hour, job: ServeJob, session=None) -> str:
    """What a token costs on this machine (serve/cost.py): the job's batch-size sweeps and the Generate session's runs."""
    traces = [] if session is None else [*session.earlier, *([session.trace] if session.trace is not None else [])]
    try:
        rows = token_costs(usd_per_hour, measured_rates(job.sweeps, traces))
    except ValueError as exc:
        return warn(str(exc))
    return cost_markdown(rows, float(usd_per_hour), DEFAULT_USD_PER_M_OUTPUT)


def serve_tab(registry, room: Room, session=None, remote=None) -> list:
    """Lay out the tab and wire its events; returns the handlers (kept out of the machine gate).

    `room`: the app's Room (serve/room.py): a workload takes its machine gate alone; the Watch view draws its client
    traffic (when it records one). `session`: the Generate tab's gr.State (its runs give the one-at-a-time and speculative rates); `remote`: the
    page's runs on remote servers (serve.remote_record.RemoteRecord), drawn by the Watch view too."""
    gate, traffic = room.gate, room.traffic
    out, form, sweep_form, buttons = layout(registry, traffic, remote, room.served, room.client_share)
    job = gr.State(ServeJob(), delete_callback=ServeJob.close)
    handlers = ServeHandlers(registry, SimpleNamespace(serve=form, sweep=sweep_form, job=job), out, gate, room)
    outputs = [getattr(out, name) for name in OUTPUTS]
    # in the CPU queue, like Generate; the machine gate (not the queue) makes a workload run alone
    run = buttons.run.click(handlers.serve, form_inputs(ServeForm, form, states=[job]), outputs, api_name="serve",
                            concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE)
    swept = buttons.sweep.click(handlers.sweep, form_inputs(SweepForm, sweep_form, states=[job]), outputs, api_name="serve_sweep",
                                concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE)
    replayed = buttons.replay.click(handlers.replay, form_inputs(ReplayForm, form, states=[job]), outputs,
                                    api_name="serve_replay", concurrency_limit=GENERATE_CONCURRENCY,
                                    concurrency_id=CPU_QUEUE)
    buttons.stop.click(handlers.stop, job, outputs, api_name="serve_stop", cancels=[run, swept, replayed],
                       concurrency_limit=None)
    cost_inputs = [buttons.price, job] + ([session] if session is not None else [])   # no model call: no queue
    buttons.cost.click(token_cost, cost_inputs, out.token_cost, api_name="token_cost", concurrency_limit=None)
    swept.then(token_cost, cost_inputs, out.token_cost, api_visibility="private", concurrency_limit=None)
    if traffic is not None or remote is not None:   # drawing only: the engine loop or the server computes
        clients = [out.clients_limits, out.clients_status, out.clients_gantt, out.clients_kv_map,
                   out.clients_classes, out.clients_refused] + ([out.clients_server] if remote is not None else []) + [
                   out.clients_shares]   # added last: an API client's earlier outputs keep their places
        watches = Watches()   # Stop watching asks the watch to draw its own last frame: none of it lands after
        def draw(_clock, t0, out, final=False, charts=True):   # clients_view's: the endpoint's and the remote runs
            updates = watch_view(traffic, remote, t0, out, final, charts)
            held = held_line(None if final else gate.paused())   # who holds the machine, for how long
            if held and out.clients_status in updates:
                updates[out.clients_status] = f"{held}<br>{updates[out.clients_status]}"
            return updates
        clock = traffic if traffic is not None else remote   # one clock for both (app.py)
        # no progress overlay on the outputs: the status line says what the watch is doing, and an overlay's
        # timers and animation on each of the eight outputs cost the page work every frame
        buttons.watch.click(watch_clients(clock, out, watches, clients_view=draw), None,
                            [*clients, out.clients_since], api_name="serve_watch", concurrency_limit=None,
                            show_progress="hidden")
        buttons.unwatch.click(unwatch_clients(clock, out, watches, clients_view=draw), out.clients_since, clients,
                              api_visibility="private", concurrency_limit=None)
        buttons.export.click(export_watch(clock), [out.clients_since, job], out.clients_download,
                             api_visibility="private", concurrency_limit=None)
    preset_targets = {"scheduler_b": form.scheduler_b, "n": form.n, "arrival": form.arrival, "rate": form.rate,
                      "about": out.preset_about}

    def on_preset(name):
        return {preset_targets[k]: v for k, v in apply_preset(name).items()}
    form.preset.change(on_preset, form.preset, list(preset_targets.values()), api_visibility="private", concurrency_limit=None)
    for box in buttons.slo:   # cheap: no model call, so outside the CPU queue
        box.change(rejudge, [*buttons.slo, job], out.goodput, api_name="serve_goodput", concurrency_limit=None)
    return [handlers.serve, handlers.sweep]
