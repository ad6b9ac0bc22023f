"""Shared fixtures: a tiny in-process model for unit tests, the bundled SmolLM2 for integration tests."""
from __future__ import annotations

import pytest

from playground.backends import create_backend
from playground.engine import Engine


@pytest.fixture(scope="session")
def tiny_backend():
    return create_backend("torch", "tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_engine(tiny_backend):
    return Engine(tiny_backend)


@pytest.fixture(scope="session")
def smol_backend():
    """The bundled SmolLM2-135M-Instruct on torch fp32 CPU (converted once, cached on disk)."""
    return create_backend("torch", None, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def smol_engine(smol_backend):
    return Engine(smol_backend)
