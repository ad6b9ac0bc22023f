"""ZeroGPU, the shared GPUs of Hugging Face Spaces, as it behaves: CUDA is attached only inside a function decorated
with `spaces.GPU(duration=…)`, which runs in a worker process forked from the app's, for at most that many seconds,
after a wait in ZeroGPU's queue; its arguments and every value it yields cross back by pickle, and whatever it
changes in the worker is lost to the app. A model reaches the GPU by a `.to("cuda")` in the main thread of the main
process before the page is launched (`spaces` intercepts it and hands the weights to each worker).

    if zero_gpu():                          # SPACES_ZERO_GPU, read as the `spaces` package reads it
        gpu_names = start_up(registry)      # at import, in the main thread: the torch engine loaded (to "cuda"),
                                            # then served by a GpuEngine: each run one spaces.GPU call

So the page's handlers, sessions, jobs, gate and exports stay in the app's process, where Gradio's state lives, and
only a run's forward passes happen on the GPU: `GpuEngine.run` sends the request (the prompt's ids and settings) to
`spaces.GPU`, whose worker runs the torch engine forked with the app and yields each Step back as it is made. The
CPU side (the ONNX backends, the 4-bit default among them, our continuous batching, the OpenAI-compatible endpoint)
runs outside spaces.GPU and costs no quota. A GPU call asks for RUN_SECONDS plus SECONDS_PER_TOKEN for each token
the run may make (at most MAX_SECONDS); that request is what ZeroGPU checks against the visitor's daily quota
(QUOTA), and the page says it (`cost_line`).

Left out: anything that computes on the torch model outside a run (speculative decoding's verify pass, transformers'
batching manager): the model's weights are not in the app's process after start-up, so those refuse with a reason.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from ..engine import Engine
from ..registry import SourceRegistry
from ..source import Capabilities, Run
from ..trace import StopReason, Trace

RUN_SECONDS = 10          # a GPU call's base: the worker's start and the prompt's prefill
SECONDS_PER_TOKEN = 0.05  # a 135M model decodes a token in ~10-20 ms on a GPU: room for larger ones
MAX_SECONDS = 300
QUOTA = ("ZeroGPU counts each call's requested duration against the visitor's daily GPU quota: 2 minutes "
         "without a Hugging Face account, a few minutes with a free one")
WAITING = ("This Space runs on ZeroGPU: a run on a GPU backend first waits for a GPU to be attached (seconds when "
           "it is idle, longer when it is busy); the wait is not in the measured times. " + QUOTA + ". The ONNX "
           "backends run on this Space's CPU and cost none.")


def zero_gpu() -> bool:
    """True where the environment says ZeroGPU, as `spaces` decides it (SPACES_ZERO_GPU = 1, t or true)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


@dataclass(frozen=True)
class RunRequest:
    """What a GPU call gets: a run as Engine._start takes it (pickled to the worker)."""
    prompt: str
    text: str
    ids: tuple[int, ...]
    settings: object          # GenerationSettings, validated in the app's process
    ignore_eos: bool = False
    use_cache: bool = True


@dataclass(frozen=True)
class RunEnd:
    """The last value a GPU call yields: how the worker's run ended."""
    stop_reason: str | None
    seed: int | None


def seconds_for(settings) -> int:
    """The duration a run asks ZeroGPU for (an estimate): RUN_SECONDS + SECONDS_PER_TOKEN per token, capped.

    >>> from playground.config import GenerationSettings
    >>> seconds_for(GenerationSettings(max_new_tokens=200)), seconds_for(GenerationSettings(max_new_tokens=2048))
    (20, 112)
    """
    return int(min(MAX_SECONDS, RUN_SECONDS + SECONDS_PER_TOKEN * settings.max_new_tokens))


class GpuEngine:
    """A torch Engine whose runs happen inside spaces.GPU: tokenizing here, the step loop in ZeroGPU's worker (`gpu`,
    the decorated generator: (name, RunRequest) -> Steps, then a RunEnd). Same Steps, same Trace, same Run."""
    capabilities = Capabilities()
    on_gpu = True

    def __init__(self, engine: Engine, gpu):
        self.engine, self.gpu, self.info = engine, gpu, engine.info

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def replay(self) -> dict:
        return self.engine.replay

    @property
    def backend(self):
        raise AttributeError(f"{self.info.name} runs on ZeroGPU, each run inside spaces.GPU: its model is not in this "
                             "process, so only whole runs are offered (no verify pass, no transformers batching)")

    def prompt_ids(self, prompt, settings):
        return self.engine.prompt_ids(prompt, settings)

    def encode(self, text: str) -> list[int]:
        return self.engine.encode(text)

    def warm_up(self) -> None:
        """Nothing: the engine warmed up at start-up, before the page was launched."""

    def cost_line(self, settings) -> str:
        return (f"ran on {self.info.name} inside spaces.GPU: asked ZeroGPU for {seconds_for(settings)} s of the "
                "visitor's daily GPU quota")

    def run(self, prompt: str, settings=None, prefix=None) -> Run:
        if prefix is not None:
            raise ValueError("a cached prefix lives with the model, which is in ZeroGPU's worker: none here")
        settings = _settings(settings)
        t0 = self.engine.clock()
        text, ids = self.engine.prompt_ids(prompt, settings)
        return self._start(RunRequest(prompt, text, tuple(ids), settings), t0)

    def run_ids(self, ids, settings=None, *, ignore_eos: bool = False, use_cache: bool = True) -> Run:
        settings = _settings(settings)
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("ids is empty: a run needs at least one prompt token")
        self.engine._check_length(len(ids))
        return self._start(RunRequest("", "", tuple(ids), settings, ignore_eos, use_cache), self.engine.clock())

    def generate(self, prompt: str, settings=None) -> Trace:
        return self.run(prompt, settings).wait()

    def _start(self, request: RunRequest, t0: float) -> Run:
        b = self.engine.backend
        trace = Trace(request.prompt, request.text, list(request.ids), request.settings, b.name, b.device, b.dtype,
                      b.model_name, b.kv_shape, tokenize_time=self.engine.clock() - t0,
                      ignore_eos=request.ignore_eos, use_cache=request.use_cache, replay=self.replay)
        return Run(trace, lambda run: self._steps(run, request), t0)

    def _steps(self, run: Run, request: RunRequest):
        calls = self.gpu(self.info.name, request)
        try:
            for item in calls:
                if isinstance(item, RunEnd):
                    run.trace.stop_reason, run.trace.seed = _stop_reason(item.stop_reason), item.seed
                    return
                run.trace.steps.append(item)
                yield item
                if run.cancelled:
                    run.trace.stop_reason = StopReason.CANCELLED
                    return
        finally:
            calls.close()   # a cancelled run or a closed handler: ZeroGPU stops the worker's generator


def _settings(settings):
    from ..config import GenerationSettings
    return (settings or GenerationSettings()).validate()


def _stop_reason(value):
    try:
        return StopReason(value)
    except ValueError:
        return value


def gpu_steps(registry: SourceRegistry):
    """The generator spaces.GPU runs in ZeroGPU's worker: the named engine (loaded at start-up, forked with the app)
    runs the request; each Step is yielded as it is made, then a RunEnd."""
    def steps(name: str, request: RunRequest):
        source = registry.engines.get(name)
        engine = getattr(source, "engine", source)
        if not isinstance(engine, Engine):
            raise RuntimeError(f"{name} was not loaded at start-up: ZeroGPU's worker only has what the app's process "
                               "had when it forked")
        run = engine._start(request.prompt, request.text, list(request.ids), request.settings, engine.clock(),
                            ignore_eos=request.ignore_eos, use_cache=request.use_cache)
        for step in run:
            yield step
        yield RunEnd(None if run.trace.stop_reason is None else str(run.trace.stop_reason), run.trace.seed)
    return steps


def gpu_names(registry: SourceRegistry) -> list[str]:
    """The registry's torch backends: the ones that run on the GPU on ZeroGPU."""
    from ..backends import BACKENDS
    return [n for n in registry.names if n in BACKENDS and BACKENDS[n].runtime == "torch"]


def start_up(registry: SourceRegistry, names: list[str] | None = None) -> list[str]:
    """On ZeroGPU, at start-up in the main thread of the main process (where `spaces` intercepts `.to("cuda")`):
    load each GPU backend (`names`, default gpu_names) and serve it through a GpuEngine whose runs are spaces.GPU
    calls. Returns the names served so; a backend that fails to load is left failed (the page names it)."""
    import spaces

    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("ZeroGPU intercepts a model's move to CUDA in the main thread only: call start_up there")
    gpu = spaces.GPU(duration=lambda name, request: seconds_for(request.settings))(gpu_steps(registry))
    served = []
    for name in gpu_names(registry) if names is None else names:
        try:
            engine = registry.get(name)
        except Exception as exc:  # noqa: BLE001 - remembered by the registry; the page says why
            print(f"model not ready: {exc}", flush=True)
            continue
        registry.engines[name] = GpuEngine(engine, gpu)
        registry.labels[name] = (registry.labels.get(name, name) + " · on ZeroGPU: each run is a spaces.GPU call of "
                                 f"{RUN_SECONDS} s + {SECONDS_PER_TOKEN} s per token, from the visitor's daily quota")
        served.append(name)
    return served


def cost_line(source, settings) -> str:
    """What a run on `source` cost on ZeroGPU, in words: a GPU call's requested duration, or nothing (the CPU)."""
    if getattr(source, "on_gpu", False):
        return source.cost_line(settings)
    return f"ran on {source.info.name} on this Space's CPU, outside spaces.GPU: no GPU quota"


__all__ = ["GpuEngine", "MAX_SECONDS", "QUOTA", "RunEnd", "RunRequest", "SECONDS_PER_TOKEN", "WAITING", "cost_line",
           "gpu_names", "seconds_for", "start_up", "zero_gpu"]
