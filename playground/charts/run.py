"""One request drawn from its Trace: timeline, per-step latency, KV-cache growth, top-k candidates.

Every number comes from the Trace's Step records (measured during the run); the only computed line
is the KV-cache formula 2 x layers x kv_heads x head_dim x seq_len x bytes, labelled "formula (estimate)".

Example:
    >>> fig = plot_timeline(trace)            # a Trace with 3 steps
    >>> [t.name for t in fig.data], [len(t.x) for t in fig.data]
    (['prefill (TTFT)', 'decode'], [1, 2])

Pure functions: no state, no I/O; an empty Trace (or None) gives an empty figure with a hint.
Left out: several requests in one figure (the compare charts do that).
"""
from __future__ import annotations

import html
import json
import math
import textwrap

import plotly.graph_objects as go

from ..tokens import visible

PREFILL, DECODE, FORMULA = "#d97706", "#2563eb", "#6b7280"
THINKING, ANSWER = "#8b5cf6", "#15803d"   # a reasoning server's thinking steps; the first answer token
WAITING, SHARED = "#9ca3af", "#0d9488"    # a request waiting for its turn; a decode pass other requests shared
FONT = dict(size=16)


def titled(text: str, subtitle: str = "") -> dict:
    """A figure's title, with Plotly's own subtitle under it (a font of its own, which presenter mode
    enlarges like any text; a `<sup>` line inside the title would stay at 70 % of the title's size).

    >>> titled("Prefill", "SmolLM2 · torch")
    {'text': 'Prefill', 'subtitle': {'text': 'SmolLM2 · torch'}}
    """
    return {"text": text, "subtitle": {"text": subtitle}} if subtitle else {"text": text}


WHITE = go.Figure(layout={"template": "plotly_white"}).layout.template   # validated once, here


def _figure(title: str | dict, xaxis: str, yaxis: str, height: int = 320) -> go.Figure:
    """An empty figure with the project's layout (`_layout`) and the white template."""
    return as_figure({"data": [], "layout": _layout(title, xaxis, yaxis, height)})


def _empty(fig: go.Figure, text: str = "Generate to see this chart") -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, font=dict(size=18),
                       xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


MISSING = "missing: {} does not give {}"   # what a chart says instead of drawing a zero


def wrap(text: str, width: int = 36) -> str:
    """A long legend entry on lines of `width` characters at most: one line would run past a half-width
    figure (in presenter mode's larger type too).

    >>> wrap("paged KV blocks allocated, of the pool's 64 (16 tokens each)")
    "paged KV blocks allocated, of the<br>pool's 64 (16 tokens each)"
    """
    return "<br>".join(textwrap.wrap(text, width)) or text


LABEL_PX, NOMINAL_WIDTH_PX = 11, 900   # a tick label's character at presenter mode's 18 px; a lesson's plot width


def _y_room(fig: go.Figure) -> float:
    """The share of a figure's width its y axis's tick labels and title take, at presenter mode's 18 px."""
    axis = fig.layout.yaxis
    if axis.showticklabels is False:
        return 0.0
    labels = list(axis.ticktext or ()) or [f"{v:.3g}" for t in fig.data for v in (t.y or ()) if isinstance(v, float)]
    title = 30 if axis.title.text else 0
    return (LABEL_PX * max(map(len, map(str, labels)), default=3) + title + 24) / NOMINAL_WIDTH_PX


LINE_PX = 24   # a line of presenter mode's 18 px text


def panel_labels(labels: list[str], width: float, first_room: float = 0.0) -> list[str]:
    """Each panel's label on lines that fit over its panel at presenter mode's 18 px: `width` is a panel's share of
    the plot's width, `first_room` the share the first panel's tick labels take from it (they widen the margin).
    Labels that ran past their panel ran into their neighbours' ("Without prefix cacheWith prefix cache").

    >>> panel_labels(["Without prefix cache", "With prefix cache", "KV budget: 112 positions"], 0.27, 0.3)
    ['Without prefix<br>cache', 'With prefix<br>cache', 'KV budget: 112<br>positions']
    >>> panel_labels(["One at a time", "With continuous batching"], 0.45)
    ['One at a time', 'With continuous batching']
    """
    fits = max(8, int(width * NOMINAL_WIDTH_PX * (1 - first_room) / LABEL_PX))
    return [wrap(label, fits) for label in labels]


def side_by_side(panels: list[tuple[str, go.Figure]], title: str | dict, height: int = 460) -> go.Figure:
    """Several figures as panels of one figure, side by side under one legend: `panels` is [(label, figure)], each
    label over its panel, each panel keeping its figure's traces, axes and annotations. A lesson step names its
    charts in its takeaway: one figure, with one legend across its width, fits a projector's screen where a chart
    each did not (a legend each, side by side, was cut). A trace name seen in an earlier panel is listed once.
    A panel whose y axis is the previous panel's (the same categories) draws no tick labels of its own.

    >>> a = go.Figure(go.Scatter(name="measured", x=[0, 1], y=[1.0, 2.0]))
    >>> fig = side_by_side([("left", a), ("right", go.Figure(go.Scatter(name="measured", x=[0], y=[3.0])))], "Both")
    >>> [a.text for a in fig.layout.annotations], [t.showlegend for t in fig.data], [t.xaxis for t in fig.data]
    (['left', 'right'], [True, False], ['x', 'x2'])
    """
    same = [k > 0 and fig.layout.yaxis.categoryarray is not None
            and fig.layout.yaxis.categoryarray == panels[k - 1][1].layout.yaxis.categoryarray
            for k, (_, fig) in enumerate(panels)]
    gaps = [0.0] + [0.08 if same[k] else _y_room(fig) for k, (_, fig) in enumerate(panels) if k]
    width = (1 - sum(gaps)) / max(len(panels), 1)
    labels = panel_labels([label for label, _ in panels], width, _y_room(panels[0][1]) if panels else 0.0)
    out = _figure(title, "", "", height=height)
    start, listed = 0.0, set()
    for k, ((_, fig), label) in enumerate(zip(panels, labels)):
        start += gaps[k]
        n = "" if k == 0 else str(k + 1)
        x, y = fig.layout.xaxis.to_plotly_json(), fig.layout.yaxis.to_plotly_json()
        out.update_layout({f"xaxis{n}": {**x, "domain": [start, start + width], "anchor": f"y{n}"},
                           f"yaxis{n}": {**y, "anchor": f"x{n}", **({"showticklabels": False} if same[k] else {})}})
        for note in fig.layout.annotations:   # a panel's own words (a missing figure): over its panel
            out.add_annotation(note.update(x=start + width * (note.x if note.x is not None else 0.5))
                               if note.xref == "paper" else note.update(xref=f"x{n}", yref=f"y{n}"))
        out.add_annotation(text=label, x=start + width / 2, xref="paper", y=1, yref="paper", yanchor="bottom",
                           showarrow=False, font=dict(size=16))
        for trace in fig.data:
            trace.update(xaxis=f"x{n}", yaxis=f"y{n}", legendgroup=trace.name, showlegend=trace.name not in listed)
            listed.add(trace.name)
            out.add_trace(trace)
        start += width
    subtitle = isinstance(title, dict) and "subtitle" in title
    lines = max((label.count("<br>") for label in labels), default=0)   # a label's second line: the title higher
    return out.update_layout(barmode=panels[0][1].layout.barmode if panels else None,
                             margin=dict(l=80, r=20, t=(90 if subtitle else 70) + LINE_PX * lines, b=130),
                             legend=dict(orientation="h", y=0, x=0, xanchor="left", yanchor="bottom", yref="container"))


def _label(text: str) -> str:
    """Whitespace made visible, escaped: plotly reads <b>, <br>, <a> in labels as markup. Quotes stay as
    they are: outside a tag they are plain text, and plotly shows &quot; as is (it decodes &amp;, &lt;, &gt;)."""
    return html.escape(visible(text.encode()) or "∅", quote=False)


# --- the four charts of a run, as plain figure specs (plotly's own JSON, the template left out)
#
# Each chart is built as the dict plotly would write for it (`{"data": [...], "layout": {...}}`), then made a
# go.Figure by `as_figure`. A Generate run's page gets the specs themselves (`run_specs`, in the step stream's end
# line): a room's runs end together, and plotly's object model took about 15 ms a run to build and write the four
# figures (tests/charts/test_charts_run.py holds each spec equal to its figure's JSON).

def _layout(title: str | dict, xaxis: str, yaxis: str, height: int = 320) -> dict:
    """`_figure`'s layout as plotly writes it (titles as {"text": ...}), without the template."""
    return {"title": title if isinstance(title, dict) else {"text": title}, "xaxis": {"title": {"text": xaxis}},
            "yaxis": {"title": {"text": yaxis}}, "height": height, "font": dict(FONT),
            "margin": {"l": 60, "r": 20, "t": 80, "b": 50},   # the legend below the title
            "legend": {"orientation": "h", "y": 1.0, "x": 1, "xanchor": "right", "yanchor": "bottom"}}


def _empty_spec(layout: dict, text: str = "Generate to see this chart") -> dict:
    layout.setdefault("annotations", []).append({"text": text, "showarrow": False, "font": {"size": 18},
                                                 "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5})
    return {"data": [], "layout": layout}


def as_figure(spec: dict) -> go.Figure:
    """A spec (the dict plotly writes) as a go.Figure with the white template. The layout goes in whole, validated
    once by the constructor (update_layout's relayout path costs 4x that), and the template as plotly puts its
    default one in: without validating it again (already done for WHITE)."""
    fig = go.Figure(data=spec["data"], layout=spec["layout"])
    fig.layout._validate = False
    fig.layout.template = WHITE
    fig.layout._validate = True
    return fig


def whole_json(spec: dict) -> dict:
    """A spec with the white template in its layout: its figure's JSON (`json.loads(as_figure(spec).to_json())`),
    without building the figure."""
    return {"data": spec["data"], "layout": {**spec["layout"], "template": TEMPLATE_JSON}}


def run_specs(trace) -> dict[str, dict]:
    """The four charts of a run as specs, by the names the Generate page's containers take."""
    return {"timeline": timeline_spec(trace), "latency": step_latency_spec(trace), "kv": kv_cache_spec(trace),
            "topk": top_k_spec(trace)}


# the white template as plotly writes it: a page gets it once beside a run's specs
TEMPLATE_JSON = json.loads(go.Figure(layout={"template": WHITE}).to_json())["layout"]["template"]


# --- time

def plot_timeline(trace) -> go.Figure:
    """A Gantt of the request: its wait for a turn (when measured: `trace.queued`), the prefill bar (t0 -> first
    token), then one bar per decode step. A step whose forward pass carried other requests too (`Step.rows` > 1,
    the engine loop batching the room) is drawn apart, its hover saying how many shared it; so are a reasoning
    server's thinking steps, and the first answer token is marked beside the first token (TTFT, the first thought).

    >>> from types import SimpleNamespace as NS
    >>> def s(i, t, thinking): return NS(index=i, time=t, latency=0.1, text="x", thinking=thinking)
    >>> fig = plot_timeline(NS(steps=[s(0, .3, True), s(1, .4, True), s(2, .5, False), s(3, .6, False)]))
    >>> [(t.name, len(t.x)) for t in fig.data]
    [('prefill (TTFT: the first thought)', 1), ('thinking', 1), ('decode (the answer)', 2), ('first answer token', 1)]
    """
    return as_figure(timeline_spec(trace))


PART_NAMES = {"copied": ("cached tokens copied", SHARED), "computed": ("its prompt computed", PREFILL),
              "machine": ("paused for the machine", WAITING), "others": ("other requests' steps", "#fcd9a8")}


def first_token_bars(waits) -> list[dict]:
    """The time to the first token as its parts (wait_parts.py), one bar each from the request's arrival, in the
    order of WaitParts.named: a sum (its chunks and other requests' steps alternate), not the order they ran in.

    >>> from playground.wait_parts import WaitParts
    >>> bars = first_token_bars(WaitParts((("no free slot", 0.2),), computed=0.1, computed_tokens=300, chunks=3,
    ...                                   chunk=128, others=0.3))
    >>> [(b["name"], round(b["base"][0], 1), round(b["x"][0], 1)) for b in bars]
    [('waiting: no free slot', 0.0, 200.0), ('its prompt computed', 200.0, 100.0), ("other requests' steps", 300.0, 300.0)]
    """
    bars, at = [], 0.0
    for part in waits.named():
        name, colour = PART_NAMES.get(part.key, (part.key, WAITING))
        bars.append({"type": "bar", "name": name, "orientation": "h", "y": ["request"], "base": [at * 1e3],
                     "x": [part.seconds * 1e3], "marker": {"color": colour},
                     "hovertemplate": f"{html.escape(part.words)} (on the {part.clock}'s clock): %{{x:.1f}} ms"
                                      "<extra>a part of the time to the first token</extra>"})
        at += part.seconds
    return bars


def timeline_spec(trace) -> dict:
    """plot_timeline's figure as a spec."""
    queued = getattr(trace, "queued", None) if trace else None
    wait = queued or 0.0
    layout = _layout("Timeline of the request", "time since request start" if queued is None else
                     "time since the request arrived", "")   # the unit in each tick's label (time_ticks)
    steps = trace.steps if trace else []
    if not steps:
        return _empty_spec(layout)
    layout["xaxis"].update(tickmode="array", **time_ticks((wait + steps[-1].time) * 1e3))
    thought = any(getattr(s, "thinking", False) for s in steps)
    data = []
    waits = getattr(trace, "waits", None)
    if queued is not None and waits is not None and steps[0].index == 0:
        data += first_token_bars(waits)
    elif queued is not None:
        data.append({"type": "bar", "name": "waiting for a turn", "orientation": "h", "y": ["request"], "base": [0.0],
                     "x": [wait * 1e3], "marker": {"color": WAITING},
                     "hovertemplate": "waiting for a turn: %{x:.1f} ms<extra></extra>"})
    if waits is None or queued is None:
        data.append({"type": "bar", "name": "prefill (TTFT: the first thought)" if thought else "prefill (TTFT)"
                     if queued is None else "prefill, after the wait", "orientation": "h", "y": ["request"],
                     "base": [wait * 1e3], "x": [steps[0].time * 1e3], "marker": {"color": PREFILL},
                     "hovertemplate": "prefill + first token: %{x:.1f} ms<extra></extra>"})
    decode = [s for s in steps[1:] if not getattr(s, "thinking", False)]
    parts = [("thinking", THINKING, [s for s in steps[1:] if getattr(s, "thinking", False)]),
             ("decode (the answer)" if thought else "decode", DECODE,
              [s for s in decode if (getattr(s, "rows", None) or 1) <= 1]),
             ("decode, a pass shared with others", SHARED, [s for s in decode if (getattr(s, "rows", None) or 1) > 1])]
    for name, colour, group in parts:
        if not group and (thought or name != "decode"):
            continue
        data.append({"type": "bar", "name": name, "orientation": "h", "y": ["request"] * len(group),
                     "base": [(wait + s.time - s.latency) * 1e3 for s in group], "x": [s.latency * 1e3 for s in group],
                     "marker": {"color": colour, "line": {"color": "white", "width": 1 if len(steps) < 200 else 0}},
                     "customdata": [[s.index, _label(s.text), getattr(s, "rows", None) or 1] for s in group],
                     "hovertemplate": f"{name}: step %{{customdata[0]}} %{{customdata[1]}}: %{{x:.1f}} ms, a pass "
                                      "of %{customdata[2]} request(s)<extra></extra>"})
    answer = next((s.time for s in steps if not s.thinking), None) if thought else None
    if answer is not None:   # a tick across the bar where the answer begins
        data.append({"type": "scatter", "name": "first answer token", "x": [(wait + answer) * 1e3], "y": ["request"],
                     "mode": "markers",
                     "marker": {"symbol": "line-ns-open", "size": 40, "line": {"color": ANSWER, "width": 4}},
                     "hovertemplate": "first answer token: %{x:.1f} ms<extra></extra>"})
    layout.update(barmode="overlay", height=220)
    layout["yaxis"]["showticklabels"] = False
    return {"data": data, "layout": layout}


def plot_step_latency(trace) -> go.Figure:
    """Latency of every step: the first is TTFT (prefill), the rest inter-token latencies (decode)."""
    return as_figure(step_latency_spec(trace))


def step_latency_spec(trace) -> dict:
    """plot_step_latency's figure as a spec."""
    layout = _layout("Latency per step", "output token (step)", "latency (ms)")
    steps = trace.steps if trace else []
    if not steps:
        return _empty_spec(layout)
    data = [{"type": "bar", "name": "prefill (TTFT)", "x": [0], "y": [steps[0].latency * 1e3],
             "marker": {"color": PREFILL}, "hovertemplate": "TTFT %{y:.1f} ms<extra></extra>"},
            {"type": "bar", "name": "decode (ITL)", "x": [s.index for s in steps[1:]],
             "y": [s.latency * 1e3 for s in steps[1:]], "marker": {"color": DECODE},
             "customdata": [_label(s.text) for s in steps[1:]],
             "hovertemplate": "step %{x} %{customdata}: %{y:.1f} ms<extra></extra>"}]
    if len(steps) > 2:   # TTFT dwarfs decode steps: a log axis keeps both readable
        layout["yaxis"].update(type="log", **log_ms_ticks([s.latency * 1e3 for s in steps]))
    return {"data": data, "layout": layout}


def time_ticks(span_ms: float) -> dict:
    """Tick values in ms, and their labels in a person's unit, for a linear time axis from 0 over `span_ms`: a step
    of 1, 2 or 5 in its decade, at most 6 ticks, the last at or past the span; every label in seconds once the
    last tick is, else in ms (Plotly's own labels read "5k" for 5,000 ms). As ui/live/format.js timeTicks.

    >>> time_ticks(20_000)["ticktext"]
    ['0 s', '5 s', '10 s', '15 s', '20 s']
    >>> time_ticks(230)["ticktext"]
    ['0 ms', '50 ms', '100 ms', '150 ms', '200 ms', '250 ms']
    >>> time_ticks(1_400)["ticktext"], time_ticks(0)
    (['0 s', '0.5 s', '1 s', '1.5 s'], {})
    """
    if not span_ms or span_ms <= 0:
        return {}
    least = span_ms / 5
    decade = 10.0 ** math.floor(math.log10(least))
    step = next(m * decade for m in (1, 2, 5, 10) if m * decade >= least)
    vals = [i * step for i in range(math.ceil(span_ms / step - 1e-9) + 1)]
    seconds = vals[-1] >= 1e3
    return {"tickvals": vals, "ticktext": [f"{v / 1e3:g} s" if seconds else f"{v:g} ms" for v in vals]}


def log_ms_ticks(values_ms) -> dict:
    """Tick values and labels in ms for a log axis over `values_ms`: 1, 2, 5 in every decade, named
    "20 ms" (Plotly's own minor log labels read "2 … 5", so 200 ms read as "2"); as ui/live/format.js logMsTicks.

    1, 2 and 5 are at most 2.5× apart, so a tick sits at or below the lowest value and one at or above the
    highest.

    >>> log_ms_ticks([14, 230])["ticktext"]
    ['10 ms', '20 ms', '50 ms', '100 ms', '200 ms', '500 ms']
    >>> log_ms_ticks([4.02, 22.8])["tickvals"]
    [2.0, 5.0, 10.0, 20.0, 50.0]
    """
    positive = [v for v in values_ms if v and v > 0]
    if not positive:
        return {}
    low, high = min(positive), max(positive)
    vals, decade = [], 10.0 ** math.floor(math.log10(low))
    while decade <= high * 10:
        vals += [m * decade for m in (1, 2, 5) if low / 2.5 <= m * decade <= high * 2.5]
        decade *= 10
    text = [f"{v / 1e3:g} s" if v >= 1e3 else f"{v:g} ms" for v in vals]
    return {"tickvals": vals, "ticktext": text}


# --- memory

def plot_kv_cache(trace) -> go.Figure:
    """KV-cache bytes measured after each step, with the formula drawn beside it as an estimate."""
    return as_figure(kv_cache_spec(trace))


def kv_cache_spec(trace) -> dict:
    """plot_kv_cache's figure as a spec."""
    layout = _layout("KV-cache size per step", "output token (step)", "KV cache (MiB)")
    steps = trace.steps if trace else []
    if not steps:
        return _empty_spec(layout)
    measured, data = [s for s in steps if s.kv_bytes is not None], []
    if measured:
        data.append({"type": "scatter", "name": "measured", "x": [s.index for s in measured],
                     "y": [s.kv_bytes / 2**20 for s in measured], "mode": "lines+markers",
                     "line": {"color": DECODE, "width": 3}, "customdata": [s.seq_len for s in measured],
                     "hovertemplate": "step %{x}: %{y:.3f} MiB (%{customdata} tokens)<extra></extra>"})
    else:
        _empty_spec(layout, MISSING.format(trace.backend, "measured KV-cache bytes"))
    shape, known = trace.kv_shape, [s for s in steps if s.seq_len is not None]
    if shape and known:
        data.append({"type": "scatter",
                     "name": f"formula (estimate): 2×{shape.layers}×{shape.kv_heads}×{shape.head_dim}"
                             f"×seq_len×{shape.bytes_per_element}",
                     "x": [s.index for s in known], "y": [shape.formula_bytes(s.seq_len) / 2**20 for s in known],
                     "mode": "lines", "line": {"color": FORMULA, "dash": "dash", "width": 2},
                     "hovertemplate": "formula: %{y:.3f} MiB<extra></extra>"})
    return {"data": data, "layout": layout}


# --- probabilities

def plot_top_k(trace, step: int | None = None, limit: int | None = None) -> go.Figure:
    """The most likely next tokens at one step (default: the last), the chosen one highlighted; `limit`: the
    first that many candidates only (the chosen one kept), so each bar has room for its label at any size."""
    return as_figure(top_k_spec(trace, step, limit))


def top_k_spec(trace, step: int | None = None, limit: int | None = None) -> dict:
    """plot_top_k's figure as a spec."""
    steps = trace.steps if trace else []
    if not steps:
        return _empty_spec(_layout("Top-k next-token probabilities", "probability", ""))
    index = len(steps) - 1 if step is None else max(0, min(int(step), len(steps) - 1))
    chosen = steps[index]
    if not chosen.top:
        return _empty_spec(_layout(f"Top-k at step {index}", "probability", ""),
                           MISSING.format(trace.backend, "top-k probabilities"))
    p = "" if chosen.prob is None else f" (model p={chosen.prob:.3f})"
    layout = _layout(f"Top-k at step {index}: chose “{_label(chosen.text)}”{p}", "probability", "")
    is_chosen = [(c.token_id == chosen.token_id) if chosen.token_id is not None else c.text == chosen.text
                 for c in chosen.top]
    kept = [c for i, c in enumerate(chosen.top) if limit is None or i < limit or is_chosen[i]]
    top = list(reversed(kept))   # best at the top of a horizontal bar chart
    labels = [f"{_label(c.text)}  (id {'?' if c.token_id is None else c.token_id})" for c in top]
    picked = [(c.token_id == chosen.token_id) if chosen.token_id is not None else c.text == chosen.text for c in top]
    # each value outside its bar's end: never over a bar or its neighbour
    data = [{"type": "bar", "name": "model p (softmax at T=1)", "orientation": "h", "x": [c.prob for c in top],
             "y": labels, "marker": {"color": [PREFILL if p else DECODE for p in picked]},
             "text": [f"{c.prob:.3f}" for c in top], "textposition": "outside", "cliponaxis": False,
             "hovertemplate": "%{y}: model p=%{x:.4f}<extra></extra>"}]
    sampled = any(c.sample_prob is not None for c in top) and not trace.settings.greedy
    if sampled:
        data.append({"type": "bar", "name": "sampled with (after temperature, top-k, top-p)", "orientation": "h",
                     "y": labels, "x": [c.sample_prob or 0.0 for c in top], "marker": {"color": FORMULA},
                     "opacity": 0.6, "hovertemplate": "%{y}: sampling p=%{x:.4f}<extra></extra>"})
    # the picked bar's colour in the legend: a trace with no bar of its own (x None on a label it shares)
    data.append({"type": "bar", "name": "picked token", "orientation": "h", "x": [None], "y": labels[:1],
                 "marker": {"color": PREFILL}, "hoverinfo": "skip"})
    most = max([c.prob or 0.0 for c in top] + [c.sample_prob or 0.0 for c in top if sampled])
    layout["xaxis"]["range"] = [0, min(1.0, most * 1.3) or 1.0]
    layout["yaxis"].update(tickmode="array", tickvals=labels, ticktext=labels)   # every bar labelled
    layout["margin"]["r"] = 70   # room for the longest bar's value beyond its end
    layout.update(barmode="group", showlegend=True,
                  uniformtext={"minsize": 14, "mode": "show"})   # labels never shrunk to fit
    return {"data": data, "layout": layout}
