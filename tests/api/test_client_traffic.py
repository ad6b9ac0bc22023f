"""ClientTraffic.since: a watch's time base starts at t0 for every time a record holds, not only some."""
from __future__ import annotations

from playground.serve.traffic import ClientTraffic
from playground.serve.records import Preemption, RequestRecord
from playground.serve.workload import Request


def test_since_counts_every_time_of_a_record_from_t0():
    """The cached-block copies, preemptions and the prefix cache's map stayed on the record's clock, so a watch
    begun 5 s in drew a copy at 5.1 s into a view 0.5 s long (the audience test found bars past its end)."""
    traffic = ClientTraffic()
    record = RequestRecord(Request(0, "short", "", 8, 5.0), prompt_tokens=40, admitted=5.1, finished=5.5,
                           chunks=[(5.2, 5.3, 24)], cache_copies=[(5.1, 5.12, 16)],
                           preemptions=[Preemption(at=5.35, after_tokens=2, positions=42, resumed=5.4, cached=16,
                                                   copy=(5.4, 5.41), chunks=[(5.41, 5.45, 26)])])
    traffic.result.records.append(record)
    traffic.result.cache_map.extend([(4.0, 1, ()), (5.12, 2, ((0, (1, 2)),))])
    seen = traffic.since(5.0)
    (r,) = seen.records
    assert r.request.arrival == 0 and round(r.admitted, 3) == 0.1 and round(r.finished, 3) == 0.5
    assert [tuple(round(v, 3) for v in span) for span in r.cache_copies] == [(0.1, 0.12, 16)]
    assert [tuple(round(v, 3) for v in span) for span in r.chunks] == [(0.2, 0.3, 24)]
    (p,) = r.preemptions
    assert (round(p.at, 3), round(p.resumed, 3), tuple(round(v, 3) for v in p.copy)) == (0.35, 0.4, (0.4, 0.41))
    assert [tuple(round(v, 3) for v in span) for span in p.chunks] == [(0.41, 0.45, 26)]
    assert [(round(t, 3), n) for t, n, _ in seen.cache_map] == [(0.12, 2)]   # from t0 on, counted from it
    assert record.cache_copies == [(5.1, 5.12, 16)]   # the record itself is left as it was


def watched_room():
    """A watch's records and refusals: one answered with 576 of its 600 prompt tokens cached, one whose client hung
    up, one preempted and resumed, one waiting for a slot; two 400s in the same second and a 429."""
    from playground.serve.traffic import Refusal
    from playground.config import GenerationSettings
    from playground.trace import Step, StopReason, Trace

    def record(rid, arrival, admitted, end, stop, cached=0, preempted=False):
        trace = Trace("", "", [1] * 600, GenerationSettings(), "fake", "cpu", "float32", "m", None)
        trace.cached_tokens = cached
        for i, t in enumerate((admitted + 0.2, end) if admitted is not None else ()):
            trace.steps.append(Step(index=i, token_id=5, text="x", special=False, phase="decode", time=t - admitted,
                                    latency=0.1, prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None))
        r = RequestRecord(Request(rid, "long", "", 8, arrival), prompt_tokens=600, admitted=admitted, trace=trace,
                          finished=end, stop_reason=stop)
        if preempted:
            r.preemptions.append(Preemption(at=admitted + 0.3, after_tokens=1, positions=601, resumed=admitted + 0.5))
        return r
    records = [record(0, 0.0, 0.1, 1.0, StopReason.EOS, cached=576), record(1, 0.1, 0.2, 0.6, StopReason.CANCELLED),
               record(2, 0.2, 0.3, 1.5, StopReason.LENGTH, preempted=True), record(3, 1.4, None, None, None)]
    refusals = [Refusal(1.10, 400, "max_tokens is 100000; the limit here is 512"),
                Refusal(1.15, 400, "max_tokens is 100000; the limit here is 512"),
                Refusal(1.30, 429, "1 request in flight from this client; the limit is 1 at a time")]
    return records, refusals


def test_the_watch_gantt_draws_each_kind_of_request_apart_and_each_refusal_on_its_row():
    """A disconnected client and a refused request drew the same red cross; two 400s in the same second drew as
    one; 576 cached tokens were a sliver with no count."""
    from playground.serve.traffic import CLIENT_GONE
    from playground.charts.serve import plot_gantt
    records, refusals = watched_room()
    traffic = ClientTraffic()
    traffic.result.records.extend(records)
    fig = plot_gantt(traffic.snapshot(), 1.6, refusals=refusals, cancelled_means=CLIENT_GONE)
    traces = {t.name: t for t in fig.data}
    gone, preempted = traces["ended: cancelled (client gone)"], traces["preemption"]
    too_long, too_many = traces["refused 400 (too long or bad)"], traces["refused 429 (too many)"]
    assert list(gone.y) == ["#1 long"] and list(preempted.y) == ["#2 long"]
    assert len(set(too_long.y)) == 2 and list(too_long.x) == [1.10, 1.15]   # two rows, each at its own time
    assert list(too_many.customdata) == [refusals[2].reason]
    looks = {(t.marker.symbol, t.marker.color) for t in (gone, preempted, too_long, too_many)}
    assert len(looks) == 4   # none drawn like another
    assert gone.marker.symbol not in {too_long.marker.symbol, too_many.marker.symbol}
    rows, ticks = list(fig.layout.yaxis.categoryarray), list(fig.layout.yaxis.ticktext)
    assert rows == ["#0 long", "#1 long", "#2 long", "refused 1 · 400", "refused 2 · 400", "refused 3 · 429",
                    "#3 long"]   # in time order
    assert ticks[0] == "#0 long · 576 cached" and ticks[1] == "#1 long"


def test_the_watch_line_counts_every_state_from_the_records():
    from playground.serve.traffic import watch_counts, watch_line
    records, refusals = watched_room()
    counts = watch_counts(records, refusals)
    assert counts == {"requests": 7, "admitted": 3, "done": 2, "running": 0, "hung up": 1, "failed": 0,
                      "waiting": 1, "gone waiting": 0, "refused": 3, "preempted": 1}
    line = watch_line(counts, slots=32)
    assert line.startswith("7 requests: 3 admitted (2 done · 0 running · 1 cancelled: client gone)")
    assert "1 waiting for a KV slot (the engine holds 32 at once)" in line
    assert line.endswith("3 refused · 1 preempted")
