"""The roofline's axes come from what it draws, on the ceilings each CPU kind measured.

A log axis's range is in decades; an annotation on it is placed in decades too, so a ridge label written at its
data value (21 FLOP/byte on a Xeon with AMX) stretched the x axis to 10^21 and lesson step 3's tick labels ran
off the presenter's screen. The ceilings below are recorded measurements (`machine_ceilings`), one per kind.
"""
from __future__ import annotations

import math

import pytest

from playground.charts.roofline import plot_roofline
from playground.roofline import Ceilings, ModelShape, Storage, decode_cost, point, prefill_cost

SMOLLM2 = ModelShape(30, 576, 1536, 9, 3, 64, 49152)
Q4 = Storage("onnx-gguf4", 20 / 32, 34 / 32, 4)   # Q4_1 layers (20 bytes a block of 32), Q8_0 head, fp32 KV

RECORDED = {   # peak FLOP/s, bandwidth bytes/s: make bench's roofline rows and this kind's measurement
    "xeon-amx (ridge 21: the runaway axis, 10^21)": (298.5e9, 14.05e9),
    "epyc-avx512 (results 71d45d2)": (205.0e9, 30.8e9),
    "epyc (results 6cc78be)": (151.4e9, 16.2e9),
}
DECADE_AND_A_HALF = 1.5


def lesson_points(ceilings: Ceilings):
    """A 46-token prompt's prefill and 16 decode steps after it, each measured 3x slower than predicted."""
    prefill = prefill_cost(SMOLLM2, Q4, 46)
    points = [point("prefill", prefill, 46, 46, 3 * ceilings.predict(prefill), ceilings)]
    for n in range(47, 63):
        cost = decode_cost(SMOLLM2, Q4, [n])
        points.append(point("decode", cost, 1, n, 3 * ceilings.predict(cost), ceilings))
    return points


@pytest.mark.parametrize("kind", RECORDED)
def test_the_axes_end_within_a_decade_and_a_half_of_what_is_drawn(kind):
    peak, bandwidth = RECORDED[kind]
    ceilings = Ceilings(peak, bandwidth, 2, "peak probe", "bandwidth probe", 1.0)
    points = lesson_points(ceilings)
    fig = plot_roofline(points, ceilings, "Why decode is slow")
    xs = [p.intensity for p in points] + [ceilings.ridge]
    ys = [p.achieved_flops for p in points] + [p.flops / p.predicted_s for p in points]
    x0, x1 = fig.layout.xaxis.range
    y0, y1 = fig.layout.yaxis.range
    assert math.log10(min(xs)) - DECADE_AND_A_HALF <= x0 <= math.log10(min(xs))
    assert math.log10(max(xs)) <= x1 <= math.log10(max(xs)) + DECADE_AND_A_HALF
    assert math.log10(min(ys)) - DECADE_AND_A_HALF <= y0 <= math.log10(min(ys))
    assert math.log10(max(ys)) <= y1 <= math.log10(max(ys)) + DECADE_AND_A_HALF
    assert not fig.layout.annotations and not fig.layout.shapes   # nothing placed in decades on a log axis
    ridge = next(t for t in fig.data if t.text and any("ridge" in (s or "") for s in t.text))
    assert set(ridge.x) == {ceilings.ridge} and f"ridge {ceilings.ridge:.1f}" in ridge.text[-1]
    assert 10 ** y0 <= min(ridge.y) and max(ridge.y) <= 10 ** y1   # the line and its label inside the plot


def test_a_roof_past_every_point_does_not_stretch_the_axis():
    """The roof is drawn over the points' span (and the ridge), not out to where it would meet nothing."""
    ceilings = Ceilings(298.5e9, 14.05e9, 2, "peak probe", "bandwidth probe", 1.0)
    fig = plot_roofline(lesson_points(ceilings)[1:], ceilings)   # decode alone: every point far left of the ridge
    roof = fig.data[0]
    assert fig.layout.xaxis.range == pytest.approx([math.log10(min(roof.x)), math.log10(max(roof.x))], abs=1e-3)
