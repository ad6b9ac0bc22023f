"""The sessions bench row (bench/sessions.py): its built-in trace forces evictions that retention prevents, its
figures per turn and after a gap (ours and llama-server's), its sentence, and its JSON."""
from __future__ import annotations

from types import SimpleNamespace as S

import pytest

from playground.bench.results import kind
from playground.bench.sessions import (AGENTS, GAPS_S, PATHS, SHARE, TTL_S, TURNS, SessionsRow, budget_text,
                                       capacity_blocks, deadline, llama_cached, order_of, pooled, predicted,
                                       round_ratios, script, slot_context, turn_figures, verdict, warm_up_workload)
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
    assert f["turns"]["1"] == {"served": 2, "ttft_p50_s": 2.0, "ttft_p95_s": 3.0, "cached_share": 0.0}
    assert f["turns"]["2"] == {"served": 2, "ttft_p50_s": 0.3, "ttft_p95_s": 0.4, "cached_share": 0.5}
    assert f["after_gap_ttft_p50_s"] == 0.3 and f["after_gap_ttft_p95_s"] == 0.4 and f["fillers_ttft_p50_s"] == 0.7
    assert f["after_gap_served"] == 2 and f["after_gap_cached_share"] == 0.5   # 150 of 300 prompt tokens


def test_a_turn_not_served_is_counted_out_and_a_missing_figure_is_none():
    f = turn_figures([_rec(0, "a", None, 0, steps=False), _rec(1, None, None, 0, steps=False)])
    assert f["turns"]["1"] == {"served": 0, "ttft_p50_s": None, "ttft_p95_s": None, "cached_share": None}
    assert f["after_gap_ttft_p50_s"] is None and f["after_gap_cached_share"] is None
    assert f["fillers_ttft_p50_s"] is None


def test_rounds_merge_into_medians_and_are_kept():
    one = turn_figures([_rec(0, "a", 1.0, 0), _rec(1, "a", 0.2, 60)])
    two = turn_figures([_rec(0, "a", 3.0, 0), _rec(1, "a", 0.4, 80)])
    p = pooled([one, two])
    assert p["turns"]["2"]["ttft_p50_s"] == 0.3 and p["turns"]["2"]["cached_share"] == 0.7
    assert p["after_gap_ttft_p50_s"] == 0.3 and p["rounds"] == [one, two]
    assert "rounds" not in pooled([one])


def _llama_rec(i, session, ttft, timings, prompt=100):
    return S(request=S(id=i, session=session), ttft=ttft, prompt_tokens=prompt, steps=[1], cached_tokens=0,
             trace=S(server={"timings": timings} if timings is not None else {}))


def test_llama_servers_cached_share_is_its_cache_n_and_missing_where_it_gave_none():
    records = [_llama_rec(0, "a", 1.0, {"cache_n": 0}), _llama_rec(1, "a", 0.5, {"cache_n": 90}),
               _llama_rec(2, "b", 0.9, {"cache_n": 0}), _llama_rec(3, "b", 0.7, {"cache_n": 70})]
    f = turn_figures(records, llama_cached)
    assert f["turns"]["2"]["cached_share"] == 0.8 and f["after_gap_cached_share"] == 0.8
    assert f["turns"]["1"]["cached_share"] == 0.0
    gone = turn_figures([_llama_rec(0, "a", 1.0, {"cache_n": 0}), _llama_rec(1, "a", 0.5, None)], llama_cached)
    assert gone["turns"]["2"]["cached_share"] is None and gone["turns"]["1"]["cached_share"] == 0.0


def test_rounds_keep_their_load_and_the_busiest_is_the_paths():
    quiet, busy = {"others_cores": 0.1, "cores": 2}, {"others_cores": 1.2, "cores": 2}
    one = {**turn_figures([_rec(0, "a", 1.0, 0), _rec(1, "a", 0.2, 60)]), "load": quiet}
    two = {**turn_figures([_rec(0, "a", 3.0, 0), _rec(1, "a", 0.4, 80)]), "load": busy}
    p = pooled([one, two])
    assert p["load"] == busy and p["validity"]["valid"] is False and "not quiet" in p["validity"]["reason"]
    assert p["after_gap_cached_share"] == 0.7 and p["turns"]["2"]["ttft_p95_s"] == 0.3
    cut = {**turn_figures([_rec(0, "a", 1.0, 0), _rec(1, "a", None, 0, steps=False)]), "load": quiet}
    fewest = pooled([one, cut, two])   # a round whose turn 2 was not answered: the fewest served, as an int
    assert fewest["turns"]["2"]["served"] == 0 and fewest["after_gap_served"] == 0
    assert fewest["turns"]["1"]["served"] == 1 and isinstance(fewest["turns"]["1"]["served"], int)
    assert pooled([one])["validity"]["valid"] is True


def test_the_ratio_is_taken_within_each_round():
    ours = [{"after_gap_ttft_p50_s": 0.1}, {"after_gap_ttft_p50_s": 0.6}]
    theirs = [{"after_gap_ttft_p50_s": 0.2}, {"after_gap_ttft_p50_s": 0.3}]
    assert round_ratios(ours, theirs) == [0.5, 2.0]
    assert round_ratios([{"after_gap_ttft_p50_s": None}], theirs) == [None]


@pytest.mark.parametrize("ratio, word", [(0.4, "had a lower"), (1.0, "did not have a lower"),
                                         (1.7, "did not have a lower")])
def test_the_sentence_says_what_the_ratio_says(ratio, word):
    without = {"after_gap_ttft_p50_s": 0.5, "after_gap_cached_share": 0.25}
    held = {"after_gap_ttft_p50_s": round(0.5 * ratio, 3), "after_gap_cached_share": 0.9}
    text = verdict(without, held, ratio, {"after_gap_ttft_p50_s": 1.25, "after_gap_cached_share": 0.875})
    assert text.startswith(f"With retention, the turn after a gap {word} TTFT p50 than without")
    assert f"{held['after_gap_ttft_p50_s']:.3f} s against 0.500 s (ratio {ratio:.2f})" in text
    assert "its cached share 0.90 against 0.25" in text
    assert text.endswith("llama-server on the same trace: 1.250 s, cached share 0.88.")


def test_the_sentence_without_figures_gives_no_verdict_and_names_why_llama_server_did_not_run():
    text = verdict({"after_gap_ttft_p50_s": None}, {"after_gap_ttft_p50_s": 0.2}, None,
                   {"error": "LlamaCppMissing: make llama"})
    assert text.startswith("The after-gap TTFT p50 was not measured on both of our paths: no verdict.")
    assert "lower" not in text and text.endswith("not run (LlamaCppMissing: make llama).")
    silent = verdict({"after_gap_ttft_p50_s": 0.3}, {"after_gap_ttft_p50_s": 0.2}, 0.67,
                     {"after_gap_ttft_p50_s": None, "after_gap_served": 0})
    assert silent.endswith("llama-server on the same trace answered no turn after a gap (its TTFT missing).")
    assert "llama-server" not in verdict({"after_gap_ttft_p50_s": 0.3}, {"after_gap_ttft_p50_s": 0.2}, 0.67, None)


def test_the_paths_alternate_and_every_round_runs_each_once():
    assert order_of(0) == PATHS and order_of(1) == PATHS[::-1] and order_of(2) == PATHS
    assert all(sorted(order_of(r)) == sorted(PATHS) for r in range(4))


def test_the_budget_the_slots_and_the_deadline_follow_the_trace():
    rows = script()
    longest = max(r["input_length"] + r["output_length"] for r in rows)
    assert slot_context(rows) >= longest and slot_context(rows) % 256 == 0
    assert deadline(rows) == 2 * max(r.get("timestamp", 0) for r in rows) / 1000
    text = budget_text(AGENTS, TURNS)
    assert f"{capacity_blocks(AGENTS, TURNS) * 16} positions" in text and f"at most {SHARE:g}" in text


def test_the_warm_up_begins_as_no_request_of_the_trace_does():
    from playground.serve.workload import Request, Workload
    requests = tuple(Request(i, "t", "", 8, 0.0, prompt_ids=tuple(range(10 * i, 10 * i + 16))) for i in range(3))
    warm = warm_up_workload(Workload(requests))
    assert len(warm.requests) == 2 and all(w.arrival == 0.0 and w.max_new_tokens == 2 for w in warm.requests)
    firsts = {r.prompt_ids[0] for r in requests}
    assert not any(w.prompt_ids[0] in firsts for w in warm.requests)


def test_the_rows_json():
    path = pooled([turn_figures([_rec(0, "a", 1.0, 0), _rec(1, "a", 0.2, 60)])])
    llama = {"parallel": 4, **path}
    out = SessionsRow(backend="onnx", model="tiny", agents=1, turns=2, gaps_s=[2.0, 10.0], trace_rows=3, threads=2,
                      cache_positions=512, session_share=SHARE, session_ttl_s=TTL_S, budget=budget_text(1, 2),
                      rounds=1, order="o", deadline_s=60.0, predicted={"without": 1, "with_retention": 0},
                      without=path, with_retention=path, llama_server=llama, after_gap_ttft_ratio=1.0,
                      round_ratios=[1.0], vs_llama={"without": None, "with_retention": None}, llama_validity=None,
                      cpu_flags={"avx2": True}, verdict=verdict(path, path, 1.0, llama)).to_json()
    assert list(out)[:2] == ["bench", "backend"] and out["bench"] == "sessions" and kind(out) == "sessions"
    for key in ("agents", "turns", "gaps_s", "threads", "cache_positions", "session_share", "session_ttl_s", "budget",
                "order", "deadline_s", "predicted", "without", "with_retention", "llama_server",
                "after_gap_ttft_ratio", "round_ratios", "vs_llama", "llama_validity", "cpu_flags", "verdict"):
        assert key in out
    assert out["llama_server"]["parallel"] == 4 and out["without"]["turns"]["2"]["cached_share"] == 0.6
    assert out["verdict"].startswith("With retention, the turn after a gap did not have")


@pytest.mark.slow
def test_the_row_replays_every_turn_on_the_tiny_model_both_ways():
    from playground.bench.sessions import sessions_row
    out = sessions_row("tiny", agents=2, turns=2, gaps=(0.2, 0.4), rounds=1, backend="onnx").to_json()
    assert out["llama_server"] == {"skipped": "llama-server runs the bundled GGUF only"}
    for key in ("without", "with_retention"):
        assert [t["served"] for t in out[key]["turns"].values()] == [2, 2]
        assert out[key]["turns"]["2"]["cached_share"] > 0   # a later turn finds its session's earlier blocks
    assert out["after_gap_ttft_ratio"] == pytest.approx(
        out["with_retention"]["after_gap_ttft_p50_s"] / out["without"]["after_gap_ttft_p50_s"], abs=2e-3)
