"""What every tab shares: constants, the backend dropdown (short names, the description as its info line),
readable errors, loading an engine with status.

    for line in registry.loading(name): yield status(line)      # "loading backend onnx: … (12 s)"
    try:
        engine = source(registry, name)                          # the Engine (or another step source)
    except SourceUnavailable as exc:                             # why not, and what is left to pick
        return warn(str(exc))

Every string that reaches a gr.HTML or gr.Markdown goes through `html.escape(..., quote=True)`.
Left out: layout of any tab (each tab module lays out its own).
"""
from __future__ import annotations

import html
from pathlib import Path

import gradio as gr

from ..registry import BackendUnavailable, SourceRegistry
from ..experiments.short_long import DEFAULT_USD_PER_M_INPUT, DEFAULT_USD_PER_M_OUTPUT  # noqa: F401
from ..prompts import LONG_DOCUMENT_PATH, OPEN_QUESTION, SHORT_QUESTION, SUMMARIZE_INSTRUCTION, reread_text  # noqa: F401
from ..prompts import long_document as read_long_document

ASSETS = Path(__file__).resolve().parents[2] / "assets"
GENERATE_CONCURRENCY = 32  # events of the CPU queue in flight: a room; runs that join the engine loop or go to a
#                            server take no CPU slot of their own (the others wait for one in their handler)
CPU_QUEUE = "generate"     # the concurrency_id shared by everything that measures the CPU (see __init__)
# The lesson's two requests, the same as the short-vs-long experiment's
FRANCE, SUMMARIZE = SHORT_QUESTION, SUMMARIZE_INSTRUCTION


def long_document() -> str:
    return read_long_document() if LONG_DOCUMENT_PATH.exists() else "(assets/long_document.txt is missing)"


def caption(text: str) -> None:
    gr.Markdown(text, elem_classes="caption")


def error_html(message: str) -> str:
    return f'<span class="error">⚠️ {html.escape(message, quote=True)}</span>'


def warn(message: str) -> str:
    """Pop a gr.Warning and return the same message as escaped HTML for a status line."""
    gr.Warning(message)
    return error_html(message)


def describe(registry: SourceRegistry, name, more: str | None = None) -> str:
    """What a backend is, in words (its registry label without the leading name), then `more`."""
    label = registry.labels.get(name, "")
    words = label.removeprefix(f"{name} · ") if label != name else ""
    return " · ".join(part for part in (words, more) if part)


def described_dropdown(names: list[str], value: str, label: str, info_of, **kw) -> gr.Dropdown:
    """A dropdown whose box shows the short name (a long label was cut off under the arrow) and whose info line
    under the label says what the picked one is (`info_of(name)`), following the selection."""
    dropdown = gr.Dropdown([(n, n) for n in names], value=value, label=label, info=info_of(value) or None, **kw)
    dropdown.change(lambda name: gr.update(info=info_of(name) or None), dropdown, dropdown,
                    api_visibility="private", queue=False, show_progress="hidden")
    return dropdown


def backend_dropdown(registry: SourceRegistry, label: str = "Backend", value: str | None = None,
                     info: str | None = None, **kw) -> gr.Dropdown:
    """The registry's sources by name; the info line says what the picked one is, followed by `info`."""
    return described_dropdown(registry.names, value or registry.default, label,
                              lambda name: describe(registry, name, info), **kw)


class SourceUnavailable(Exception):
    """A backend the page picked cannot be used; the message names it, says why, and what is left to pick."""


def source(registry: SourceRegistry, name):
    """The step source for `name`; SourceUnavailable (its message for the page) when it failed or is unknown."""
    try:
        return registry.get(name)
    except (BackendUnavailable, ValueError) as exc:
        others = registry.others(name)
        raise SourceUnavailable(f"{exc}. " + (f"Pick another backend: {', '.join(others)}." if others
                                              else "No other backend is left.")) from exc


def loading_line(line: str) -> str:
    return f"⏳ {html.escape(line, quote=True)}"
