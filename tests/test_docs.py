"""The docs name only real things: every make target, module, flag, path, setting and link (scripts/check_docs.py);
and docs/architecture.md's map names every module of playground/ under its layer (playground/layers.py)."""
import re
from pathlib import Path

import pytest

from playground.layers import NAMED
from scripts.check_docs import ROOT, Repo, check_docs, check_text, documents


@pytest.fixture(scope="module")
def repo():
    return Repo.scan(ROOT)


def problems_in(text: str, repo) -> list[str]:
    return [p.reason for p in check_text(text, ROOT / "docs" / "example.md", repo)]


def test_every_command_path_and_link_in_the_docs_is_real():
    assert {"README.md", "CONTRIBUTING.md"} <= {d.name for d in documents()}
    problems = check_docs()
    assert not problems, "\n".join(map(str, problems))


def test_the_readme_stays_under_200_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_real_commands_pass(repo):
    assert problems_in("""
Run `make test-fast`, then `make run ARGS="--openai-api --port 7861"` or `PLAYGROUND_MODEL=tiny make run`.
```bash
python -m playground.lesson --out handout --backend onnx
python -m playground.serve --requests 16 --sweep batch \\
    --out results/batch
python scripts/soak.py --ui --backend onnx   # app.py in a subprocess
python -m pytest -q
```
See `playground/step_stream.py`, `tests/remote/test_remote_*.py`, `presenter.js` and [the backends](backends.md#the-fidelity-gate).
""", repo) == []


@pytest.mark.parametrize("line, reason", [
    ("`make tets`", "`make tets`: no such target in the Makefile"),
    ("```\nmake run ARGS=\"--opnai-api\"\n```", "`--opnai-api`: not a flag of app.py"),
    ("`python -m playground.lessons --out x`", "`python -m playground.lessons`: no module playground.lessons"),
    ("`python -m playground.lesson --outdir x`", "`--outdir`: not a flag of playground.lesson"),
    ("```\npython -m playground.serve --requests 4 \\\n   --reqs 4\n```",
     "`--reqs`: not a flag of playground.serve"),
    ("`python scripts/soaks.py`", "`python scripts/soaks.py`: no such file"),
    ("`python -m nosuchpackage_xyz`", "`python -m nosuchpackage_xyz`: no such module installed"),
    ("`playground/nothing_here.py`", "`playground/nothing_here.py`: no such file or folder"),
    ("`tests/test_nothing_*.py`", "`tests/test_nothing_*.py`: no such file or folder"),
    ("`nothing_here.js`", "`nothing_here.js`: no such file or folder"),
    ("Set PLAYGROUND_NO_SUCH_SETTING=1.", "`PLAYGROUND_NO_SUCH_SETTING`: no code reads this setting"),
    ("[x](missing.md)", "link `missing.md`: no such file"),
    ("[x](backends.md#no-such-heading)", "link `backends.md#no-such-heading`: no heading with that anchor"),
])
def test_a_wrong_line_is_reported(repo, line, reason):
    problems = problems_in(line, repo)
    assert len(problems) == 1 and problems[0].startswith(reason), problems


def test_a_flag_is_checked_against_the_program_that_reads_it(repo):
    """--rounds is the bench's interleaved command's flag; the lesson does not read it."""
    assert problems_in("`python -m playground.bench interleaved onnx --rounds 4`", repo) == []
    assert problems_in("`python -m playground.lesson --rounds 4`", repo) == [
        "`--rounds`: not a flag of playground.lesson"]


def test_another_projects_path_and_other_programs_are_left_alone(repo):
    assert problems_in("transformers' `generation/continuous_batching`; `llama-server --no-such-flag 1`", repo) == []


def test_the_checker_reads_every_doc_under_docs():
    assert {p.relative_to(ROOT).as_posix() for p in documents()} >= {
        str(Path("docs") / n) for n in ("presenting.md", "backends.md", "serving.md", "remote-servers.md",
                                          "architecture.md", "benchmarks.md")}


# --- the map of the house: docs/architecture.md's "Layers and modules"

MAP = ROOT / "docs" / "architecture.md"
MAP_SECTION = "## Layers and modules"
HEADING = re.compile(r"^### \d+ · .+$")
ENTRY = re.compile(r"^- `([^`]+)`")
MODULE_SPAN = re.compile(r"`(\w+\.py)`")


def playground_modules() -> list[str]:
    """Every module of playground/, as a path inside it: "engine.py", "serve/cli.py", "ui/live/view.py",
    "__init__.py"; a package inside a package ("ui/live/") has its own entry in the map, under its top package's layer."""
    package = ROOT / "playground"
    return sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py"))


def map_entries(text: str) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """The map's layer headings, and {entry ("engine.py", "serve/", "__init__.py"): (its heading, its text)}."""
    section = text.split(MAP_SECTION, 1)[1].split("\n## ", 1)[0]
    headings, entries, heading, key = [], {}, "", None
    for line in section.splitlines():
        if HEADING.match(line):
            heading, key = line, None
            headings.append(line)
        elif (m := ENTRY.match(line)) and heading:
            key = m.group(1)
            entries[key] = (heading, line)
        elif key and line.startswith("  "):
            entries[key] = (heading, entries[key][1] + " " + line.strip())
        else:
            key = None
    return headings, entries


def map_problems(text: str, modules: list[str], named=NAMED) -> list[str]:
    """What the map lacks or gets wrong, each saying which module and where to put it right."""
    where = {unit: f"### {i} · {name}" for i, (name, units) in enumerate(named) for unit in units}
    wanted = [f"### {i} · {name}" for i, (name, _) in enumerate(named)]
    headings, entries = map_entries(text)
    problems = [] if headings == wanted else [
        f"{MAP.name}'s layer headings are {headings}; playground/layers.py's order gives {wanted}"]
    for module in modules:
        package, _, name = module.rpartition("/")
        unit = package.split("/")[0] or ("playground" if name == "__init__.py" else name.removesuffix(".py"))
        key = f"{package}/" if package else name
        if unit not in where:
            problems.append(f"playground/{module}: its unit {unit} has no layer; give it one in playground/layers.py, "
                            f"then add a line `- \\`{key}\\` …` to the map in docs/architecture.md")
        elif key not in entries:
            problems.append(f"playground/{module} is missing from the map in docs/architecture.md: add a line "
                            f"`- \\`{key}\\` …` under \"{where[unit]}\"")
        elif entries[key][0] != where[unit]:
            problems.append(f"playground/{module}: the map in docs/architecture.md lists `{key}` under "
                            f"\"{entries[key][0]}\"; playground/layers.py puts it under \"{where[unit]}\"")
        elif package and name != "__init__.py" and f"`{name}`" not in entries[key][1]:
            problems.append(f"playground/{module} is missing from the map in docs/architecture.md: name `{name}` "
                            f"in the `{key}` entry under \"{where[unit]}\"")
    present = set(modules)
    for key, (heading, entry) in entries.items():
        if not key.endswith("/") and key not in present:
            problems.append(f"the map in docs/architecture.md lists `{key}` under \"{heading}\", but "
                            f"playground/{key} does not exist: rename or drop it")
        for name in MODULE_SPAN.findall(entry) if key.endswith("/") else ():
            if key + name not in present:
                problems.append(f"the map in docs/architecture.md names `{name}` in the `{key}` entry, but "
                                f"playground/{key}{name} does not exist: rename or drop it")
    return list(dict.fromkeys(problems))


def test_the_map_names_every_module_of_playground_under_its_layer():
    problems = map_problems(MAP.read_text(), playground_modules())
    assert not problems, "\n".join(problems)


def test_a_module_missing_from_the_map_says_which_and_where_to_add_it():
    text, modules = MAP.read_text(), playground_modules()
    assert map_problems(text, modules + ["serve/prefill_only.py", "newcomer.py"],
                        NAMED[:3] + ((NAMED[3][0], NAMED[3][1] + ("newcomer",)),) + NAMED[4:]) == [
        "playground/serve/prefill_only.py is missing from the map in docs/architecture.md: name "
        "`prefill_only.py` in the `serve/` entry under \"### 6 · serve\"",
        "playground/newcomer.py is missing from the map in docs/architecture.md: add a line `- \\`newcomer.py\\` …` "
        "under \"### 3 · engine\""]
    assert map_problems(text, modules + ["orphan.py"]) == [
        "playground/orphan.py: its unit orphan has no layer; give it one in playground/layers.py, then add a line "
        "`- \\`orphan.py\\` …` to the map in docs/architecture.md"]


def test_a_module_the_map_names_that_is_gone_or_in_another_layer_is_reported():
    text, modules = MAP.read_text(), playground_modules()
    gone = [m for m in modules if m not in ("serve/slots.py", "units.py")]
    assert map_problems(text, gone) == [
        "the map in docs/architecture.md lists `units.py` under \"### 0 · base\", but playground/units.py does not "
        "exist: rename or drop it",
        "the map in docs/architecture.md names `slots.py` in the `serve/` entry, but playground/serve/slots.py does "
        "not exist: rename or drop it"]
    moved = tuple((name, tuple(u for u in units if u != "units") + (("units",) if name == "records" else ()))
                  for name, units in NAMED)
    assert map_problems(text, modules, moved) == [
        "playground/units.py: the map in docs/architecture.md lists `units.py` under \"### 0 · base\"; "
        "playground/layers.py puts it under \"### 1 · records\""]
