"""Each client's share of a room's engine (serve/shares.py), from records built here: the exact figures per client,
the sentence naming who waited longest, the Watch view's table, and the live record's client names (a page
session as "page N", an API client as the guard names it, a refusal with its client); Stop watching's answer."""
from __future__ import annotations

from playground.serve.traffic import ClientTraffic, Refusal
from playground.config import GenerationSettings
from playground.serve.records import Preemption, RequestRecord
from playground.serve.shares import client_shares, longest_wait, slots_held
from playground.serve.workload import Request
from playground.trace import Step, StopReason, Trace
from playground.ui.serve_views import shares_html


def record(rid, client, arrival, admitted=None, finished=None, stop=None, tokens=0, prompt=20, cached=0,
           origin="API") -> RequestRecord:
    trace = Trace("", "", [1] * prompt, GenerationSettings(), "fake", "cpu", "float32", "m", None)
    trace.cached_tokens = cached
    for i in range(tokens):
        trace.steps.append(Step(index=i, token_id=5, text="x", special=False, phase="decode", time=0.1 * (i + 1),
                                latency=0.1, prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None))
    return RequestRecord(Request(rid, "short", "", 8, arrival), prompt_tokens=prompt, admitted=admitted,
                         trace=trace if admitted is not None else None, finished=finished, stop_reason=stop,
                         origin=origin, client=client)


def room() -> tuple[list[RequestRecord], list[Refusal]]:
    """Four slots. client 1 sends four long requests at 0 s and holds three slots from 0.5 s (its fourth fails as
    it is admitted at 3.5 s); page 1 arrives at 1.0 s and waits until 3.0 s; client 2 is answered at once, then sends one that waits until it hangs up at 2.0 s
    and one still waiting at 4.0 s (now); a refusal of client 2's, one of no named client."""
    records = [
        record(0, "client 1", 0.0, 0.0, 3.0, StopReason.LENGTH, tokens=30, prompt=100),
        record(1, "client 1", 0.0, 0.5, 3.5, StopReason.LENGTH, tokens=30, prompt=100, cached=96),
        record(2, "client 1", 0.0, 0.5, None, None, tokens=12, prompt=100, cached=96),
        record(3, "client 2", 0.2, 0.2, 0.4, StopReason.EOS, tokens=2, prompt=10),
        record(4, "page 1", 1.0, 3.0, 3.8, StopReason.EOS, tokens=6, prompt=40, origin="page"),
        record(5, "client 2", 1.5, None, 2.0, StopReason.CANCELLED, prompt=10),
        record(6, "client 2", 3.9, None, None, None, prompt=10),
        record(7, "client 1", 0.0, 3.5, 3.6, StopReason.ERROR, prompt=100),
    ]
    return records, [Refusal(1.1, 429, "too many", "client 2"), Refusal(1.2, 401, "no key")]


def test_each_clients_row_counts_its_requests_tokens_waits_and_cached_prompt_tokens_exactly():
    records, refusals = room()
    rows = client_shares(records, refusals, now=4.0)
    got = {x.client: (x.origin, x.done, x.running, x.waiting, x.cancelled, x.failed, x.refused, x.requests, x.tokens,
                      x.prompt_tokens, x.cached_tokens) for x in rows}
    assert got == {"client 1": ("API", 2, 1, 0, 0, 1, 0, 4, 72, 400, 192),
                   "client 2": ("API", 1, 0, 1, 1, 0, 1, 4, 2, 30, 0),
                   "page 1": ("page", 1, 0, 0, 0, 0, 0, 1, 6, 40, 0),
                   "unnamed": ("API", 0, 0, 0, 0, 0, 1, 1, 0, 0, 0)}
    share = {x.client: x.share for x in rows}
    assert share == {"client 1": 72 / 80, "client 2": 2 / 80, "page 1": 6 / 80, "unnamed": 0.0}
    waits = {x.client: (round(x.longest_wait, 9) if x.longest_wait is not None else None,
                        round(x.wait_p50, 9) if x.wait_p50 is not None else None, x.longest_request) for x in rows}
    assert waits == {"client 1": (3.5, 0.5, 7), "page 1": (2.0, 2.0, 4), "client 2": (0.5, 0.1, 5),
                     "unnamed": (None, None, None)}
    assert [x.client for x in rows] == ["client 1", "page 1", "client 2", "unnamed"]   # the longest wait first


def test_the_sentence_names_who_waited_longest_and_the_slots_held_meanwhile():
    records, refusals = room()
    without_errors = [r for r in records if r.request.id != 7]   # then page 1 waited longest
    rows = client_shares(without_errors, refusals, now=4.0)
    assert longest_wait(rows, without_errors, 4.0, slots=4) == (
        "Longest wait to be admitted: page 1, 2.0 s (request #4), holding none of the 4 slots while client 1 held up to 3.")
    rows = client_shares(records, refusals, now=4.0)   # client 1's request 7 waited 3.5 s
    assert longest_wait(rows, records, 4.0, slots=4) == (
        "Longest wait to be admitted: client 1, 3.5 s (request #7), holding up to 3 of the 4 slots; no other client "
        "held more.")
    still = [record(0, "client 1", 0.0, 0.0, None, None, tokens=3), record(1, "page 1", 0.5)]
    assert longest_wait(client_shares(still, now=2.0), still, 2.0) == (
        "Longest wait to be admitted: page 1, 1.5 s (request #1, still waiting), holding none of the slots while "
        "client 1 held up to 1.")
    assert longest_wait(client_shares([], refusals), []) == "No request has waited for a slot yet."
    alone = [record(0, "page 1", 0.0, 0.004, 1.0, StopReason.EOS, tokens=2)]
    assert longest_wait(client_shares(alone), alone, slots=8) == (
        "Longest wait to be admitted: page 1, 4 ms (request #0), holding none of the 8 slots; no client held one.")


def test_slots_held_leave_out_a_preempted_requests_time_without_its_slot():
    a = record(0, "client 1", 0.0, 0.0, 5.0, StopReason.LENGTH)
    b = record(1, "client 1", 0.0, 0.0, 5.0, StopReason.LENGTH)
    b.preemptions.append(Preemption(at=1.0, after_tokens=2, positions=30, resumed=3.0))
    assert slots_held([a, b], 1.5, 2.5) == {"client 1": 1}
    assert slots_held([a, b], 0.5, 2.5) == {"client 1": 2}
    assert slots_held([a, b], 3.0, 4.0) == {"client 1": 2}


def test_the_watch_table_shows_every_client_longest_wait_first_with_the_sentence_above():
    records, refusals = room()
    page = shares_html(records, refusals, 4.0, slots=4)
    sentence, table = page.split("</p>", 1)
    assert "Longest wait to be admitted: client 1, 3.5 s" in sentence
    cells = [[c.split("</td>")[0] for c in row.split("<td>")[1:]] for row in table.split("<tr>")[2:]]
    assert cells == [
        ["client 1 (API)", "2 done · 1 running · 1 failed", "72 (90%)", "3.5 s · 500 ms", "400 · 192 cached"],
        ["page 1", "1 done", "6 (8%)", "2.0 s · 2.0 s", "40"],
        ["client 2 (API)", "1 done · 1 waiting · 1 cancelled · 1 refused", "2 (2%)", "500 ms · 100 ms", "30"],
        ["unnamed (API)", "1 refused", "0 (0%)", "— · —", "0"]]


def test_the_live_record_names_page_sessions_in_order_and_keeps_a_refusals_client():
    traffic = ClientTraffic()
    assert [traffic.client_label(c) for c in ("page 9f", "client 3", "page 07", "page 9f", "")] == [
        "page 1", "client 3", "page 2", "page 1", "unnamed"]
    traffic.refused(429, "too many", "client 3")
    traffic.refused(401, "no key")
    assert [x.client for x in traffic.refusals] == ["client 3", ""]


def test_stop_watching_a_running_watch_changes_nothing_itself_and_gradio_accepts_it():
    """Stop watching returned {} while the watch drew its own last frame: Gradio reads an empty dict as one value
    for the view's outputs and logged a ValueError at every Stop."""
    import gradio as gr
    from types import SimpleNamespace

    from playground.ui.serve_tab import Watches, unwatch_clients
    watches = Watches()
    stop = watches.start(3.0)
    answer = unwatch_clients(ClientTraffic(), SimpleNamespace(), watches)(3.0)
    assert stop.is_set() and answer == gr.skip()
    assert unwatch_clients(ClientTraffic(), SimpleNamespace(), watches)(None) == gr.skip()


def test_the_watch_title_says_running_only_while_a_request_runs():
    """The Watch view's title said "(running…)" with 0 requests running."""
    from playground.charts.serve import plot_gantt
    traffic = ClientTraffic()
    traffic.result.records.append(record(0, "client 1", 0.0, 0.1, 0.5, StopReason.EOS, tokens=2))
    assert plot_gantt(traffic.since(0.0)).layout.title.text.endswith("(none running now)")
    traffic.result.records.append(record(1, "client 1", 0.6, 0.7, None, None, tokens=1))
    assert plot_gantt(traffic.since(0.0)).layout.title.text.endswith("(running…)")


def test_the_watch_view_draws_the_newest_requests_and_a_compact_kv_map():
    """The Watch view redrew every request since watching began, a row each, and a KV map trace and legend entry a
    request: with a room streaming for 30 s its page spent most of its time redrawing them. The timeline now draws
    the newest WATCH_ROWS requests from the first of them, its title saying of how many; the map draws its bands
    one trace a colour, every band there, with no legend entry a request."""
    from playground.ui.serve_views import WATCH_ROWS, watch_charts
    traffic = ClientTraffic()
    n = WATCH_ROWS + 12
    result = traffic.result
    result.pool = {"kind": "slots", "slots": 4, "capacity": 64, "bytes": 4 * 64}
    for i in range(n):
        result.records.append(record(i, f"client {i % 4}", 0.5 * i, 0.5 * i + 0.1, 0.5 * i + 0.4, StopReason.EOS,
                                     tokens=3))
        result.slot_map += [(0.5 * i + 0.1 * k, ((i % 4, i, 8 * k),)) for k in (1, 2, 3)]
    gantt, kv_map = watch_charts(traffic.since(0.0), [Refusal(0.2, 429, "too many", "client 1")])
    assert len(gantt.layout.yaxis.categoryarray) == WATCH_ROWS   # the old refusal went with the old rows
    assert gantt.layout.title.text.endswith(f" · the newest {WATCH_ROWS} of {n} requests")
    assert gantt.layout.xaxis.range[0] == 0.5 * 12
    bands = [t for t in kv_map.data if t.fill == "toself"]
    assert len(bands) <= 20 < WATCH_ROWS and not any(t.showlegend for t in kv_map.data)   # 20 colours
    assert sum(x is None for t in bands for x in t.x) == WATCH_ROWS   # a band a request shown, apart
    hovers = next(t for t in kv_map.data if t.name == "requests").text
    assert len(hovers) == WATCH_ROWS and hovers[-1] == f"slot {(n - 1) % 4}: request #{n - 1} (short), up to 24 of 64 positions"
    # no axis measures its labels to hide those past the figure's edge (a forced layout a label, per label drawn)
    assert {fig.layout[axis].ticklabeloverflow for fig in (gantt, kv_map) for axis in ("xaxis", "yaxis")} == {"allow"}
