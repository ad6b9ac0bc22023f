"""The Experiments tab: the four measured lessons (playground/experiments/) run from the browser.

Pick an experiment (the registry in experiments/registry.py gives each its sliders) and the source it
runs on, then Run: the experiment runs in a
worker thread while the handler streams one progress display, the status line's ▰▱ bar and message
from the experiment's own progress callback (Gradio's own progress overlay is hidden: it was drawn on
top of that bar). Cancel sets the session's threading.Event (kept in gr.State) and
cancels the Gradio event; the experiment stops at its next measurement and Cancel shows the partial
result. Output: the chart, the result in words with units (the result's `findings()`), naming the backend
it ran on, and the result as JSON (raw keys).
API names: /experiment, /cancel_experiment.

Serialized with generation: /experiment shares Generate's concurrency_id ("generate") and limit, so
generate, compare and experiments together never run more than GENERATE_CONCURRENCY at once on the
two cores. That limit is 2, so an experiment can still overlap one other request; its timings then
show it (the prefill sweep's repeats go round-robin to spread such bursts). A limit of 1 everywhere
would make every generate wait behind a minute-long sweep, which we judged worse for a live demo.

Left out: running several experiments in one click (the CLI `python -m playground.experiments all`).
"""
from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import gradio as gr

from ..experiments import EXPERIMENTS
from ..run_view import format_seconds
from ..session import ABANDONED_AFTER, ExportFolder
from .common import CPU_QUEUE, GENERATE_CONCURRENCY, backend_dropdown, described_dropdown, engine_or_message, loading_line, warn

# the sliders, in the order the handler receives them: every parameter of every experiment
SLIDERS = [(spec, param) for spec in EXPERIMENTS.values() for param in spec.params]


class Job:
    """One session's experiment: its cancel Event, worker thread, and what it produced."""

    def __init__(self):
        self.cancel, self.thread, self.result, self.figure, self.error = threading.Event(), None, None, None, None
        self.fraction, self.message, self.asked = 0.0, "starting", time.monotonic()
        self.exports = ExportFolder("experiment-")

    def close(self) -> None:
        """The session is gone: stop the experiment and delete its files."""
        self.cancel.set()
        self.exports.remove()

    def __deepcopy__(self, memo):   # gr.State copies its initial value per session; an Event can't be copied
        return Job()

    def start(self, name: str, options: dict, source) -> None:
        self.cancel, self.result, self.figure, self.error = threading.Event(), None, None, None
        self.fraction, self.message, self.asked = 0.0, "starting", time.monotonic()
        spec = EXPERIMENTS[name]

        def work():
            try:
                self.result = spec.run(source, options, self.report, self.cancel)
                self.figure = spec.plot(self.result)
            except Exception as exc:   # noqa: BLE001 - shown to the user; the app keeps serving
                self.error = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        self.thread = threading.Thread(target=work, daemon=True, name=f"experiment-{name}")
        self.thread.start()

    def report(self, fraction: float, message: str) -> None:
        self.fraction, self.message = fraction, message
        if time.monotonic() - self.asked > ABANDONED_AFTER:
            self.cancel.set()   # the page stopped asking (its handler dropped without being closed)

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


def describe_experiment(name: str) -> str:
    """The info line under the Experiment dropdown (its box shows the short name).

    >>> describe_experiment("cache")
    'Cache vs no cache: what does the KV cache save?'
    """
    spec = EXPERIMENTS.get(name)
    return f"{spec.title}: {spec.question}" if spec else ""


def slider_label(param) -> str:
    """A parameter's label without its experiment's name (the Experiment dropdown above says it).

    >>> slider_label(EXPERIMENTS["prefill"].params[0])
    'min prompt length'
    """
    return param.label.partition(": ")[2] or param.label


def summary_markdown(result) -> str:
    """The result in words with units (the result's own findings), under a line naming what it ran on."""
    head = f"**{EXPERIMENTS[result.NAME].title}** on {result.info.describe()} · {format_seconds(result.elapsed)}"
    if result.cancelled:
        head += " · **cancelled: partial result**"
    lines = [f"- {line}" for line in result.findings()]
    return "\n".join([head, *lines]) if lines else head + "\n- (too little measured for a summary)"


OUTPUTS = ("figure", "summary", "download", "status")   # /experiment returns these, in this order


def outcome(job: Job, out: SimpleNamespace) -> dict:
    """The updates once the worker is done: chart, summary, JSON file and status (or the error alone)."""
    if job.error:
        return {out.status: warn(job.error)}
    [path] = job.exports.write({f"{job.result.NAME}.json": json.dumps(job.result.to_dict(), indent=1,
                                                                    ensure_ascii=False)})
    status = "cancelled: the partial result is shown" if job.result.cancelled else "finished"
    return {out.figure: job.figure, out.summary: summary_markdown(job.result), out.download: str(path),
            out.status: status}


def bar(fraction: float) -> str:
    return "▰" * round(fraction * 20) + "▱" * (20 - round(fraction * 20)) + f" {fraction:.0%}"


def make_handlers(registry, out: SimpleNamespace):
    def run(name, backend, job: Job, *values):
        if name not in EXPERIMENTS:
            yield {out.status: warn(f"experiment must be one of {', '.join(EXPERIMENTS)}; got {name!r}")}
            return
        for line in registry.loading(backend):
            yield {out.status: loading_line(line)}
        source = engine_or_message(registry, backend)
        if isinstance(source, str):
            yield {out.status: warn(source)}
            return
        given = {param.name: value for (spec, param), value in zip(SLIDERS, values) if spec.name == name}
        try:
            options = EXPERIMENTS[name].values(given)
        except ValueError as exc:
            yield {out.status: warn(str(exc))}
            return
        job.start(name, options, source)
        try:
            while job.running():
                job.asked = time.monotonic()
                yield {out.status: f"⏳ {bar(job.fraction)} · {job.message}"}
                job.thread.join(0.4)
        finally:   # the handler was closed (event cancelled, tab gone): the worker thread stops too
            if job.running():
                job.cancel.set()
        yield outcome(job, out)

    def cancel(job: Job):
        if job.thread is None:
            return {out.status: warn("no experiment has run in this session")}
        job.cancel.set()
        job.thread.join(timeout=60)
        return outcome(job, out) if not job.running() else {out.status: "still stopping…"}
    return run, cancel


def experiments_tab(registry) -> None:
    with gr.Tab("Experiments", id="experiments"):
        gr.Markdown("Each experiment measures the chosen backend directly (greedy, no sampling); every "
                    "number is measured, and fits are labelled as fits. TTFT = time to first token.")
        with gr.Row():
            name = described_dropdown(list(EXPERIMENTS), "prefill", "Experiment", describe_experiment,
                                      elem_id="experiment-name")
            backend = backend_dropdown(registry, elem_id="experiment-backend")
        groups, sliders = {}, []
        for spec in EXPERIMENTS.values():
            with gr.Row(visible=spec.name == "prefill") as groups[spec.name]:
                sliders += [gr.Slider(p.low, p.high, value=p.default, step=1, label=slider_label(p),
                                      elem_id=f"experiment-{spec.name}-{p.name}", min_width=320) for p in spec.params]
        with gr.Row():
            start = gr.Button("Run", variant="primary", elem_id="experiment-run")
            stop = gr.Button("Cancel", variant="stop", elem_id="experiment-cancel")
        out = SimpleNamespace(status=gr.Markdown(elem_classes="status", elem_id="experiment-status"),
                              figure=gr.Plot(label="Result", elem_id="experiment-plot"),
                              summary=gr.Markdown(elem_id="experiment-summary"),
                              download=gr.File(label="The result as JSON", interactive=False))
        job = gr.State(Job(), delete_callback=Job.close)   # inside the tab: a State between tabs doubles the next one
    run, cancel = make_handlers(registry, out)
    outputs = [getattr(out, name) for name in OUTPUTS]
    name.change(lambda n: [gr.update(visible=k == n) for k in groups], name, list(groups.values()),
                api_name=False, queue=False)
    event = start.click(run, [name, backend, job, *sliders], outputs, api_name="experiment",
                        concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE, show_progress="hidden")
    stop.click(cancel, job, outputs, api_name="cancel_experiment", cancels=[event], concurrency_limit=None,
               show_progress="hidden")
