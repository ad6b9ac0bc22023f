"""What a token costs on this machine: price per hour over measured output tokens per hour, missing when unmeasured."""
from __future__ import annotations

import doctest
import math
from types import SimpleNamespace

import pytest

from playground.serve import cost
from playground.config import GenerationSettings
from playground.serve.cost import Rate, cost_markdown, measured_rates, token_costs, usd_per_million
from playground.serve.sweeps import BatchPoint, Sweep
from playground.ui.session import Session
from playground.speculative import Speculation, SpeculativeEngine


def test_docstring_examples():
    assert doctest.testmod(cost).failed == 0


@pytest.mark.parametrize("usd_per_hour, tps, expected", [
    (0.10, 25.0, 0.10 / 90_000 * 1e6),   # 25 tok/s: 90,000 tokens an hour
    (3.60, 1000.0, 1.0),                 # 3.6 M tokens an hour for $3.60: a dollar a million
    (0.0, 10.0, 0.0),                    # a machine you already own
])
def test_usd_per_million_known_answers(usd_per_hour, tps, expected):
    assert usd_per_million(usd_per_hour, tps) == pytest.approx(expected)


def test_an_unmeasured_rate_is_missing_never_zero():
    rows = token_costs(0.10, {"batched at 8": Rate(80.0, "a sweep")})
    assert [r.usd_per_million is None for r in rows] == [True, False, True]
    table = cost_markdown(rows, 0.10, 0.60)
    assert table.count("missing: not measured in this session") == 2 and "$0.00 |" not in table
    assert "(an assumption: edit it)" in table and "$0.60" in table   # the provider's price beside them


@pytest.mark.parametrize("bad", ["ten", -1, math.nan, math.inf, None])
def test_a_bad_price_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="price per hour"):
        token_costs(bad, {})


def test_rates_come_from_the_sweep_and_the_sessions_runs(tiny_engine):
    sweep = Sweep("batch", "batching", "onnx (tiny)", {}, [BatchPoint(1, 30.0, 30.0, 64), BatchPoint(8, 12.0, 96.0, 512)])
    settings = GenerationSettings(max_new_tokens=12)
    plain = tiny_engine.generate("the cat sat on the mat and the cat sat", settings)
    spec = SpeculativeEngine(tiny_engine.backend, Speculation(k=3, ngram=2, row_cost=0)).generate(
        "the cat sat on the mat and the cat sat", settings)
    rates = measured_rates([sweep], [plain, spec])
    assert rates["one at a time"].tokens_per_s == 30.0 and "sweep, 1 at once" in rates["one at a time"].source
    assert rates["batched at 8"].tokens_per_s == 96.0
    assert rates["speculative decoding"].tokens_per_s == spec.metrics().decode_tps
    without_sweep = measured_rates([], [plain])   # one at a time falls back to the plain Generate run
    assert without_sweep["one at a time"].tokens_per_s == plain.metrics().decode_tps
    assert "Generate run, plain" in without_sweep["one at a time"].source and len(without_sweep) == 1


def test_the_serve_tabs_handler_says_what_is_missing_and_refuses_a_bad_price(tiny_engine):
    from playground.ui.serve_tab import token_cost
    session = Session()
    run = tiny_engine.run("Hello there", GenerationSettings(max_new_tokens=6))
    session.start(run)
    run.wait()
    text = token_cost(0.10, SimpleNamespace(sweeps=[]), session)
    assert "Generate run, plain" in text and text.count("missing: not measured") == 2
    assert "price per hour must be" in token_cost(-3, SimpleNamespace(sweeps=[]), session)
    session.close()
