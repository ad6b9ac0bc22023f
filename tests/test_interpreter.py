"""The interpreters, each declared once and used everywhere: the README's front matter (`python_version`, what a
Space builds with) is the Python the simulated Space (tests/space/test_space.py) builds its venv with;
`pyproject.toml`'s `requires-python` floor is the one `make test-oldest` runs the fast tier under; its classifiers
name every supported Python from that floor up, the Space's among them, as README.md says. And every module of the
package and app.py imports under the interpreter running the suite (`make test` runs this file under the oldest
supported Python too, in .venv-oldest)."""
from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from playground.interpreter import front_matter, requires_python_floor, space_python_version, supported_pythons

ROOT = Path(__file__).resolve().parents[1]


def test_the_space_runs_a_supported_python_and_the_oldest_is_the_floor():
    declared, supported = space_python_version(), supported_pythons()
    assert re.fullmatch(r"3\.\d+", declared), declared   # a minor version: the Space's pip resolves the rest
    assert declared in supported, (declared, supported)
    floor = requires_python_floor()
    minors = [int(v.split(".")[1]) for v in supported]
    assert supported[0] == floor and minors == list(range(minors[0], minors[0] + len(minors)))   # no gap


def test_the_readme_names_the_supported_pythons_and_the_space_s():
    *older, newest = supported_pythons()
    readme = (ROOT / "README.md").read_text()
    assert f"needs Python {', '.join(older)} or {newest} ({space_python_version()} is what the Space runs" in readme


def test_a_missing_or_different_declaration_is_caught(tmp_path):
    readme, pyproject = tmp_path / "README.md", tmp_path / "pyproject.toml"
    readme.write_text("---\ntitle: x\nsdk: gradio\n---\n# x\n")
    with pytest.raises(ValueError, match="declares no python_version"):
        space_python_version(readme)
    readme.write_text("---\ntitle: x\npython_version: '3.12'   # comment\n---\n# x\n")
    pyproject.write_text('[project]\nname = "x"\nrequires-python = ">=3.10,<4"\n')
    assert (space_python_version(readme), requires_python_floor(pyproject)) == ("3.12", "3.10")
    pyproject.write_text('[project]\nname = "x"\n')
    with pytest.raises(ValueError, match="requires-python"):
        requires_python_floor(pyproject)
    assert front_matter("no front matter\n---\nx: 1\n---\n") == {}
    pyproject.write_text('[project]\nclassifiers = [\n  "Programming Language :: Python :: 3.11",\n'
                         '  "Programming Language :: Python :: 3.9", "Programming Language :: Python :: 3 :: Only",\n'
                         '  "Programming Language :: Python :: 3.10",\n]\n')
    assert supported_pythons(pyproject) == ["3.9", "3.10", "3.11"]   # by number, not by text


def test_make_test_oldest_runs_the_fast_tier_under_the_declared_floor():
    """The Makefile asks playground/interpreter.py for the oldest version (no number of its own) and builds
    .venv-oldest with that interpreter; `make -n -B` shows every command without running one."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^OLDEST_VERSION\s*=\s*\$\(shell python3 playground/interpreter\.py oldest\)$", makefile, re.M)
    planned = subprocess.run(["make", "-n", "-B", "--no-print-directory", "-C", str(ROOT), "test-oldest"],
                             capture_output=True, text=True, check=True).stdout
    version = requires_python_floor()
    assert f"scripts/oldest_python.sh {version}" in planned
    assert f".venv-oldest/.installed-dev-{version}" in planned
    assert re.search(r'\.venv-oldest/bin/python -m pytest -m "not integration and [^"]+"', planned)


@pytest.mark.subprocess
def test_the_script_prints_each_declared_version_for_the_makefile():
    def run(*args):
        return subprocess.run(["python3", "playground/interpreter.py", *args], cwd=ROOT, capture_output=True, text=True)
    assert run("oldest").stdout == requires_python_floor() + "\n"
    assert run("space").stdout == space_python_version() + "\n"
    refused = run()
    assert refused.returncode != 0 and "oldest|space" in refused.stderr


def test_the_simulated_space_builds_with_the_declared_interpreter():
    """tests/space/test_space.py reads the version from playground.interpreter and names none of its own."""
    source = (ROOT / "tests" / "space" / "test_space.py").read_text()
    imported = {alias.name for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.ImportFrom) and node.module == "playground.interpreter"
                for alias in node.names}
    assert "space_python_version" in imported
    assert not re.search(r"""["']3\.\d+["']""", source)


def test_the_suite_runs_on_a_supported_interpreter():
    assert sys.version_info[:2] >= tuple(int(p) for p in requires_python_floor().split("."))


def package_modules() -> list[str]:
    """Every module of playground/ by its import name, `__main__` ones included (doctest collection skips those)."""
    names = []
    for path in sorted((ROOT / "playground").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_and_app_py_imports_under_this_interpreter():
    """A construct newer than the interpreter (an import, a name, syntax) fails here, under `make test-oldest`."""
    modules = package_modules()
    assert "playground.bench.__main__" in modules and "playground.interpreter" in modules
    for name in modules + ["app"]:
        module = importlib.import_module(name)
        assert module.__name__ == name
