"""One step source per name (a local backend's Engine, a server), created on first use, cached, shared.

    registry = SourceRegistry.for_model("tiny")          # every local backend of one model spec
    source = registry.get("onnx")                        # loads once (ONNX export ~35-70 s the first time)
    for message in registry.loading("onnx"): print(message)   # or watch the load from another thread
    registry.add("llama.cpp @ 127.0.0.1:8080", factory, label="…")   # any other source (remote/)
    registry.choices()                                   # [(label, name)] for the dropdowns
    registry.on_close(server.stop); registry.close()     # e.g. stop a server process a source started

Loading is thread-safe: each name has its own lock, so two sessions asking for the same backend at
once load it once (the second waits), while another backend may load beside it. A load that fails
(ModelLoadError, an impossible ONNX export, an ImportError, anything) is remembered with its message:
`get` raises BackendUnavailable at once afterwards, and `error(name)` says why, so a UI can offer the
others. The latest progress message of a load in flight is kept, so any waiter can show it.

Left out: gradio (playground/ui/ shows all this), unloading sources (close() runs the on_close hooks
only), and retrying a failed load.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

from .engine import Engine

Factory = Callable[[str, Callable[[float, str], None]], Any]   # (name, progress) -> a step source


STARTING = ("loading the model (a first start on an empty cache converts, exports and warms it up once: about "
            "2 minutes on 2 CPU cores, 108 s measured; later starts reuse the cache and take seconds)")


class BackendUnavailable(RuntimeError):
    """A backend that failed to load; the message names it and says why."""


class SourceRegistry:
    def __init__(self, factory: Factory, names: list[str], default: str | None = None,
                 labels: dict[str, str] | None = None):
        if not names:
            raise ValueError("a source registry needs at least one name")
        if default is not None and default not in names:
            raise ValueError(f"backend must be one of {', '.join(names)}; got {default!r}")
        self.factories = {name: factory for name in names}
        self.names, self.labels = list(names), dict(labels or {})
        self.default = default or self.names[0]
        self.engines: dict[str, Any] = {}   # name -> loaded step source
        self.errors: dict[str, str] = {}
        self.progress: dict[str, str] = {}
        self._locks = {name: threading.Lock() for name in self.names}
        self._on_close: list[Callable[[], None]] = []

    def add(self, name: str, factory: Factory, label: str | None = None) -> None:
        """Offer one more source (e.g. a server given on the command line), loaded on first use."""
        if name in self.factories:
            raise ValueError(f"a source named {name!r} is already registered")
        self.factories[name], self._locks[name] = factory, threading.Lock()
        self.names.append(name)
        if label:
            self.labels[name] = label

    def on_close(self, hook: Callable[[], None]) -> None:
        """Run `hook` on close() (e.g. stop a server process a source started)."""
        self._on_close.append(hook)

    def close(self) -> None:
        """Run the on_close hooks, latest first, each once."""
        while self._on_close:
            self._on_close.pop()()

    def choices(self) -> list[tuple[str, str]]:
        """(what a dropdown shows, the name it returns), in registry order."""
        return [(self.labels.get(n, n), n) for n in self.names]

    # --- ways to make one

    @classmethod
    def fixed(cls, engine: Engine) -> "SourceRegistry":
        """A registry holding one ready source, under its name (tests, a single runtime)."""
        registry = cls(lambda name, progress: engine, [engine.info.name])
        registry.engines[engine.info.name] = engine
        return registry

    @classmethod
    def for_model(cls, model: str | None = None, backend: str | None = None, device: str | None = None,
                  dtype: str | None = None) -> "SourceRegistry":
        """Every available backend of one model spec; `backend` (default: default_backend_name()) first."""
        from .backends import BACKENDS, available_backends, create_backend, default_backend_name

        def factory(name, progress):
            # dtype applies to torch only (the others are named by their variant)
            torch_dtype = dtype if BACKENDS[name].runtime == "torch" else None
            engine = Engine(create_backend(name, model, device=device, dtype=torch_dtype, progress=progress))
            progress(1.0, "warming up (one short run, so the first request is not the one paying for it)")
            engine.warm_up()
            return engine
        return cls(factory, available_backends(), backend or default_backend_name(device, model),
                   {name: f"{name} · {BACKENDS[name].label}" for name in available_backends()})

    # --- use

    def get(self, name: str | None = None):
        """The engine for `name` (default: the registry's default), loading it on first use."""
        name = name or self.default
        if name not in self.names:
            raise ValueError(f"backend must be one of {', '.join(self.names)}; got {name!r}")
        if name in self.engines:
            return self.engines[name]
        with self._locks[name]:
            if name in self.errors:
                raise BackendUnavailable(self.errors[name])
            if name not in self.engines:
                self.progress[name] = STARTING
                try:
                    self.engines[name] = self.factories[name](name, lambda f, msg: self.progress.__setitem__(name, msg))
                except Exception as exc:   # noqa: BLE001 - any failure: remember it, offer the others
                    self.errors[name] = f"backend {name} failed to load: {type(exc).__name__}: {exc}"
                    raise BackendUnavailable(self.errors[name]) from exc
                finally:
                    self.progress.pop(name, None)
        return self.engines[name]

    def error(self, name: str) -> str | None:
        return self.errors.get(name)

    def others(self, name: str) -> list[str]:
        """The names still worth offering when `name` failed: not failed themselves."""
        return [n for n in self.names if n != name and n not in self.errors]

    def loading(self, name: str | None = None, interval: float = 0.5) -> Iterator[str]:
        """Load `name` in a worker thread, yielding a status line every `interval` s until it is ready.

        Yields nothing when the engine is already loaded; afterwards `get(name)` returns it at once or
        raises BackendUnavailable. If the caller stops iterating, the load still finishes and is cached.
        """
        name = name or self.default
        if name in self.engines or name in self.errors or name not in self.names:
            return
        worker = threading.Thread(target=self._load_quietly, args=(name,), daemon=True, name=f"load-{name}")
        start = time.monotonic()
        worker.start()
        while worker.is_alive():
            message = self.progress.get(name, STARTING)
            yield f"loading backend {name}: {message}… ({time.monotonic() - start:.0f} s)"
            worker.join(interval)

    def _load_quietly(self, name: str) -> None:
        try:
            self.get(name)
        except BackendUnavailable:
            pass   # remembered in self.errors; the caller's get() raises it


def as_registry(engine_or_factory) -> SourceRegistry:
    """A SourceRegistry from a step source (an Engine), a registry, or a callable `get(name) -> source`."""
    if isinstance(engine_or_factory, SourceRegistry):
        return engine_or_factory
    if isinstance(engine_or_factory, Engine) or hasattr(engine_or_factory, "info"):
        return SourceRegistry.fixed(engine_or_factory)
    if callable(engine_or_factory):
        from .backends import available_backends, default_backend_name
        return SourceRegistry(lambda name, progress: engine_or_factory(name), available_backends(),
                              default_backend_name())
    raise TypeError(f"expected an Engine, a SourceRegistry or a callable, got {type(engine_or_factory).__name__}")
