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


def plot_roofline(points, ceilings, title: str = "Roofline", subtitle: str = "") -> go.Figure:
    """`points`: RooflinePoints (playground.roofline); `ceilings`: the Ceilings they were predicted with."""
    fig = go.Figure()
    xs = [p.intensity for p in points] or [ceilings.ridge]
    lo, hi = min(min(xs), ceilings.ridge) / 4, max(max(xs), ceilings.ridge) * 4
    roof_x = np.geomspace(lo, hi, 200)
    fig.add_trace(go.Scatter(
        x=roof_x, y=np.minimum(ceilings.peak_flops, ceilings.bandwidth * roof_x), mode="lines",
        line={"color": "#444"}, name=(f"roof, measured here: {ceilings.bandwidth / 1e9:.1f} GB/s slope, "
                                      f"{ceilings.peak_flops / 1e9:.1f} GFLOP/s peak"),
        hovertemplate=(f"bandwidth: {ceilings.bandwidth_method}<br>peak: {ceilings.peak_method}"
                       "<extra></extra>")))
    for phase, color in PHASE_COLORS.items():
        mine = [p for p in points if p.phase == phase]
        if not mine:
            continue
        custom = [_hover(p) for p in mine]
        x = [p.intensity for p in mine]
        fig.add_trace(go.Scatter(x=x, y=[p.achieved_flops for p in mine], mode="markers", customdata=custom,
                                 marker={"color": color, "size": 9}, name=f"{phase} ({MEASURED}: FLOPs / time)",
                                 hovertemplate=HOVER))
        fig.add_trace(go.Scatter(x=x, y=[p.flops / p.predicted_s for p in mine], mode="markers",
                                 customdata=custom, name=f"{phase} ({PREDICTED} by the roofline)",
                                 marker={"color": color, "size": 9, "symbol": "circle-open"}, hovertemplate=HOVER))
    fig.add_vline(x=ceilings.ridge, line={"dash": "dot", "color": "#888"},
                  annotation_text=f"ridge {ceilings.ridge:.1f} FLOP/byte", annotation_position="bottom right")
    # one label a decade (10, 100, 1k …): Plotly's own also labels 2 and 5 within a decade, unreadable on a projector
    decade = {"type": "log", "dtick": 1, "exponentformat": "SI"}
    fig.update_layout(title=titled(title, subtitle), xaxis={**decade, "title": "FLOPs per byte moved"},
                      yaxis={**decade, "title": "FLOP/s"}, legend={"orientation": "h", "y": -0.25})
    return fig


def plot_roofline_sweep(result) -> go.Figure:
    """The `roofline` experiment's figure: its prefill and (batched) decode points on its ceilings."""
    note = " (cancelled: partial)" if result.cancelled else ""
    return plot_roofline(result.points, result.ceilings,
                         f"Roofline: prefill lengths and decode batch sizes{note}",
                         f"{result.info.describe()} · weights: {result.storage}")
