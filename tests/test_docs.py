"""The docs name only real things: every make target, module, flag, path, setting and link (scripts/check_docs.py)."""
from pathlib import Path

import pytest

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
See `playground/live.py`, `tests/test_remote_*.py`, `presenter.js` and [the backends](backends.md#the-fidelity-gate).
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
