"""The Watch view over the page's runs on remote servers (`--endpoint`): the room's requests from this client's side,
each server's own figures beside them.

    updates = watch_view(traffic, remote, t0, out)   # {component: value}: the endpoint's clients, the remote runs

Without the app's own endpoint (`traffic` None) the view draws the remote runs: a status line counting them and
saying what each server reports, a Gantt from the client's side (each row naming the server's figures, the
client's TTFT beside the server's on hover), p50/p95 per class, and the table of the server's figures beside the
client's (serve/remote_record.py). With the endpoint too, its clients' Gantt stays as it is and the remote runs get
their status line and table under it.
Left out: one Gantt of the endpoint's clients and the remote runs together (two engines, two sets of rows).
"""
from __future__ import annotations

import html
from dataclasses import replace

import gradio as gr

from ..charts.serve import on_time_axis, plot_gantt, plot_kv_map, shared_range
from ..serve import lesson
from ..serve.remote_record import SERVER_HEADERS, remote_line, server_rows
from .serve_views import CLASS_HEADERS, WATCH_AXIS, class_rows, clients_view

FAILED_HERE = ('<p class="pg-refused">A remote server refuses nothing before a request is sent: a request it '
               'answers with an error (a 429, a 400) ends as failed on its row, the reason on hover.</p>')


def servers_text(remote) -> str:
    """Where the page's Generate runs go when a remote server is picked, and how the watch shows them."""
    names = ", ".join(f"`{name}`" for name in remote.servers) or "the servers given with --endpoint"
    return (f"Remote servers: {names}. A Generate run on one of them is computed there (the server batches its "
            "requests itself); this page times it as a client does: sent, each event's arrival, its end. The server's "
            "own figures come with the last event, where it sends them (llama.cpp's timings; vLLM's per-request "
            "metrics when it runs with --enable-per-request-metrics), and sit beside the client's in the table; "
            "a figure it does not send is marked missing, never 0.")


def server_table(records) -> str:
    """The server's figures beside the client's, one row a request, the latest first (an HTML table: every row drawn).

    >>> server_table([])
    '<p class="pg-remote">No request from this page to a remote server since you started watching.</p>'
    """
    if not records:
        return '<p class="pg-remote">No request from this page to a remote server since you started watching.</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in SERVER_HEADERS)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in reversed(server_rows(records)))
    return f'<table class="pg-remote"><tr>{head}</tr>{rows}</table>'


def remote_view(remote, t0: float, out, final: bool = False, charts: bool = True) -> dict:
    """The page's remote runs since t0 (the watch's start on the record's clock, times counted from it); `charts`:
    the Gantt and the KV map are drawn too (left out of the frame when False)."""
    result = remote.since(t0)
    if final:
        result = replace(result, done=True)
    recs = result.records
    head = "Stopped watching: the page's requests" if final else "Watching: the page's requests"
    line = html.escape(f"{head} since you started watching ({result.elapsed:.0f} s): "
                       f"{remote_line(recs, remote.servers)}")
    if any(r.steps for r in recs):
        line += f"<br>{html.escape(lesson(result))}"
    updates = {out.clients_limits: servers_text(remote), out.clients_status: line,
               out.clients_classes: gr.update(value=class_rows(result), headers=CLASS_HEADERS),
               out.clients_refused: FAILED_HERE, out.clients_server: server_table(recs)}
    if charts or final:
        x_range = shared_range([result])
        gantt = plot_gantt(result, result.now(), x_range, cancelled_means="stopped or left", wide=True)
        kv_map = on_time_axis(plot_kv_map(result, compact=True), x_range)
        for fig in (gantt, kv_map):
            fig.update_xaxes(title_text=WATCH_AXIS)
        updates.update({out.clients_gantt: gantt, out.clients_kv_map: kv_map})
    return updates


def watch_view(traffic, remote, t0: float, out, final: bool = False, charts: bool = True) -> dict:
    """The Watch view's frame: the endpoint's clients (`traffic`) and the page's remote runs (`remote`), either may
    be None; with both, one clock counts t0 for both (the app gives the remote record the endpoint's). `charts`:
    the Gantt and the KV map are drawn too."""
    if traffic is None:
        return remote_view(remote, t0, out, final, charts)
    updates = clients_view(traffic, t0, out, final, charts)
    if remote is not None:
        recs = remote.since(t0).records
        updates[out.clients_status] += "<br>" + html.escape(remote_line(recs, remote.servers))
        updates[out.clients_server] = server_table(recs)
    return updates
