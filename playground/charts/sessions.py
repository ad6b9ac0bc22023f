"""A replayed trace's sessions on one timeline: each turn a bar, each tool gap the space between, and in each gap the
session's blocks: measured in the engine's prefix cache when the next turn came, else as the prefix cache alone would
keep them (serve/session_gaps.replay_gaps), labelled predicted.

    fig = plot_session_timeline(result.records, gaps)   # gaps: replay_gaps(trace.rows, ...)[0], or None
    fig = plot_session_timeline(sides=[("A", a.records, gaps_a), ("B", b.records, gaps_b)])   # both sides, a row each

A row per session (request.session; with sides, "A · agent 1"), its turns in request order: a bar from the turn's
release (its arrival when it was not held back) to its end, labelled with its TTFT and the share of its prompt found
in the prefix cache, both measured. The gap before a turn is drawn as a thin bar under the session's row, across the
measured gap, split in proportion to its blocks: held, evictable, evicted (one part per reason), missing. Where the
turn's record measured them (`gap_blocks`: our batching samples its cache as it releases the turn) the legend says
"measured"; else a gap (session, turn) from replay_gaps gives them, the cache alone on the trace's own clock (turns
take no time there), and the legend says "predicted".

>>> from types import SimpleNamespace as S
>>> rec = lambda i, s, a, f: S(request=S(id=i, session=s, arrival=a), released=None, finished=f, ttft=0.25,
...                            cached_tokens=24, prompt_tokens=32, steps=[1])
>>> rows = turn_bars([rec(0, "a", 0.0, 1.0), rec(1, "a", 3.0, 4.0), rec(2, None, 0.5, 0.8)])
>>> [(r["session"], r["turn"], r["start"], r["end"], r["label"]) for r in rows]
[('a', 1, 0.0, 1.0, 'turn 1 · TTFT 0.25 s · cached 75%'), ('a', 2, 3.0, 4.0, 'turn 2 · TTFT 0.25 s · cached 75%')]
>>> gap_segments(1.0, 3.0, {"held": 1, "evictable": 0, "evicted": {"least recently used": 3}, "missing": 0})
[('held', 1.0, 1.5, 1), ('evicted · least recently used', 1.5, 3.0, 3)]
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
EVICTED = "evicted · "   # an evicted part's name: this, then its reason (prefix_cache.Reason's value)
COLOURS = {"held": "#0d9488", "evictable": "#d97706", "evicted": "#dc2626", "missing": "#9ca3af", "turn": "#2563eb",
           EVICTED + "least recently used": "#dc2626", EVICTED + "TTL expired": "#9333ea",
           EVICTED + "over the held share": "#db2777", EVICTED + "pressure": "#7f1d1d"}
EMPTY = "Replay a trace with sessions, or run the preset \"two agents with tool gaps\", to see their turns and gaps"
TITLE = "Sessions: each turn (its TTFT, its cached share) and, in each gap, its blocks"
SUBTITLE = ("turns measured; a gap's blocks measured in the engine's prefix cache when the next turn came, "
            "else predicted by the cache alone on the trace's clock")


def turn_bars(records, side: str = "") -> list[dict]:
    """Each session turn of `records` (request order within a session): session (`side · session` with a side),
    turn, start, end, label, and `blocks`: the gap before it as its record measured them (None: not measured). A turn
    not finished is left out.
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
        out.append({"session": f"{side} · {session}" if side else session, "turn": count[session], "start": start,
                    "end": r.finished, "label": f"turn {count[session]} · {ttft} · {cached}",
                    "blocks": getattr(r, "gap_blocks", None)})
    return out


def gap_segments(start: float, end: float, state: dict) -> list[tuple[str, float, float, int]]:
    """The gap [start, end] split in proportion to the session's blocks in `state` (PrefixCache.chain_state):
    (state, x0, x1, blocks) for each state with blocks, the evicted ones a part per reason ("evicted · reason")."""
    counts = {}
    for k in STATES:
        if k == "evicted":
            counts.update({EVICTED + why: n for why, n in state.get(k, {}).items()})
        else:
            counts[k] = state.get(k, 0)
    total = sum(counts.values())
    out, x = [], start
    for k, n in counts.items():
        if n:
            width = (end - start) * n / total
            out.append((k, x, x + width, n))
            x += width
    return out


def plot_session_timeline(records=(), gaps=None, sides=None) -> go.Figure:
    """The sessions' turns as bars on the run's clock and each gap's blocks: measured where the next turn's record
    has them, else from `gaps` (session_gaps.Gap: session, turn, state) as the cache alone would keep them.
    `sides`: [(name, records, gaps), ...] drawn together, a row per side and session, instead of one run."""
    sides = sides if sides is not None else [("", records, gaps)]
    bars, predicted = [], {}
    for side, recs, side_gaps in sides:
        bars += turn_bars(recs, side)
        for g in side_gaps or []:
            predicted[(f"{side} · {g.session}" if side else g.session, g.turn)] = g.state
    fig = _figure(titled(TITLE, SUBTITLE), "seconds since the run began", "session", height=max(240, 60 * len(
        {b["session"] for b in bars}) + 140))
    if not bars:
        return _empty(fig, EMPTY)
    fig.add_trace(go.Bar(y=[b["session"] for b in bars], x=[b["end"] - b["start"] for b in bars],
                         base=[b["start"] for b in bars], orientation="h", name="turn",
                         marker_color=COLOURS["turn"], text=[b["label"] for b in bars], textposition="inside",
                         hovertemplate="%{y}: %{text}<extra></extra>"))
    ends = {(b["session"], b["turn"]): b["end"] for b in bars}
    shown = set()
    for b in bars:
        if b["turn"] == 1:
            continue
        key, start, end = (b["session"], b["turn"] - 1), ends.get((b["session"], b["turn"] - 1)), b["start"]
        state, how = (b["blocks"], "measured") if b["blocks"] is not None else (predicted.get(key), "predicted")
        if state is None or start is None or end <= start:
            continue
        where = "in the engine's prefix cache when the turn came" if how == "measured" else "the cache alone"
        for part, x0, x1, n in gap_segments(start, end, state):
            name = f"{part} ({how})"
            fig.add_trace(go.Bar(y=[b["session"]], x=[x1 - x0], base=[x0], orientation="h", width=0.25,
                                 name=name, marker_color=COLOURS.get(part, COLOURS["evicted"]),
                                 showlegend=name not in shown, legendgroup=name,
                                 hovertemplate=f"%{{y}}, gap after turn {key[1]}: {n} blocks {part} "
                                               f"({how}: {where})<extra></extra>"))
            shown.add(name)
    fig.update_layout(barmode="overlay")
    return fig
