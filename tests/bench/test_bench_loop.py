"""The loop row on the tiny model: a lone run through the shared engine loop (as the app builds it) against
Engine.run, rounds alternating which goes first, the ratio the median of the rounds' own, greedy agreement."""
from __future__ import annotations

import pytest

from playground.bench.loop import TARGETS, loop_row
from playground.bench.stats import median


@pytest.fixture(scope="module")
def row():
    return loop_row("tiny", rounds=2, tokens=6).to_json()


@pytest.mark.slow
def test_both_sides_decode_the_same_tokens_eos_ignored_rounds_alternating(row):
    assert row["bench"] == "loop" and row["backend"] == "onnx"   # the tiny model's batching backend
    assert row["new_tokens"] == 6 and row["ignore_eos"] and row["rounds"] == 2
    assert [r["order"] for r in row["per_round"]] == [["loop", "engine"], ["engine", "loop"]]
    for r in row["per_round"]:
        assert r["loop_tokens"] == 6 == r["engine_tokens"]
        assert r["loop_decode_tps"] > 0 and r["engine_decode_tps"] > 0 and r["load"]["cores"] >= 1
    assert row["slots"] >= 1 and row["threads"] >= 1 and set(row["cpu_flags"]) >= {"avx2"}


@pytest.mark.slow
def test_the_ratio_is_the_median_of_the_rounds_and_the_target_follows_it(row):
    for r in row["per_round"]:
        assert r["decode_ratio"] == round(r["loop_decode_tps"] / r["engine_decode_tps"], 3) or \
            abs(r["decode_ratio"] - r["loop_decode_tps"] / r["engine_decode_tps"]) < 2e-3   # from unrounded tok/s
    assert row["decode_ratio_loop_vs_engine"] == median([r["decode_ratio"] for r in row["per_round"]], 3)
    assert row["targets"] == {"decode_ratio_loop_vs_engine": ">= 0.97"} and set(TARGETS) == set(row["targets"])
    assert row["targets_met"] == {"decode_ratio_loop_vs_engine": row["decode_ratio_loop_vs_engine"] >= 0.97}


@pytest.mark.slow
def test_greedy_agreement_is_the_lowest_rounds_share_and_names_the_first_difference(row):
    shares = [r["agreement"] for r in row["per_round"]]
    assert row["greedy_agreement"] == min(shares) and 0 <= row["greedy_agreement"] <= 1
    assert (row["first_divergence"] is None) == (row["greedy_agreement"] == 1.0)
