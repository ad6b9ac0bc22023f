"""The sessions timeline (charts/sessions.py): turns as bars on the run's clock, each labelled with its measured TTFT
and cached share, and in each gap the session's blocks as the engine measured them, else as replay_gaps predicts
them (labelled so)."""
from __future__ import annotations

import json
from types import SimpleNamespace as S

import pytest

from playground.charts.sessions import EMPTY, gap_segments, plot_session_timeline, turn_bars
from playground.serve.agent_trace import read_rows
from playground.serve.session_gaps import replay_gaps


def _rec(i, session, start, end, ttft=0.5, cached=0, prompt=64, released=None, steps=True, blocks=None):
    return S(request=S(id=i, session=session, arrival=start), released=released, finished=end,
             ttft=ttft if steps else None, cached_tokens=cached, prompt_tokens=prompt, steps=[1] if steps else [],
             gap_blocks=blocks)


def test_turns_are_numbered_per_session_in_request_order_from_their_release():
    bars = turn_bars([_rec(2, "a", 0.0, 5.0, released=4.0, cached=48), _rec(0, "a", 0.0, 1.0), _rec(1, "b", 0.2, 0.9),
                      _rec(3, None, 0.1, 0.3), _rec(4, "b", 2.0, None)])
    assert [(b["session"], b["turn"], b["start"], b["end"]) for b in bars] == [("a", 1, 0.0, 1.0), ("b", 1, 0.2, 0.9),
                                                                              ("a", 2, 4.0, 5.0)]
    assert bars[2]["label"] == "turn 2 · TTFT 0.50 s · cached 75%"


def test_a_missing_figure_is_labelled_missing_not_zero():
    bar, = turn_bars([_rec(0, "a", 0.0, 1.0, prompt=None, steps=False)])
    assert bar["label"] == "turn 1 · TTFT missing · cached missing"


def test_a_gap_is_split_by_its_blocks_each_eviction_reason_a_part_of_its_own():
    segs = gap_segments(2.0, 6.0, {"held": 1, "evictable": 1, "evicted": {"least recently used": 1, "TTL expired": 1},
                                   "missing": 0})
    assert segs == [("held", 2.0, 3.0, 1), ("evictable", 3.0, 4.0, 1), ("evicted · least recently used", 4.0, 5.0, 1),
                    ("evicted · TTL expired", 5.0, 6.0, 1)]
    assert gap_segments(0.0, 1.0, {"held": 0, "evictable": 0, "evicted": {}, "missing": 0}) == []


@pytest.mark.parametrize("share, drawn", [(0.5, "held (predicted)"),
                                                  (0.0, "evicted · least recently used (predicted)")])
def test_the_gaps_blocks_come_from_replay_gaps_under_the_measured_gap(share, drawn):
    rows = read_rows([json.dumps(r) for r in (
        {"session_id": "a", "timestamp": 0, "input_length": 32, "output_length": 1, "hash_ids": [1, 2]},
        {"timestamp": 1000, "input_length": 48, "output_length": 1, "hash_ids": [7, 8, 9]},
        {"session_id": "a", "delay": 5000, "input_length": 48, "output_length": 1, "hash_ids": [1, 2, 3]})])
    gaps, _ = replay_gaps(rows, capacity=4, held_share=share, ttl_s=300.0)
    fig = plot_session_timeline([_rec(0, "a", 0.0, 1.0), _rec(2, "a", 0.0, 7.5, released=6.0)], gaps)
    turns = [t for t in fig.data if t.name == "turn"][0]
    assert list(turns.base) == [0.0, 6.0] and list(turns.x) == [1.0, 1.5]
    states = [t for t in fig.data if t.name != "turn"]
    assert drawn in {t.name for t in states}
    assert min(t.base[0] for t in states) == 1.0 and max(t.base[0] + t.x[0] for t in states) == pytest.approx(6.0)


def test_no_session_turns_give_an_empty_figure_with_a_hint():
    fig = plot_session_timeline([_rec(0, None, 0.0, 1.0)])
    assert not fig.data and fig.layout.annotations[0].text == EMPTY


def test_a_gap_the_engine_measured_is_drawn_measured_instead_of_predicted():
    measured = {"held": 0, "evictable": 1, "evicted": {"TTL expired": 3}, "missing": 0}
    predicted = [S(session="a", turn=1, state={"held": 4, "evictable": 0, "evicted": {}, "missing": 0})]
    fig = plot_session_timeline([_rec(0, "a", 0.0, 1.0), _rec(1, "a", 0.0, 5.0, released=4.0, blocks=measured)],
                                predicted)
    parts = {t.name: t for t in fig.data if t.name != "turn"}
    assert set(parts) == {"evictable (measured)", "evicted · TTL expired (measured)"}
    assert parts["evicted · TTL expired (measured)"].x[0] == pytest.approx(3 * 3.0 / 4)   # 3 of 4 blocks, a 3 s gap
    assert "TTL expired" in parts["evicted · TTL expired (measured)"].hovertemplate


def test_two_sides_are_drawn_a_row_per_side_and_session_each_gap_from_its_own_side():
    held = {"held": 4, "evictable": 0, "evicted": {}, "missing": 0}
    gone = {"held": 0, "evictable": 0, "evicted": {"least recently used": 4}, "missing": 0}
    a = [_rec(0, "agent 1", 0.0, 1.0), _rec(1, "agent 1", 0.0, 4.0, released=3.0, ttft=0.1, cached=48, blocks=held)]
    b = [_rec(0, "agent 1", 0.0, 1.0), _rec(1, "agent 1", 0.0, 4.5, released=3.0, ttft=0.4, blocks=gone)]
    fig = plot_session_timeline(sides=[("A", a, []), ("B", b, [])])
    turns, = [t for t in fig.data if t.name == "turn"]
    assert list(turns.y) == ["A · agent 1", "A · agent 1", "B · agent 1", "B · agent 1"]
    assert turns.text[1] == "turn 2 · TTFT 0.10 s · cached 75%" and turns.text[3] == "turn 2 · TTFT 0.40 s · cached 0%"
    parts = {(t.y[0], t.name) for t in fig.data if t.name != "turn"}
    assert parts == {("A · agent 1", "held (measured)"), ("B · agent 1", "evicted · least recently used (measured)")}
