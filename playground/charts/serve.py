"""A workload drawn from its records: the Gantt of every request, throughput and KV cache over time.

    fig = plot_gantt(result, now=12.3)   # one row per request: waiting, prefill (its passes), decode, end
    plot_throughput(result); plot_kv_in_use(result); plot_batches(result)
    plot_kv_map(result)                  # the KV pool's slots over time, coloured by the request holding each

Every bar and point is a measured timestamp (serve/records.py). While a workload runs, `now` (seconds
since it started) extends the bars of requests still waiting or running, so the chart grows live.
A figure the source cannot give (its KV cache, its batches) is labelled missing, never drawn as zero.

Left out: sweeps (charts/serve_sweeps.py).
"""
from __future__ import annotations

import textwrap

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from ..trace import COMPLETED, Phase, StopReason
from .run import DECODE, FORMULA, PREFILL, _empty, _figure, titled

WAITING, PASS, FAILED = "#cbd5e1", "#b45309", "#dc2626"
ENDS = {StopReason.EOS: ("circle", "#16a34a"), StopReason.LENGTH: ("square", "#16a34a"),
        StopReason.CONTEXT: ("diamond", "#16a34a"), StopReason.CANCELLED: ("x", FAILED),
        StopReason.ERROR: ("x", "#7f1d1d")}


def over_time(result, window: float = 1.0) -> dict:
    """Output tokens/s and finished requests/s per `window` seconds (measured token times, bucketed)."""
    times = [(t, n) for r in result.records if r.steps for t, n in r.token_times()]
    ends = [r.last_token for r in result.records if r.steps and r.stop_reason in COMPLETED]
    if not times:
        return {"t": [], "output_tps": [], "requests_per_s": []}
    buckets = int(max(t for t, _ in times) // window) + 1
    tokens, finished = np.zeros(buckets), np.zeros(buckets)
    for t, n in times:
        tokens[int(t // window)] += n
    for t in ends:
        finished[min(int(t // window), buckets - 1)] += 1
    return {"t": [(i + 0.5) * window for i in range(buckets)], "output_tps": (tokens / window).tolist(),
            "requests_per_s": (finished / window).tolist()}


def _title(text: str, result) -> dict:
    state = " (cancelled: partial)" if result.cancelled else "" if result.done else " (running…)"
    return titled(f"{text}{state}", f"{result.scheduler} on {result.source}")


def _legend_below(fig: go.Figure) -> go.Figure:
    """The legend under the x axis: above the plot it ran into the title's second line."""
    fig.update_layout(height=380, margin=dict(b=130),
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.32, yanchor="top"))
    return fig


def _lines(text: str, width: int = 36) -> str:
    """A long legend entry on lines of `width` characters at most: one line would run past a half-width
    figure (in presenter mode's larger type too).

    >>> _lines("paged KV blocks allocated, of the pool's 64 (16 tokens each)")
    "paged KV blocks allocated, of the<br>pool's 64 (16 tokens each)"
    """
    return "<br>".join(textwrap.wrap(text, width)) or text


def _row(record) -> str:
    return f"#{record.request.id} {record.request.cls}"


def _segments(result, now: float | None):
    """{phase: [(row, start, end, hover)]} from the records, open phases cut at `now`."""
    out = {"waiting": [], Phase.PREFILL: [], "prefill pass": [], Phase.DECODE: []}
    for r in result.records:
        row, clip = _row(r), (now if now is not None else r.finished)
        if r.arrival > (clip if clip is not None else r.arrival):
            continue   # not arrived yet
        admitted = r.admitted if r.admitted is not None else (clip if r.stop_reason is None else r.finished)
        if admitted is not None and admitted > r.arrival:
            out["waiting"].append((row, r.arrival, admitted, "waiting"))
        if r.admitted is None:
            continue
        first = r.first_token if r.first_token is not None else (clip if r.stop_reason is None else r.finished)
        kind = Phase.PREFILL if r.chunks else "prefill pass"   # passes known: draw them over the prefill phase
        out[kind].append((row, r.admitted, first, f"prefill (TTFT from admission): {(first - r.admitted):.3f} s"))
        out["prefill pass"] += [(row, a, b, f"prefill pass: {n} prompt tokens, {b - a:.3f} s") for a, b, n in r.chunks]
        if r.first_token is not None:
            last = r.last_token if r.stop_reason is not None else max(r.last_token, clip or r.last_token)
            out[Phase.DECODE].append((row, r.first_token, last, f"decode: {r.output_tokens} tokens, {last - r.first_token:.3f} s"))
    return out


def plot_gantt(result, now: float | None = None) -> go.Figure:
    n = len(result.records)
    fig = _figure(_title("Every request's timeline", result), "seconds since the workload started", "",
                  height=max(460, 250 + 24 * n))
    colors = {"waiting": WAITING, Phase.PREFILL: "#fcd9a8", "prefill pass": PREFILL, Phase.DECODE: DECODE}
    names = {"waiting": "waiting (arrived, not admitted)", Phase.PREFILL: "prefill phase (waiting between its passes)",
             "prefill pass": "prefill (its forward passes, where known)", Phase.DECODE: "decode"}
    for phase, segs in _segments(result, now).items():
        if segs:
            fig.add_bar(name=names[phase], orientation="h", y=[s[0] for s in segs], base=[s[1] for s in segs],
                        x=[max(s[2] - s[1], 1e-4) for s in segs], marker_color=colors[phase],
                        customdata=[s[3] for s in segs], hovertemplate="%{y}: %{customdata}<extra></extra>")
    for reason, (symbol, color) in ENDS.items():
        ends = [r for r in result.records if r.stop_reason == reason and r.finished is not None]
        if ends:
            fig.add_scatter(name=f"ended: {reason}", mode="markers", y=[_row(r) for r in ends],
                            x=[r.last_token if r.last_token is not None else r.finished for r in ends],
                            marker=dict(symbol=symbol, color=color, size=9),
                            customdata=[r.error or reason for r in ends],
                            hovertemplate="%{y}: %{customdata}<extra></extra>")
    rows = [_row(r) for r in result.records]
    fig.update_layout(barmode="overlay", legend=dict(orientation="h", y=0, x=0, xanchor="left", yanchor="bottom",
                                                     yref="container"),
                      margin=dict(l=80, r=20, t=70, b=180),
                      yaxis=dict(autorange="reversed", type="category", categoryorder="array", categoryarray=rows,
                                 tickmode="array", tickvals=rows, ticktext=rows))
    return fig


def plot_throughput(result, window: float = 1.0) -> go.Figure:
    fig = _figure(_title(f"Throughput over time ({window:g} s windows)", result), "seconds since the workload started",
                  "output tokens/s")
    series = over_time(result, window)
    if not series["t"]:
        return _empty(fig, "no token yet")
    fig.add_bar(name="output tokens/s", x=series["t"], y=series["output_tps"], marker_color=DECODE, width=window * 0.9)
    fig.add_scatter(name="requests finished/s", x=series["t"], y=series["requests_per_s"], yaxis="y2",
                    mode="lines+markers", line=dict(color=PREFILL))
    fig.update_layout(yaxis2=dict(title="requests/s", overlaying="y", side="right", showgrid=False, rangemode="tozero"))
    return _legend_below(fig)


def plot_kv_in_use(result) -> go.Figure:
    unit = result.kv_unit
    scale, label = {"bytes": (2**-20, "MiB"), "blocks": (1, "blocks"), "fraction": (100, "% of the server's cache"),
                    "tokens": (1, "tokens held")}.get(unit, (1, unit or ""))
    fig = _figure(_title("KV cache in use", result), "seconds since the workload started", f"KV cache ({label})")
    if unit is None:
        return _empty(fig, f"missing: {result.source} does not give its KV-cache use")
    if not result.kv:
        return _empty(fig, "no sample yet")
    fig.add_scatter(name=_lines(result.kv_note or "in use"), x=[t for t, _ in result.kv], y=[v * scale for _, v in result.kv],
                    mode="lines", line=dict(color=DECODE, width=3, shape="hv"))
    if result.kv_total:
        fig.add_scatter(name=f"pool: {result.kv_total * scale:g} {label}", mode="lines", line=dict(color=FORMULA, dash="dash"),
                        x=[0, max(t for t, _ in result.kv)], y=[result.kv_total * scale] * 2)
    fig.update_yaxes(rangemode="tozero")
    return _legend_below(fig)


def _tenures(result) -> list[tuple[int, int, list[tuple[float, int]]]]:
    """(slot, request id, [(time, positions held)]) for each unbroken stretch a request held a slot."""
    open_, done = {}, []
    for k, (t, held) in enumerate(result.slot_map):
        for slot, rid, length in held:
            run = open_.get((slot, rid))
            if run is None or run[0] != k - 1:   # a new stretch (first seen, or back after a gap)
                run = open_[(slot, rid)] = [k, (slot, rid, [])]
                done.append(run[1])
            run[0] = k
            run[1][2].append((t, length))
    return done


def plot_kv_map(result, max_points: int = 300) -> go.Figure:
    """The KV pool as slots over time: a band per slot, filled by the request holding it, as high as the
    share of the slot's positions it holds (allocation at admission, growth with each token, release)."""
    fig = _figure(_title("KV memory map: who holds which slot", result), "seconds since the workload started",
                  "KV slot", height=380)
    pool = result.pool or {}
    if pool.get("kind") != "slots":
        what = "its paged blocks are counted, not mapped" if result.pool else "no pool of KV slots here"
        return _empty(fig, f"missing: {what}")
    if not result.slot_map:
        return _empty(fig, "no iteration yet")
    capacity, classes = pool["capacity"], {r.request.id: r.request.cls for r in result.records}
    palette, keyed = qualitative.Plotly + qualitative.D3, set()
    for slot, rid, samples in _tenures(result):
        samples = samples[::max(1, len(samples) // max_points)] + ([samples[-1]] if len(samples) > max_points else [])
        xs, ys = [], []
        for (t, n), nxt in zip(samples, samples[1:] + [None]):
            top = slot - 0.45 + 0.9 * n / capacity
            xs += [t, nxt[0] if nxt else t]
            ys += [top, top]
        x0, x1 = samples[0][0], samples[-1][0]
        fig.add_scatter(x=[x0, *xs, x1, x0], y=[slot - 0.45, *ys, slot - 0.45, slot - 0.45], fill="toself",
                        mode="lines", line=dict(width=1, color=palette[rid % len(palette)]), hoveron="fills",
                        name=f"#{rid} {classes.get(rid, '')}", legendgroup=str(rid),
                        showlegend=rid not in keyed,   # the colour key: one entry a request
                        text=f"slot {slot}: request #{rid} ({classes.get(rid, '')}), up to {max(n for _, n in samples)}"
                             f" of {capacity} positions", hoverinfo="text")
        keyed.add(rid)
    rows = -(-len(keyed) // 6)   # the key's lines, about six requests a line under the plot
    _legend_below(fig)
    fig.update_layout(yaxis=dict(range=[pool["slots"] - 0.5, -0.5], tickmode="linear", dtick=1),
                      legend=dict(title_text="colour: request", y=-0.2), margin=dict(b=90 + 26 * rows),
                      height=330 + 26 * rows)
    fig.add_annotation(text=f"{pool['slots']} slots × {capacity} positions = {pool['bytes'] / 2**20:.0f} MiB; "
                            "band height = positions held", showarrow=False, xref="paper", yref="paper", x=0, y=1.0,
                       xanchor="left", yanchor="bottom", font=dict(size=12))
    return fig


def plot_batches(result) -> go.Figure:
    """What each forward pass carried: prompt tokens (prefill chunks) and decoding requests."""
    fig = _figure(_title("What each forward pass carried", result), "seconds since the workload started", "tokens")
    if not result.batches:
        return _empty(fig, f"missing: {result.scheduler_label} does not report its forward passes")
    b = list(result.batches)
    mid = [(s.start + s.end) / 2 for s in b]
    fig.add_bar(name="prompt tokens (prefill)", x=mid, y=[s.prefill_tokens for s in b], marker_color=PREFILL,
                customdata=[s.end - s.start for s in b], hovertemplate="%{y} prompt tokens, pass %{customdata:.3f} s<extra></extra>")
    fig.add_bar(name="decoding requests (1 token each)", x=mid, y=[s.decode_tokens for s in b], marker_color=DECODE,
                customdata=[s.end - s.start for s in b], hovertemplate="%{y} decodes, pass %{customdata:.3f} s<extra></extra>")
    fig.update_layout(barmode="stack")
    return fig


def request_rows(result) -> list[list]:
    """The per-request table: id, class, prompt/output tokens, waiting, TTFT, TPOT, E2E (s), stop reason."""
    def s(v):
        return "—" if v is None else round(v, 3)
    return [[r.request.id, r.request.cls, r.prompt_tokens if r.prompt_tokens is not None else "—", r.output_tokens,
             s(r.waiting), s(r.ttft), s(r.tpot), s(r.e2e), r.stop_reason or "running"] for r in result.records]

