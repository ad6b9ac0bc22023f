"""What every tab shares: constants, the backend dropdown, readable errors, loading an engine with status.

    for line in registry.loading(name): yield status(line)      # "loading backend onnx: … (12 s)"
    engine = engine_or_message(registry, name)                   # an Engine, or a str saying why not

Every string that reaches a gr.HTML or gr.Markdown goes through `html.escape(..., quote=True)`.
Left out: layout of any tab (each tab module lays out its own).
"""
from __future__ import annotations

import html
from pathlib import Path

import gradio as gr

from ..engines import BackendUnavailable, EngineRegistry

ASSETS = Path(__file__).resolve().parents[2] / "assets"
GENERATE_CONCURRENCY = 2   # runs at once: 2 CPU cores; more only slows every run (one more queues)
CPU_QUEUE = "generate"     # the concurrency_id shared by everything that measures the CPU (see __init__)
FRANCE = "What is the capital of France?"
SUMMARIZE = "Summarize the following document in three sentences.\n\n"


def long_document() -> str:
    path = ASSETS / "long_document.txt"
    return path.read_text(encoding="utf-8") if path.exists() else "(assets/long_document.txt is missing)"


def caption(text: str) -> None:
    gr.Markdown(text, elem_classes="caption")


def error_html(message: str) -> str:
    return f'<span class="error">⚠️ {html.escape(message, quote=True)}</span>'


def warn(message: str) -> str:
    """Pop a gr.Warning and return the same message as escaped HTML for a status line."""
    gr.Warning(message)
    return error_html(message)


def backend_dropdown(registry: EngineRegistry, label: str = "Backend", value: str | None = None, **kw):
    return gr.Dropdown(registry.names, value=value or registry.default, label=label, **kw)


def engine_or_message(registry: EngineRegistry, name):
    """The engine for `name`, or a message naming the backend, why it failed, and what is left to pick."""
    try:
        return registry.get(name)
    except (BackendUnavailable, ValueError) as exc:
        others = registry.others(name)
        return f"{exc}. " + (f"Pick another backend: {', '.join(others)}." if others else "No other backend is left.")


def loading_line(line: str) -> str:
    return f"⏳ {html.escape(line, quote=True)}"
