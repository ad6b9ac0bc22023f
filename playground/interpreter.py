"""The Pythons this project runs on, each declared in one place and read from there.

- The Space's: the README's front matter (`python_version`), which a Space reads to pick its interpreter and the
  simulated Space (tests/space/test_space.py) builds its venv with.
- The oldest supported: `pyproject.toml`'s `requires-python` floor, which `make test-oldest` runs the fast tier
  under (`python3 playground/interpreter.py oldest` prints it for the Makefile).
- Every supported one: `pyproject.toml`'s `Programming Language :: Python :: 3.X` classifiers, from the floor up;
  the Space's among them and README.md naming them (tests/test_interpreter.py holds all of this together).

Standard library only, and runnable as a script with any Python 3 (the Makefile does so, before any venv exists):
`python3 playground/interpreter.py oldest|space` prints that version.

Left out: finding an interpreter of that version on this machine (scripts/oldest_python.sh does).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def front_matter(text: str) -> dict[str, str]:
    """The `key: value` lines of a README's YAML front matter (between the leading `---` lines), unquoted.

    >>> front_matter('---\\ntitle: A\\npython_version: "3.10"\\n---\\n# A')
    {'title': 'A', 'python_version': '3.10'}
    >>> front_matter("# no front matter")
    {}
    """
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if not match:
        return {}
    pairs = (line.split(":", 1) for line in match.group(1).splitlines() if ":" in line and not line.startswith(" "))
    return {key.strip(): value.split(" #")[0].strip().strip("'\"") for key, value in pairs}


def space_python_version(readme_path: str | Path = ROOT / "README.md") -> str:
    """The `python_version` the README's front matter declares, e.g. "3.12"; a `ValueError` if it declares none
    (a Space would then build with the hub's default, whatever that is that day).

    >>> space_python_version()
    '3.12'
    """
    version = front_matter(Path(readme_path).read_text(encoding="utf-8")).get("python_version", "")
    if not re.fullmatch(r"3\.\d+(\.\d+)?", version):
        raise ValueError(f"{readme_path}: its front matter declares no python_version (e.g. python_version: \"3.12\")")
    return version


def requires_python_floor(pyproject_path: str | Path = ROOT / "pyproject.toml") -> str:
    """The lower bound of `pyproject.toml`'s `requires-python = ">=X.Y"`, e.g. "3.10" (read without tomllib,
    which Python 3.10 lacks); a `ValueError` if there is none.

    >>> requires_python_floor()
    '3.11'
    """
    text = Path(pyproject_path).read_text(encoding="utf-8")
    match = re.search(r'^requires-python\s*=\s*["\']>=\s*(3\.\d+(?:\.\d+)?)[^"\']*["\']', text, re.M)
    if not match:
        raise ValueError(f'{pyproject_path}: no requires-python = ">=3.X" in its [project] table')
    return match.group(1)


def supported_pythons(pyproject_path: str | Path = ROOT / "pyproject.toml") -> list[str]:
    """The minor versions `pyproject.toml`'s `Programming Language :: Python :: 3.X` classifiers name, oldest first.

    >>> supported_pythons()
    ['3.11', '3.12']
    """
    text = Path(pyproject_path).read_text(encoding="utf-8")
    found = re.findall(r'["\']Programming Language :: Python :: (3\.\d+)["\']', text)
    return sorted(set(found), key=lambda v: int(v.split(".")[1]))


VERSIONS = {"oldest": requires_python_floor, "space": space_python_version}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in VERSIONS:
        sys.exit(f"usage: python3 {sys.argv[0]} {'|'.join(VERSIONS)}")
    print(VERSIONS[sys.argv[1]]())
