"""The levers row (bench/levers.py): each lever on the default's decode graph against the default, its ratio taken
within each round; the names it accepts; its place in the CLI and the kld rows."""
from __future__ import annotations

import doctest

import pytest

from playground.backends.onnx_gguf import LEVERS, VARIANTS
from playground.bench import __main__ as cli
from playground.bench import kld, levers


def test_docstring_examples():
    assert doctest.testmod(levers).failed == 0


def test_every_lever_is_a_variant_and_scored_by_the_kld_rows():
    assert set(LEVERS) <= set(VARIANTS)
    assert "levers" in cli.COMMANDS
    assert all(f"onnx-gguf4-{lever}" in kld.BACKEND_ARITHMETIC for lever in LEVERS)


@pytest.mark.parametrize("name", ["onnx-gguf4-int3", "llama.cpp", "onnx-gguf4-"])
def test_a_name_that_is_neither_backend_nor_lever_is_refused(name):
    with pytest.raises(ValueError, match="neither a backend nor a lever"):
        levers.open_lever(name)


def test_an_unknown_lever_is_refused_before_anything_loads(monkeypatch):
    monkeypatch.setattr(levers, "open_lever", lambda name: pytest.fail(f"loaded {name}"))
    with pytest.raises(ValueError, match="levers are"):
        levers.lever_rows(["q8zp", "int3"])


def test_each_lever_is_timed_every_round_and_its_ratio_taken_within_the_round(monkeypatch):
    """Round speeds of the default 50, 40, 60 and of q8zp 45, 44, 30: ratios 0.9, 1.1, 0.5, median 0.9 (the
    median of the speeds' ratio would be 44 / 50 = 0.88)."""
    speeds = {"onnx-gguf4": iter([(50.0, 5.0)] + [(50.0, 5.0), (40.0, 4.0), (60.0, 6.0)]),
              "onnx-gguf4-q8zp": iter([(45.0, 4.5)] + [(45.0, 4.5), (44.0, 4.4), (30.0, 3.0)])}

    class Named:
        def __init__(self, name):
            self.name = name
    calls = []
    monkeypatch.setattr(levers, "open_lever", Named)
    monkeypatch.setattr(levers, "decode_speed",
                        lambda backend, tokens=levers.TOKENS: calls.append(backend.name) or next(speeds[backend.name]))
    monkeypatch.setattr(levers, "say", lambda row: row)
    q8zp, default = levers.lever_rows(["q8zp"], rounds=3)
    assert (default.lever, default.cpu_x, default.cpu_tps) == ("", 1.0, 50.0)
    # warmed up, then the pair in turn, the default first, second, first: neither keeps one place
    d, q = "onnx-gguf4", "onnx-gguf4-q8zp"
    assert calls == [d, q, d, q, q, d, d, q]
    assert (q8zp.lever, q8zp.backend, q8zp.cpu_x, q8zp.cpu_tps, q8zp.wall_tps) == ("q8zp", "onnx-gguf4-q8zp", 0.9, 44.0, 4.4)
    assert [r["cpu_x"] for r in q8zp.rounds] == [0.9, 1.1, 0.5] and q8zp.changes == LEVERS["q8zp"]
