"""Charts of the experiments: a result record in, a plotly Figure out (no measuring, no gradio).

    fig = plot_prefill_sweep(run_prefill_sweep(backend))
    fig.write_html("prefill.html", include_plotlyjs=True)    # standalone, works offline

Measured points are drawn as markers; anything derived (a least-squares fit, a cost) says so in its
legend entry. Every title names the model, backend, device and dtype the numbers came from.

Left out: styling beyond plotly's defaults; the UI picks the theme.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..units import formula, times
from .run import titled

CACHED, UNCACHED = "#1f77b4", "#d62728"


def _title(text: str, result) -> dict:
    note = " (cancelled: partial)" if result.cancelled else ""
    return titled(f"{text}{note}", result.info.describe())


# --- prefill sweep

def plot_prefill_sweep(sweep) -> go.Figure:
    pts = sweep.points
    L = [p.length for p in pts]
    med = [p.median * 1000 for p in pts]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(
        x=L, y=med, mode="markers", name=f"TTFT median of {sweep.repeats} (measured, bars: min–max)",
        error_y={"type": "data", "symmetric": False, "array": [p.max * 1000 - m for p, m in zip(pts, med)],
                 "arrayminus": [m - p.min * 1000 for p, m in zip(pts, med)]},
        customdata=[[p.tokens_per_s] for p in pts],
        hovertemplate="L=%{x}<br>%{y:.1f} ms<br>%{customdata[0]:.0f} tok/s<extra></extra>"))
    if sweep.fit and len(pts) > 1:
        xs = np.linspace(0, max(L), 200)
        fig.add_trace(go.Scatter(
            x=xs, y=sweep.fit(xs) * 1000, mode="lines", line={"dash": "dash"},
            name=f"fit: {formula(sweep.fit.coefficients, 'L')} (R² {sweep.fit.r2:.3f})"))
    fig.add_trace(go.Scatter(x=L, y=[p.tokens_per_s for p in pts], mode="lines+markers", name="prefill tok/s",
                             line={"color": "gray", "width": 1}), secondary_y=True)
    fig.update_layout(title=_title("Prefill time vs prompt length", sweep),
                      legend={"orientation": "h", "y": -0.2})
    fig.update_xaxes(title_text="prompt length L (tokens)")
    fig.update_yaxes(title_text="TTFT (ms)", secondary_y=False)
    fig.update_yaxes(title_text="prefill tok/s", secondary_y=True, showgrid=False)
    return fig


# --- cache vs no cache

def without_cache(ratio: float | None) -> str:
    """What dropping the cache did to the run's time, its word computed from the ratio (without ÷ with).

    >>> without_cache(2.46), without_cache(0.7), without_cache(1.0), without_cache(None)
    ('2.5× slower without cache', '1.4× faster without cache', 'as fast without cache', 'ratio: incomplete run')
    """
    if not ratio:
        return "ratio: incomplete run"
    if round(ratio, 1) == 1.0:
        return "as fast without cache"
    return f"{times(ratio)} slower without cache" if ratio > 1 else f"{times(1 / ratio)} faster without cache"


def plot_cache_comparison(cmp) -> go.Figure:
    s = cmp.summary()
    fig = go.Figure()
    for name, lat, color in (("with KV cache", cmp.cached_latency, CACHED),
                             ("without cache (recompute all)", cmp.uncached_latency, UNCACHED)):
        fig.add_trace(go.Scatter(x=list(range(len(lat))), y=[t * 1000 for t in lat], mode="lines+markers",
                                 name=f"{name}: {sum(lat):.2f} s total (measured)", line={"color": color}))
    ratio = without_cache(s["ratio"])
    same = "identical tokens" if s["identical"] else "tokens DIFFER"
    fig.update_layout(title=_title(f"Per-step latency, {cmp.prompt_tokens}-token prompt: {ratio}; {same}", cmp),
                      xaxis_title="output token index (0 = prefill)", yaxis_title="step latency (ms)",
                      legend={"orientation": "h", "y": -0.2})
    return fig


# --- decode vs depth

def plot_depth_sweep(sweep) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=sweep.seq_len, y=[t * 1000 for t in sweep.latency], mode="markers",
                             marker={"size": 4}, name="decode step latency (measured ITL)"))
    if sweep.fit and len(sweep.seq_len) > 1:
        xs = np.array([min(sweep.seq_len), max(sweep.seq_len)])
        fig.add_trace(go.Scatter(x=xs, y=sweep.fit(xs) * 1000, mode="lines", line={"dash": "dash"},
                                 name=f"fit: {formula(sweep.fit.coefficients, 'depth')}"))
    fig.update_layout(title=_title("Decode cost vs context depth (EOS ignored)", sweep),
                      xaxis_title="tokens in the KV cache", yaxis_title="step latency (ms)",
                      legend={"orientation": "h", "y": -0.2})
    return fig


# --- short vs long

PANELS = (("input tokens", "input_tokens", 1), ("output tokens", "output_tokens", 1),
          ("TTFT (s)", "ttft", 1), ("E2E (s)", "e2e", 1), ("KV cache (MiB)", "kv_bytes", 1 / 2**20),
          ("cost of 1,000 (USD, est.)", "est_cost_usd", 1000))
RATIO_WORDS = {"input_tokens": "input tokens", "ttft": "TTFT", "est_cost_usd": "cost"}   # the title's ratios
PANEL_COLUMNS = 3   # two rows of three: each panel's title fits over it at 1024 px


def plot_short_vs_long(cmp, keys: tuple[str, ...] | None = None) -> go.Figure:
    """Short vs long, one panel a figure (all six, or those named by `keys`, e.g. ("input_tokens", "ttft",
    "est_cost_usd") for the lesson), three panels a row; a figure the source did not give is left out and
    its panel says so. Each panel's y range leaves room above its taller bar for the value label; the
    bars are named on their axis (no legend)."""
    panels = [p for p in PANELS if keys is None or p[1] in keys]
    missing = {key: [r.label for r in (cmp.short, cmp.long) if r is not None and getattr(r, key) is None]
               for _, key, _ in panels}
    titles = [title + (f"<br>missing for {', '.join(missing[key])}" if missing[key] else "")
              for title, key, _ in panels]
    rows = -(-len(panels) // PANEL_COLUMNS)
    fig = make_subplots(rows=rows, cols=PANEL_COLUMNS, subplot_titles=titles, vertical_spacing=0.22)
    for req, color in ((cmp.short, CACHED), (cmp.long, UNCACHED)):
        if req is None:
            continue
        for i, (_, key, scale) in enumerate(panels):
            if getattr(req, key) is None:
                continue   # not measured by this source: no bar, never a zero
            v = getattr(req, key) * scale
            fig.add_trace(go.Bar(x=[req.label], y=[v], name=req.label, marker_color=color, legendgroup=req.label,
                                 showlegend=i == 0, text=[f"{v:.3g}"], textposition="outside", cliponaxis=False),
                          row=i // PANEL_COLUMNS + 1, col=i % PANEL_COLUMNS + 1)
    for i, (_, key, scale) in enumerate(panels):
        top = max((getattr(r, key) * scale for r in (cmp.short, cmp.long) if r is not None and getattr(r, key)),
                  default=None)
        if top:
            fig.update_yaxes(range=[0, top * 1.3], row=i // PANEL_COLUMNS + 1, col=i % PANEL_COLUMNS + 1)
    ratios = cmp.summary().get("ratios", {})
    sub = ", ".join(f"{times(ratios[k])} {w}" for k, w in RATIO_WORDS.items() if k in ratios)   # as the lesson says it
    fig.update_layout(title=_title(f"Long ÷ short: {sub}" if sub else "Short vs long request", cmp),
                      barmode="group", height=180 + 220 * rows, margin={"t": 110}, showlegend=False)
    return fig


# --- speculative decoding

def plot_speculative(result) -> go.Figure:
    """Per preset: decode tok/s plain and speculative (bars, measured), tokens per forward pass and the
    acceptance rate in the bar labels; the title gives each preset's speedup."""
    fig = go.Figure()
    names = [p.preset for p in result.presets]
    for label, key, color in (("plain", "plain_decode_tps", UNCACHED), ("speculative", "spec_decode_tps", CACHED)):
        values = [getattr(p, key) for p in result.presets]
        text = [("" if v is None else f"{v:.1f} tok/s") + ("" if label == "plain" else
                f"<br>{p.tokens_per_pass:.2f} tok/pass<br>accepted {p.accepted}/{p.proposed}")
                for v, p in zip(values, result.presets)]
        fig.add_trace(go.Bar(x=names, y=values, name=label, marker_color=color, text=text, textposition="outside",
                             cliponaxis=False))
    speedups = ", ".join(f"{p.preset} {p.speedup:.2f}×" for p in result.presets if p.speedup)
    fig.update_layout(title=_title(f"Speculative ÷ plain decode tok/s: {speedups}" if speedups
                                   else "Speculative decoding (prompt lookup)", result),
                      barmode="group", yaxis_title="decode tok/s (measured)", height=460, margin={"t": 110})
    return fig
