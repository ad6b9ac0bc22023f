"""The package's layers: every import in `playground/` (function-level and TYPE_CHECKING ones included) goes to
a module of its own layer or a lower one, no two packages import each other, and every module has a layer.

The order is playground/layers.py's LAYERS (docs/architecture.md's map follows it: tests/test_docs.py). A
module's layer is its package's (`playground.serve.cli` is in `serve`'s), or its own for a top-level
module; `playground` is the package's `__init__` (the public API). A new package or top-level module gets a
place in LAYERS; an import that points up is a layer to rethink, not an exception to list.

A function-level import is checked like a top-level one, so none can dodge a cycle: an import inside a
function only defers loading (a runtime such as torch or onnxruntime, a module one code path needs).
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from playground.layers import LAYERS, unit

ROOT = Path(__file__).resolve().parents[1] / "playground"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, module: str, known: set[str]) -> set[str]:
    """Every playground module that `path` imports anywhere in its body (resolved to a known module)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                if node.level else node.module
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            while name and name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in known and name != module:
                found.add(name)
                break   # `from .x import a, b`: one edge to the deepest module named
    return found


@lru_cache(maxsize=1)
def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in ROOT.rglob("*.py")}
    known = set(files)
    return {m: imports_of(p, m, known) for m, p in files.items()}


def violations(edges: dict[str, set[str]], layers: list[tuple[str, ...]]) -> list[str]:
    """Imports that point to a higher layer, units with no layer, and pairs of units importing each other.

    >>> violations({"p.a": {"p.b"}, "p.b": set()}, [("a",), ("b",)])
    ['p.a (layer 0: a) imports p.b (layer 1: b), a higher layer']
    >>> violations({"p.a.x": {"p.b"}, "p.b": {"p.a.y"}, "p.a.y": set()}, [("a", "b")])
    ['a and b import each other (p.a.x -> p.b, p.b -> p.a.y)']
    >>> violations({"p.new": set()}, [("a",)])
    ['p.new: its unit new has no layer in LAYERS']
    """
    level = {name: i for i, names in enumerate(layers) for name in names}
    out, between = [], {}
    for m in sorted(edges):
        if unit(m) not in level:
            out.append(f"{m}: its unit {unit(m)} has no layer in LAYERS")
            continue
        for t in sorted(edges[m]):
            a, b = unit(m), unit(t)
            if b not in level or a == b:
                continue
            if level[b] > level[a]:
                out.append(f"{m} (layer {level[a]}: {a}) imports {t} (layer {level[b]}: {b}), a higher layer")
            between.setdefault((a, b), f"{m} -> {t}")
    for (a, b), example in sorted(between.items()):
        if a < b and (b, a) in between:
            out.append(f"{a} and {b} import each other ({example}, {between[(b, a)]})")
    return out


def module_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), e.g. a package and the steps it imports.

    >>> module_cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}})
    [['a', 'b']]
    """
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_import_points_down_the_layers():
    assert violations(graph(), LAYERS) == []


def test_no_modules_import_each_other_round_a_cycle():
    assert module_cycles(graph()) == []


def test_the_layers_name_each_unit_once():
    names = [n for layer in LAYERS for n in layer]
    assert len(names) == len(set(names))


def test_the_checker_sees_a_function_level_import(tmp_path):
    path = tmp_path / "engine.py"
    path.write_text("def f():\n    from .ui.common import error_html\n    return error_html\n")
    edges = {"playground.engine": imports_of(path, "playground.engine", {"playground.ui", "playground.engine"})}
    assert edges == {"playground.engine": {"playground.ui"}}
    assert violations(edges, LAYERS) == [
        "playground.engine (layer 3: engine) imports playground.ui (layer 9: ui), a higher layer"]
