"""The typed vocabulary: phases, stop reasons, origins and scheduler needs are TextEnums (str-valued enums),
named by their members everywhere in the package, and serialized as the strings exports have always carried."""
from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import pytest

from playground.config import GenerationSettings
from playground.serve.registry import SCHEDULERS, Needs
from playground.source import Origin
from playground.trace import COMPLETED, Phase, Step, StopReason

ROOT = Path(__file__).resolve().parents[1] / "playground"
DEFINITIONS = {"trace.py": {'PREFILL = "prefill"', 'CANCELLED = "cancelled"  # the user (or a closed page) stopped it'}}


def literal_uses(pattern: str = r'"(prefill|cancelled)"') -> list[str]:
    """Lines of playground/ that spell a phase or a stop reason as a string, the enum's own definitions excepted."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(pattern, line) and line.strip() not in DEFINITIONS.get(path.name, ()):
                found.append(f"{path.relative_to(ROOT.parent)}:{n}: {line.strip()}")
    return found


def test_phases_and_stop_reasons_are_spelled_only_in_their_enum():
    assert literal_uses() == []


def test_the_check_sees_a_string_phase(tmp_path, monkeypatch):
    (tmp_path / "playground").mkdir()
    (tmp_path / "playground" / "x.py").write_text('if step.phase == "prefill":\n    pass\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path / "playground")
    assert literal_uses() == ['playground/x.py:1: if step.phase == "prefill":']


def test_a_step_is_built_by_keyword():
    with pytest.raises(TypeError):
        Step(0, 1, "a", False, Phase.PREFILL, 0.1, 0.1, None, None, None, None, None)


def test_the_enums_serialize_as_their_strings(tiny_engine):
    """JSON and CSV exports carry "prefill", "decode" and "length", as before the enums."""
    trace = tiny_engine.generate("Hello", GenerationSettings(max_new_tokens=3))
    data = json.loads(trace.to_json())
    assert [s["phase"] for s in data["steps"]] == ["prefill"] + ["decode"] * (len(trace.steps) - 1)
    assert data["stop_reason"] in {"eos", "length"} and type(trace.stop_reason) is StopReason
    rows = list(csv.DictReader(io.StringIO(trace.to_csv())))
    assert rows[0]["phase"] == "prefill" and rows[-1]["phase"] == "decode"
    assert StopReason("cancelled") is StopReason.CANCELLED and StopReason.CANCELLED not in COMPLETED
    assert json.dumps([Origin.REMOTE, SCHEDULERS["batching"].needs]) == '["remote", "onnx"]'
    assert SCHEDULERS["batching"].needs is Needs.ONNX
