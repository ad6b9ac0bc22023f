"""The interleaved one-stream row: ours against llama.cpp's working configuration and, where llama.cpp's own
choice runs decode alone (its batches die here), against that decode-only figure too, with the CPU kind."""
from __future__ import annotations

import pytest

from playground.bench import interleaved
from playground.bench.genai import GenaiSkipped
from playground.bench.peer import LlamaBenchRow

NO_PEER = GenaiSkipped("not measured here: the tiny model is not the peer's")
CONFIGURATION = "sapphirerapids: its repacked weights run decode alone but die on batches here; zen4 with repacking"


@pytest.mark.slow
@pytest.mark.parametrize("own_decode_only", [300.0, None])
def test_the_row_names_the_cpu_kind_and_each_llama_figure_as_a_ratio(monkeypatch, tiny_backend, own_decode_only):
    monkeypatch.setattr("playground.backends.create_backend", lambda name, device=None: tiny_backend)
    monkeypatch.setattr(interleaved, "llama_bench_row", lambda repeats: LlamaBenchRow(
        threads=2, cpu_variant="zen4", configuration=CONFIGURATION, own_decode_only_tps=own_decode_only,
        decode_tps=150.0, prompt_s=0.05, prefill_s=1.0))
    row = interleaved.interleaved_rows(["torch"], rounds=1, peer=NO_PEER).to_json()
    assert row["llama_configuration"] == CONFIGURATION and set(row["cpu_flags"]) >= {"avx2", "avx512f"}
    ours = row["torch"]
    assert ours["decode_tps"] > 0
    # the ratios are gated on a quiet machine (null otherwise): where there is one, it is ours over theirs
    if ours["decode_x"] is not None:
        assert ours["decode_x"] == pytest.approx(ours["decode_tps"] / 150.0, abs=2e-3)
    assert ("decode_x_own_decode_only" in ours) == (own_decode_only is not None)
    if own_decode_only and ours["decode_x_own_decode_only"] is not None:
        assert ours["decode_x_own_decode_only"] == pytest.approx(ours["decode_tps"] / own_decode_only, abs=2e-3)
    assert row["llama.cpp"].get("own_decode_only_tps") == own_decode_only


@pytest.mark.slow
def test_each_decode_is_put_on_the_measured_bandwidth_and_the_default_held_to_its_targets(monkeypatch, tiny_backend):
    monkeypatch.setattr("playground.backends.create_backend", lambda name, device=None: tiny_backend)
    monkeypatch.setattr(interleaved, "llama_bench_row", lambda repeats: LlamaBenchRow(
        threads=2, cpu_variant="zen4", configuration=CONFIGURATION, decode_tps=150.0, prompt_s=0.05, prefill_s=1.0))
    monkeypatch.setattr("playground.roofline.measure_bandwidth", lambda threads, budget_s: (1e8, "fixed"))
    monkeypatch.setattr(interleaved, "validity", lambda loads: {"valid": True})
    row = interleaved.interleaved_rows(["torch"], rounds=1, peer=NO_PEER).to_json()
    assert row["machine"]["bandwidth_gb_s"] == 0.1
    ours, llama = row["torch"], row["llama.cpp"]
    # tok/s x the roofline's bytes a token reads, over the bandwidth
    assert ours["bandwidth_pct"] == pytest.approx(100 * ours["decode_tps"] * ours["token_mb"] * 1e6 / 1e8, rel=0.01)
    assert llama["bandwidth_pct"] == pytest.approx(100 * 150.0 * llama["token_mb"] * 1e6 / 1e8, rel=0.01)
    assert row["targets"] == {"decode_x": ">= 0.9", "bandwidth_pct": ">= 60"}
    assert row["targets_met"] == {"decode_x": ours["decode_x"] >= 0.9, "bandwidth_pct": ours["bandwidth_pct"] >= 60}
