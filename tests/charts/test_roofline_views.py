"""The roofline where the lesson reads it: Lesson step 3, a server's run (estimated), the Serve tab's batch sweep."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from playground.config import GenerationSettings
from playground.lesson import Lesson
from playground.roofline import (ESTIMATED, MEASURED_HERE, SERVER_STORAGE, Ceilings, ModelShape, machine_ceilings,
                                 roofline_model, storage_of, sweep_points, trace_points)
from playground.serve.sweeps import BatchPoint, Sweep

SMOLLM2 = ModelShape(30, 576, 1536, 9, 3, 64, 49152)
CEILINGS = Ceilings(2e10, 1e10, 2, "peak probe", "bandwidth probe", 0.0)


def test_lesson_step_3_draws_the_run_on_the_roofline(tiny_engine):
    lesson = Lesson(tiny_engine)
    three = lesson.run(3)
    trace = lesson.shared["trace"]
    assert "roofline" in three.figures and "timeline" in three.figures
    names = [t.name for t in three.figures["roofline"].data]
    assert any(n.startswith("decode (measured") for n in names) and any(n.startswith("prefill (measured") for n in names)
    points = trace_points(trace, ModelShape.of(tiny_engine.backend.config), storage_of(tiny_engine.backend),
                          machine_ceilings())   # cached per process: the ceilings the step drew with
    ratios = sorted(p.ratio for p in points if p.phase == "decode")
    assert three.numbers["decode_measured_over_roofline"] == ratios[len(ratios) // 2]
    assert MEASURED_HERE in three.figures["roofline"].layout.title.subtitle.text and three.notes == []


def test_a_local_backend_is_measured_and_a_server_of_the_bundled_model_estimated(tiny_engine, fake_server):
    from playground.remote.local_copy import bundled_copy
    from playground.remote.source import RemoteSource

    local = roofline_model(tiny_engine)
    assert not local.estimated and local.label == MEASURED_HERE
    if bundled_copy() is None:
        pytest.skip("the bundled model's config is not here")
    server = roofline_model(RemoteSource(fake_server.url("other-tokenizer")))   # names SmolLM2-135M-Instruct
    assert server.estimated and server.label == ESTIMATED and server.storage == SERVER_STORAGE
    assert server.shape == SMOLLM2
    assert roofline_model(RemoteSource(fake_server.url("ok"))) is None   # "fake-model": no shape known here


def test_a_server_run_on_the_generate_roofline_is_labelled_estimated(tiny_engine, fake_server):
    from playground.remote.local_copy import bundled_copy
    from playground.remote.source import RemoteSource
    from playground.ui.session import Session
    from playground.ui.generate_handlers import roofline
    from tests.helpers import tab_by_name

    if bundled_copy() is None:
        pytest.skip("the bundled model's config is not here")
    source = RemoteSource(fake_server.url("other-tokenizer"))
    registry = SimpleNamespace(get=lambda name: source, others=lambda name: [])
    session = Session()
    run = source.run("Hi", GenerationSettings(max_new_tokens=4))
    session.start(run)
    run.wait()
    figure, text = roofline(tab_by_name(registry), source.info.name, session)
    assert "(estimated)" in figure.layout.title.text and "estimated from the model's config" in text
    session.close()


def test_the_batch_sweep_moves_decode_right_on_the_roofline():
    sweep = Sweep("batch", "batching", "onnx", {"new_tokens": 64},
                  [BatchPoint(b, 10.0, 10.0 * b, 64 * b, tpot_s=0.03 + 0.002 * b) for b in (1, 2, 4, 8, 16)])
    storage = storage_of(SimpleNamespace(name="onnx-gguf4", kv_shape=SimpleNamespace(bytes_per_element=4),
                                         dtype="float32"))
    points = sweep_points(sweep, SMOLLM2, storage, CEILINGS, prompt_tokens=16)
    assert [p.rows for p in points] == [1, 2, 4, 8, 16] and {p.seq_len for p in points} == {16 + 32}
    intensities = [p.intensity for p in points]
    assert intensities == sorted(intensities) and intensities[-1] > 10 * intensities[0]
    assert [p.measured_s for p in points] == [0.03 + 0.002 * b for b in (1, 2, 4, 8, 16)]


def test_the_serve_tabs_sweep_view_draws_the_roofline(tiny_onnx_engine):
    from playground.ui.serve_views import sweep_roofline
    sweep = Sweep("batch", "batching", "onnx", {"new_tokens": 8, "prompt": "What is the capital of France?"},
                  [BatchPoint(1, 10.0, 10.0, 8, tpot_s=0.01), BatchPoint(8, 5.0, 40.0, 64, tpot_s=0.02)])
    fig = sweep_roofline(sweep, tiny_onnx_engine, CEILINGS)
    data = json.loads(fig.to_json())["data"]
    measured = next(t for t in data if t["name"].startswith("decode (measured"))
    assert len(measured["x"]) == 2 and measured["x"][1] > measured["x"][0]
    assert sweep_roofline(Sweep("rate", "batching", "onnx", {}, []), tiny_onnx_engine, CEILINGS) is None


def test_a_speculative_verify_pass_is_one_point_with_a_row_per_token_it_made():
    from playground.trace import Step

    def step(i, latency, forward_pass):
        return Step(index=i, token_id=1, text="a", special=False, phase="prefill" if i == 0 else "decode", time=0.0, latency=latency, prob=None, sample_prob=None, top=None, seq_len=20 + i, kv_bytes=None,
                    draft=None, forward_pass=forward_pass)
    trace = SimpleNamespace(prompt_ids=list(range(20)),
                            steps=[step(0, 0.5, 0), step(1, 0.03, 1), step(2, 0.001, 1), step(3, 0.001, 1),
                                   step(4, 0.02, 2)])
    storage = storage_of(SimpleNamespace(name="onnx", kv_shape=SimpleNamespace(bytes_per_element=4), dtype="float32"))
    points = trace_points(trace, SMOLLM2, storage, CEILINGS)
    assert [(p.phase, p.rows) for p in points] == [("prefill", 20), ("decode", 3), ("decode", 1)]
    assert points[1].measured_s == pytest.approx(0.032) and points[1].seq_len == 21


def test_the_roofline_labels_one_tick_a_decade():
    """Minor tick labels (2, 5 within each decade) crammed the log axes, unreadable in presenter mode: one
    label a decade, so a chart over d decades carries about d labels an axis."""
    import math

    from playground.charts.roofline import plot_roofline
    sweep = Sweep("batch", "batching", "onnx", {"new_tokens": 64},
                  [BatchPoint(b, 10.0, 10.0 * b, 64 * b, tpot_s=0.03 + 0.002 * b) for b in (1, 4, 16)])
    storage = storage_of(SimpleNamespace(name="onnx-gguf4", kv_shape=SimpleNamespace(bytes_per_element=4),
                                         dtype="float32"))
    fig = plot_roofline(sweep_points(sweep, SMOLLM2, storage, CEILINGS, prompt_tokens=16), CEILINGS)
    for axis, values in (("xaxis", [v for t in fig.data for v in t.x]), ("yaxis", [v for t in fig.data for v in t.y])):
        spec = getattr(fig.layout, axis)
        decades = math.log10(max(values) / min(v for v in values if v > 0))
        assert spec.type == "log" and spec.dtick == 1 and decades + 2 <= 12, (axis, decades)   # <= 12 labels
