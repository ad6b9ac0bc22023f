"""A workload drawn from its records: the Gantt of every request, throughput and KV cache over time.

    fig = plot_gantt(result, now=12.3)   # one row per request: waiting, prefill (its passes), decode, end
    plot_gantt(result, refusals=[...], cancelled_means="client gone")   # an endpoint's: refused requests too
    plot_throughput(result); plot_kv_in_use(result); plot_batches(result)
    plot_kv_map(result)                  # the KV pool's slots over time, coloured by the request holding each
    plot_itl(result)                     # decoding requests' inter-token latency, prefill chunks marked

With prefix caching the Gantt draws each request's cached prefix copy in its own colour; under a KV budget,
each preemption (a cross), the wait that follows and the recompute's passes; the memory map adds a row for
the prefix cache's blocks (how many requests share them) and says the budget. A request's row names how many
of its prompt tokens were cached ("#3 short · 576 cached"): the copy itself is a sliver of a millisecond. An
endpoint's Gantt draws each refused request on a row of its own at its time (a marker per HTTP status, its
reason on hover), so two refused in the same second stay two; a cancelled request's end says why it was.

Every bar and point is a measured timestamp (serve/records.py). While a workload runs, `now` (seconds
since it started) extends the bars of requests still waiting or running, so the chart grows live.
A figure the source cannot give (its KV cache, its batches) is labelled missing, never drawn as zero.

Left out: sweeps (charts/serve_sweeps.py).
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from ..trace import COMPLETED, Phase, StopReason
from ..wait_parts import WAITING_WORDS
from .run import DECODE, FORMULA, PREFILL, _empty, _figure, side_by_side, titled
from .run import wrap as _lines

WAITING, PASS, FAILED = "#cbd5e1", "#b45309", "#dc2626"
CACHED, PREEMPTED, RECOMPUTE = "#0d9488", "#f9a8d4", "#be185d"
ENDS = {StopReason.EOS: ("circle", "#16a34a"), StopReason.LENGTH: ("square", "#16a34a"),
        StopReason.CONTEXT: ("diamond", "#16a34a"), StopReason.CANCELLED: ("x", FAILED),
        StopReason.ERROR: ("hexagram", "#7f1d1d")}
# a refused request: a closed square, coloured by its HTTP status (the reason is on hover and in the table)
REFUSED_SYMBOL, REFUSED_COLORS, REFUSED_OTHER = "square-x", {400: "#7c3aed", 429: "#0369a1", 413: "#a16207"}, "#475569"
STATUS_WORDS = {400: "too long or bad", 401: "no key or a wrong one", 413: "too large", 429: "too many",
                503: "not ready"}   # a refusal's words where its record has none of its own (Refusal.words)


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
    return titled(f"{text}{run_state(result)}", f"{result.scheduler} on {result.source}")


def run_state(result) -> str:
    """What a title says of a workload's state: nothing once done; running only while a request of it runs or is
    still to come (a room's live record with every request finished is not running).

    >>> from types import SimpleNamespace as S
    >>> live = S(cancelled=False, done=False, workload=S(requests=()), started=0.0)
    >>> run_state(S(**vars(live), records=[S(finished=None)])), run_state(S(**vars(live), records=[S(finished=2.0)]))
    (' (running…)', ' (none running now)')
    """
    if result.cancelled:
        return " (did not run: stopped first)" if result.started is None else " (cancelled: partial)"
    if result.done:
        return ""
    to_come = len(result.records) < len(result.workload.requests)
    return " (running…)" if to_come or any(r.finished is None for r in result.records) else " (none running now)"


def _legend_below(fig: go.Figure) -> go.Figure:
    """The legend under the x axis: above the plot it ran into the title's second line."""
    fig.update_layout(height=380, margin=dict(b=130),
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.32, yanchor="top"))
    return fig


def request_row(record) -> str:
    return f"#{record.request.id} {record.request.cls}"


def _row_label(record) -> str:
    """A request's row as the chart shows it: its id and class, who sent it where a room's record says (the client
    by the name the share table gives it, "page 2" or "client 3"; else only where from), how many prompt tokens
    were cached, and a remote server's own figures (`server_note`: serve/remote_record.py).

    >>> from types import SimpleNamespace as S
    >>> _row_label(S(request=S(id=3, cls="short"), cached_tokens=576)), _row_label(S(request=S(id=4, cls="long")))
    ('#3 short · 576 cached', '#4 long')
    >>> _row_label(S(request=S(id=5, cls="short"), cached_tokens=0, origin="page", server_note="server: 9 tok/s"))
    '#5 short · page · server: 9 tok/s'
    >>> _row_label(S(request=S(id=6, cls="short"), origin="page", client="page 2"))
    '#6 short · page 2'
    >>> _row_label(S(request=S(id=7, cls="long"), origin="API", client="client 3", cached_tokens=64))
    '#7 long · client 3 · 64 cached'
    >>> _row_label(S(request=S(id=8, cls="short"), origin="page", client="page 1", alone="speculative decoding"))
    '#8 short · page 1 · alone: speculative decoding'
    """
    cached, origin = getattr(record, "cached_tokens", 0), getattr(record, "origin", "")
    note, client = getattr(record, "server_note", ""), getattr(record, "client", "")
    who, alone = client or origin, getattr(record, "alone", "")
    return (request_row(record) + (f" · {who}" if who else "") + (f" · alone: {alone}" if alone else "")
            + (f" · {cached:,} cached" if cached else "") + (f" · {note}" if note else ""))


def refusal_words(refusal) -> str:
    """A refusal in a few words: its own (a wrong key and no key are both 401), else its status's.

    >>> from types import SimpleNamespace as S
    >>> refusal_words(S(status=401, words="wrong key")), refusal_words(S(status=429, words=""))
    ('wrong key', 'too many')
    """
    return getattr(refusal, "words", "") or STATUS_WORDS.get(refusal.status, "refused")


def refused_row(k: int, refusal) -> str:
    """The row of the k-th refused request (from 0), named by its status.

    >>> from types import SimpleNamespace as S
    >>> refused_row(0, S(status=429))
    'refused 1 · 429'
    """
    return f"refused {k + 1} · {refusal.status}"


def _legend_rows(entries: int, per_row: int = 2) -> int:
    """Lines a horizontal legend of `entries` takes, two entries a line (each half the figure's width: the longest,
    ~40 characters, fits at presenter mode's 18 px on a full-width figure at 1024 px).

    >>> _legend_rows(9)
    5
    """
    return -(-entries // per_row)


def _segments(result, now: float | None):
    """{phase: [(row, start, end, hover)]} from the records, open phases cut at `now`."""
    out = {"waiting": [], Phase.PREFILL: [], "prefill pass": [], Phase.DECODE: [], "cached": [], "preempted": [],
           "recompute": []}
    for r in result.records:
        row, clip = request_row(r), (now if now is not None else r.finished)
        if r.arrival > (clip if clip is not None else r.arrival):
            continue   # not arrived yet
        admitted = r.admitted if r.admitted is not None else (clip if r.stop_reason is None else r.finished)
        if admitted is not None and admitted > r.arrival:
            out["waiting"].append((row, r.arrival, admitted, waiting_hover(r, admitted - r.arrival)))
        if r.admitted is None:
            continue
        ended = r.finished if r.stop_reason is not None else None   # None too while its end is being recorded
        first = r.first_token if r.first_token is not None else (ended if ended is not None else clip)
        if first is None:
            continue
        kind = Phase.PREFILL if r.chunks else "prefill pass"   # passes known: draw them over the prefill phase
        detail = getattr(r, "server_detail", "")   # a remote server's count of the first token beside the client's
        out[kind].append((row, r.admitted, first, f"prefill (TTFT from admission): {(first - r.admitted):.3f} s"
                          + (f"<br>{detail}" if detail else "")))
        out["prefill pass"] += [(row, a, b, f"prefill pass: {n} prompt tokens, {b - a:.3f} s") for a, b, n in r.chunks]
        if r.first_token is not None:
            last = r.last_token if r.stop_reason is not None else max(r.last_token, clip or r.last_token)
            out[Phase.DECODE].append((row, r.first_token, last, f"decode: {r.output_tokens} tokens, {last - r.first_token:.3f} s"))
        for a, b, n in getattr(r, "cache_copies", ()):
            out["cached"].append((row, a, b, f"cached blocks copied in: {n} prompt tokens, {(b - a) * 1e3:.1f} ms"))
        for p in getattr(r, "preemptions", ()):
            back = p.resumed if p.resumed is not None else (clip if r.stop_reason is None else r.finished)
            if back is not None:
                out["preempted"].append((row, p.at, back, f"preempted after {p.after_tokens} tokens: "
                                                          f"{p.positions} positions dropped; waiting again"))
            if p.copy:
                out["cached"].append((row, *p.copy, f"copied back from the prefix cache: {p.cached} positions"))
            out["recompute"] += [(row, a, b, f"recompute pass: {n} positions, {b - a:.3f} s") for a, b, n in p.chunks]
    return out


def waiting_hover(record, seconds: float) -> str:
    """A waiting bar's hover: how long, and what for by the batcher's reasons where the record has them (its wait
    parts once admitted; the latest plan's reason while it waits).

    >>> from types import SimpleNamespace as S
    >>> from playground.wait_parts import WaitParts
    >>> waiting_hover(S(wait_parts=WaitParts((("the iteration in progress", 0.12),)), waiting_for=None), 0.125)
    'waiting 0.125 s: 0.120 s waiting for the iteration in progress (it came after the batcher had planned the iteration running)'
    >>> waiting_hover(S(wait_parts=None, waiting_for="no free slot"), 2.0)
    'waiting 2.000 s, now waiting for a KV slot (every slot was held)'
    >>> waiting_hover(S(), 0.5)
    'waiting 0.500 s'
    """
    parts, now_for = getattr(record, "wait_parts", None), getattr(record, "waiting_for", None)
    if parts is not None and parts.waited:
        return f"waiting {seconds:.3f} s: " + "; ".join(f"{s:.3f} s {WAITING_WORDS.get(reason, reason)}"
                                                        for reason, s in parts.waited)
    if now_for is not None:
        return f"waiting {seconds:.3f} s, now {WAITING_WORDS.get(now_for, now_for)}"
    return f"waiting {seconds:.3f} s"


def timeline_end(result) -> float:
    """Where a workload's timeline ends so far: now while it runs, else its last end (0 before it starts)."""
    ends = [r.finished for r in result.records if r.finished is not None]
    return max([result.now() or 0.0, *ends])


def shared_range(results) -> list[float] | None:
    """One x-range for several Gantt charts side by side, so the faster run looks faster; None when none ran."""
    end = max((timeline_end(r) for r in results if r is not None), default=0.0)
    return [0.0, end * 1.03] if end > 0 else None


def on_time_axis(fig: go.Figure, x_range: list[float] | None) -> go.Figure:
    """`fig`'s x axis set to `x_range` (shared_range's: charts side by side on one time axis); None: as drawn."""
    if x_range is not None:
        fig.update_xaxes(range=x_range, autorange=False)
    return fig


def plot_gantt(result, now: float | None = None, x_range: list[float] | None = None, refusals=(),
               cancelled_means: str = "", wide: bool = False) -> go.Figure:
    """`x_range`: the x-axis's [start, end] (shared_range: the same for A and B); None: Plotly's own.
    `refusals`: requests refused before they ran (each with `time`, `status`, `reason`: serve.traffic.Refusal), a row
    each among the others in time order; `cancelled_means`: what a cancel is here ("client gone"); `wide`: the
    figure is as wide as the page (the clients' view), so its legend takes two entries a line, every one shown."""
    n = len(result.records) + len(refusals)   # rows of 28 px: presenter mode's 18 px labels never overlap
    fig = _figure(_title("Every request's timeline", result), "seconds since the workload started", "")
    colors = {"waiting": WAITING, Phase.PREFILL: "#fcd9a8", "prefill pass": PREFILL, Phase.DECODE: DECODE,
              "cached": CACHED, "preempted": PREEMPTED, "recompute": RECOMPUTE}
    names = {"waiting": "waiting (arrived, not admitted)", Phase.PREFILL: "prefill phase (between its passes)",
             "prefill pass": "prefill (its forward passes)", Phase.DECODE: "decode",
             "cached": "cached prefix copied in (not computed)", "preempted": "preempted: KV dropped, waiting again",
             "recompute": "recompute after a preemption"}
    for phase, segs in _segments(result, now).items():
        if segs:
            fig.add_bar(name=names[phase], orientation="h", y=[s[0] for s in segs], base=[s[1] for s in segs],
                        x=[max(s[2] - s[1], 1e-4) for s in segs], marker_color=colors[phase],
                        customdata=[s[3] for s in segs], hovertemplate="%{y}: %{customdata}<extra></extra>")
    for reason, (symbol, color) in ENDS.items():
        ends = [r for r in result.records if r.stop_reason == reason and r.finished is not None]
        if ends:
            why = f" ({cancelled_means})" if reason == StopReason.CANCELLED and cancelled_means else ""
            fig.add_scatter(name=f"ended: {reason}{why}", mode="markers", y=[request_row(r) for r in ends],
                            x=[r.last_token if r.last_token is not None else r.finished for r in ends],
                            marker=dict(symbol=symbol, color=color, size=9),
                            customdata=[r.error or f"{reason}{why}" for r in ends],
                            hovertemplate="%{y}: %{customdata}<extra></extra>")
    cuts = [(r, p) for r in result.records for p in getattr(r, "preemptions", ())]
    if cuts:
        fig.add_scatter(name="preemption", mode="markers", y=[request_row(r) for r, _ in cuts], x=[p.at for _, p in cuts],
                        marker=dict(symbol="x-thin", color=RECOMPUTE, size=12, line=dict(width=3, color=RECOMPUTE)),
                        customdata=[f"preempted after {p.after_tokens} tokens" for _, p in cuts],
                        hovertemplate="%{y}: %{customdata}<extra></extra>")
    refused = [(refused_row(k, x), x) for k, x in enumerate(refusals)]
    for status, words in sorted({(x.status, refusal_words(x)) for x in refusals}):
        mine = [(row, x) for row, x in refused if (x.status, refusal_words(x)) == (status, words)]
        color = REFUSED_COLORS.get(status, REFUSED_OTHER)
        fig.add_scatter(name=f"refused {status} ({words})", mode="markers",
                        y=[row for row, _ in mine], x=[x.time for _, x in mine],
                        marker=dict(symbol=REFUSED_SYMBOL, color=color, size=11, line=dict(width=1, color=color)),
                        customdata=[x.reason for _, x in mine], hovertemplate="%{y}: %{customdata}<extra></extra>")
    rows = [(r.arrival, request_row(r), _row_label(r)) for r in result.records]
    if refused:   # among the others, in time order
        rows = sorted(rows + [(x.time, row, row) for row, x in refused], key=lambda row: row[0])
    # the x axis's ticks and title, then the legend: on a figure as wide as the page two entries a line
    below = 110 + 28 * _legend_rows(len(fig.data)) if wide else 180
    legend = dict(entrywidth=0.5, entrywidthmode="fraction") if wide else {}
    fig.update_layout(barmode="overlay", legend=dict(orientation="h", y=0, x=0, xanchor="left", yanchor="bottom",
                                                     yref="container", **legend),
                      height=110 + max(210, 28 * n) + below, margin=dict(l=80, r=20, t=70, b=below),
                      yaxis=_rows_axis([r[1] for r in rows], [r[2] for r in rows]))
    return on_time_axis(fig, x_range)


def _rows_axis(rows: list[str], labels: list[str] | None = None) -> dict:
    """A Gantt's y axis: one category per request, the first at the top, each shown as its label (default: itself)."""
    return dict(autorange="reversed", type="category", categoryorder="array", categoryarray=rows, tickmode="array",
                tickvals=rows, ticktext=labels or rows, automargin=True)


def plot_gantts(panels: list[tuple[str, object, list[float] | None]], title: str) -> go.Figure:
    """Several workloads' Gantt charts side by side in one figure, under one legend (run.side_by_side): `panels`
    is [(label, result, x_range)]; a panel whose requests are the previous panel's shares its row labels.

    >>> from playground.serve.records import WorkloadResult
    >>> from playground.serve.workload import Workload
    >>> empty = WorkloadResult("batching", "batching", "tiny", Workload(()), [])
    >>> fig = plot_gantts([("without", empty, None), ("with", empty, None)], "Every request")
    >>> [a.text for a in fig.layout.annotations], fig.layout.xaxis2.domain[0] > fig.layout.xaxis.domain[1]
    (['without', 'with'], True)
    """
    figures = []
    for label, result, x_range in panels:
        gantt = plot_gantt(result, x_range=x_range)
        gantt.update_xaxes(title=None, ticksuffix=" s", nticks=4)   # one unit a panel, the legend's row kept
        figures.append((label, gantt))
    rows = max((len(result.records) for _, result, _ in panels), default=0)
    return side_by_side(figures, title, height=max(460, 250 + 24 * rows))


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
    budget = (result.pool or {}).get("kv_budget")
    if budget and unit == "bytes":
        fig.add_scatter(name=_lines(f"KV budget: {budget:,} positions (a smaller memory, as on a full GPU)"),
                        mode="lines", line=dict(color=RECOMPUTE, dash="dot"), x=[0, max(t for t, _ in result.kv)],
                        y=[budget * result.pool["position_bytes"] * scale] * 2)
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


COMPACT_POINTS = 12   # samples a tenure keeps at most in a compact KV map (a live view's: redrawn while it grows)


def plot_kv_map(result, max_points: int = 300, compact: bool = False) -> go.Figure:
    """The KV pool as slots over time: a band per slot, filled by the request holding it, as high as the
    share of the slot's positions it holds (allocation at admission, growth with each token, release).

    `compact` (a live view that redraws it while hundreds of requests pass): the same bands, each tenure's
    samples thinned to COMPACT_POINTS, drawn as one trace a colour (the bands of one colour are shapes of one
    trace, apart) rather than one a tenure, with no legend entry a request: a band's end, hovered, names its
    request."""
    fig = _figure(_title("KV memory map", result), "seconds since the workload started",
                  "KV slot", height=380)
    pool = result.pool or {}
    if pool.get("kind") != "slots":
        what = "its paged blocks are counted, not mapped" if result.pool else "no pool of KV slots here"
        return _empty(fig, f"missing: {what}")
    if not result.slot_map:
        return _empty(fig, "no iteration yet")
    capacity, classes = pool["capacity"], {r.request.id: r.request.cls for r in result.records}
    palette, keyed = qualitative.Plotly + qualitative.D3, set()
    if compact:
        _draw_tenures(fig, _tenures(result), capacity, classes, palette)
    for slot, rid, samples in () if compact else _tenures(result):
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
    rows = pool["slots"]
    cache_map = getattr(result, "cache_map", None)
    if cache_map and pool.get("prefix_cache_blocks"):
        _draw_prefix_cache(fig, cache_map, pool["prefix_cache_blocks"], rows, classes)
        rows += 1
    key = [f"{pool['slots']} slots × {capacity} positions = {pool['bytes'] / 2**20:.0f} MiB",
           *([f"KV budget: {pool['kv_budget']:,} positions (a smaller memory)"] if pool.get("kv_budget") else []),
           "a band's height: the positions its request holds",
           "colour: request" + (" (hover a band's end for its number)" if compact else "")]
    key = "<br>".join(key)
    lines = key.count("<br>") + 1 + -(-len(keyed) // 5)   # the key under the x axis: about five requests a line
    below = 80 + 24 * lines             # the x axis's ticks and title, then the key, anchored to the bottom edge
    fig.update_layout(yaxis=dict(range=[rows - 0.5, -0.5], tickmode="linear", dtick=1),
                      legend=dict(orientation="h", x=0, xanchor="left", y=0, yanchor="bottom", yref="container",
                                  title=dict(text=key, side="top")),
                      margin=dict(l=60, r=20, t=80, b=below), height=max(300, 160 + 20 * rows) + below)
    return fig


def _draw_tenures(fig, tenures, capacity: int, classes: dict, palette, most: int = COMPACT_POINTS) -> None:
    """plot_kv_map's bands, compact: one trace a colour, each tenure a closed shape of it (None between two), its
    samples thinned to `most` (the last kept) and joined by straight lines, times in ms; one unseen point a tenure
    (at its band's end) holds its hover: the slot, the request, the most positions it held."""
    shapes: dict[int, tuple[list, list]] = {}
    hover: tuple[list, list, list] = ([], [], [])
    for slot, rid, samples in tenures:
        held = max(n for _, n in samples)
        if len(samples) > most:
            samples = samples[::-(-len(samples) // most)] + [samples[-1]]
        xs, ys = shapes.setdefault(rid % len(palette), ([], []))
        low = slot - 0.45
        band = [(samples[0][0], low), *((t, low + 0.9 * n / capacity) for t, n in samples), (samples[-1][0], low)]
        xs += [round(x, 3) for x, _ in band] + [None]
        ys += [round(y, 3) for _, y in band] + [None]
        hover[0].append(round(samples[-1][0], 3))
        hover[1].append(round(low + 0.45 * held / capacity, 3))
        hover[2].append(f"slot {slot}: request #{rid} ({classes.get(rid, '')}), up to {held} of {capacity} positions")
    for colour, (xs, ys) in sorted(shapes.items()):
        fig.add_scatter(x=xs, y=ys, fill="toself", mode="lines", line=dict(width=1, color=palette[colour]),
                        showlegend=False, hoverinfo="skip", name="")
    fig.add_scatter(x=hover[0], y=hover[1], text=hover[2], mode="markers", marker=dict(size=10, opacity=0),
                    hoverinfo="text", showlegend=False, name="requests")


def _draw_prefix_cache(fig, cache_map, capacity: int, row: int, classes: dict) -> None:
    """The prefix cache as one more row: blocks kept (light) and, over them, blocks running requests hold, the
    ones two or more hold (shared) darkest; heights are shares of the cache's budget in blocks."""
    xs, kept, held, shared, hover = [], [], [], [], []
    for (t, n, holders), nxt in zip(cache_map, cache_map[1:] + [None]):
        counts = {}
        for _, ids in holders:
            for b in ids:
                counts[b] = counts.get(b, 0) + 1
        two = sum(c > 1 for c in counts.values())
        for x in (t, nxt[0] if nxt else t):
            xs.append(x)
            kept.append(n)
            held.append(len(counts))
            shared.append(two)
        hover.append(f"prefix cache: {n} of {capacity} blocks kept; {len(counts)} held by running requests, "
                     f"{two} shared by two or more")
    base = row + 0.45
    for values, color, name in ((kept, "#99f6e4", "blocks kept"), (held, "#2dd4bf", "held by a running request"),
                                (shared, CACHED, "shared by two or more")):
        top = [base - 0.9 * v / capacity for v in values]
        fig.add_scatter(x=[xs[0], *xs, xs[-1], xs[0]], y=[base, *top, base, base], fill="toself", mode="lines",
                        line=dict(width=1, color=color), name=f"prefix cache: {name}", showlegend=False,
                        hoveron="fills", text=hover[-1], hoverinfo="text")
    fig.add_annotation(text="prefix cache", x=xs[0], y=row, xanchor="left", showarrow=False, font=dict(size=11))


def decode_itl(result) -> list[tuple[float, float, bool, str, int]]:
    """(time, ITL, whether a prefill pass ran within that interval, class, request id) for every decode Step:
    a chunk read between two decode steps delays every decoding request's next token (Sarathi's interference)."""
    passes = sorted((a, b) for r in result.records for a, b, _ in
                    [*r.chunks, *(c for p in getattr(r, "preemptions", ()) for c in p.chunks)])
    starts = [a for a, _ in passes]
    out = []
    for r in result.records:
        for step in r.steps[1:]:
            t = r.admitted + step.time
            lo = t - step.latency
            i = int(np.searchsorted(starts, t))   # passes run one after another: the last to start before t
            hit = i > 0 and passes[i - 1][1] > lo   # overlaps (lo, t) when any of them does
            out.append((t, step.latency, hit, r.request.cls, r.request.id))
    return sorted(out)


def plot_itl(result, max_points: int = 4000) -> go.Figure:
    """Decoding requests' inter-token latency over time; a token whose interval held a prefill pass in the
    prefill colour, the others in the decode colour, and every prefill pass as a tick along the bottom."""
    fig = _figure(_title("Inter-token latency of decoding requests", result), "seconds since the workload started",
                  "ITL (ms)")
    points = decode_itl(result)
    if not points:
        return _empty(fig, "no decode step yet")
    points = points[::max(1, len(points) // max_points)]
    for carried, color, name in ((False, DECODE, "ITL: no prefill pass in between"),
                                 (True, PREFILL, "ITL: a prefill chunk ran in between")):
        sel = [p for p in points if p[2] == carried]
        if sel:
            fig.add_scatter(name=_lines(name), mode="markers", x=[p[0] for p in sel], y=[p[1] * 1e3 for p in sel],
                            marker=dict(color=color, size=5), customdata=[f"#{p[4]} {p[3]}" for p in sel],
                            hovertemplate="%{customdata}: %{y:.0f} ms<extra></extra>")
    passes = [(a, b) for r in result.records for a, b, _ in r.chunks]
    if passes:
        fig.add_scatter(name="a prefill pass", mode="markers", x=[(a + b) / 2 for a, b in passes], y=[0] * len(passes),
                        marker=dict(symbol="line-ns-open", color=PREFILL, size=12), hoverinfo="skip")
    fig.update_yaxes(rangemode="tozero")
    return _legend_below(fig)


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
    """The per-request table: id, class, prompt/output tokens (thinking ones in brackets), waiting, TTFT, the first
    answer token (TTFT where nothing was thought first), TPOT, E2E (s), stop reason."""
    def s(v):
        return "—" if v is None else round(v, 3)

    def tokens(r):
        return f"{r.output_tokens} ({r.thinking_tokens} thinking)" if r.thinking_tokens else r.output_tokens
    return [[r.request.id, r.request.cls, r.prompt_tokens if r.prompt_tokens is not None else "—", tokens(r),
             s(r.waiting), s(r.ttft), s(r.ttft_answer), s(r.tpot), s(r.e2e), r.stop_reason or "running"]
            for r in result.records]



def watch_placeholder(what: str) -> go.Figure:
    """One of the Watch view's charts before a watch: its title says how to start one; no axis, no data. Drawn
    when the Serve tab opens, so the page loads and starts Plotly (about a second of its main thread on 2 cores)
    then, not in a watch's first update.

    >>> fig = watch_placeholder("every request")
    >>> fig.layout.title.text, len(fig.data), list(fig.layout.yaxis.categoryarray)
    ('every request: press Watch to see it live', 0, [])
    """
    return go.Figure(layout=dict(title=dict(text=f"{what}: press Watch to see it live"), height=120,
                                 margin=dict(l=20, r=20, t=40, b=10), xaxis=dict(visible=False),
                                 yaxis=dict(visible=False, categoryarray=[]), template="plotly_white"))
