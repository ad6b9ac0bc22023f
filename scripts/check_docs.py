"""Every command, module, flag, path and setting the docs name is real (tests/test_docs.py runs it).

    python scripts/check_docs.py          # prints each problem as doc:line: what is wrong; exit 1 if any

Read: README.md, CONTRIBUTING.md and docs/**/*.md. In their code (inline spans and fenced blocks):
  - `make TARGET`: TARGET is a rule of the Makefile;
  - `python -m MODULE`: MODULE is a module of this repository (a package needs its __main__.py), or one
    the environment can import (pytest, pip);
  - `python FILE`: the file exists;
  - a flag after `python -m MODULE` or `python FILE`, or in `make run|bench|soak ARGS="…"`: the program
    names it (a flag it reads from argv by hand), or an `add_argument(…)` or `Param(…)` call defines it in
    the program or in a module of this repository it imports (read, never run: a program is not started);
  - a span that is one path (`playground/step_stream.py`, `tests/remote/test_remote_*.py`, `presenter.js`): some file or
    folder of the repository is that path, ends with it, or matches it;
  - `PLAYGROUND_*` settings: the code reads them.
And every link to a local file (`[text](docs/x.md#anchor)`) points at a file, and at a heading of it.
Left out: other programs' commands and flags (llama-server, vllm, curl); prose outside code.
"""
from __future__ import annotations

import ast
import fnmatch
import functools
import importlib.util
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", ".venv-aiperf", ".venv-oldest", "__pycache__", ".cache", ".pytest_cache", ".hypothesis",
             "node_modules", "bench-results", "out"}
PYTHONS = {"python", "python3", "python3.11", ".venv/bin/python", "$(PY)"}
MAKE_PROGRAMS = {"run": "app.py", "bench": "playground.bench", "soak": "scripts/soak.py"}   # what ARGS reach
PATH_SUFFIXES = (".py", ".md", ".sh", ".js", ".css", ".toml", ".txt", ".png", ".json", ".gguf", ".cfg", ".ini")
FENCE = re.compile(r"^\s*```")
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
SETTING = re.compile(r"\bPLAYGROUND_[A-Z0-9_]+\b")
FLAG = re.compile(r"^--[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class Problem:
    doc: str
    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.reason}  ({self.text.strip()[:100]})"


@dataclass
class Repo:
    """What the docs are checked against: the Makefile's targets, the files, the code's settings."""
    root: Path = ROOT
    files: list[str] = field(default_factory=list)
    targets: set[str] = field(default_factory=set)
    settings: set[str] = field(default_factory=set)

    @classmethod
    def scan(cls, root: Path = ROOT) -> Repo:
        repo = cls(root=root)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".venv")]
            rel = Path(dirpath).relative_to(root)
            repo.files += [(rel / d).as_posix() for d in dirnames]
            repo.files += [(rel / f).as_posix() for f in filenames]
        repo.files = [f[2:] if f.startswith("./") else f for f in repo.files]
        repo.targets = makefile_targets((root / "Makefile").read_text())
        for f in repo.files:
            if f.endswith((".py", ".js")) or f == "Makefile":
                if not f.startswith(("docs/", "tests/test_docs.py", "scripts/check_docs.py")):
                    repo.settings |= set(SETTING.findall((root / f).read_text(errors="replace")))
        return repo

    def has_path(self, token: str) -> bool:
        """True when a file or folder of the repository is `token`, ends with it, or matches it (a glob)."""
        token = token.removeprefix("./").rstrip("/")
        if any(c in token for c in "*?["):
            return any(fnmatch.fnmatch(f, token) or fnmatch.fnmatch(f, "*/" + token) for f in self.files)
        return any(f == token or f.endswith("/" + token) for f in self.files)

    def has_flag(self, program: str, flag: str) -> bool:
        """True when `program` (a module name or a file) names `flag` itself, or an `add_argument(…)` or
        `Param(…)` call defines it in a module of this repository that the program imports, at any depth."""
        path = self.program_file(program)
        if path is None:
            return False
        if flag in file_literal_flags(path):
            return True
        return any(flag in file_flags(module) for module in self.imported_files(path))

    def imported_files(self, path: Path):
        """`path` and every module of this repository it imports, at any depth (function-level included),
        nearest first."""
        seen, todo = {path}, [path]
        while todo:
            current = todo.pop(0)
            yield current
            for name in sorted(imported_modules(current, self.root)):
                file = self.program_file(name) if self.is_local_module(name) else None
                init = self.root / name.replace(".", "/") / "__init__.py"
                for f in (file, init if init.is_file() else None):
                    if f and f not in seen:
                        seen.add(f)
                        todo.append(f)

    def program_file(self, program: str) -> Path | None:
        if program.endswith(".py"):
            return self.root / program
        base = self.root / program.replace(".", "/")
        for candidate in (base.with_suffix(".py"), base / "__main__.py", base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def is_local_module(self, module: str) -> bool:
        return (self.root / module.split(".")[0]).is_dir()


def makefile_targets(text: str) -> set[str]:
    """The rules a Makefile defines (`name: deps`, not `NAME := value`).

    >>> sorted(makefile_targets("X := 1\\nrun: install\\n\\t$(PY) app.py\\ntest-fast bench: x\\n$(PY):\\n"))
    ['bench', 'run', 'test-fast']
    """
    targets = set()
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_][A-Za-z0-9_. -]*?)\s*:(?![=:])", line)
        if m:
            targets |= set(m.group(1).split())
    return targets


def literal_flags(source: str) -> set[str]:
    """Every string constant of a Python source that is a flag ("--name")."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and FLAG.match(n.value)}


def defined_flags(source: str | ast.Module) -> set[str]:
    """The flags a source defines: string constants given to `add_argument(…)` or `Param(…)`.

    >>> sorted(defined_flags("p.add_argument('--out', '-o'); Param('k', 4, 1, 8, 'k', '--spec-k'); f('--no')"))
    ['--out', '--spec-k']
    """
    flags = set()
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        if isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if callee in ("add_argument", "Param"):
                flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                          and FLAG.match(a.value)}
    return flags


@functools.lru_cache(maxsize=None)
def file_literal_flags(path: Path) -> frozenset[str]:
    return frozenset(literal_flags(path.read_text()))


@functools.lru_cache(maxsize=None)
def file_flags(path: Path) -> frozenset[str]:
    return frozenset(defined_flags(parsed(path)))


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@functools.lru_cache(maxsize=None)
def imported_modules(path: Path, root: Path) -> frozenset[str]:
    """The dotted names a Python file imports (relative imports resolved against its package)."""
    package = path.relative_to(root).parent.as_posix().replace("/", ".")
    if path.name != "__init__.py" and path.name != "__main__.py" and path.parent == root:
        package = ""
    names = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}
    return frozenset(n for n in names if n)


def code_lines(text: str):
    """(line number, code) for every fenced line (continuations joined) and every inline code span."""
    fenced, pending, start = False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            if not pending:
                start = number
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            yield start, pending + line, True
            pending = ""
        else:
            for span in SPAN.findall(line):
                yield number, span, False


def split_commands(code: str) -> list[list[str]]:
    """The simple commands of a shell line, as words (comments dropped; `&&`, `;`, `|` split)."""
    code = re.sub(r"\$\([^()]*(\([^()]*\)[^()]*)*\)", "SUBST", code)   # $(…) is one word
    try:
        words = shlex.split(code, comments=True)
    except ValueError:
        words = code.split()
    commands, current = [], []
    for word in words:
        if word in ("&&", ";", "|", "||") or word.endswith(";"):
            if word.endswith(";") and word != ";":
                current.append(word[:-1])
            commands.append(current)
            current = []
        else:
            current.append(word)
    return [c for c in commands + [current] if c]


def check_command(words: list[str], repo: Repo) -> list[str]:
    """What is wrong with one documented command (an empty list when it is real)."""
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):   # leading VAR=value settings
        words = words[1:]
    if not words:
        return []
    if words[0] == "make":
        return check_make(words[1:], repo)
    if words[0] in PYTHONS:
        return check_python(words[1:], repo)
    return []


def check_make(args: list[str], repo: Repo) -> list[str]:
    reasons, targets, settings = [], [], {}
    for arg in args:
        if "=" in arg:
            name, value = arg.split("=", 1)
            settings[name] = value
        elif not arg.startswith("-"):
            targets.append(arg)
    if not targets:
        return []   # `make` in prose, or `make -C …`
    for target in targets:
        if target not in repo.targets:
            reasons.append(f"`make {target}`: no such target in the Makefile")
    if "ARGS" in settings and targets[-1] in MAKE_PROGRAMS:
        reasons += check_flags(MAKE_PROGRAMS[targets[-1]], split_words(settings["ARGS"]), repo)
    return reasons


def check_python(args: list[str], repo: Repo) -> list[str]:
    if not args or args[0] == "-c":
        return []
    if args[0] == "-m" and len(args) > 1:
        module, rest = args[1], args[2:]
        if repo.is_local_module(module):
            if repo.program_file(module) is None:
                return [f"`python -m {module}`: no module {module} with a main in this repository"]
            return check_flags(module, rest, repo)
        if importlib.util.find_spec(module.split(".")[0]) is None:
            return [f"`python -m {module}`: no such module installed"]
        return []
    if args[0].endswith(".py"):
        if not (repo.root / args[0]).is_file():
            return [f"`python {args[0]}`: no such file"]
        return check_flags(args[0], args[1:], repo)
    return []


def check_flags(program: str, args: list[str], repo: Repo) -> list[str]:
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    if not flags:
        return []
    return [f"`{flag}`: not a flag of {program}" for flag in flags
            if FLAG.match(flag) and flag != "--help" and not repo.has_flag(program, flag)]


def split_words(value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def is_path(span: str) -> bool:
    """True for a span that names one path: `playground/step_stream.py`, `tests/test_*.py`, `presenter.js`."""
    if not re.fullmatch(r"[\w*?][\w.*?/-]*", span) or span.startswith(".venv") or "..." in span:
        return False
    return "/" in span or span.endswith(PATH_SUFFIXES)


def check_span_path(span: str, repo: Repo) -> list[str]:
    local = (repo.root / span.split("/")[0]).exists() or span.endswith(PATH_SUFFIXES)
    if not local:
        return []   # another project's path (transformers' `generation/continuous_batching`)
    return [] if repo.has_path(span) else [f"`{span}`: no such file or folder in the repository"]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading.

    >>> slug("The app's cost: ui and ui-flat")
    'the-apps-cost-ui-and-ui-flat'
    >>> slug("llama.cpp beside ours")
    'llamacpp-beside-ours'
    """
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    fenced, found = False, set()
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def check_link(target: str, doc: Path, repo: Repo) -> list[str]:
    if re.match(r"^[a-z]+:", target) or target.startswith("#") and not target[1:]:
        return []
    path, _, anchor = target.partition("#")
    file = (doc.parent / path).resolve() if path else doc.resolve()
    if not file.exists():
        return [f"link `{target}`: no such file"]
    if anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
        return [f"link `{target}`: no heading with that anchor in {file.name}"]
    return []


def check_text(text: str, doc: Path, repo: Repo) -> list[Problem]:
    """Every problem of one document's text (doc: where it lives, for its relative links)."""
    name = doc.relative_to(repo.root).as_posix() if doc.is_absolute() else doc.as_posix()
    problems = []
    for number, code, fenced in code_lines(text):
        reasons = []
        if not fenced and is_path(code):
            reasons += check_span_path(code, repo)
        else:
            for words in split_commands(code):
                reasons += check_command(words, repo)
        problems += [Problem(name, number, code, r) for r in reasons]
    for number, line in enumerate(text.splitlines(), 1):
        for target in LINK.findall(line):
            problems += [Problem(name, number, line, r) for r in check_link(target, doc, repo)]
        for setting in SETTING.findall(line):
            if setting not in repo.settings:
                problems.append(Problem(name, number, line, f"`{setting}`: no code reads this setting"))
    return problems


def documents(root: Path = ROOT) -> list[Path]:
    docs = [root / "README.md", root / "CONTRIBUTING.md"] + sorted((root / "docs").rglob("*.md"))
    return [d for d in docs if d.is_file()]


def check_docs(root: Path = ROOT) -> list[Problem]:
    repo = Repo.scan(root)
    return [p for doc in documents(root) for p in check_text(doc.read_text(), doc, repo)]


def main() -> int:
    problems = check_docs()
    for problem in problems:
        print(problem)
    print(f"{len(documents())} documents, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
