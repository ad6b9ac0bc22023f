"""The gap row (playground/bench/gap.py): the default's decode step against ONNX Runtime GenAI's, their nodes
grouped by what they do, and the gap put on the groups."""
from __future__ import annotations

from collections import Counter

import onnx
import pytest

from playground.bench import gap
from playground.bench.genai import GENAI, GenaiSkipped


def test_the_apportioned_groups_add_up_to_the_step_and_the_gap_to_the_ratio():
    ours = gap.apportion(10.0, {"4-bit layer matmuls": 5.0, "Q4_1 minimum terms": 3.0, "LM head": 4.0}, 16.0)
    peer = gap.apportion(6.0, {"4-bit layer matmuls": 4.0, "LM head": 1.0}, 6.0)
    assert sum(ours.values()) == pytest.approx(10.0) and sum(peer.values()) == pytest.approx(6.0)
    assert ours["between nodes"] == pytest.approx(10.0 * 4 / 16) and peer["between nodes"] == pytest.approx(1.0)
    pct = gap.gap_pct(ours, peer, 6.0)
    assert sum(pct.values()) == pytest.approx(100 * (10.0 / 6.0 - 1), abs=0.5)
    assert list(pct)[0] == "Q4_1 minimum terms" and pct["Q4_1 minimum terms"] == pytest.approx(100 * 1.875 / 6, abs=0.1)


@pytest.mark.integration
def test_the_real_graphs_are_grouped_by_structure_and_the_row_adds_up(monkeypatch):
    try:
        from playground.bench.genai import graph_dir, require
        require()
        peer = graph_dir()
    except GenaiSkipped as exc:
        pytest.skip(str(exc))
    from playground.backends.onnx_cache import MODEL_FILE
    from playground.bench.levers import open_lever
    ours = onnx.load(str(open_lever("onnx-gguf4").folder / MODEL_FILE),
                     load_external_data=False).graph
    groups = Counter(gap.classify(ours).values())
    pools = sum(n.op_type == "AveragePool" for n in ours.node)
    # each of the default's minimum terms is its AveragePool, its 8-bit MatMulNBits and its Add; one per 4-bit layer
    # matmul
    assert pools > 0 and groups["Q4_1 minimum terms"] == 3 * pools == 3 * groups["4-bit layer matmuls"]
    inside = onnx.load(str(open_lever("onnx-gguf4-cat4").folder / MODEL_FILE), load_external_data=False).graph
    # the term inside (lever cat4): the AveragePool and the Concat of the means onto the layer's input
    assert Counter(gap.classify(inside).values())["Q4_1 minimum terms"] == 2 * pools
    assert groups["attention"] == sum(n.op_type == "GroupQueryAttention" for n in ours.node)
    theirs = Counter(gap.classify(onnx.load(str(peer / "model.onnx"), load_external_data=False).graph).values())
    assert theirs["Q4_1 minimum terms"] == 0 and theirs["LM head"] == 1 and theirs["4-bit layer matmuls"] > 0

    monkeypatch.setattr(gap, "STEPS", 4)
    monkeypatch.setattr(gap, "WARM_UP", 1)
    row = gap.gap_row(rounds=1).to_json()
    for label in ("onnx-gguf4", GENAI):
        assert sum(row["groups_ms"][label].values()) == pytest.approx(row["step_ms"][label], rel=0.01)
    assert row["groups_ms"][GENAI]["Q4_1 minimum terms"] == 0 < row["groups_ms"]["onnx-gguf4"]["Q4_1 minimum terms"]
    assert row["x_genai"] == pytest.approx(row["step_ms"][GENAI] / row["step_ms"]["onnx-gguf4"], rel=0.01)
    total = 100 * (row["step_ms"]["onnx-gguf4"] / row["step_ms"][GENAI] - 1)
    assert sum(row["gap_pct"].values()) == pytest.approx(total, abs=1.0)
