"""What the Generate page draws with in the browser: Plotly.js, the scripts beside this file and the elements they own.

    gr.Blocks(head=live_head())     # <script src=…plotly.min.js> (from the plotly package) + live/*.js inline

The live view is ui/live/*.js, one file per concern, each adding its part to `window.pgLive` and loaded in
LIVE_PARTS' order (a part uses the ones before it): format.js (figures as text, as the Python formatters
write them), charts.js, metrics.js, redraw.js (when to draw), stream.js (reads the step stream).

Plotly.js comes from the installed `plotly` Python package (its package_data/plotly.min.js, the same
version that builds the server's figures), served by Gradio as a static file: no CDN, no internet.
Gradio loads its own copy lazily, only for gr.Plot, and never exposes it; the live view waits for ours.
The containers below are gr.HTML values the server never updates: the live view alone writes inside them.

Left out: the drawing itself (ui/live/*.js) and the stream's format (playground/step_stream.py).
"""
from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import quote

import plotly

import gradio as gr

LIVE_DIR = Path(__file__).parent   # the scripts live/*.js, beside this file
LIVE_PARTS = ("format.js", "charts.js", "metrics.js", "redraw.js", "stream.js")   # in load order
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
LIVE_METRICS_ID = "pg-live-metrics"   # the metrics panel live/metrics.js redraws while a run streams
# stream.js writes the count ("8 tokens so far"): a number here would take the page's count back each time Gradio
# sends the status again
RUNNING_STATUS = '⏳ <span id="pg-phase">generating… <span id="pg-count"></span></span>'


def prefill_status(prompt_tokens: int, chunk: int | None = None) -> str:
    """The status until the first token: the model reads the prompt (prefill), which takes seconds for a long one;
    live/stream.js adds the seconds so far and turns it into RUNNING_STATUS. `chunk`: prompt tokens one pass reads
    at most (the engine loop's batcher reads a longer prompt in chunks, between other requests' steps).

    >>> prefill_status(7267)
    '⏳ <span id="pg-phase">reading the prompt (prefill): 7,267 tokens in one pass…</span>'
    """
    return f'⏳ <span id="pg-phase">{prefill_words(prompt_tokens, chunk)}</span>'


def prefill_words(prompt_tokens: int, chunk: int | None = None) -> str:
    """How the prompt is read, as live/format.js `prefill` writes it too.

    >>> prefill_words(845, 128)
    "reading the prompt (prefill): 845 tokens in chunks of 128 tokens between other requests' steps…"
    >>> prefill_words(37, 128)
    "reading the prompt (prefill): 37 tokens in one chunk, when the engine's next iteration runs…"
    """
    if not chunk:
        return f"reading the prompt (prefill): {prompt_tokens:,} tokens in one pass…"
    if prompt_tokens > chunk:
        return (f"reading the prompt (prefill): {prompt_tokens:,} tokens in chunks of {chunk:,} tokens between other "
                "requests' steps…")
    return f"reading the prompt (prefill): {prompt_tokens:,} tokens in one chunk, when the engine's next iteration runs…"


CHIPS_HTML = ('<div class="tok-view out-chips" id="pg-chips"><p class="tok-note">Output tokens appear here.</p>'
              '</div><p class="pg-notice" id="pg-notice" role="status"></p>')
LIVE_CSS = """
.pg-hidden { display: none !important; }
.pg-chart { height: 320px; contain: strict; } #pg-timeline { height: 220px; }
#pg-chips { height: 15em; overflow-y: auto; resize: vertical; contain: strict; }
/* a fixed box (scrolling with the newest chip): a growing answer never moves, re-lays out or repaints the charts */
.pg-chart-empty { display: flex; align-items: center; justify-content: center; color: #374151; font-size: 1.1rem;
  border: 1px dashed #d1d5db; border-radius: 8px; }
.pg-notice { color: #b91c1c; font-weight: 700; margin: .2em 0; } .pg-notice:empty { display: none; }
.pg-step { display: flex; flex-direction: column; gap: .3em; font-size: 1rem; }
.pg-step input { width: 100%; }
"""


def chart_html(name: str) -> str:
    """An empty chart container (`pg-<name>`) that live/charts.js draws into."""
    return (f'<div class="pg-chart pg-chart-empty" id="pg-{html.escape(name, quote=True)}">'
            "Generate to see this chart</div>")


def step_picker_html() -> str:
    """The top-k chart's step picker: it follows the last step until moved."""
    return ('<label class="pg-step">Step to inspect: <span id="pg-step-label">the last</span>'
            '<input type="range" id="pg-step" min="0" max="0" value="0" step="1"></label>')


def live_head() -> str:
    """The <head> HTML: Plotly.js by URL (a static file of this app), then the live view's parts inline."""
    gr.set_static_paths([PLOTLY_JS])
    src = "gradio_api/file=" + quote(str(PLOTLY_JS.resolve()))
    parts = "".join(f"\n<script>{(LIVE_DIR / name).read_text(encoding='utf-8')}</script>" for name in LIVE_PARTS)
    return f'<script src="{src}"></script>{parts}'
