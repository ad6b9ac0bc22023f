"""The package's layers, lowest first: a module imports only from its own layer and the ones below.

    >>> layer_of("playground.serve.cli"), layer_of("playground.engine"), layer_of("playground")
    (6, 3, 4)
    >>> NAMES[6], LAYERS[6]
    ('serve', ('serve',))

A unit is a package under playground/ or a top-level module (`playground` is the package's `__init__`,
the public API); every module takes its unit's layer. tests/test_layers.py checks every import against
this order (function-level ones included) and that every unit has a layer; tests/test_docs.py checks
that docs/architecture.md's map names every module under its layer. A new package or top-level module
gets a place here; an import that points up is a layer to rethink, not an exception to list.

Left out: the order inside a layer (a module may import any unit of its own layer, never round a cycle).
"""
from __future__ import annotations

NAMED: tuple[tuple[str, tuple[str, ...]], ...] = (
    # settings, words, tokenizers, free ports, the browser, the background job, the declared Python version
    ("base", ("config", "metrics", "tiny", "tokens", "units", "replay", "prompts", "ports", "chromium", "jobs",
              "interpreter", "layers", "machine")),
    ("records", ("models", "trace", "wait_parts", "sampling", "measure", "next_token")),
    ("seam", ("source", "backends")),
    ("engine", ("engine", "roofline")),
    ("sources", ("playground", "registry", "speculative", "remote", "llamacpp", "compare",   # sources of Steps
                 "step_stream")),
    ("views", ("run_view", "chat_view", "charts")),                                                    # Steps in words and figures
    ("serve", ("serve",)),                                                                 # many requests at once
    ("experiments", ("experiments",)),
    ("top", ("lesson", "api")),
    ("ui", ("ui",)),                                                                       # the only gradio importer
    ("bench", ("bench",)),                                                                 # make bench: JSON lines
)
NAMES: tuple[str, ...] = tuple(name for name, _ in NAMED)
LAYERS: list[tuple[str, ...]] = [units for _, units in NAMED]


def unit(module: str) -> str:
    """The layer unit of a module: its package under playground, or the top-level module itself.

    >>> unit("playground.serve.cli"), unit("playground.engine"), unit("playground")
    ('serve', 'engine', 'playground')
    """
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(module: str) -> int | None:
    """The index in LAYERS of a module's unit; None for a unit with no layer."""
    return next((i for i, units in enumerate(LAYERS) if unit(module) in units), None)
