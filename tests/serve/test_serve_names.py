"""serve/ named by concept: each scheduler's file is its registry name, the package's docstring names every module
and its example runs, one function says whether a backend batches, one sizes the batching pool."""
from __future__ import annotations

import re
from pathlib import Path

import playground.serve as serve
from playground.serve import SCHEDULERS, batching_for
from playground.serve.batching import ContinuousBatching
from playground.serve.batching_torch import BatchingScheduler
from playground.serve.concurrent import ConcurrentScheduler
from playground.serve.one_at_a_time import OneAtATime

PACKAGE = Path(serve.__file__).parent
PLAYGROUND = PACKAGE.parent


def test_each_scheduler_lives_in_the_file_its_registry_name_names():
    classes = (OneAtATime, ContinuousBatching, BatchingScheduler, ConcurrentScheduler)
    assert sorted(c.name for c in classes) == sorted(SCHEDULERS)
    assert {c.name: c.__module__ for c in classes} == {
        c.name: f"playground.serve.{c.name.replace('-', '_')}" for c in classes}


def test_the_package_docstring_names_every_module():
    named = set(re.findall(r"(?<![/\w])(\w+)\.py\b", serve.__doc__))   # not ui/serve_tab.py
    assert named == {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}


def test_the_package_docstrings_example_runs(tiny_onnx_engine):
    lines = serve.__doc__.split("\n\n")[1].splitlines()
    code = "\n".join(line[4:] for line in lines)
    scope = {"engine": tiny_onnx_engine}
    exec(compile(code, "playground/serve/__init__.py", "exec"), scope)   # noqa: S102 - the package's own example
    result = scope["result"]
    assert result.scheduler == "batching" and all(r.trace.steps for r in result.records)


def test_one_function_says_which_scheduler_batches_a_backend(tiny_engine, tiny_onnx_engine):
    assert (batching_for(tiny_onnx_engine), batching_for(tiny_engine)) == ("batching", "batching-torch")
    assert (batching_for("onnx"), batching_for("torch"), batching_for("onnx-int8")) == ("batching", "batching-torch",
                                                                                          None)


def uses(pattern: str) -> list[str]:
    return sorted(f"{p.relative_to(PLAYGROUND.parent)}:{n}" for p in PLAYGROUND.rglob("*.py")
                  for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if re.search(pattern, line))


def test_the_pool_is_sized_and_batching_named_in_one_place_each():
    sizing = uses(r"MAX_POOL_BYTES\s*//")
    assert len(sizing) == 1 and sizing[0].startswith("playground/serve/batching.py:")
    assert uses(r"\bBATCHABLE\b") == []
    assert [u.split(":")[0] for u in uses(r'\(\s*"onnx-gguf4",\s*"onnx"\s*\)')] == ["playground/serve/registry.py"]
