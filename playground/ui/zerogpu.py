"""ZeroGPU, the shared GPUs of Hugging Face Spaces: CUDA is attached to the process only inside a function
decorated with `spaces.GPU(duration=…)`, for at most that many seconds, after a wait in ZeroGPU's queue.

    if zero_gpu():                       # SPACES_ZERO_GPU, read as the `spaces` package reads it
        wrap_gpu_handlers(demo)          # after build_demo's handlers exist: the GPU work runs in spaces.GPU

The GPU work is the handlers in GPU_WORK (by API name: Generate, Compare, Experiments, the Lesson's runs,
Serve); each asks for a duration fitted to its request: its base seconds plus SECONDS_PER_TOKEN for every
token the request may decode (the inputs labelled as token budgets, times the number of requests when
one is given), capped at MAX_SECONDS. Before each, the page shows a notice that the run first waits for a
GPU (WAITING); that wait happens before the handler starts its clock, so no measured time includes it.
Elsewhere nothing changes, and `spaces` need not be installed (a Space has it preinstalled). Every GPU_WORK
handler takes Gradio's dict inputs (one dict keyed by component, and a gr.Request where it asks for one), the
shape the wrapper and the duration take.

Left out: `spaces` runs a decorated function in a forked worker; state the handler leaves in that worker
(an engine loaded there) is not seen by the main process. Not tried on a real ZeroGPU Space.
"""
from __future__ import annotations

import functools
import inspect
import os

import gradio as gr

GPU_WORK = {"generate": 30, "compare": 60, "experiment": 120, "lesson_next": 60, "lesson_prev": 60,
            "lesson_run": 60, "serve": 120, "serve_sweep": 240}   # API name -> base seconds (load and warm-up)
SECONDS_PER_TOKEN = 0.05   # a 135M model decodes a token in ~10-20 ms on a GPU: this leaves room for larger ones
MAX_SECONDS = 300
WAITING = "This Space runs on ZeroGPU: each run first waits for a GPU to be attached (seconds when it is idle, " \
          "longer when it is busy). The wait is not in the measured times."


def zero_gpu() -> bool:
    """True where the environment says ZeroGPU, as `spaces` decides it (SPACES_ZERO_GPU = 1, t or true)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def token_budget_inputs(labels: list[str | None]) -> tuple[list[int], int | None]:
    """(indices of the inputs that are token budgets, index of a request count or None), from input labels.

    >>> token_budget_inputs(["Prompt", "Max new tokens", "USD per 1M output tokens", "Cache: prompt tokens"])
    ([1], None)
    >>> token_budget_inputs(["Requests", "Short: max new tokens", "Long: max new tokens"])
    ([1, 2], 0)
    """
    budgets = [i for i, label in enumerate(labels) if label and "token" in label.lower()
               and not any(word in label.lower() for word in ("usd", "prompt", "ttft", "tpot"))]
    count = next((i for i, label in enumerate(labels) if label == "Requests"), None)
    return budgets, count


def duration_for(base: float, inputs: list):
    """A `spaces.GPU` duration callable: the seconds a request with these inputs may need (an estimate).
    `inputs`: the handler's input components; the duration reads the values of those labelled as token budgets.

    >>> prompt, budget = gr.Textbox(label="Prompt"), gr.Slider(1, 4096, label="Max new tokens")
    >>> duration_for(30, [prompt, budget])({prompt: "Hi", budget: 200})
    40
    >>> n, short = gr.Slider(1, 64, label="Requests"), gr.Slider(1, 256, label="Short: max new tokens")
    >>> duration_for(120, [n, short])({n: 100, short: 100_000})
    300
    """
    budgets, count = token_budget_inputs([getattr(block, "label", None) for block in inputs])

    def seconds(values: dict, request: gr.Request | None = None) -> int:
        tokens = sum(_number(values.get(inputs[i])) for i in budgets)
        if count is not None:
            tokens *= max(1, _number(values.get(inputs[count])))
        return int(min(MAX_SECONDS, base + SECONDS_PER_TOKEN * tokens))
    return seconds


def _number(value) -> float:
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return 0.0


def on_gpu(fn, duration):
    """`fn` (a handler of dict inputs) run inside spaces.GPU(duration=duration), after a notice on the page that
    it waits for a GPU. Gradio sees fn's own signature (functools.wraps): a gr.Request only where fn asks for one."""
    import spaces

    gpu_fn = spaces.GPU(duration=duration)(fn)
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def run(values: dict, request: gr.Request | None = None):
            gr.Info(WAITING, duration=5)
            yield from (gpu_fn(values) if request is None else gpu_fn(values, request))
    else:
        @functools.wraps(fn)
        def run(values: dict, request: gr.Request | None = None):
            gr.Info(WAITING, duration=5)
            return gpu_fn(values) if request is None else gpu_fn(values, request)
    run.zero_gpu_seconds = duration
    return run


def wrap_gpu_handlers(demo: gr.Blocks) -> list[str]:
    """On ZeroGPU, run every GPU_WORK handler of `demo` inside spaces.GPU; returns the API names wrapped
    (none elsewhere). Coroutines are left alone (spaces.GPU refuses them); TypeError for one that does not take
    dict inputs."""
    if not zero_gpu():
        return []
    wrapped = []
    for block_fn in demo.fns.values():
        fn, name = block_fn.fn, block_fn.api_name
        if name not in GPU_WORK or fn is None or inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            continue
        if not block_fn.inputs_as_dict:
            raise TypeError(f"/{name}: GPU work takes dict inputs (a set), as on_gpu passes one dict on")
        block_fn.fn = on_gpu(fn, duration_for(GPU_WORK[name], block_fn.inputs))
        wrapped.append(name)
    return wrapped
