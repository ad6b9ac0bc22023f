"""ClientTraffic.since: a watch's time base starts at t0 for every time a record holds, not only some."""
from __future__ import annotations

from playground.api.record import ClientTraffic
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
