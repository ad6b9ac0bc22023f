"""The step-source seam: anything that turns a prompt (or exact token ids) into a `Run` of `Step`s.

    source = Engine(create_backend("onnx"))               # a local runtime (engine.py)
    source.info.describe()                                # "SmolLM2-… · onnx · cpu · float32"
    source.capabilities.missing()                         # [] locally; a server lacks some
    run = source.run("Why is the sky blue?", settings)    # or run_ids(ids, settings, ignore_eos=True)
    for step in run: ...                                  # Steps as they happen; run.cancel() from any thread
    run.trace.metrics()

Every view, experiment, export and benchmark reads Steps from Runs, so one timing loop serves them
all: a new source (a remote server, a batch scheduler) only has to produce Steps. What a source
cannot give is declared in `Capabilities` and arrives as None in its Steps; views label it missing.

Left out: the loops themselves (engine.py for local runtimes, remote/ for servers).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator, Protocol, runtime_checkable

from .config import GenerationSettings
from .trace import KVShape, Step, StopReason, TextEnum, Trace


class SourceError(RuntimeError):
    """A source failed to serve a request (a server's error, a cut stream): the message says which and why.

    Views show the message; a run that fails this way keeps its partial trace (StopReason.ERROR).
    """


@dataclass(frozen=True)
class Capabilities:
    """What a source's Steps and runs can carry; each False is labelled missing wherever it is shown."""
    kv_bytes: bool = True          # Steps carry KV-cache bytes measured from the runtime's own tensors
    top_k: bool = True             # Steps carry the model's top-k candidates and probabilities
    local_tokenizer: bool = True   # prompt_ids() gives, before the run, exactly the ids the model reads
    no_cache: bool = True          # run_ids(use_cache=False): every step re-reads the whole context
    exact_ids: bool = True         # run_ids(): a run from exact token ids (no template, no tokenizing)

    LABELS = {"kv_bytes": "measured KV-cache bytes", "top_k": "top-k probabilities",
              "local_tokenizer": "a local tokenizer", "no_cache": "runs without a KV cache",
              "exact_ids": "runs from exact token ids"}

    def missing(self) -> list[str]:
        """What this source cannot give, in words.

        >>> Capabilities(kv_bytes=False, no_cache=False).missing()
        ['measured KV-cache bytes', 'runs without a KV cache']
        """
        return [self.LABELS[f.name] for f in fields(self) if not getattr(self, f.name)]


class Origin(TextEnum):
    """Where a source's steps are made. Serialized as its string.

    >>> Origin.REMOTE == "remote"
    True
    """
    LOCAL = "local"     # this process
    REMOTE = "remote"   # a server, over HTTP


@dataclass(frozen=True)
class SourceInfo:
    name: str                      # what the dropdowns show: "onnx", "llama.cpp @ 127.0.0.1:8080"
    model: str
    runtime: str                   # "torch" | "onnx" | "remote" | …
    device: str
    dtype: str
    context_window: int | None     # None: the source does not say
    kv_shape: KVShape | None       # None: the model's shape is unknown (no KV formula)
    origin: Origin = Origin.LOCAL
    note: str = ""                 # how it runs, where that matters: "llama.cpp: zen4 with repacking (…)"

    def describe(self) -> str:
        return " · ".join(v for v in (self.name, self.device, self.dtype, self.note) if v)


@runtime_checkable
class StepSource(Protocol):
    info: SourceInfo
    capabilities: Capabilities
    tokenizer: Any                 # a transformers tokenizer, or None when the source has none here

    def prompt_ids(self, prompt: str, settings: GenerationSettings) -> tuple[str, list[int]]: ...

    def encode(self, text: str) -> list[int]: ...

    def run(self, prompt: str, settings: GenerationSettings | None = None) -> "Run": ...

    def run_ids(self, ids: list[int], settings: GenerationSettings | None = None, *, ignore_eos: bool = False,
                use_cache: bool = True) -> "Run": ...

    def warm_up(self) -> None: ...


class Run:
    """One request in flight: iterate it for Steps; `trace` grows as it goes; `cancel()` stops it.

    `produce(run)` is the source's loop: it appends each Step to run.trace.steps, yields it, sets
    run.trace.stop_reason when it ends, and checks `run.cancelled` between steps. Whatever happens
    (cancel, the iterator closed or dropped, an error), the steps made so far stay in the trace.
    `on_end(callback)`: callback(run) once it has ended (a live record noting when; at once if it has).
    """

    def __init__(self, trace: Trace, produce: Callable[["Run"], Iterator[Step]], t0: float):
        import threading
        self.trace, self.t0, self._produce = trace, t0, produce
        self._cancel = threading.Event()
        self._ended: list[Callable[["Run"], None]] | None = []   # None once it has ended and they were called
        self._end_lock = threading.Lock()

    def cancel(self) -> None:
        self._cancel.set()

    def on_end(self, callback: Callable[["Run"], None]) -> None:
        """Call `callback(run)` once the run has ended, in the thread that iterated it (now, if it has ended)."""
        with self._end_lock:
            if self._ended is not None:
                self._ended.append(callback)
                return
        callback(self)

    def _end(self) -> None:
        with self._end_lock:
            callbacks, self._ended = self._ended or [], None
        for callback in callbacks:
            callback(self)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def __iter__(self) -> Iterator[Step]:
        trace = self.trace
        try:
            if not self.cancelled:
                yield from self._produce(self)
        except Exception as exc:
            trace.stop_reason, trace.error = StopReason.ERROR, f"{type(exc).__name__}: {exc}"
            raise
        finally:   # cancel(), the iterator closed (GeneratorExit) or dropped: whatever was made is kept
            trace.stop_reason = trace.stop_reason or StopReason.CANCELLED
            self._end()

    def wait(self) -> Trace:
        """Run to the end (or until cancelled) and return the trace."""
        for _ in self:
            pass
        return self.trace


def generate(source: StepSource, prompt: str, settings: GenerationSettings | None = None) -> Trace:
    return source.run(prompt, settings).wait()
