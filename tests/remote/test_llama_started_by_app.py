"""`--llama-server` / PLAYGROUND_LLAMA_SERVER=1: llama.cpp's server as a source the app starts on first use
(llamacpp/server.py add_llama_server), named in the registry at once, stopped on close."""
from __future__ import annotations

import httpx
import pytest

from playground.config import GenerationSettings
from playground.llamacpp import APP_SOURCE, INSTALL_HINT, LlamaCppMissing, add_llama_server
from playground.llamacpp import server as llama_server
from playground.registry import BackendUnavailable, SourceRegistry
from tests.helpers import FRANCE, require_llama


def local_registry() -> SourceRegistry:
    return SourceRegistry(lambda name, progress: "local source", ["local"])


def test_the_flag_and_the_env_var_offer_llama_server_without_starting_it(monkeypatch):
    import app
    monkeypatch.delenv("PLAYGROUND_LLAMA_SERVER", raising=False)
    assert APP_SOURCE not in app.make_registry("tiny").names
    args = app.parse_args(["--llama-server", "--llama-parallel", "2"])
    registry = app.make_registry("tiny", llama_server=args.llama_server, llama_parallel=args.llama_parallel)
    started = registry.factories[APP_SOURCE].__self__
    assert (started.parallel, started.server) == (2, None)   # nothing runs before the first use
    assert dict((name, label) for label, name in registry.choices())[APP_SOURCE].startswith(APP_SOURCE)
    monkeypatch.setenv("PLAYGROUND_LLAMA_SERVER", "1")
    assert app.make_registry("tiny").factories[APP_SOURCE].__self__.parallel == 4   # the default slots
    with pytest.raises(ValueError, match="at least one slot"):
        add_llama_server(local_registry(), parallel=0)


def test_a_missing_binary_is_the_sources_load_error_naming_make_llama(monkeypatch):
    def missing(name):
        raise LlamaCppMissing(f"{name} is not installed: {INSTALL_HINT}")
    monkeypatch.setattr(llama_server, "llama_binary", missing)
    registry = local_registry()
    started = add_llama_server(registry)
    with pytest.raises(BackendUnavailable, match="make llama"):
        registry.get(APP_SOURCE)
    assert "llama-server is not installed" in registry.error(APP_SOURCE) and started.server is None
    assert registry.get("local") == "local source" and registry.others(APP_SOURCE) == ["local"]


def test_close_runs_each_hook_once_latest_first():
    registry, calls = local_registry(), []
    registry.on_close(lambda: calls.append("first"))
    registry.on_close(lambda: calls.append("second"))
    registry.close()
    registry.close()
    assert calls == ["second", "first"]


@pytest.mark.server
def test_the_started_server_answers_through_the_registry_and_stops_on_close():
    require_llama()
    registry = local_registry()
    started = add_llama_server(registry, parallel=2)
    try:
        source = registry.get(APP_SOURCE)
        assert source.info.origin == "remote" and source.info.context_window == 2048   # 2048 tokens a slot
        # its description (the Serve tab's runs, the charts' subtitles) names the CPU variant that runs here
        from playground.llamacpp import llama_choice
        assert f"llama.cpp here: {llama_choice().summary()}" in source.info.describe()
        trace = source.run(FRANCE, GenerationSettings(max_new_tokens=8)).wait()
        assert 1 <= trace.metrics().output_tokens <= 8 and trace.text
    finally:
        registry.close()
    assert started.server.process.poll() is not None and not started.server.log.exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(started.server.url.removesuffix("/v1") + "/health", timeout=2)
