"""The roofline: a run's Steps against the machine's two ceilings (records in, a plotly Figure out).

    fig = plot_roofline(points, ceilings, "SmolLM2-135M · onnx-gguf4")   # RooflinePoints, Ceilings
    fig = plot_roofline_sweep(run_roofline(source))                       # the `roofline` experiment

Log-log: x = arithmetic intensity (FLOPs per byte moved), y = FLOP/s. The roof is min(peak, bandwidth · x)
from the ceilings measured here (a bandwidth slope, then the compute roof past the ridge point). Each Step
is drawn twice at its intensity: filled, the FLOP/s it achieved (counted FLOPs over its measured time),
and open, on the roof, what the roofline predicts; the hover gives both times. Prefill lands right
(many rows reuse each weight), a decode step left (every weight read for one row), and a batched decode
step moves right as the batch grows.

Left out: the time axis (the hover has it) and anything the ceilings do not measure (caches, overhead).
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .run import titled
from ..trace import Phase

PHASE_COLORS = {Phase.PREFILL: "#d62728", Phase.DECODE: "#1f77b4"}
PREDICTED, MEASURED = "predicted", "measured"


def _hover(p) -> list:
    return [p.phase, p.rows, p.seq_len, p.measured_s * 1e3, p.predicted_s * 1e3, p.ratio, p.bound]


HOVER = ("%{customdata[0]} · %{customdata[1]} rows · seq_len %{customdata[2]}<br>"
         "intensity %{x:.3g} FLOP/byte<br>measured %{customdata[3]:.2f} ms · predicted %{customdata[4]:.2f} ms"
         " (%{customdata[6]}-bound)<br>measured / predicted = %{customdata[5]:.2f}<extra></extra>")


def log_range(values, pad: float = 0.3) -> list[float]:
    """A log axis's range, in decades (Plotly's units for a log axis), around the positive `values`, `pad` decades
    beyond each end.

    >>> log_range([10, 1000])
    [0.7, 3.3]
    """
    logs = [float(np.log10(v)) for v in values if v and v > 0 and np.isfinite(v)]
    return [round(min(logs) - pad, 3), round(max(logs) + pad, 3)]


def plot_roofline(points, ceilings, title: str = "Roofline", subtitle: str = "") -> go.Figure:
    """`points`: RooflinePoints (playground.roofline); `ceilings`: the Ceilings they were predicted with. Both axes'
    ranges come from what is drawn (points, roof, ridge): nothing else can stretch them."""
    fig = go.Figure()
    xs = [p.intensity for p in points if p.intensity > 0] or [ceilings.ridge]
    lo, hi = min(min(xs), ceilings.ridge) / 4, max(max(xs), ceilings.ridge) * 4
    roof_x = np.geomspace(lo, hi, 200)
    roof_y = np.minimum(ceilings.peak_flops, ceilings.bandwidth * roof_x)
    fig.add_trace(go.Scatter(
        x=roof_x, y=roof_y, mode="lines",
        line={"color": "#444"}, name=(f"roof, measured here: {ceilings.bandwidth / 1e9:.1f} GB/s slope, "
                                      f"{ceilings.peak_flops / 1e9:.1f} GFLOP/s peak"),
        hovertemplate=(f"bandwidth: {ceilings.bandwidth_method}<br>peak: {ceilings.peak_method}"
                       "<extra></extra>")))
    ys = [*roof_y]
    for phase, color in PHASE_COLORS.items():
        mine = [p for p in points if p.phase == phase]
        if not mine:
            continue
        custom = [_hover(p) for p in mine]
        x = [p.intensity for p in mine]
        achieved, predicted = [p.achieved_flops for p in mine], [p.flops / p.predicted_s for p in mine]
        ys += [*achieved, *predicted]
        fig.add_trace(go.Scatter(x=x, y=achieved, mode="markers", customdata=custom,
                                 marker={"color": color, "size": 9}, name=f"{phase} ({MEASURED}: FLOPs / time)",
                                 hovertemplate=HOVER))
        fig.add_trace(go.Scatter(x=x, y=predicted, mode="markers",
                                 customdata=custom, name=f"{phase} ({PREDICTED} by the roofline)",
                                 marker={"color": color, "size": 9, "symbol": "circle-open"}, hovertemplate=HOVER))
    y_range = log_range(ys)
    # the ridge as a trace in data coordinates, its label at its top beside the line (a vline's annotation on a
    # log axis is placed in decades, not data units, and stretched the axis to 10^ridge)
    fig.add_trace(go.Scatter(
        x=[ceilings.ridge, ceilings.ridge], y=[10 ** y_range[0], 10 ** y_range[1]], mode="lines+text",
        line={"dash": "dot", "color": "#888"}, text=["", f"ridge {ceilings.ridge:.1f} FLOP/byte"],
        textposition="bottom right", showlegend=False, hoverinfo="skip", cliponaxis=False))
    # one label a decade (10, 100, 1k …): Plotly's own also labels 2 and 5 within a decade, unreadable on a projector
    decade = {"type": "log", "dtick": 1, "exponentformat": "SI"}
    fig.update_layout(title=titled(title, subtitle),
                      xaxis={**decade, "title": "FLOPs per byte moved", "range": log_range([lo, hi], pad=0)},
                      yaxis={**decade, "title": "FLOP/s", "range": y_range}, legend={"orientation": "h", "y": -0.25})
    return fig


def plot_roofline_sweep(result) -> go.Figure:
    """The `roofline` experiment's figure: its prefill and (batched) decode points on its ceilings."""
    note = " (cancelled: partial)" if result.cancelled else ""
    return plot_roofline(result.points, result.ceilings,
                         f"Roofline: prefill lengths and decode batch sizes{note}",
                         f"{result.info.describe()} · weights: {result.storage}")
