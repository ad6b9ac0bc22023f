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
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import gradio as gr

from ..experiments import EXPERIMENTS
from ..run_view import format_seconds
from .export_folder import ExportFolder
from .common import (CPU_QUEUE, GENERATE_CONCURRENCY, SourceUnavailable, backend_dropdown, described_dropdown,
                     loading_line, source, warn)
from ..jobs import BackgroundJob

# the sliders, in the order /experiment takes them: every parameter of every experiment
SLIDERS = [(spec, param) for spec in EXPERIMENTS.values() for param in spec.params]
FIRST = next(iter(EXPERIMENTS))   # the experiment the tab opens on


@dataclass
class ExperimentForm:
    """The Experiments tab's inputs: /experiment's, in this order (the name, the backend, then every slider's
    value in SLIDERS' order; `values` keys them by experiment, then parameter)."""
    name: str
    backend: str
    values: dict[str, dict[str, float]] = field(default_factory=dict)

    def api_args(self) -> tuple:
        """The values an API client passes, in order: a slider of another experiment (or not given) at its default."""
        return (self.name, self.backend,
                *[self.values.get(spec.name, {}).get(p.name, p.default) for spec, p in SLIDERS])


class Job(BackgroundJob):
    """One session's experiment (BackgroundJob): its result, the result's figure, and its exported file."""

    def __init__(self):
        super().__init__()
        self.figure, self.exports = None, ExportFolder("experiment-")

    def close(self) -> None:
        """The session is gone: stop the experiment and delete its files."""
        self.cancel.set()
        self.exports.remove()

    def run(self, name: str, options: dict, source) -> None:
        spec = EXPERIMENTS[name]
        self.figure = None

        def work(job):
            result = spec.run(source, options, job.report, job.cancel)
            job.figure = spec.plot(result)
            return result
        self.start(work, name=f"experiment-{name}")


def describe_experiment(name: str) -> str:
    """The info line under the Experiment dropdown (its box shows the short name).

    >>> describe_experiment("cache")
    'Cache vs no cache: what does the KV cache save?'
    """
    spec = EXPERIMENTS.get(name)
    return f"{spec.title}: {spec.question}" if spec else ""


def slider_label(param) -> str:
    """A parameter's label without its experiment's name (the Experiment dropdown above says it).

    >>> slider_label(EXPERIMENTS["cache"].params[0])
    'prompt tokens'
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


def read_experiment(form: SimpleNamespace, values: dict) -> ExperimentForm:
    """A dict input's values ({component: value}) as an ExperimentForm; `form` names the components (name,
    backend, and `sliders`: one per (spec, param) of SLIDERS)."""
    given: dict[str, dict[str, float]] = {}
    for (spec, param), slider in zip(SLIDERS, form.sliders):
        given.setdefault(spec.name, {})[param.name] = values[slider]
    return ExperimentForm(values[form.name], values[form.backend], given)


@dataclass
class ExperimentHandlers:
    """The Experiments tab's events, one method each: Run (`run`, dict inputs keyed by the components `form` names;
    `start` takes the typed ExperimentForm) and Cancel (`cancel`)."""
    registry: Any
    form: SimpleNamespace
    out: SimpleNamespace

    def run(self, values: dict):
        yield from self.start(read_experiment(self.form, values), values[self.form.job])

    def start(self, f: ExperimentForm, job: Job):
        """Load the backend, read the experiment's options, run it in the job's thread, stream its progress bar."""
        out = self.out
        if f.name not in EXPERIMENTS:
            yield {out.status: warn(f"experiment must be one of {', '.join(EXPERIMENTS)}; got {f.name!r}")}
            return
        for line in self.registry.loading(f.backend):
            yield {out.status: loading_line(line)}
        try:
            picked = source(self.registry, f.backend)
            options = EXPERIMENTS[f.name].values(f.values.get(f.name, {}))
        except (SourceUnavailable, ValueError) as exc:
            yield {out.status: warn(str(exc))}
            return
        job.run(f.name, options, picked)
        yield from job.follow(lambda final, tick: outcome(job, out) if final else
                              {out.status: f"⏳ {bar(job.fraction)} · {job.message}"}, every=0.4)

    def cancel(self, job: Job):
        if job.thread is None:
            return {self.out.status: warn("no experiment has run in this session")}
        return outcome(job, self.out) if job.stop(wait=60) else {self.out.status: "still stopping…"}


def experiments_tab(registry) -> None:
    with gr.Tab("Experiments", id="experiments"):
        gr.Markdown("Each experiment measures the chosen backend directly (greedy, no sampling); every "
                    "number is measured, and fits are labelled as fits. TTFT = time to first token.")
        form = SimpleNamespace(sliders=[])
        with gr.Row():
            form.name = described_dropdown(list(EXPERIMENTS), FIRST, "Experiment", describe_experiment,
                                           elem_id="experiment-name")
            form.backend = backend_dropdown(registry, elem_id="experiment-backend")
        groups = {}
        for spec in EXPERIMENTS.values():
            with gr.Row(visible=spec.name == FIRST) as groups[spec.name]:
                form.sliders += [gr.Slider(p.low, p.high, value=p.default, step=1, label=slider_label(p),
                                      elem_id=f"experiment-{spec.name}-{p.name}", min_width=320) for p in spec.params]
        with gr.Row():
            start = gr.Button("Run", variant="primary", elem_id="experiment-run")
            stop = gr.Button("Cancel", variant="stop", elem_id="experiment-cancel")
        out = SimpleNamespace(status=gr.Markdown(elem_classes="status", elem_id="experiment-status"),
                              figure=gr.Plot(label="Result", elem_id="experiment-plot"),
                              summary=gr.Markdown(elem_id="experiment-summary"),
                              download=gr.File(label="The result as JSON", interactive=False))
        # inside the tab: a State between tabs doubles the next one
        form.job = gr.State(Job(), delete_callback=Job.close)
    handlers = ExperimentHandlers(registry, form, out)
    outputs = [getattr(out, name) for name in OUTPUTS]
    form.name.change(lambda n: [gr.update(visible=k == n) for k in groups], form.name, list(groups.values()),
                     api_visibility="private", queue=False)
    inputs = {form.name, form.backend, *form.sliders, form.job}   # made in ExperimentForm.api_args' order
    event = start.click(handlers.run, inputs, outputs, api_name="experiment",
                        concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CPU_QUEUE, show_progress="hidden")
    stop.click(handlers.cancel, form.job, outputs, api_name="cancel_experiment", cancels=[event], concurrency_limit=None,
               show_progress="hidden")
