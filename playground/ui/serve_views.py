"""The Serve tab's outputs from a job: status, lesson sentences, two columns of charts and tables.

    view(job, out, charts=True, final=False)   # {component: value} for every output that changed

Cheap while running: the Gantt charts, status and lesson update every second; throughput and KV charts
every third update; files are written once, at the end.
Left out: layout (serve_tab.py) and the job itself (serve_job.py).
"""
from __future__ import annotations

import html
import json
from collections import Counter
from dataclasses import replace

import gradio as gr

from ..charts.serve import (on_time_axis, plot_gantt, plot_itl, plot_kv_in_use, plot_kv_map, plot_throughput,
                            request_rows, shared_range)
from ..charts.serve_sweeps import plot_sweep
from ..charts.sessions import plot_session_timeline
from ..serve.traffic import CLIENT_GONE, alone_line, endpoint_text, watch_counts, watch_line
from ..serve import compare, lesson
from ..serve.agent_trace import sessions_jsonl
from ..serve.mooncake import results_jsonl
from ..serve.perfetto import workload_json
from ..serve.report import html_report
from ..run_view import format_seconds
from ..serve.summary import class_stats, goodput, pool_text
from ..serve.sweeps import chunk_sentence
from ..serve.schedulers import progress_line
from ..serve.shares import client_shares, longest_wait
from ..trace import StopReason
from .common import error_html

CLASS_HEADERS = ["class", "requests", "TTFT p50 (s)", "TTFT p95 (s)", "TPOT p50 (s)", "TPOT p95 (s)", "E2E p50 (s)",
                 "E2E p95 (s)", "waiting p50 (s)"]
REQUEST_HEADERS = ["id", "class", "prompt tokens", "output tokens", "waiting (s)", "TTFT (s)", "first answer token (s)",
                   "TPOT (s)", "E2E (s)", "end"]
REFUSED_HEADERS = ["t (s)", "HTTP status", "reason"]
SHARE_HEADERS = ["client", "requests", "output tokens (share)", "wait for a slot: longest · p50", "prompt tokens"]
WATCH_AXIS = "seconds since you started watching"
OUTPUTS = ("status", "lesson", "gantt_a", "gantt_b", "classes_a", "classes_b", "throughput_a", "throughput_b",
           "kv_a", "kv_b", "kv_map_a", "kv_map_b", "requests_a", "requests_b", "pool", "goodput", "download",
           "sweep_plot", "sweep_roofline", "itl_a", "itl_b", "session_timeline")


def _s(v):
    return "—" if v is None else round(v, 3)


def class_rows(result) -> list[list]:
    return [[cls, f"{row['served']}/{row['requests']}", *(_s(row[k]) for k in (
        "ttft_p50", "ttft_p95", "tpot_p50", "tpot_p95", "e2e_p50", "e2e_p95", "waiting_p50"))]
        for cls, row in class_stats(result).items()]


def did_run(result) -> bool:
    return result.started is not None


def pool_markdown(results) -> str:
    def kv(r) -> str:
        if not did_run(r):
            return "KV cache: not known yet (it did not run)." if r.done else "KV cache: known once it runs."
        return pool_text(r) or f"KV cache: {r.kv_note or 'missing: the source does not give it'}."
    return "\n\n".join(f"**{side}**: " + html.escape(kv(r)) for side, r in zip("AB", results))


def goodput_markdown(results, ttft: float | None, tpot: float | None) -> str:
    """Goodput under the SLO, per run, recomputed from the stored records (nothing runs again)."""
    if not results:
        return "Run a workload first: goodput is computed from its requests' measured TTFT and TPOT."
    slo = " and ".join(x for x in (f"TTFT ≤ {ttft:g} s" if ttft else "", f"TPOT ≤ {tpot:g} s" if tpot else "") if x)
    lines = [f"**Goodput**: requests per second that finished within the SLO (service-level objective: the latency "
             f"each request is promised; here {slo or 'no limit set'}):"]
    for side, r in zip("AB", results):
        g = goodput(r, ttft, tpot)
        rate = "—" if g["goodput_rps"] is None else f"{g['goodput_rps']:.2f} requests/s"
        lines.append(f"- {side}: {g['met']} of {g['of']} requests met it "
                     f"({g['met'] / max(g['of'], 1):.0%}); goodput {rate}")
    return "\n".join(lines)


def status_text(job) -> str:
    if job.error:
        return error_html(job.error)
    parts = []
    for side, r in zip("AB", job.results):
        if not did_run(r):
            state = "did not run: stopped before it began" if r.done else "waiting for A to end"
            parts.append(f"**{side}** = {html.escape(r.scheduler_label)} on {html.escape(r.source)}: {state}")
            continue
        state = StopReason.CANCELLED.value if r.cancelled else "done" if r.done else "running"
        parts.append(f"**{side}** = {html.escape(r.scheduler_label)} on {html.escape(r.source)}: {state} · "
                     f"{html.escape(progress_line(r)[1])}")
    return "<br>".join(parts) or html.escape(job.message)


def lesson_text(job) -> str:
    """A and B in one sentence each (named in the status line above), then B against A."""
    lines = [f"- {html.escape(lesson(r, side))}" for side, r in zip("AB", job.results) if r.started]
    if len(job.results) == 2 and all(r.done and not r.cancelled for r in job.results):
        preset = getattr(job, "preset", None)
        lines.append(f"- **{html.escape(compare(*job.results, named=True, expect=preset and preset.expect))}**")
        if preset is not None and not job.running():   # its measured extras come once the job ends
            finding = preset.finding(*job.results, **getattr(job, "measured", {}))
            lines.append(f"- **{html.escape(preset.name)}**: {html.escape(finding)}")
    return "\n".join(lines)


def session_timeline(job):
    """The sessions of the job's runs on one timeline (charts/sessions.py): one run's as they are, A's and B's a row
    per side; each side's predicted gaps from `job.gaps` where its turns did not measure them."""
    gaps = list(getattr(job, "gaps", None) or [])
    gaps += [[]] * (len(job.results) - len(gaps))
    if len(job.results) == 1:
        return plot_session_timeline(job.results[0].records, gaps[0])
    return plot_session_timeline(sides=[(side, r.records, g) for side, r, g in zip("AB", job.results, gaps)])


def view(job, out, charts: bool = True, final: bool = False) -> dict:
    updates = {out.status: status_text(job), out.lesson: lesson_text(job)}
    x_range = shared_range(job.results)   # A and B on one time axis: the faster run looks faster
    for side, result in zip("ab", job.results + [None, None]):
        if result is None:
            continue
        updates[getattr(out, f"gantt_{side}")] = plot_gantt(result, result.now(), x_range)
        updates[getattr(out, f"classes_{side}")] = gr.update(value=class_rows(result), headers=CLASS_HEADERS)
        updates[getattr(out, f"requests_{side}")] = gr.update(value=request_rows(result), headers=REQUEST_HEADERS)
        if charts or final:
            for name, plot in (("throughput", plot_throughput), ("kv", plot_kv_in_use), ("kv_map", plot_kv_map),
                               ("itl", plot_itl)):   # every time chart of A and B on the Gantts' axis
                updates[getattr(out, f"{name}_{side}")] = on_time_axis(plot(result), x_range)
    if job.results:
        updates[out.pool] = pool_markdown(job.results)
        if charts or final:   # the sessions: turns measured, their gaps' blocks measured (else predicted)
            updates[out.session_timeline] = session_timeline(job)
    if final and job.results:
        updates[out.goodput] = goodput_markdown(job.results, *job.slo)
    if final and job.results:
        same = len({r.scheduler for r in job.results}) < len(job.results)   # our batching twice: named by side
        files = {f"serve-{r.scheduler}{'-' + side if same else ''}.json": json.dumps(r.to_dict(), ensure_ascii=False)
                 for side, r in zip("ab", job.results)}
        preset = getattr(job, "preset", None)
        files["serve-report.html"] = html_report(job.results, expect=preset and preset.expect)
        files["serve-perfetto.json"] = workload_json(job.results)   # A and B as Chrome Trace Events
        files["serve-mooncake.jsonl"] = results_jsonl(job.results)   # the workload as a Mooncake trace
        files["serve-sessions.jsonl"] = sessions_jsonl(job.results)  # A's run as session lines (agent_trace.py)
        updates[out.download] = job.exports.write(files)
    return updates


def clients_view(traffic, t0: float, out, final: bool = False, charts: bool = True) -> dict:
    """The endpoint's clients since t0 (the watch's start, on the record's clock; times counted from it): the
    limits, one line counting every state, the Gantt (each refused request on a row of its own), the KV map,
    p50/p95 per class, the refusals. `final`: the watch has stopped (the charts are no longer "running");
    `charts`: the Gantt, the KV map and the table per class are drawn too (left out of the frame when False)."""
    result, refusals = traffic.since(t0), traffic.refused_since(t0)
    if final:
        result = replace(result, done=True)
    recs = result.records
    head = "Stopped watching: the requests" if final else "Watching: requests"
    if not recs and not refusals:
        line = f"{head} since you started watching: none yet. Send one (see below)."
    else:
        looped = [r for r in recs if not r.alone]   # a run that took a CPU slot alone is counted apart
        line = (f"{head} since you started watching ({result.elapsed:.0f} s): "
                f"{watch_line(watch_counts(looped, refusals), traffic.endpoint.get('slots'))} · "
                + "".join(f"{said} · " for said in [alone_line(recs)] if said)
                + f"{sum(r.output_tokens for r in recs)} output tokens")
        if len(result.workload.classes()) > 0 and any(r.steps for r in recs):
            line += f"<br>{html.escape(lesson(result))}"
    if refusals:
        counts = Counter((x.status, x.reason) for x in refusals)
        line += "<br>" + html.escape(f"{len(refusals)} refused: " + "; ".join(
            f"{status} ×{n} ({reason})" for (status, reason), n in counts.most_common()))
    slots = traffic.endpoint.get("slots")
    updates = {out.clients_limits: endpoint_text(traffic.endpoint), out.clients_status: line,
               out.clients_shares: shares_html(recs, refusals, result.now(), slots) + cache_html(recs),
               out.clients_refused: refused_html(refusals)}
    if charts or final:   # the table of percentiles with them: a Dataframe redrawn is a large task too
        updates.update(dict(zip((out.clients_gantt, out.clients_kv_map), watch_charts(result, refusals))))
        updates[out.clients_classes] = gr.update(value=class_rows(result), headers=CLASS_HEADERS)
    return updates


WATCH_ROWS = 24   # requests the Watch view's timeline draws at most: the newest (one a client in a room of 24)


def watch_charts(result, refusals, rows: int = WATCH_ROWS):
    """The Watch view's timeline and KV memory map on one time axis (the last refusal on it too): the newest `rows`
    requests, the axis from the first of them to now, the title saying how many of all there are (the download
    holds every one); the map from the same moment."""
    recs = result.records
    shown = sorted(recs, key=lambda r: r.arrival)[-rows:]
    if len(shown) < len(recs):
        start = shown[0].arrival
        result = replace(result, records=shown, slot_map=[s for s in result.slot_map if s[0] >= start],
                         cache_map=[c for c in result.cache_map if c[0] >= start])
        refusals = [x for x in refusals if x.time >= start]
    x_range = shared_range([result])
    if x_range and refusals:
        x_range = [x_range[0], max(x_range[1], refusals[-1].time * 1.03)]
    if x_range and len(shown) < len(recs):
        x_range[0] = shown[0].arrival
    gantt = plot_gantt(result, result.now(), x_range, refusals=refusals, cancelled_means=CLIENT_GONE, wide=True)
    if len(shown) < len(recs):
        gantt.layout.title.text += f" · the newest {len(shown)} of {len(recs)} requests"
    kv_map = on_time_axis(plot_kv_map(result, compact=True), x_range)
    for fig in (gantt, kv_map):
        # Plotly hides a label past the figure's edge by measuring every label once per label drawn (a forced layout
        # each, the largest part of a redraw with a row label per request): the margins hold them, so none is hidden
        fig.update_xaxes(title_text=WATCH_AXIS, ticklabeloverflow="allow")
        fig.update_yaxes(ticklabeloverflow="allow")
    return gantt, kv_map


def held_line(paused: tuple[str, float] | None) -> str:
    """The Watch view's line while work holds the machine alone, or waits to take it (MachineGate.paused: the
    state and its seconds so far; "" while neither).

    >>> held_line(None), held_line(("held", 12.4))
    ('', '⏸ A Serve run holds the machine alone (12.4 s so far): the engine loop waits for its end, and a new API request is told so at once (429, Retry-After).')
    >>> held_line(("taking", 2.0)).split(";")[0]
    '⏸ A Serve run is taking the machine alone (2.0 s so far): it waits for the runs in progress to end'
    """
    if paused is None:
        return ""
    state, seconds = paused
    if state == "taking":
        return (f"⏸ A Serve run is taking the machine alone ({format_seconds(seconds)} so far): it waits for the runs "
                "in progress to end; the engine loop waits meanwhile, and a new API request is told so at once "
                "(429, Retry-After).")
    return (f"⏸ A Serve run holds the machine alone ({format_seconds(seconds)} so far): the engine loop waits for its "
            "end, and a new API request is told so at once (429, Retry-After).")


def refused_html(refusals) -> str:
    """The refused requests as a table, the latest first (an HTML table: every row drawn whatever the count).

    >>> from playground.serve.traffic import Refusal
    >>> print(refused_html([Refusal(1.04, 400, "max_tokens <b>")]))
    <table class="pg-refused"><tr><th>t (s)</th><th>HTTP status</th><th>reason</th></tr><tr><td>1.0</td><td>400</td><td>max_tokens &lt;b&gt;</td></tr></table>
    >>> refused_html([])
    '<p class="pg-refused">No request refused since you started watching.</p>'
    """
    if not refusals:
        return '<p class="pg-refused">No request refused since you started watching.</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in REFUSED_HEADERS)
    rows = "".join(f"<tr><td>{x.time:.1f}</td><td>{x.status}</td><td>{html.escape(x.reason)}</td></tr>"
                   for x in reversed(refusals))
    return f'<table class="pg-refused"><tr>{head}</tr>{rows}</table>'


def shares_html(records, refusals, now: float | None = None, slots: int | None = None) -> str:
    """Each client's share (serve/shares.py) as a table narrow enough for a projector (five columns), the client
    that waited longest first and named in a sentence above it.

    >>> from types import SimpleNamespace as S
    >>> rec = S(client="client 1", origin="API", arrival=0.0, admitted=0.25, finished=1.0, stop_reason="eos",
    ...         output_tokens=4, prompt_tokens=30, cached_tokens=16, request=S(id=0), preemptions=[])
    >>> print(shares_html([rec], [], slots=8).replace("<tr>", "\\n<tr>"))
    <p class="pg-shares">Longest wait to be admitted: client 1, 250 ms (request #0), holding none of the 8 slots; no client held one.</p><table class="pg-shares">
    <tr><th>client</th><th>requests</th><th>output tokens (share)</th><th>wait for a slot: longest · p50</th><th>prompt tokens</th></tr>
    <tr><td>client 1 (API)</td><td>1 done</td><td>4 (100%)</td><td>250 ms · 250 ms</td><td>30 · 16 cached</td></tr></table>
    >>> print(shares_html([], []))
    <p class="pg-shares">No request since you started watching: each client’s share shows here.</p>
    """
    rows = client_shares(records, refusals, now)
    if not rows:
        return '<p class="pg-shares">No request since you started watching: each client’s share shows here.</p>'

    def seconds(v):
        return "—" if v is None else format_seconds(v)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in (
        x.label, x.states(), f"{x.tokens:,} ({'—' if x.share is None else f'{x.share:.0%}'})",
        f"{seconds(x.longest_wait)} · {seconds(x.wait_p50)}",
        f"{x.prompt_tokens:,}" + (f" · {x.cached_tokens:,} cached" if x.cached_tokens else ""))) + "</tr>"
        for x in rows)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in SHARE_HEADERS)
    return (f'<p class="pg-shares">{html.escape(longest_wait(rows, records, now, slots))}</p>'
            f'<table class="pg-shares"><tr>{head}</tr>{body}</table>')


CACHE_ROWS = 12   # requests the Watch view's cache table lists at most (the newest)
CACHE_HEADERS = ("request", "client", "turn", "prompt tokens", "cached (share)", "cause")


def cache_html(records, rows: int = CACHE_ROWS) -> str:
    """Each request's record of its prefix-cache lookup (serve/cache_miss.py, as its Trace keeps it), the newest
    `rows` first: its turn, prompt tokens, the share found in the cache and why the rest was computed; a request
    without a record (a run outside a conversation) is left out, and the table says how many had one.

    >>> from types import SimpleNamespace as S
    >>> cache = {"turn": 2, "prompt_tokens": 40, "cached": 32, "cause": "no miss"}
    >>> rec = S(client="page 1", request=S(id=3), trace=S(cache=cache))
    >>> print(cache_html([rec, S(client="client 2", request=S(id=4), trace=S(cache={}))]))
    <p class="pg-cache">The prefix cache, per request of a conversation: 1 of 2 requests (the newest 12 shown).</p><table class="pg-cache"><tr><th>request</th><th>client</th><th>turn</th><th>prompt tokens</th><th>cached (share)</th><th>cause</th></tr><tr><td>#3</td><td>page 1</td><td>2</td><td>40</td><td>32 (80%)</td><td>no miss</td></tr></table>
    >>> cache_html([])
    ''
    """
    kept = [r for r in records if r.trace is not None and r.trace.cache]
    if not kept:
        return ""

    def share(c):
        return f"{c['cached']:,} ({c['cached'] / c['prompt_tokens']:.0%})" if c["prompt_tokens"] else "—"
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
        f"#{r.request.id}", r.client, r.trace.cache["turn"], f"{r.trace.cache['prompt_tokens']:,}",
        share(r.trace.cache), r.trace.cache["cause"])) + "</tr>" for r in reversed(kept[-rows:]))
    head = "".join(f"<th>{html.escape(h)}</th>" for h in CACHE_HEADERS)
    return (f'<p class="pg-cache">The prefix cache, per request of a conversation: {len(kept)} of {len(records)} '
            f'requests (the newest {rows} shown).</p><table class="pg-cache"><tr>{head}</tr>{body}</table>')


def sweep_roofline(sweep, source, ceilings):
    """A batch-size sweep's decode steps on the roofline (roofline.sweep_points): decode moves right as the batch
    grows. None for a rate sweep, or a source whose model shape or prompt length is not known here."""
    from ..charts.roofline import plot_roofline
    from ..config import GenerationSettings
    from ..roofline import roofline_model, sweep_points
    model = roofline_model(source)
    if sweep.kind != "batch" or model is None or not source.capabilities.local_tokenizer:
        return None
    prompt_tokens = len(source.prompt_ids(sweep.settings.get("prompt", ""), GenerationSettings())[1])
    points = sweep_points(sweep, model.shape, model.storage, ceilings, prompt_tokens)
    return plot_roofline(points, ceilings, "The batch-size sweep on the roofline: decode moves right as the batch "
                         "grows" + (" (estimated)" if model.estimated else ""),
                         f"{sweep.source} · one point per batch size, measured: the median TPOT · {model.label}")


def sweep_view(job, out, final: bool = False) -> dict:
    updates = {out.status: error_html(job.error) if job.error else f"⏳ {html.escape(job.message)}"}
    if job.sweeps:
        sweep = job.sweeps[-1]
        updates[out.sweep_plot] = plot_sweep(sweep)
        if final and job.roofline is not None:
            updates[out.sweep_roofline] = gr.update(value=job.roofline, visible=True)
        if final:
            updates[out.status] = "cancelled: partial sweep" if sweep.cancelled else f"sweep done in {sweep.elapsed:.0f} s"
            if sweep.kind == "chunk":   # the trade-off in the sweep's own numbers
                updates[out.status] += f"<br>{html.escape(chunk_sentence(sweep.points))}"
            updates[out.download] = job.exports.write({f"sweep-{sweep.kind}.json": json.dumps(sweep.to_dict()),
                                                       "sweep-report.html": html_report([], [sweep], "Sweep")})
    return updates
