"""Two runs in one figure: when each token arrived, and how long each step took.

Left: cumulative time (seconds since the request started) against the output token index, one line
per run; the first point is TTFT, the slope afterwards is time per token. Right: per-step latency
(the first step is TTFT, so it is drawn as a marker apart from the decode line).

Example:
    >>> fig = plot_compare(comparison)                         # doctest: +SKIP
    >>> [t.name for t in fig.data]                             # doctest: +SKIP
    ['onnx', 'onnx-int8', 'onnx · decode', 'onnx-int8 · decode', 'onnx · TTFT', 'onnx-int8 · TTFT']

A pure function of a `Comparison` (playground/compare.py): no state, no I/O.
Left out: the KV-cache chart (both backends hold the same fp32 cache, so it would be one line twice).
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .run import log_ms_ticks
from ..trace import Phase

COLOURS = ("#2563eb", "#d97706")


def _label(trace) -> str:
    return f"{trace.backend} ({trace.dtype})"


def plot_compare(comparison) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Timeline: time each token arrived",
                                                        "Per-step latency (◆ first token: TTFT)"))
    runs = list(zip(comparison.traces, COLOURS))
    for t, colour in runs:
        fig.add_trace(go.Scatter(x=[s.index for s in t.steps], y=[s.time for s in t.steps], mode="lines+markers",
                                 name=_label(t), legendgroup=_label(t), line=dict(color=colour),
                                 marker=dict(size=4), hovertemplate="token %{x}: %{y:.3f} s<extra></extra>"),
                      row=1, col=1)
    for t, colour in runs:
        decode = [s for s in t.steps if s.phase == Phase.DECODE]
        fig.add_trace(go.Scatter(x=[s.index for s in decode], y=[s.latency * 1000 for s in decode],
                                 mode="lines", name=f"{_label(t)} · decode", legendgroup=_label(t),
                                 showlegend=False, line=dict(color=colour),
                                 hovertemplate="token %{x}: %{y:.1f} ms<extra></extra>"), row=1, col=2)
    for t, colour in runs:
        first = t.steps[:1]
        fig.add_trace(go.Scatter(x=[s.index for s in first], y=[s.latency * 1000 for s in first],
                                 mode="markers", name=f"{_label(t)} · TTFT", legendgroup=_label(t),
                                 showlegend=False, marker=dict(color=colour, size=10, symbol="diamond"),
                                 hovertemplate="TTFT %{y:.1f} ms<extra></extra>"), row=1, col=2)
    agree = f"token agreement {comparison.agreement:.0%}"
    if comparison.first_divergence is not None:
        agree += f", first divergence at token {comparison.first_divergence}"
    fig.update_layout(title=f"{_label(comparison.a)} vs {_label(comparison.b)} · {agree}",
                      template="plotly_white", height=380, margin=dict(l=50, r=20, t=70, b=40),
                      legend=dict(orientation="h", y=-0.2))
    fig.update_xaxes(title_text="output token", row=1, col=1)
    fig.update_xaxes(title_text="output token", row=1, col=2)
    fig.update_yaxes(title_text="seconds since request start", row=1, col=1)
    fig.update_yaxes(title_text="time per step (log)", type="log", row=1, col=2,
                     **log_ms_ticks([s.latency * 1e3 for t in comparison.traces for s in t.steps]))
    return fig
