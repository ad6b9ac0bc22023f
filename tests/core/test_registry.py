"""SourceRegistry: one load per backend even under concurrent requests; failures remembered and named."""
from __future__ import annotations

import threading
import time

import pytest

from playground.registry import BackendUnavailable, SourceRegistry, as_registry


def counting_registry(fail=(), pause=0.0):
    calls = []

    def factory(name, progress):
        calls.append(name)
        progress(0.5, f"building {name}")
        time.sleep(pause)   # timing: a slow load, so that two threads ask for it at once
        if name in fail:
            raise ImportError(f"no runtime for {name}")
        return f"engine-{name}"
    return SourceRegistry(factory, ["a", "b", "c"], default="b"), calls


def test_two_threads_asking_for_one_backend_load_it_once():
    registry, calls = counting_registry(pause=0.3)
    got = []
    threads = [threading.Thread(target=lambda: got.append(registry.get("a"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["a"] and got == ["engine-a"] * 4


def test_a_failed_load_is_remembered_with_its_reason_and_not_retried():
    registry, calls = counting_registry(fail=("a",))
    for _ in range(2):
        with pytest.raises(BackendUnavailable, match="backend a failed to load: ImportError: no runtime for a"):
            registry.get("a")
    assert calls == ["a"] and "ImportError" in registry.error("a")
    assert registry.others("a") == ["b", "c"] and registry.get() == "engine-b"


def test_loading_yields_progress_until_ready_then_nothing():
    registry, _ = counting_registry(pause=0.6)
    lines = list(registry.loading("c", interval=0.1))
    assert lines and all(line.startswith("loading backend c: ") for line in lines)
    assert any("building c" in line for line in lines)
    assert registry.get("c") == "engine-c" and list(registry.loading("c")) == []


def test_an_unknown_backend_is_refused_by_name():
    registry, _ = counting_registry()
    with pytest.raises(ValueError, match="backend must be one of a, b, c; got 'z'"):
        registry.get("z")


def test_a_single_engine_becomes_a_registry_of_its_backend(tiny_engine):
    registry = as_registry(tiny_engine)
    assert registry.names == ["torch"] and registry.get("torch") is tiny_engine


@pytest.mark.slow
def test_for_model_loads_and_warms_up_a_real_engine():
    from playground.registry import SourceRegistry

    registry = SourceRegistry.for_model("tiny", backend="torch")
    messages = []
    engine = registry.factories["torch"]("torch", lambda fraction, message: messages.append(message))
    assert engine.backend.model_name == "tiny-random-llama"
    assert any("warming up" in m for m in messages)
    assert registry.get("torch").backend.name == "torch" and registry.get("torch") is registry.get()
