"""The sessions bench row (bench/sessions.py): its built-in trace forces evictions that retention prevents, its
figures per turn and after a gap, and its JSON."""
from __future__ import annotations

from types import SimpleNamespace as S

import pytest

from playground.bench.results import kind
from playground.bench.sessions import (AGENTS, GAPS_S, SHARE, TTL_S, TURNS, SessionsRow, capacity_blocks, pooled,
                                       predicted, script, turn_figures)
from playground.serve.agent_trace import read_rows


def test_the_built_in_trace_is_an_agent_trace_fixed_by_its_seed():
    rows = script()
    assert rows == script() and rows != script(seed=1)
    parsed = read_rows([__import__("json").dumps(r) for r in rows])
    sessions = {r.session_id for r in parsed if r.session_id is not None}
    assert sessions == {f"agent {a}" for a in range(1, AGENTS + 1)}
    delays = [r.delay / 1000 for r in parsed if r.delay is not None]
    assert len(delays) == AGENTS * (TURNS - 1) and all(GAPS_S[0] <= d <= GAPS_S[1] for d in delays)
    assert max(delays) < TTL_S   # retention outlasts every gap
    assert any(r.session_id is None for r in parsed)   # fillers that compete for the cache


def test_without_retention_the_fillers_evict_a_sessions_blocks_and_with_it_none():
    rows, blocks = script(), capacity_blocks(AGENTS, TURNS)
    assert predicted(rows, blocks, 0.0, TTL_S) > 0
    assert predicted(rows, blocks, SHARE, TTL_S) == 0


@pytest.mark.parametrize("args", [(0, 4, (2.0, 10.0)), (3, 0, (2.0, 10.0)), (3, 4, (0.0, 1.0)), (3, 4, (5.0, 2.0))])
def test_a_trace_that_cannot_be_built_is_refused(args):
    with pytest.raises(ValueError, match="agents >= 1"):
        script(*args)


def _rec(i, session, ttft, cached, prompt=100, steps=True):
    return S(request=S(id=i, session=session), ttft=ttft if steps else None, cached_tokens=cached,
             prompt_tokens=prompt, steps=[1] if steps else [])


def test_turns_are_counted_per_session_in_request_order_and_fillers_apart():
    records = [_rec(3, "a", 0.2, 50), _rec(0, "a", 1.0, 0), _rec(1, "b", 3.0, 0), _rec(2, None, 0.7, 0),
               _rec(4, "b", 0.4, 100, prompt=200)]
    f = turn_figures(records)
    assert f["turns"]["1"] == {"served": 2, "ttft_p50_s": 2.0, "cached_share": 0.0}
    assert f["turns"]["2"] == {"served": 2, "ttft_p50_s": 0.3, "cached_share": 0.5}
    assert f["after_gap_ttft_p50_s"] == 0.3 and f["fillers_ttft_p50_s"] == 0.7


def test_a_turn_not_served_is_counted_out_and_a_missing_figure_is_none():
    f = turn_figures([_rec(0, "a", None, 0, steps=False), _rec(1, None, None, 0, steps=False)])
    assert f["turns"]["1"] == {"served": 0, "ttft_p50_s": None, "cached_share": None}
    assert f["after_gap_ttft_p50_s"] is None and f["fillers_ttft_p50_s"] is None


def test_rounds_merge_into_medians_and_are_kept():
    one = turn_figures([_rec(0, "a", 1.0, 0), _rec(1, "a", 0.2, 60)])
    two = turn_figures([_rec(0, "a", 3.0, 0), _rec(1, "a", 0.4, 80)])
    p = pooled([one, two])
    assert p["turns"]["2"]["ttft_p50_s"] == 0.3 and p["turns"]["2"]["cached_share"] == 0.7
    assert p["after_gap_ttft_p50_s"] == 0.3 and p["rounds"] == [one, two]
    assert "rounds" not in pooled([one])


def test_the_rows_json():
    path = pooled([turn_figures([_rec(0, "a", 1.0, 0), _rec(1, "a", 0.2, 60)])])
    out = SessionsRow(backend="onnx", model="tiny", agents=1, turns=2, gaps_s=[2.0, 10.0], trace_rows=3,
                      cache_positions=512, session_share=SHARE, session_ttl_s=TTL_S, rounds=1,
                      predicted={"without": 1, "with_retention": 0}, without=path, with_retention=path,
                      after_gap_ttft_ratio=1.0, round_ratios=[1.0], llama_server="not run").to_json()
    assert list(out)[:2] == ["bench", "backend"] and out["bench"] == "sessions" and kind(out) == "sessions"
    for key in ("agents", "turns", "gaps_s", "cache_positions", "session_share", "session_ttl_s", "predicted",
                "without", "with_retention", "after_gap_ttft_ratio", "round_ratios", "llama_server"):
        assert key in out
    assert out["llama_server"] == "not run" and out["without"]["turns"]["2"]["cached_share"] == 0.6


@pytest.mark.slow
def test_the_row_replays_every_turn_on_the_tiny_model_both_ways():
    from playground.bench.sessions import sessions_row
    out = sessions_row("tiny", agents=2, turns=2, gaps=(0.2, 0.4), rounds=1, backend="onnx").to_json()
    for key in ("without", "with_retention"):
        assert [t["served"] for t in out[key]["turns"].values()] == [2, 2]
        assert out[key]["turns"]["2"]["cached_share"] > 0   # a later turn finds its session's earlier blocks
    assert out["after_gap_ttft_ratio"] == pytest.approx(
        out["with_retention"]["after_gap_ttft_p50_s"] / out["without"]["after_gap_ttft_p50_s"], abs=2e-3)
