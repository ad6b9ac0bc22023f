"""Names the docstring examples in playground/ use (they run as doctests: `make test` keeps them true)."""
import pytest


@pytest.fixture(scope="session")
def _doctest_engine():
    from playground.backends import create_backend
    from playground.engine import Engine
    return Engine(create_backend("torch", "tiny", device="cpu", dtype="float32"))


@pytest.fixture(scope="session")
def _doctest_trace(_doctest_engine):
    from playground.config import GenerationSettings
    return _doctest_engine.generate("Hello", GenerationSettings(max_new_tokens=3))


@pytest.fixture(autouse=True)
def _doctest_names(request, doctest_namespace):
    """Only doctests pay for the tiny model: `tiny_engine`, and `trace` (a finished 3-token run, made once)."""
    if isinstance(request.node, pytest.DoctestItem):
        doctest_namespace["tiny_engine"] = request.getfixturevalue("_doctest_engine")
        doctest_namespace["trace"] = request.getfixturevalue("_doctest_trace")
