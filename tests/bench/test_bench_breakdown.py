"""breakdown.py: a decode step's time by op type (ONNX Runtime's profiler) and the Python around the calls."""
import json

import pytest

from playground.bench.breakdown import per_run, profile_events, step_breakdown, summarize

PHASES = ("one_stream", "rows_1", "rows_8", "rows_16")


def test_nodes_are_assigned_to_the_run_they_fall_in_and_the_warm_up_is_left_out(tmp_path):
    events = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
              {"cat": "Node", "name": "a_kernel_time", "ts": 5, "dur": 40, "args": {"op_name": "MatMulNBits"}},
              {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
              {"cat": "Node", "name": "b_kernel_time", "ts": 210, "dur": 30, "args": {"op_name": "MatMulNBits"}},
              {"cat": "Node", "name": "c_kernel_time", "ts": 250, "dur": 20, "args": {"op_name": "Add"}},
              {"cat": "Node", "name": "c_fence_after", "ts": 271, "dur": 1, "args": {"op_name": "Add"}},
              {"cat": "Node", "name": "late_kernel_time", "ts": 400, "dur": 9, "args": {"op_name": "Add"}}]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(events))
    runs = per_run(*profile_events(path), skip=1)
    assert runs == [{"run_ms": 0.1, "kernels_ms": 0.03, "other_nodes_ms": 0.02,
                     "by_op": {"MatMulNBits": 0.03, "Add": 0.02}}]   # the node after the last run counts nowhere
    figures = summarize(runs, step_ms=0.25)
    assert figures["ort_between_nodes_ms"] == pytest.approx(0.05) and figures["python_ms"] == pytest.approx(0.15)


def test_no_timed_run_is_an_error_not_zeros():
    assert "error" in summarize([], 1.0)


@pytest.mark.slow
def test_every_phase_splits_its_step_into_ort_and_python(tiny_onnx_engine):
    out = step_breakdown(tiny_onnx_engine)
    assert set(out) == set(PHASES)
    for name in PHASES:
        phase = out[name]
        assert phase["step_ms"] > 0 and phase["ort_run_ms"] > 0
        assert phase["python_ms"] == pytest.approx(max(0.0, phase["step_ms"] - phase["ort_run_ms"]), abs=2e-3)
        assert phase["kernels_ms"] == 0.0   # the tiny fp32 graph has no MatMulNBits
        assert phase["other_nodes_ms"] > 0 and "MatMul" in phase["by_op_ms"]
    assert tiny_onnx_engine.backend.session.get_session_options().enable_profiling is False   # restored
