"""The test tiers: `make test` runs every test, `make test-fast` deselects only registered markers."""
import re
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:   # Python 3.10, the oldest supported: pytest itself depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def recipe(target: str) -> list[str]:
    """The recipe lines of a Makefile rule."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^{re.escape(target)}\s*:(?!=)", line))
    body = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        body.append(line.strip())
    return body


def registered_markers() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in config["addopts"]   # an unregistered marker is an error, not a silent tier
    return {m.split(":")[0].strip() for m in config["markers"]}


def fast_expression() -> str:
    makefile = (ROOT / "Makefile").read_text()
    return re.search(r"^FAST_TESTS\s*:?=\s*(.+)$", makefile, re.M).group(1).strip()


def test_make_test_runs_pytest_with_no_marker_deselected():
    pytest_lines = [line for line in recipe("test") if "-m pytest" in line]
    assert len(pytest_lines) == 1
    assert " -m pytest $(PYTEST_ARGS)" in pytest_lines[0] and not re.search(r"-m pytest.* -m\b", pytest_lines[0])
    assert not re.search(r"\s(-k|--deselect|--ignore)\b", pytest_lines[0])


def test_make_test_times_its_phases_in_order():
    phases = [re.search(r"\$\(PHASE_LOG\) (\"[^\"]+\"|\S+)", line).group(1).strip('"')
              for line in recipe("test") if "$(PHASE)" in line]
    assert phases == ["install", "llama.cpp build", "browser", "oldest Python", "tests"]
    assert "--last" in recipe("test")[-1]   # the table of phase times comes after the tests, pass or fail


def test_make_test_fast_deselects_only_registered_markers():
    assert 'pytest -m "$(FAST_TESTS)"' in " ".join(recipe("test-fast"))
    expression = fast_expression()
    terms = re.findall(r"not (\w+)", expression)
    assert expression == " and ".join(f"not {t}" for t in terms)   # nothing but "not marker and …"
    assert set(terms) == registered_markers()   # every tier is left out of the fast run, and only tiers


def test_the_tiers_are_documented():
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    for marker in registered_markers():
        assert f"| `{marker}` |" in contributing, marker


def test_an_unmarked_test_cannot_start_a_python_subprocess():
    """tests/conftest.py refuses it, so `make test-fast` never starts the bench CLI or app.py unawares."""
    import subprocess
    import sys

    with pytest.raises(RuntimeError, match="mark it @pytest.mark.subprocess"):
        subprocess.run([sys.executable, "-c", "pass"])
    assert subprocess.run(["true"]).returncode == 0   # other programs (ruff, git) still run


@pytest.mark.subprocess
def test_a_marked_test_may_start_one():
    import subprocess
    import sys
    assert subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout == "42\n"
