"""No test's outcome follows the machine's speed: CI runs on a shared, noisy 2-core machine.

The check parses every file under tests/ and reports, by file:line,
- a fixed sleep: `time.sleep`, `asyncio.sleep` or Playwright's `wait_for_timeout` outside a `while` loop
  (a loop polls a condition; a sleep on its own waits for something to happen, and fails when the machine
  is slower than the sleep), or `assert not event.wait(seconds)`. A sleep that is the behaviour under test
  (a fake server's delay, a slow backend's pace) lives in a fake (FAKES) or carries a `# timing: why`
  comment;
- an assert that orders a wall-clock measurement: a comparison (<, <=, >, >=) whose side reads a clock
  (`time.monotonic()`, `time.perf_counter()`, `time.time()`), a name computed from one in the same
  function, or a call of a function of the same file that returns one. A hang detector with a generous
  bound, or an order of events read from clocks, stays, marked `# timing: why` on the assert's lines or
  in the comment just above.
Speed claims belong to `make bench`; a test checks an order of events, a count, or a fake clock.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# fakes whose sleeps are the behaviour the tests drive (a slow backend, a server that stalls, ZeroGPU's double)
FAKES = {"fakes.py", "fake_openai_server.py", "zerogpu_double.py"}
MARK = re.compile(r"# timing: \S")   # the comment that justifies what stays: "# timing: why"
SLEEPS = {"sleep", "wait_for_timeout"}
CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns"}
ORDERS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _called(node: ast.AST) -> str | None:
    """The called name of a call (`time.sleep(...)` -> "sleep"), or None."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _reads_clock(node: ast.AST, tainted: set[str], timers: frozenset[str] = frozenset()) -> bool:
    """Does `node` read a clock: a clock call, a name computed from one, or a call of a function returning one?"""
    for sub in ast.walk(node):
        name = _called(sub)
        if name in CLOCKS and (name != "time" or isinstance(sub.func, ast.Attribute)):
            return True
        if name in timers:
            return True
        if isinstance(sub, ast.Name) and sub.id in tainted:
            return True
    return False


def _marked(lines: list[str], node: ast.AST) -> bool:
    """A `# timing:` comment on one of the node's lines or in the comment lines just above it."""
    first, last = node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno
    while first > 1 and lines[first - 2].lstrip().startswith("#"):
        first -= 1
    return any(MARK.search(lines[i - 1]) for i in range(first, last + 1))


class _Finder(ast.NodeVisitor):
    def __init__(self, path: Path, lines: list[str], root: Path, timers: frozenset[str] = frozenset()):
        self.path, self.lines, self.root = path, lines, root
        self.timers = timers    # functions of this file that return a clock reading
        self.returns_clock: set[str] = set()
        self.functions: list[str] = []
        self.loops = 0          # `while` loops around the current node
        self.tainted: list[set[str]] = [set()]
        self.found: list[str] = []

    def _where(self, node) -> str:
        return f"{self.path.relative_to(self.root)}:{node.lineno}"

    def _reads(self, node) -> bool:
        return _reads_clock(node, self.tainted[-1], self.timers)

    def _function(self, node):
        self.tainted.append(set(self.tainted[-1]))
        self.functions.append(getattr(node, "name", "<lambda>"))
        loops, self.loops = self.loops, 0
        self.generic_visit(node)
        self.loops = loops
        self.functions.pop()
        self.tainted.pop()

    def visit_Return(self, node):
        if node.value is not None and self.functions and self._reads(node.value):
            self.returns_clock.add(self.functions[-1])
        self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_While(self, node):
        self.loops += 1
        self.generic_visit(node)
        self.loops -= 1

    def _assign(self, targets, value):
        if value is not None and self._reads(value):
            for t in targets:
                self.tainted[-1].update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))

    def visit_Assign(self, node):
        self._assign(node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._assign([node.target], node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._assign([node.target], node.value)
        self.generic_visit(node)

    def visit_Call(self, node):
        if (_called(node) in SLEEPS and not self.loops and self.path.name not in FAKES
                and not _marked(self.lines, node)):
            self.found.append(f"{self._where(node)}: a fixed sleep (wait on an event or a polled condition)")
        self.generic_visit(node)

    def visit_Assert(self, node):
        test = node.test
        if (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _called(test.operand) == "wait"
                and test.operand.args and not _marked(self.lines, node)):
            self.found.append(f"{self._where(node)}: a fixed wait then \"nothing happened\" (check the state itself)")
        for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            if any(isinstance(op, ORDERS) for op in cmp.ops) and any(
                    self._reads(side) for side in [cmp.left, *cmp.comparators]):
                if not _marked(self.lines, node):
                    self.found.append(f"{self._where(node)}: an assert on a wall-clock measurement "
                                      "(move the speed claim to `make bench`, or check an order or a count)")
                break
        self.generic_visit(node)


def timing_dependencies(path: Path, root: Path = TESTS.parent) -> list[str]:
    """Each fixed sleep and timed assert in one file, as "file:line: what" (file relative to `root`)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    first = _Finder(path, text.splitlines(), root)   # which functions return a clock reading
    first.visit(tree)
    finder = _Finder(path, text.splitlines(), root, frozenset(first.returns_clock))
    finder.visit(tree)
    return finder.found


def test_no_test_depends_on_the_machines_speed():
    found = [f for path in sorted(TESTS.rglob("*.py")) for f in timing_dependencies(path)]
    assert not found, "\n".join(found)


def test_the_check_finds_a_sleep_and_a_timed_assert(tmp_path):
    """The check itself works: a sleep then a "nothing happened" assert, and an elapsed-time bound, are
    reported with their lines; a polled condition, a fake's delay and a justified hang detector are not."""
    bad = tmp_path / "test_probe.py"
    source = (
        "import time\n"
        "def test_waits():\n"
        "    start = time.monotonic()\n"
        "    time.sleep(0.5)\n"                                            # 4: fixed sleep
        "    elapsed = time.monotonic() - start\n"
        "    assert elapsed < 2\n"                                         # 6: timed assert
        "    assert time.perf_counter() - start >= 0.1, 'slow'\n"          # 7: timed assert
        "    while not done():\n"
        "        time.sleep(0.05)\n"                                       # polled: fine
        "    assert time.monotonic() < start + 600   # timing: hang detector\n"
        "    assert len(steps) < 5\n"                                      # a count: fine
        "    # timing: a fake server's delay, the behaviour under test\n"
        "    time.sleep(1)\n"
        "def timed(f):\n"
        "    t = time.perf_counter()\n"
        "    f()\n"
        "    return time.perf_counter() - t\n"
        "def test_timed():\n"
        "    took = timed(print)\n"
        "    assert took < 5\n"                                            # 20: timed through a helper
        "    assert not entered.wait(0.2)\n"                               # 21: a fixed wait
        "    time.sleep(2)   # timing:\n"                                  # 22: a mark without a reason
    )
    bad.write_text(source, encoding="utf-8")
    found = timing_dependencies(bad, root=tmp_path)
    assert [f.split(": ")[0].rsplit(":", 1)[1] for f in found] == ["4", "6", "7", "20", "21", "22"], found
    assert "fixed sleep" in found[0] and "wall-clock" in found[1] and found[0].startswith("test_probe.py:4: ")
