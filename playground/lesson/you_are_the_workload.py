"""Lesson step 6, "You are the workload": the room's requests as its workload, as the app's Room recorded them.

    rush = room_rush(traffic)        # the record's busiest rush, its times counted from its first arrival; None: none
    figures = rush_figures(rush)     # requests (from the page, through the API), the span of their arrivals, …
    room_sentence(figures)           # "You are the workload: 14 requests (…) in 3.0 s, served in passes of up to 8 requests; …"
    room_step(traffic)               # step 6 drawn from the room (a StepResult), None when the room sent nothing

`traffic` is the Room's live record of its client traffic (serve.traffic.ClientTraffic: `snapshot()`, `since(t0)`),
the one the Serve tab's Watch view draws: the endpoint's clients and the page's Generate runs, which join the same
engine loop. A rush is a
busy period, as queueing theory has it: a request that arrived while an earlier one was still being served
belongs to the earlier one's rush. Step 6 draws the rush with the most requests (the latest of equals) with
the Watch view's own Gantt (charts/serve.py `plot_gantt`), and says what it covers while requests are still
running.

Left out: who sent each request (the record names no one: a person with two tabs open is two requests),
running the room's prompts again (the record keeps token ids, not text).
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..charts.serve import request_row, plot_gantt, shared_range
from ..run_view import format_seconds
from ..serve.summary import plural
from ..serve.workload import Workload
from ..wait_parts import main_reason
from .lesson_step import StepResult

ROOM_TITLE = "No two requests are the same"   # step 6's own title: the room is its workload
LABELLED_ROWS = 8   # more requests than this: each group of rows is labelled once ("from the page (5)"), not each row
ROW_PX, TOP_PX, BOTTOM_PX, LEGEND_PX = 22, 90, 60, 270   # a row at presenter mode's 18 px; the margins around the
# plot (title and subtitle; the time axis's ticks and title); the legend at the right, one entry a line
SHORT_NAMES = {"waiting (arrived, not admitted)": "waiting to be admitted", "prefill phase (between its passes)":
               "prefill, between passes", "prefill (its forward passes)": "prefill pass",
               "cached prefix copied in (not computed)": "cached prefix copied",
               "preempted: KV dropped, waiting again": "preempted", "recompute after a preemption": "recomputed"}
ORIGINS = (("page", "from the page"), ("API", "through the API"))
DRAWN_FROM = "the room's requests, as this app's engine loop recorded them"
NO_TRAFFIC = ("This app records no room traffic: it serves no endpoint (start it with --openai-api, or "
              "PLAYGROUND_OPENAI_API=1, and the page's and the API's requests share one recorded engine loop).")
NO_ROOM_YET = ("No requests from the room yet: ask everyone to open this page and press Generate, then press "
               "\"You are the workload\" again.")


def _end(record) -> float:
    return math.inf if record.finished is None else record.finished


def rushes(records) -> list[list]:
    """The records grouped into busy periods, in arrival order: a request that arrived before every earlier one
    had finished joins their rush.

    >>> from types import SimpleNamespace as R
    >>> [[r.arrival for r in g] for g in rushes([R(arrival=0.0, finished=1.0), R(arrival=0.5, finished=3.0),
    ...                                          R(arrival=2.0, finished=2.5), R(arrival=4.0, finished=None)])]
    [[0.0, 0.5, 2.0], [4.0]]
    """
    groups, end = [], -math.inf
    for r in sorted(records, key=lambda r: r.arrival):
        if groups and r.arrival < end:
            groups[-1].append(r)
        else:
            groups.append([r])
        end = max(end, _end(r)) if len(groups[-1]) > 1 else _end(r)
    return groups


def room_rush(traffic):
    """The busiest rush in `traffic`'s record as a WorkloadResult of its own (the Watch view's `since`: times
    counted from its first arrival; the loop's passes during it); None when the record holds no request."""
    groups = rushes(traffic.snapshot().records)
    if not groups:
        return None
    busiest = max(groups, key=lambda g: (len(g), g[0].arrival))
    start, ids = busiest[0].arrival, {r.request.id for r in busiest}
    result = traffic.since(start)
    records = [r for r in result.records if r.request.id in ids]
    end = max(_end(r) for r in records)
    over = end < math.inf   # every request of it finished: drawn as a finished workload, its axis to its end
    return replace(result, records=records, workload=Workload(tuple(r.request for r in records)),
                   batches=[b for b in result.batches if b.start < end], done=over,
                   elapsed=end if over else result.elapsed)


def rush_figures(rush) -> dict:
    """What the takeaway says, from the rush's records (each Step says how many requests its pass carried): the
    loop's requests by origin, and apart from them those that ran alone with their reasons (a wait of theirs is
    for a CPU slot, not a KV slot: left out of the waits)."""
    recs = rush.records
    looped = [r for r in recs if not r.alone]
    waits = [r.waiting for r in looped if r.waiting is not None]
    longest = max((r for r in looped if r.waiting is not None), key=lambda r: r.waiting, default=None)
    return {"requests": len(recs), "page": sum(r.origin == "page" for r in looped),
            "api": sum(r.origin == "API" for r in looped), "alone": len(recs) - len(looped),
            "alone_why": sorted({r.alone for r in recs if r.alone}),
            "span_s": max(r.arrival for r in recs) - min(r.arrival for r in recs),
            "most_rows": max((s.rows for r in looped for s in r.steps if s.rows), default=None),
            "longest_wait_s": max(waits, default=None), "not_admitted": len(looped) - len(waits),
            "longest_wait_for": main_reason(longest.wait_parts.waited)
            if longest is not None and longest.wait_parts is not None else None,
            "unfinished": sum(r.finished is None for r in recs)}


TAKEAWAY_WORDS = 35   # a room reads a takeaway at a glance (the lesson's rule)


def room_sentence(f: dict) -> str:
    """Step 6's takeaway from the room's rush, every word computed from its figures (at most TAKEAWAY_WORDS: where
    the runs that left the loop need the room, the passes are said shorter, then the span left to the chart).

    >>> print(room_sentence({"requests": 14, "page": 9, "api": 5, "span_s": 3.0, "most_rows": 8,
    ...                      "longest_wait_s": 1.2, "not_admitted": 0, "unfinished": 0}))
    You are the workload: 14 requests (9 from the page, 5 through the API) in 3.0 s, served in passes of up to 8 requests; the longest wait for a KV slot was 1.2 s.
    >>> print(room_sentence({"requests": 4, "page": 4, "api": 0, "span_s": 0.2, "most_rows": 4, "longest_wait_s": 0.5,
    ...                      "longest_wait_for": "the iteration in progress", "not_admitted": 0, "unfinished": 0}))
    You are the workload: 4 requests (all from the page) in 200 ms, served in passes of up to 4 requests; the longest wait: 500 ms, most for the iteration in progress.
    >>> print(room_sentence({"requests": 3, "page": 3, "api": 0, "span_s": 0.4, "most_rows": 1,
    ...                      "longest_wait_s": 0.9, "not_admitted": 1, "unfinished": 2}))
    You are the workload so far: 3 requests (all from the page) in 400 ms, served one a pass; the longest wait for a KV slot was 900 ms.
    >>> print(room_sentence({"requests": 18, "page": 5, "api": 12, "alone": 1, "alone_why": ["speculative decoding"],
    ...                      "span_s": 3.0, "most_rows": 8, "longest_wait_s": 1.2, "not_admitted": 0, "unfinished": 0}))
    You are the workload: 18 requests (5 from the page, 12 through the API, 1 alone for speculative decoding), in passes of up to 8; the longest wait for a KV slot was 1.2 s.
    """
    n, page, api, alone = f["requests"], f["page"], f["api"], f.get("alone", 0)
    why = " and ".join(f.get("alone_why", ()))
    parts = ([f"{page} from the page"] if page else []) + ([f"{api} through the API"] if api else []) + (
        [f"{alone} alone for {why}"] if alone else [])
    origin = ("all from the page" if page == n else "all through the API" if api == n else
              f"all alone for {why}" if alone == n else ", ".join(parts))
    live = " so far" if f["unfinished"] else ""
    rows, wait = f["most_rows"], f["longest_wait_s"]
    why = f.get("longest_wait_for")   # what the longest wait was mostly for: the batcher's reason
    waited = ("none has a KV slot yet" if wait is None else f"the longest wait for a KV slot was {format_seconds(wait)}"
              if why is None else f"the longest wait: {format_seconds(wait)}, most for {why}")
    for short, span in ((False, True), (True, True), (True, False)):
        passes = ("not served yet" if rows is None else ("one a pass" if short else "served one a pass") if rows == 1
                  else f"in passes of up to {rows}" if short else f"served in passes of up to {rows} requests")
        arrived = (f"1 request ({origin.removeprefix('all ')})" if n == 1 else
                   f"{n} requests ({origin})" + (f" in {format_seconds(f['span_s'])}" if span else ""))
        said = f"You are the workload{live}: {arrived}, {passes}; {waited}."
        if len(said.split()) <= TAKEAWAY_WORDS:
            break
    return said


def live_note(f: dict) -> list[str]:
    """What a rush still running leaves out of its figures.

    >>> live_note({"unfinished": 2, "not_admitted": 1}), live_note({"unfinished": 0, "not_admitted": 0})
    (['2 requests still running, 1 of them still waiting for a KV slot: the figures cover what happened so far'], [])
    """
    if not f["unfinished"]:
        return []
    waiting = f", {f['not_admitted']} of them still waiting for a KV slot" if f["not_admitted"] else ""
    return [f"{plural(f['unfinished'], 'request')} still running{waiting}: the figures cover what happened so far"]


def room_traffic(lesson):
    """The record of the lesson's room (its Room's `traffic`), None when the app records none."""
    return None if lesson.room is None else lesson.room.traffic


def room_gantt(rush):
    """The rush's Gantt for a projector: the page's requests first, then the API's, a line between them; past
    LABELLED_ROWS rows each group is labelled once with its count (a label a row would overlap); the legend at the
    right, one short entry a line, so the rows keep the figure's height (under it, the legend took more height than
    the rows had); the height gives each row ROW_PX."""
    gantt = plot_gantt(rush, rush.now(), shared_range([rush]))
    groups = [[r for r in sorted(rush.records, key=lambda r: r.arrival) if r.origin == origin] for origin, _ in ORIGINS]
    groups.append([r for r in rush.records if r.origin not in dict(ORIGINS)])
    rows = [request_row(r) for group in groups for r in group]
    axis = gantt.layout.yaxis
    labels = dict(zip(axis.tickvals, axis.ticktext))
    if len(rows) <= LABELLED_ROWS:
        ticks = {"tickvals": rows, "ticktext": [labels.get(row, row) for row in rows]}
    else:
        named = [(group, words) for group, (_, words) in zip(groups, ORIGINS) if group]
        ticks = {"tickvals": [request_row(group[len(group) // 2]) for group, _ in named],
                 "ticktext": [f"{words} ({len(group)})" for group, words in named]}
    gantt.update_yaxes(categoryarray=rows, **ticks)
    if groups[0] and len(groups[0]) < len(rows):   # the line between the page's rows and the API's
        gantt.add_hline(y=len(groups[0]) - 0.5, line=dict(color="#374151", width=2))
    for trace in gantt.data:
        trace.name = SHORT_NAMES.get(trace.name, trace.name)
    return gantt.update_layout(height=TOP_PX + BOTTOM_PX + ROW_PX * max(len(rows), 8),
                               margin=dict(t=TOP_PX, b=BOTTOM_PX, r=LEGEND_PX),
                               legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top", yref="paper",
                                           entrywidth=None))


def room_step(traffic) -> StepResult | None:
    """Step 6 drawn from the room's busiest rush; None when the record holds no request (or there is none)."""
    rush = None if traffic is None else room_rush(traffic)
    if rush is None:
        return None
    figures = rush_figures(rush)
    gantt = room_gantt(rush)
    return StepResult(6, ROOM_TITLE, room_sentence(figures), figures, {"gantt": gantt}, drawn_from=DRAWN_FROM,
                      notes=[*live_note(figures), "the Serve tab's Watch view draws the same record; \"Run again\" "
                             "measures the step's own workload instead"])
