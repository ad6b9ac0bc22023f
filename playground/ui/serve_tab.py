"""The Serve tab: many different requests share one engine, live, per request, on two schedulers side by side.

Edit the workload (how many requests, the two classes' prompts, budgets and shares, how they arrive),
pick scheduler A (and B for the same workload replayed), Run: the workload runs in a worker thread
holding the machine alone (machine_gate.py) while the handler redraws the Gantt charts, tables and the
lesson sentences about once a second (serve_views.py). Stop cancels every request within one step.
Sweeps (batch size, arrival rate with an SLO, prefill chunk on the interference preset) run from the accordion
below with the same gate.
Below the sweeps, what a token costs on this machine (serve/cost.py): a price per hour over the output tokens
per hour measured by the batch-size sweep and the Generate tab's runs.
API names: /serve, /serve_stop, /serve_sweep, /token_cost.

Left out: more than two classes in the editor (the CLI replays any workload.json).
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr

from ..serve import MAX_REQUESTS, SCHEDULERS, RequestClass, Workload, check_tokens, fit_to_window
from ..serve.registry import Needs
from ..serve.batching_torch import PoolConfig
from ..serve.batching import BatchConfig
from ..serve.perfetto import watch_json
from ..serve.presets import CACHE_POSITIONS, INTERFERENCE, PRESETS
from ..serve.sweeps import run_batch_sweep, run_chunk_sweep, run_rate_sweep
from ..config import GenerationSettings
from ..serve.cost import cost_markdown, measured_rates, token_costs
from ..roofline import machine_ceilings
from ..source import Origin
from .common import (CPU_QUEUE, DEFAULT_USD_PER_M_OUTPUT, FRANCE, GENERATE_CONCURRENCY, SUMMARIZE,
                     SourceUnavailable, loading_line, long_document, source, warn)
from .forms import form_inputs, read_form
from .machine_gate import MachineGate
from .serve_job import ServeJob
from .serve_layout import DEFAULT_RATE, NONE, ServeForm, SweepForm, WorkloadForm, layout
from .remote_watch import watch_view
from .serve_views import OUTPUTS, clients_view, not_run, goodput_markdown, sweep_roofline, sweep_view, view


def make_scheduler(registry, name: str, source_name: str, options: dict):
    """(scheduler, None) or (None, a message saying why not). `options`: the batching schedulers' (batch, pool)."""
    if name not in SCHEDULERS:
        return None, f"scheduler must be one of {', '.join(SCHEDULERS)}; got {name!r}"
    spec = SCHEDULERS[name]
    if spec.needs == Needs.TORCH and Needs.TORCH not in registry.names:
        return None, f"{spec.label} runs on the torch backend, which this app does not offer"
    try:
        picked = source(registry, source_for(name, source_name))
    except SourceUnavailable as exc:
        return None, str(exc)
    if spec.needs == Needs.REMOTE and picked.info.origin != Origin.REMOTE:
        return None, f"{spec.label} needs a remote server as its source; {picked.info.name} runs in this process"
    try:
        return spec.create(picked, **options), None
    except ValueError as exc:
        return None, str(exc)


def source_for(scheduler: str, source_name: str) -> str:
    """The source a scheduler runs on: the one picked, except transformers' manager, which runs on torch."""
    spec = SCHEDULERS.get(scheduler)
    return Needs.TORCH.value if spec is not None and spec.needs == Needs.TORCH else source_name


def build_workload(scheduler, form: WorkloadForm) -> Workload:
    runs_on = scheduler.source
    classes = [RequestClass("short", form.short_prompt, int(form.short_tokens), float(form.short_share)),
               RequestClass("long", fit_to_window(runs_on, form.long_prompt or "", int(form.long_tokens))[0],
                            int(form.long_tokens), float(form.long_share))]
    rate = float(form.rate) if form.arrival != "all-at-once" else None
    workload = Workload.build(classes, int(form.n), form.arrival, rate, int(form.seed))
    if runs_on.capabilities.local_tokenizer:
        check_tokens(workload, lambda p: len(runs_on.prompt_ids(p, GenerationSettings())[1]))
    return workload


def preset_schedulers(preset, schedulers, form) -> Workload:
    """A preset's workload (the form's count, rate and seed) on A's source; `schedulers` become our batching with
    the preset's A and B settings (in place). ValueError when the workload is too large."""
    engine = schedulers[0].source
    rate = float(form.rate) if form.arrival != "all-at-once" else None
    workload = preset.build(engine, int(form.n), rate, int(form.seed))
    count = lambda p: len(engine.prompt_ids(p, GenerationSettings())[1])   # noqa: E731
    check_tokens(workload, count)
    base = schedulers[0].config
    for i, config in enumerate(preset.configs(workload, count, replace(base, prefix_cache=0, kv_budget=0))):
        schedulers[i] = SCHEDULERS["batching"].create(engine, batch=config)
    return workload


def measure_preset(job, preset, source) -> None:
    """A preset's figures measured after both runs (the machine still held): the finding's keywords."""
    job.measured = {}
    if preset is not None and preset.measure and all(r.done and not r.cancelled for r in job.results):
        job.report(1.0, "replaying the requests whose tokens parted, teacher-forced")
        job.measured = preset.measure(source, *job.results, job.cancel)


def apply_preset(name: str):
    """A preset picked: our batching on both sides, its request count and arrivals, what it shows."""
    preset = PRESETS.get(name)
    if preset is None:
        return {}
    return {"scheduler_b": "batching", "n": preset.requests, "arrival": "poisson" if preset.rate else "all-at-once",
            "rate": preset.rate or DEFAULT_RATE, "about": f"**{preset.name}**: {preset.about}."}


def sweep_mix(requests) -> WorkloadForm:
    """The rate sweep's workload: the lesson's two requests (a question, a document to summarize), Poisson."""
    return WorkloadForm(n=requests, arrival="poisson", rate=1.0, seed=0, short_prompt=FRANCE, short_tokens=48,
                        short_share=0.8, long_prompt=SUMMARIZE + long_document(), long_tokens=48, long_share=0.2)


def chunk_sweep_input(scheduler, text) -> tuple[list[int], Workload]:
    """The prefill-chunk sweep's sizes (from "32,64,…") and its workload: the preset "a long document among
    chatters" on the scheduler's source, with its own request count and arrivals; ValueError in words."""
    try:
        chunks = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        chunks = []
    if not chunks or not all(16 <= x <= 4096 for x in chunks):
        raise ValueError("prefill chunks must be whole numbers between 16 and 4096, e.g. 32,64,128,256,512")
    preset, engine = PRESETS[INTERFERENCE], scheduler.source
    workload = preset.build(engine, preset.requests, preset.rate, 0)
    check_tokens(workload, lambda p: len(engine.prompt_ids(p, GenerationSettings())[1]))
    return chunks, workload


def replace_chunk(scheduler, chunk: int):
    """Our batching as `scheduler` is, reading `chunk` prompt tokens per iteration."""
    return SCHEDULERS["batching"].create(scheduler.source, batch=replace(scheduler.config, prefill_chunk=chunk))


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


def make_handlers(registry, forms: SimpleNamespace, out: SimpleNamespace, gate: MachineGate):
    """serve, stop, sweep, rejudge; `forms` names the components: `serve` (ServeForm's), `sweep` (SweepForm's) and
    `job` (the session's ServeJob State), the keys of the handlers' dict inputs."""
    def prepare(job, names):
        if job.running():
            yield {out.status: warn("a workload is already running in this session: Stop it first")}
            return
        for name in names:
            for line in registry.loading(name):
                yield {out.status: loading_line(line)}

    def serve(values: dict):
        f, job = read_form(ServeForm, forms.serve, values), values[forms.job]
        preset = PRESETS.get(f.preset)
        try:
            pool = PoolConfig(num_blocks=int(f.blocks) or None, max_batch_tokens=int(f.max_batch_tokens),
                              scheduler=f.manager)
            sides = [{"batch": BatchConfig(int(f.slots), int(f.chunk), CACHE_POSITIONS if cache else 0,
                                           int(budget or 0)).validate(), "pool": pool}
                     for cache, budget in ((f.prefix_cache_a, f.kv_budget_a), (f.prefix_cache_b, f.kv_budget_b))]
        except (ValueError, TypeError) as exc:
            yield {out.status: warn(str(exc))}
            return
        picked = [(s, src, o) for s, src, o in ((f.scheduler_a, f.source_a, sides[0]), (f.scheduler_b, f.source_b,
                                                                                        sides[1])) if s != NONE]
        if preset is not None:   # our batching twice on A's source; the preset sets what differs
            picked = [("batching", f.source_a, sides[0]), ("batching", f.source_a, sides[1])]
        yield from prepare(job, [source_for(s, src) for s, src, _ in picked])
        if job.running():
            return
        made = [make_scheduler(registry, s, src, o) for s, src, o in picked]
        if any(msg for _, msg in made):
            yield {out.status: warn(next(msg for _, msg in made if msg))}
            return
        schedulers = [s for s, _ in made]
        try:
            workload = build_workload(schedulers[0], f) if preset is None else preset_schedulers(
                preset, schedulers, f)
        except (ValueError, TypeError) as exc:
            yield {out.status: warn(str(exc))}
            return
        job.preset = preset
        if not (yield from acquire(gate, out.status)):
            yield {out.status: warn(BUSY)}
            return

        def work(job):
            job.results = [s.prepare(workload) for s in schedulers]
            for s, result in zip(schedulers, job.results):
                if job.cancel.is_set():   # stopped before this one began: it did not run
                    not_run(result)
                else:
                    s.run(workload, job.report, job.cancel, result)
            measure_preset(job, preset, schedulers[0].source)
        job.run(work, gate)
        yield from job.follow(lambda final, tick: view(job, out, charts=tick % 3 == 0, final=final), every=1.0)

    def stop(job: ServeJob):
        if job.thread is None:
            return {out.status: warn("no workload has run in this session")}
        return view(job, out, final=True) if job.stop(wait=15) else {out.status: "still stopping…"}

    def sweep(values: dict):
        f, job = read_form(SweepForm, forms.sweep, values), values[forms.job]
        chunked = f.kind == "chunk"   # the prefill-chunk sweep runs our batching, whichever scheduler is picked
        name = "batching" if chunked else f.scheduler
        yield from prepare(job, [source_for(name, f.source)])
        if job.running():
            return
        scheduler, msg = make_scheduler(registry, name, f.source, {"batch": BatchConfig(), "pool": PoolConfig()})
        try:
            if msg:
                raise ValueError(msg)
            if chunked:
                chunks, base = chunk_sweep_input(scheduler, f.chunks)
            else:
                sizes = [int(x) for x in str(f.sizes).split(",") if x.strip()]
                if not sizes or not all(1 <= x <= MAX_REQUESTS for x in sizes):
                    raise ValueError(f"batch sizes must be whole numbers between 1 and {MAX_REQUESTS}, e.g. 1,2,4,8,16")
                rates = [float(x) for x in str(f.rates).split(",") if x.strip()]
                base = build_workload(scheduler, sweep_mix(f.requests))
        except ValueError as exc:
            yield {out.status: warn(str(exc))}
            return
        if not (yield from acquire(gate, out.status)):
            yield {out.status: warn(BUSY)}
            return
        slo = (float(f.ttft) if f.ttft else None, float(f.tpot) if f.tpot else None)

        def work(job):
            job.roofline = None
            if f.kind == "batch":
                sweep = run_batch_sweep(scheduler, sizes, int(f.new_tokens), progress=job.report, cancel=job.cancel,
                                        live=job.sweeps)
                if not sweep.cancelled:   # the machine is still this job's alone: measure its ceilings (cached)
                    job.report(1.0, "measuring the machine's ceilings for the roofline")
                    ceilings = machine_ceilings(cancel=job.cancel)
                    if not ceilings.cancelled:
                        job.roofline = sweep_roofline(sweep, scheduler.source, ceilings)
            elif chunked:
                at = lambda c: replace_chunk(scheduler, c)   # noqa: E731
                run_chunk_sweep(at, base, chunks, progress=job.report, cancel=job.cancel, live=job.sweeps)
            else:
                run_rate_sweep(scheduler, base, rates, *slo, progress=job.report, cancel=job.cancel, live=job.sweeps)
        job.run(work, gate)
        yield from job.follow(lambda final, tick: sweep_view(job, out, final), every=1.0)

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
    return serve, stop, sweep, rejudge


WATCH_FOR = 30 * 60   # seconds a page watches the clients before it stops by itself


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
    generator: Stop watching, or closing the page, ends it; the start goes to out.clients_since). `clients_view`:
    how a frame is drawn (remote_watch.watch_view's, with the page's remote runs); `traffic` keeps the clock."""
    def watch():
        start, t0 = time.monotonic(), traffic.now()
        stop = watches.start(t0)
        try:
            while time.monotonic() - start < cancel_after:
                yield {**clients_view(traffic, t0, out), out.clients_since: t0}
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
            return {}
        return clients_view(traffic, t0, out, final=True)
    return unwatch


def export_watch(traffic):
    """The Watch view's download: the clients' requests since the watch started as a Perfetto trace (a path for
    the gr.File, written to the session's folder), or a warning before any watch."""
    def export(t0, job: ServeJob):
        if t0 is None:
            gr.Warning("Press Watch first: the trace holds the requests since you started watching.")
            return None
        [path] = job.watch_exports.write({"clients-perfetto.json": watch_json(traffic.since(t0))})
        return path
    return export


def token_cost(usd_per_hour, job: ServeJob, session=None) -> str:
    """What a token costs on this machine (serve/cost.py): the job's batch-size sweeps and the Generate session's runs."""
    traces = [] if session is None else [*session.earlier, *([session.trace] if session.trace is not None else [])]
    try:
        rows = token_costs(usd_per_hour, measured_rates(job.sweeps, traces))
    except ValueError as exc:
        return warn(str(exc))
    return cost_markdown(rows, float(usd_per_hour), DEFAULT_USD_PER_M_OUTPUT)


def serve_tab(registry, gate: MachineGate, traffic=None, session=None, remote=None) -> list:
    """Lay out the tab and wire its events; returns the handlers (kept out of the machine gate).

    `session`: the Generate tab's gr.State (its runs give the one-at-a-time and speculative rates); `remote`: the
    page's runs on remote servers (serve.remote_record.RemoteRecord), drawn by the Watch view too."""
    out, form, sweep_form, buttons = layout(registry, traffic, remote)
    job = gr.State(ServeJob(), delete_callback=ServeJob.close)
    serve, stop, sweep, rejudge = make_handlers(registry, SimpleNamespace(serve=form, sweep=sweep_form, job=job),
                                                out, gate)
    outputs = [getattr(out, name) for name in OUTPUTS]
    # in the CPU queue, like Generate; the machine gate (not the queue) makes a workload run alone
    run = buttons.run.click(serve, form_inputs(ServeForm, form, states=[job]), outputs, api_name="serve",
                            concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE)
    swept = buttons.sweep.click(sweep, form_inputs(SweepForm, sweep_form, states=[job]), outputs, api_name="serve_sweep",
                                concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE)
    buttons.stop.click(stop, job, outputs, api_name="serve_stop", cancels=[run, swept], concurrency_limit=None)
    cost_inputs = [buttons.price, job] + ([session] if session is not None else [])   # no model call: no queue
    buttons.cost.click(token_cost, cost_inputs, out.token_cost, api_name="token_cost", concurrency_limit=None)
    swept.then(token_cost, cost_inputs, out.token_cost, api_visibility="private", concurrency_limit=None)
    if traffic is not None or remote is not None:   # drawing only: the engine loop or the server computes
        clients = [out.clients_limits, out.clients_status, out.clients_gantt, out.clients_kv_map,
                   out.clients_classes, out.clients_refused] + ([out.clients_server] if remote is not None else [])
        watches = Watches()   # Stop watching asks the watch to draw its own last frame: none of it lands after
        def draw(_clock, t0, out, final=False):   # clients_view's signature: the endpoint's and the remote runs
            return watch_view(traffic, remote, t0, out, final)
        clock = traffic if traffic is not None else remote   # one clock for both (app.py)
        buttons.watch.click(watch_clients(clock, out, watches, clients_view=draw), None,
                            [*clients, out.clients_since], api_name="serve_watch", concurrency_limit=None)
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
    return [serve, sweep]
