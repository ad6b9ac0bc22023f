"""The serving sweeps drawn: per-request vs total decode speed by batch size, the latency-throughput curve, and
the prefill chunk's trade-off (the long prompt's TTFT against the decoding requests' ITL p95).

    plot_batch_sweep(run_batch_sweep(scheduler))
    plot_rate_sweep(run_rate_sweep(scheduler, workload, [0.5, 1, 2], ttft_slo=1.0, tpot_slo=0.2))
    plot_chunk_sweep(run_chunk_sweep(batching_at, interference_workload))
    plot_sweep(sweep)                                   # whichever kind it is

Measured points only (markers joined by lines); the SLOs are the user's, drawn as dashed lines.
Left out: fits; a knee is read off the measured points.
"""
from __future__ import annotations

from .run import DECODE, FORMULA, PREFILL, _empty, _figure, titled
from .serve import _legend_below


def _title(text: str, sweep) -> dict:
    note = " (cancelled: partial)" if sweep.cancelled else ""
    return titled(f"{text}{note}", f"{sweep.scheduler} · {sweep.source}")


def plot_batch_sweep(sweep):
    fig = _figure(_title(f"Concurrent decodes: {sweep.settings['new_tokens']} tokens each, EOS ignored", sweep),
                  "requests decoding at once", "output tokens/s")
    pts = sweep.points
    if not pts:
        return _empty(fig, "no point measured yet")
    x = [p.concurrency for p in pts]
    fig.add_scatter(name="total (all requests together)", x=x, y=[p.total_tps for p in pts], mode="lines+markers",
                    line=dict(color=DECODE, width=3))
    fig.add_scatter(name="per request (median of each request's decode tok/s)", x=x,
                    y=[p.per_request_tps for p in pts], mode="lines+markers", line=dict(color=PREFILL, width=3))
    fig.update_xaxes(type="log", tickvals=x, ticktext=[str(v) for v in x])
    fig.update_yaxes(rangemode="tozero")
    return fig


def plot_rate_sweep(sweep):
    s = sweep.settings
    fig = _figure(_title(f"Latency vs throughput: {s['requests']} requests per rate, Poisson arrivals", sweep),
                  "throughput (output tokens/s)", "TTFT (s)")
    pts = [p for p in sweep.points if p.output_tps is not None]
    if not pts:
        return _empty(fig, "no point measured yet")
    x, labels = [p.output_tps for p in pts], [f"{p.rate:g} req/s" for p in pts]
    for name, key, color in (("TTFT p50", "ttft_p50", PREFILL), ("TTFT p95", "ttft_p95", "#7c2d12")):
        fig.add_scatter(name=name, x=x, y=[getattr(p, key) for p in pts], mode="lines+markers+text", text=labels,
                        textposition="top center", line=dict(color=color, width=3))
    good = [f"{p.goodput_rps:.2f} req/s ({p.met}/{p.of})" if p.goodput_rps is not None else "—" for p in pts]
    fig.add_scatter(name="goodput (requests/s within the SLOs)", x=x, y=[p.goodput_rps for p in pts], yaxis="y2",
                    mode="lines+markers", line=dict(color=DECODE, dash="dot"), customdata=good,
                    hovertemplate="goodput %{customdata}<extra></extra>")
    if s.get("ttft_slo_s") is not None:
        fig.add_hline(y=s["ttft_slo_s"], line=dict(color=FORMULA, dash="dash"),
                      annotation_text=f"TTFT SLO {s['ttft_slo_s']:g} s" + (
                          f" · TPOT SLO {s['tpot_slo_s']:g} s" if s.get("tpot_slo_s") is not None else ""))
    fig.update_layout(yaxis2=dict(title="goodput (req/s)", overlaying="y", side="right", showgrid=False,
                                  rangemode="tozero"))
    return fig


def plot_chunk_sweep(sweep):
    """The long prompt's TTFT (left axis) and the decoding requests' ITL p95 (right axis) at each prefill chunk."""
    fig = _figure(_title(f"Prefill chunk: a long prompt among {sweep.settings['requests'] - 1} decoding requests",
                         sweep), "prefill chunk (prompt tokens per iteration)", "long prompt's TTFT (s)")
    pts = sweep.points
    if not pts:
        return _empty(fig, "no point measured yet")
    x = [p.prefill_chunk for p in pts]
    fig.add_scatter(name="the long prompt's TTFT", x=x, y=[p.document_ttft for p in pts], mode="lines+markers",
                    line=dict(color=PREFILL, width=3))
    fig.add_scatter(name="decoding requests' ITL p95", x=x,
                    y=[None if p.itl_p95 is None else p.itl_p95 * 1e3 for p in pts], yaxis="y2",
                    mode="lines+markers", line=dict(color=DECODE, width=3))
    fig.add_scatter(name="ITL p95 of tokens that waited for a chunk", x=x,
                    y=[None if p.itl_p95_with_chunk is None else p.itl_p95_with_chunk * 1e3 for p in pts], yaxis="y2",
                    mode="lines+markers", line=dict(color=DECODE, dash="dot"))
    fig.update_xaxes(type="log", tickvals=x, ticktext=[str(v) for v in x])
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(yaxis2=dict(title="ITL p95 (ms)", overlaying="y", side="right", showgrid=False,
                                  rangemode="tozero"), margin=dict(r=70))
    return _legend_below(fig)   # three entries above the plot ran into the title


PLOTS = {"batch": plot_batch_sweep, "rate": plot_rate_sweep, "chunk": plot_chunk_sweep}
TITLES = {"batch": "Batch-size sweep", "rate": "Rate sweep", "chunk": "Prefill-chunk sweep"}


def plot_sweep(sweep):
    """A sweep of any kind, drawn by its kind's chart."""
    return PLOTS[sweep.kind](sweep)
