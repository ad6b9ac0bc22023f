"""A replayed trace's sessions on one timeline: each turn a bar, each tool gap the space between, and in each gap the
session's blocks as the prefix cache alone would keep them (serve/session_gaps.replay_gaps).

    fig = plot_session_timeline(result.records, gaps)   # gaps: replay_gaps(trace.rows, ...)[0], or None

A row per session (request.session), its turns in request order: a bar from the turn's release (its arrival when it
was not held back) to its end, labelled with its TTFT and the share of its prompt found in the prefix cache, both
measured. A gap (session, turn) from replay_gaps is drawn as a thin bar under the session's row, across the measured
gap, split in proportion to its blocks: held, evictable, evicted (every reason together), missing. Those blocks are
the cache alone on the trace's own clock (turns take no time there), so the legend says "predicted".

>>> from types import SimpleNamespace as S
>>> rec = lambda i, s, a, f: S(request=S(id=i, session=s, arrival=a), released=None, finished=f, ttft=0.25,
...                            cached_tokens=24, prompt_tokens=32, steps=[1])
>>> rows = turn_bars([rec(0, "a", 0.0, 1.0), rec(1, "a", 3.0, 4.0), rec(2, None, 0.5, 0.8)])
>>> [(r["session"], r["turn"], r["start"], r["end"], r["label"]) for r in rows]
[('a', 1, 0.0, 1.0, 'turn 1 · TTFT 0.25 s · cached 75%'), ('a', 2, 3.0, 4.0, 'turn 2 · TTFT 0.25 s · cached 75%')]
>>> gap_segments(1.0, 3.0, {"held": 1, "evictable": 0, "evicted": {"least recently used": 3}, "missing": 0})
[('held', 1.0, 1.5, 1), ('evicted', 1.5, 3.0, 3)]
>>> fig = plot_session_timeline([rec(0, "a", 0.0, 1.0), rec(1, "a", 3.0, 4.0)],
...     [S(session="a", turn=1, state={"held": 2, "evictable": 0, "evicted": {}, "missing": 0})])
>>> sorted({t.name for t in fig.data})
['held (predicted)', 'turn']

Pure functions: no state, no I/O; no session turns gives an empty figure with a hint.
"""
from __future__ import annotations

import plotly.graph_objects as go

from .run import _empty, _figure, titled

STATES = ("held", "evictable", "evicted", "missing")
COLOURS = {"held": "#0d9488", "evictable": "#d97706", "evicted": "#dc2626", "missing": "#9ca3af", "turn": "#2563eb"}
EMPTY = "Replay a trace with sessions to see their turns and gaps"
TITLE = "Sessions: each turn (its TTFT, its cached share) and, in each gap, its blocks"
SUBTITLE = "turns measured; the blocks in a gap predicted by the prefix cache alone on the trace's clock"


def turn_bars(records) -> list[dict]:
    """Each session turn of `records` (request order within a session): session, turn, start, end, label. A turn not
    finished is left out.
    """
    out, count = [], {}
    for r in sorted(records, key=lambda x: x.request.id):
        session = r.request.session
        if session is None or r.finished is None:
            continue
        count[session] = count.get(session, 0) + 1
        start = r.released if r.released is not None else r.request.arrival
        ttft = f"TTFT {r.ttft:.2f} s" if r.steps and r.ttft is not None else "TTFT missing"
        cached = f"cached {r.cached_tokens / r.prompt_tokens:.0%}" if r.prompt_tokens else "cached missing"
        out.append({"session": session, "turn": count[session], "start": start, "end": r.finished,
                    "label": f"turn {count[session]} · {ttft} · {cached}"})
    return out


def gap_segments(start: float, end: float, state: dict) -> list[tuple[str, float, float, int]]:
    """The gap [start, end] split in proportion to the session's blocks in `state` (PrefixCache.chain_state):
    (state, x0, x1, blocks) for each state with blocks."""
    counts = {k: (sum(state[k].values()) if k == "evicted" else state.get(k, 0)) for k in STATES}
    total = sum(counts.values())
    out, x = [], start
    for k in STATES:
        if counts[k]:
            width = (end - start) * counts[k] / total
            out.append((k, x, x + width, counts[k]))
            x += width
    return out


def plot_session_timeline(records, gaps=None) -> go.Figure:
    """The sessions' turns as bars on the run's clock and, from `gaps` (session_gaps.Gap: session, turn, state), each
    gap's blocks as the cache alone would keep them."""
    bars = turn_bars(records)
    fig = _figure(titled(TITLE, SUBTITLE), "seconds since the run began", "session", height=max(240, 60 * len(
        {b["session"] for b in bars}) + 140))
    if not bars:
        return _empty(fig, EMPTY)
    fig.add_trace(go.Bar(y=[b["session"] for b in bars], x=[b["end"] - b["start"] for b in bars],
                         base=[b["start"] for b in bars], orientation="h", name="turn",
                         marker_color=COLOURS["turn"], text=[b["label"] for b in bars], textposition="inside",
                         hovertemplate="%{y}: %{text}<extra></extra>"))
    ends = {(b["session"], b["turn"]): b["end"] for b in bars}
    starts = {(b["session"], b["turn"]): b["start"] for b in bars}
    shown = set()
    for g in gaps or []:
        start, end = ends.get((g.session, g.turn)), starts.get((g.session, g.turn + 1))
        if start is None or end is None or end <= start:
            continue
        for state, x0, x1, n in gap_segments(start, end, g.state):
            fig.add_trace(go.Bar(y=[g.session], x=[x1 - x0], base=[x0], orientation="h", width=0.25,
                                 name=f"{state} (predicted)", marker_color=COLOURS[state],
                                 showlegend=state not in shown, legendgroup=state,
                                 hovertemplate=f"%{{y}}, gap after turn {g.turn}: {n} blocks {state} "
                                               f"(the cache alone)<extra></extra>"))
            shown.add(state)
    fig.update_layout(barmode="overlay")
    return fig
