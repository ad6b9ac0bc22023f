"""Experiments: structure of each result on the tiny model, the fit, cancel, progress, the CLI;
on the bundled model, that the cache changes the cost and not the answer."""
from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from playground.charts import plot_cache_comparison, plot_depth_sweep, plot_prefill_sweep, plot_short_vs_long
from playground.experiments import (fit_polynomial, geometric_lengths, run_cache_comparison, run_depth_sweep,
                                    run_prefill_sweep, run_short_vs_long)
from playground.measure import exact_length_ids
from playground.prompts import long_document
from playground.experiments.cli import main
from playground.metrics import estimate_cost

SMALL = {  # each experiment on the tiny model with ranges small enough for a unit test
    "prefill": lambda e, **kw: run_prefill_sweep(e, [8, 16, 32], repeats=2, **kw),
    "cache": lambda e, **kw: run_cache_comparison(e, prompt_tokens=12, new_tokens=6, **kw),
    "depth": lambda e, **kw: run_depth_sweep(e, prompt_tokens=8, new_tokens=24, **kw),
    "short-long": lambda e, **kw: run_short_vs_long(e, max_new_tokens=4, **kw),
}


# --- the fit

@pytest.mark.parametrize("a, b, c", [(0.05, 2e-3, 1e-7), (0.0, 1e-3, 0.0), (0.2, 0.0, 3e-6), (1.0, -1e-4, 2e-7)])
def test_fit_recovers_known_coefficients(a, b, c):
    L = np.array(geometric_lengths(16, 4096, 10), dtype=float)
    noise = np.random.default_rng(0).normal(0, 1e-9, L.size)
    fit = fit_polynomial(L, a + b * L + c * L**2 + noise, 2)
    assert fit.coefficients == pytest.approx((a, b, c), abs=1e-6, rel=1e-4)
    assert fit.r2 == pytest.approx(1.0, abs=1e-6) or (b == 0 and c == 0)


def test_fit_degrades_gracefully_with_few_points():
    assert fit_polynomial([], [], 2) is None
    assert fit_polynomial([10], [0.5], 2).coefficients == (0.5, 0.0, 0.0)
    assert fit_polynomial([1, 2], [3, 5], 2).coefficients == pytest.approx((1, 2, 0))


def test_geometric_lengths_are_distinct_and_capped():
    assert geometric_lengths(16, 1024, 7) == [16, 32, 64, 128, 256, 512, 1024]
    assert geometric_lengths(16, 1024, 7, limit=512)[-1] == 511
    assert geometric_lengths(1, 4, 20) == [1, 2, 3, 4]


@pytest.mark.parametrize("n", [1, 7, 100, 2000])
def test_exact_length_ids_are_real_text(tiny_backend, n):
    ids = exact_length_ids(tiny_backend.tokenizer, n)
    doc = tiny_backend.tokenizer(long_document(), add_special_tokens=False)["input_ids"]
    assert len(ids) == n and ids[:min(n, len(doc))] == doc[:n]


# --- structure of each result (tiny model)

@pytest.mark.slow
def test_prefill_sweep_structure(tiny_engine):
    r = SMALL["prefill"](tiny_engine)
    assert [p.length for p in r.points] == [8, 16, 32] and not r.cancelled
    for p in r.points:
        assert len(p.times) == 2 and p.min <= p.q1 <= p.median <= p.q3 <= p.max
        assert p.tokens_per_s == pytest.approx(p.length / p.median)
    assert len(r.fit.coefficients) == 3 and r.info.backend == "torch" and r.info.model == "tiny-random-llama"
    assert "fit: " in " ".join(t.name for t in plot_prefill_sweep(r).data)


@pytest.mark.slow
def test_cache_and_no_cache_give_identical_tokens(tiny_engine):
    r = SMALL["cache"](tiny_engine)
    assert len(r.cached_tokens) == len(r.uncached_tokens) == 6 == len(r.cached_latency) == len(r.uncached_cpu)
    assert r.cached_tokens == r.uncached_tokens and r.summary()["identical"]
    assert r.summary()["ratio"] > 0
    assert len(plot_cache_comparison(r).data) == 2


@pytest.mark.slow
def test_depth_sweep_records_one_row_per_decode_step(tiny_engine):
    r = SMALL["depth"](tiny_engine)
    assert r.seq_len == list(range(9, 33)) and len(r.latency) == 24
    assert r.kv_bytes == r.kv_formula_bytes  # fp32 DynamicCache: measured equals the formula
    assert len(r.fit.coefficients) == 2 and len(plot_depth_sweep(r).data) == 2


@pytest.mark.slow
def test_short_vs_long_measures_both_requests(tiny_engine):
    r = SMALL["short-long"](tiny_engine)
    s, lg = r.short, r.long
    assert lg.input_tokens > s.input_tokens and lg.kv_bytes > s.kv_bytes
    assert lg.input_tokens < tiny_engine.backend.context_window and r.document_truncated  # 512-token context
    assert s.ttft > 0 and s.e2e >= s.ttft and 1 <= s.output_tokens <= 4
    assert r.summary()["ratios"]["input_tokens"] == pytest.approx(lg.input_tokens / s.input_tokens)
    m = type("M", (), {"prompt_tokens": s.input_tokens, "output_tokens": s.output_tokens})
    assert s.est_cost_usd == pytest.approx(estimate_cost(m, r.usd_per_m_input, r.usd_per_m_output))
    assert len(plot_short_vs_long(r).data) == 12


@pytest.mark.slow
@pytest.mark.parametrize("name", SMALL)
def test_results_are_json_ready_and_name_their_runtime(tiny_engine, name):
    d = json.loads(json.dumps(SMALL[name](tiny_engine).to_dict()))
    assert d["experiment"] == name and d["info"]["device"] == "cpu" and d["info"]["dtype"] == "float32"


def test_out_of_range_settings_are_refused(tiny_engine):
    with pytest.raises(ValueError, match="context window"):
        run_cache_comparison(tiny_engine, prompt_tokens=500, new_tokens=100)
    with pytest.raises(ValueError, match="prompt lengths"):
        run_prefill_sweep(tiny_engine, [16, 4096])


# --- progress and cancel

@pytest.mark.slow
@pytest.mark.parametrize("name", SMALL)
def test_progress_fractions_increase_to_one(tiny_engine, name):
    seen = []
    SMALL[name](tiny_engine, progress=lambda f, msg: seen.append((f, msg)))
    fractions = [f for f, _ in seen]
    assert len(seen) >= 3 and fractions == sorted(fractions) and fractions[-1] == 1.0 and fractions[0] >= 0
    assert all(isinstance(m, str) and m for _, m in seen)


@pytest.mark.slow
@pytest.mark.parametrize("name", SMALL)
def test_cancel_before_start_measures_nothing(tiny_engine, name):
    cancel = threading.Event()
    cancel.set()
    r = SMALL[name](tiny_engine, cancel=cancel)
    assert r.cancelled
    assert not any(getattr(r, f, None) for f in ("points", "cached_latency", "latency", "short", "long"))


@pytest.mark.slow
@pytest.mark.parametrize("name", SMALL)
def test_cancel_during_a_run_stops_early(tiny_engine, name):
    cancel = threading.Event()
    r = SMALL[name](tiny_engine, cancel=cancel, progress=lambda f, msg: f > 0 and cancel.set())
    assert r.cancelled
    done = {"prefill": lambda: sum(len(p.times) for p in r.points) < 6,
            "cache": lambda: len(r.uncached_latency) < 6,
            "depth": lambda: 0 < len(r.latency) < 24,
            "short-long": lambda: r.long is None}
    assert done[name]()


# --- the CLI

@pytest.mark.slow
def test_cli_writes_json_and_standalone_html(tmp_path, capsys):
    assert main(["all", "--out", str(tmp_path), "--model", "tiny", "--backend", "torch", "--max-length", "32",
                 "--points", "3", "--repeats", "1", "--cache-prompt", "8", "--cache-tokens", "3",
                 "--depth-prompt", "8", "--depth-tokens", "8", "--max-new-tokens", "3"]) == 0
    for name in ("prefill", "cache", "depth", "short-long"):
        d = json.loads((tmp_path / f"{name}.json").read_text())
        assert d["experiment"] == name and d["info"]["model"] == "tiny-random-llama"
        html = (tmp_path / f"{name}.html").read_text()
        assert len(html) > 1_000_000 and "<script src=\"https://cdn.plot.ly" not in html  # plotly.js inlined
    printed = capsys.readouterr()
    assert "%" in printed.err
    # the results in words with units, never the JSON's raw keys or exponent notation
    assert "fit to the medians: TTFT ≈" in printed.out and "estimated cost (USD) $" in printed.out
    for raw in ("max_length", "median_s", "est_cost_usd", "e-0", "tokens_per_pass", "{"):
        assert raw not in printed.out, raw


def test_the_cli_sends_a_workload_to_the_serve_command_instead_of_running_it(capsys):
    assert main(["serve", "--requests", "4", "--out", "never-written"]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and "python -m playground.serve" in printed.err and "not an experiment" in printed.err


# --- the bundled model

class ReadLengths:
    """A backend that records how many tokens each prefill reads: the work of a step, counted, not timed."""

    def __init__(self, backend):
        self._backend, self.prefills, self.decodes = backend, [], 0

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def prefill(self, ids):
        self.prefills.append(len(ids))
        return self._backend.prefill(ids)

    def decode(self, token, state):
        self.decodes += 1
        return self._backend.decode(token, state)


@pytest.mark.integration
def test_bundled_model_no_cache_matches_cache_and_costs_grow_with_context(smol_backend):
    """Step i without a cache is a prefill of 8 + i tokens (by the last step the work has about doubled); with
    the cache, one prefill of 8 then a token a step. How long each takes is `make bench`'s: here the work is
    counted."""
    from playground.engine import Engine

    counted = ReadLengths(smol_backend)
    r = run_cache_comparison(Engine(counted), prompt_tokens=8, new_tokens=64)
    assert r.cached_tokens == r.uncached_tokens and len(r.uncached_latency) == len(r.cached_latency) == 64
    assert counted.prefills[-64:] == list(range(8, 8 + 64)), counted.prefills   # the uncached run re-reads it all
    assert counted.prefills.count(8) >= 2 and counted.decodes >= 63   # the cached run: one prefill, then decodes
    assert all(t > 0 for t in r.uncached_latency + r.cached_latency) and r.summary()["ratio"] is not None


def test_charts_name_bytes_in_binary_units():
    """Every page writes bytes in KiB, MiB, GiB (run_view.format_bytes, live/format.js); a chart axis read
    "KV cache (MB)" beside text in MiB. Bandwidth stays GB/s (decimal, as hardware is rated)."""
    import re
    from pathlib import Path

    from playground.charts.experiments import PANELS
    root = Path(__file__).resolve().parents[2] / "playground"
    sources = [*(root / "charts").glob("*.py"), *(root / "ui" / "live").glob("*.js")]
    decimal = [(p.name, m.group(0)) for p in sources for m in re.finditer(r"\b[kKMGT]B\b(?!/s)", p.read_text())]
    assert decimal == []
    title, key, scale = next(p for p in PANELS if p[1] == "kv_bytes")
    assert title == "KV cache (MiB)" and scale == 1 / 2**20
