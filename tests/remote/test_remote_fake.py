"""The remote source against a misbehaving fake server: steps from events, every failure named, Stop at any
moment, the key kept secret. (The real llama.cpp server: test_remote_llama.py.)"""
from __future__ import annotations

import logging
import math
import threading
import time

import pytest

from playground.config import GenerationSettings
from playground.remote import (RemoteAuthError, RemoteError, RemoteMalformed, RemoteNotFound, RemoteRateLimited,
                               RemoteServerError, RemoteSource, RemoteStreamCut, RemoteTimeout, RemoteTLSError,
                               RemoteUnreachable)
from playground.remote.endpoints import add_endpoints, endpoint_urls
from playground.ports import free_port
from playground.remote.report import server_lines
from playground.run_view import metrics_html
from playground.trace import Trace

FOUR = GenerationSettings(max_new_tokens=4)


def run_of(fake_server, mode, **options):
    return RemoteSource(fake_server.url(mode), read_timeout=options.pop("read_timeout", 5), **options).run("Hi", FOUR)


# --- streams that work

def test_each_token_event_is_one_step_and_the_role_only_chunk_is_not_the_first_token(fake_server):
    trace = run_of(fake_server, "ok").wait()
    assert [(s.text, s.token_id, s.tokens) for s in trace.steps] == [("Hello", 9906, 1), (" world", 1917, 1),
                                                                      ("!", 0, 1)]
    assert [s.phase for s in trace.steps] == ["prefill", "decode", "decode"]
    assert trace.stop_reason == "eos" and trace.error is None
    assert math.isclose(trace.steps[0].prob, math.exp(-0.1)) and trace.steps[0].sample_prob is None
    assert trace.steps[0].top[0].token_id == 9906 and trace.steps[0].kv_bytes is None
    assert all(b.time >= a.time and math.isclose(b.latency, b.time - a.time) for a, b in zip(trace.steps, trace.steps[1:]))
    assert trace.server["kind"] == "openai-compatible" and trace.server["usage"]["completion_tokens"] == 3


def test_an_event_carrying_two_tokens_is_one_step_counting_two(fake_server):
    trace = run_of(fake_server, "multi").wait()
    assert [(s.text, s.tokens, s.token_id) for s in trace.steps] == [("Hello world", 2, None), ("!", 1, 0)]
    m = trace.metrics()
    assert m.output_tokens == 3 and len(m.itl) == 1            # one gap between two events, never split
    assert m.tpot == pytest.approx(trace.steps[1].time - trace.steps[0].time)   # 1 token after the first event


def test_a_token_count_that_disagrees_with_the_servers_usage_is_said_and_tpot_by_usage_shown(fake_server):
    trace = run_of(fake_server, "no-logprobs").wait()
    assert trace.metrics().output_tokens == 3 and all(s.prob is None and s.top is None for s in trace.steps)
    assert "the server's usage says 4 completion tokens" in trace.server["token_count_source"]
    assert any(line.startswith("TPOT by the server's token count") for line in server_lines(trace))


def test_a_server_that_always_streams_connects_with_top_k_unknown_and_says_what_its_probe_saw(fake_server):
    from playground.ui import source_line
    source = RemoteSource(fake_server.url("always-stream"))   # its logprobs probe gets an event stream, not JSON
    assert not source.capabilities.top_k
    assert source.top_k_note.startswith("unknown, off (the logprobs probe got:") and "data: " in source.top_k_note
    assert "top-k probabilities: unknown, off (the logprobs probe got:" in source_line(source)
    trace = source.run("Hi", FOUR).wait()
    assert trace.error is None and [s.text for s in trace.steps] == ["Hello", " world", "!"]


def test_raw_mode_streams_from_completions(fake_server):
    source = RemoteSource(fake_server.url("ok"))
    trace = source.run("Hi", FOUR.with_(chat=False)).wait()
    assert trace.text == "Hello world!" and trace.prompt_text == "Hi"


def test_a_server_without_a_tokenizer_labels_cl100k_as_an_approximation(fake_server):
    source = RemoteSource(fake_server.url("ok"))
    assert not source.capabilities.local_tokenizer and not source.capabilities.exact_ids
    trace = source.run("Hi there", FOUR).wait()
    assert "cl100k_base (an approximation" in trace.server["prompt_ids_source"]
    assert any("the server read 7 prompt tokens" in w for w in trace.server["warnings"])
    assert all(s.seq_len is None for s in trace.steps)   # no exact prompt length: no KV formula drawn
    with pytest.raises(ValueError, match="cannot run from exact token ids"):
        source.run_ids([1, 2, 3], FOUR)


def test_a_top_k_the_server_cannot_take_is_named_not_dropped_silently(fake_server):
    trace = RemoteSource(fake_server.url("ok")).run("Hi", FOUR.with_(top_k=5, temperature=0.7)).wait()
    assert "top_k=5 was not sent: openai-compatible takes no top_k" in trace.server["warnings"]


def test_a_response_in_another_models_tokenizer_is_flagged(fake_server, monkeypatch, tiny_backend):
    """The server names the bundled model, so a local copy of its tokenizer is used; its ids are not that one's."""
    from playground.remote import source as source_module
    from playground.remote.local_copy import LocalCopy
    copy = LocalCopy(tiny_backend.tokenizer, tiny_backend.kv_shape, "local copy of the test tokenizer")
    monkeypatch.setattr(source_module, "local_copy", lambda model: copy)
    trace = RemoteSource(fake_server.url("other-tokenizer")).run("Hi", FOUR).wait()
    assert any("do not match the local copy of the test tokenizer" in w for w in trace.server["warnings"])
    assert "⚠" in metrics_html(trace)


# --- failures: each a RemoteError naming the endpoint; a partial trace is kept

@pytest.mark.parametrize("mode, error, steps", [
    ("cut", RemoteStreamCut, 2), ("end-early", RemoteStreamCut, 3), ("malformed", RemoteMalformed, 2),
    ("not-sse", RemoteMalformed, 0), ("error-event", RemoteServerError, 2), ("401", RemoteAuthError, 0),
    ("403", RemoteAuthError, 0), ("404", RemoteNotFound, 0), ("429", RemoteRateLimited, 0),
    ("500", RemoteServerError, 0), ("503", RemoteServerError, 0)])
def test_a_failing_stream_raises_a_named_error_and_keeps_the_partial_trace(fake_server, mode, error, steps):
    run = run_of(fake_server, mode)
    with pytest.raises(error) as caught:
        run.wait()
    assert f"127.0.0.1:{fake_server.httpd.server_port}/{mode}" in str(caught.value)
    if mode.isdigit():
        assert f"HTTP {mode}" in str(caught.value)
    assert len(run.trace.steps) == steps and run.trace.stop_reason == "error"
    assert type(caught.value).__name__ in run.trace.error


def test_failures_at_connect_time_are_named(fake_server):
    with pytest.raises(RemoteServerError, match="models are on fire"):
        RemoteSource(fake_server.url("models-500"))
    with pytest.raises(RemoteNotFound, match="'nope' is not served here"):
        RemoteSource(fake_server.url("ok"), model="nope")
    with pytest.raises(RemoteUnreachable, match="could not connect"):
        RemoteSource(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(RemoteTLSError, match="TLS failed"):
        RemoteSource(f"https://127.0.0.1:{fake_server.httpd.server_port}/ok/v1")
    with pytest.raises(ValueError, match="http:// or https://"):
        RemoteSource("ftp://127.0.0.1/v1")


@pytest.mark.slow
def test_a_server_that_never_sends_a_byte_times_out(fake_server):
    """The server holds the request 60 s without a byte: only the 0.5 s read timeout ends it as a RemoteTimeout."""
    run = run_of(fake_server, "silent", read_timeout=0.5)
    with pytest.raises(RemoteTimeout):
        run.wait()
    assert run.trace.stop_reason == "error"


@pytest.mark.slow
@pytest.mark.parametrize("mode, steps", [("silent", 0), ("stall", 2)])
def test_stop_ends_a_run_at_once_even_while_the_server_sends_nothing(fake_server, mode, steps):
    """The server sends nothing for 60 s (the read timeout too): Stop, once the run waits, ends it well before."""
    run = run_of(fake_server, mode, read_timeout=60)
    threading.Timer(0.5, run.cancel).start()
    start = time.monotonic()
    trace = run.wait()
    assert time.monotonic() - start < 30   # timing: a hang detector; without Stop the wait lasts 60 s
    assert trace.stop_reason == "cancelled" and len(trace.steps) == steps and trace.error is None


def test_a_stalled_endpoint_never_blocks_a_local_run(fake_server, tiny_engine):
    stalled = run_of(fake_server, "silent", read_timeout=60)
    worker = threading.Thread(target=stalled.wait, daemon=True)
    worker.start()
    local = tiny_engine.generate("Hello", GenerationSettings(max_new_tokens=4))
    assert len(local.steps) == 4 and worker.is_alive()
    stalled.cancel()
    worker.join(2)
    assert not worker.is_alive() and stalled.trace.stop_reason == "cancelled"


# --- the key: sent to its endpoint only, never shown, exported or logged

def test_the_api_key_reaches_its_endpoint_and_nowhere_else(fake_server, monkeypatch, caplog):
    from playground.registry import SourceRegistry
    from playground.ui import source_line
    monkeypatch.setenv("FAKE_KEY", "sekrit")
    caplog.set_level(logging.DEBUG)
    registry = SourceRegistry(lambda name, progress: None, ["local"])
    [name] = add_endpoints(registry, endpoint_urls([fake_server.url("auth")]), api_key_env="FAKE_KEY")
    source = registry.get(name)
    trace = source.run("Hi", FOUR).wait()
    assert trace.text == "Hello world!" and set(fake_server.seen["auth"]) == {"Bearer sekrit"}
    shown = [trace.to_json(), trace.to_csv(), source_line(source), metrics_html(trace), repr(source.info),
             str(registry.choices()), caplog.text]
    assert not [text for text in shown if "sekrit" in text]


def test_a_wrong_key_echoed_by_the_server_is_blanked_from_the_error(fake_server):
    with pytest.raises(RemoteAuthError) as caught:
        RemoteSource(fake_server.url("auth"), api_key="wrong-key-123")
    assert "wrong-key-123" not in str(caught.value) and "***" in str(caught.value)


def test_endpoints_come_from_the_command_line_and_the_environment_once_each():
    assert endpoint_urls(["http://a:1/v1"], "http://b:2/v1,http://a:1") == ["http://a:1/v1", "http://b:2/v1"]
    with pytest.raises(ValueError, match="must not carry credentials"):
        endpoint_urls(["http://user:pw@a:1/v1"])
    with pytest.raises(ValueError, match="NO_SUCH_KEY_VAR"):
        add_endpoints(None, ["http://a:1/v1"], api_key_env="NO_SUCH_KEY_VAR")


def test_an_endpoint_that_fails_to_connect_is_named_in_the_registry_and_the_others_stay(fake_server):
    from playground.registry import BackendUnavailable, SourceRegistry
    registry = SourceRegistry(lambda name, progress: "local source", ["local"])
    [name] = add_endpoints(registry, [fake_server.url("models-500")])
    with pytest.raises(BackendUnavailable, match="models are on fire"):
        registry.get(name)
    assert registry.get("local") == "local source" and registry.others(name) == ["local"]


def test_a_trace_without_server_figures_exports_an_empty_server_field():
    trace = Trace("p", "p", [1], GenerationSettings(), "torch", "cpu", "float32", "m", None)
    assert trace.to_dict()["server"] == {} and "server" in trace.to_dict()["fields"] and server_lines(trace) == []
    assert isinstance(RemoteError("x", "y"), RuntimeError)


# --- a reasoning server: thinking streamed before the answer, under either field name

@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_a_reasoning_servers_thinking_is_a_phase_of_its_own_with_two_first_token_times(fake_server, field):
    from tests.fake_openai_server import THOUGHTS
    trace = run_of(fake_server, field).wait()
    thought = [s for s in trace.steps if s.thinking]
    assert [s.text for s in thought] == THOUGHTS and all(s.special for s in thought)
    assert trace.text == "Hello world!"   # the thinking is shown, never part of the answer
    m = trace.metrics()
    assert m.thinking_tokens == 3 and m.output_tokens == 6
    assert m.ttft == trace.steps[0].time < m.ttft_answer == trace.steps[3].time   # the first thought, then the answer
    assert any("(3 of them thinking)" in line for line in server_lines(trace))
    cards = metrics_html(trace, 0.0, 2.0)
    assert "time to first answer token" in cards and f"{m.ttft_answer * 1e3:,.0f} ms" in cards
    assert "thinking tokens" in cards and "3 · $0.000006 (estimate)" in cards
    assert "the server counts" not in cards   # it counts what the client counted


def test_the_timeline_draws_the_thinking_apart_and_marks_the_first_answer_token(fake_server):
    from playground.charts import plot_timeline
    trace = run_of(fake_server, "reasoning").wait()
    fig = plot_timeline(trace)
    named = {t.name: t for t in fig.data}
    assert len(named["thinking"].x) == 2 and len(named["decode (the answer)"].x) == 3
    assert named["first answer token"].x == (pytest.approx(trace.metrics().ttft_answer * 1e3),)
    plain = plot_timeline(run_of(fake_server, "ok").wait())
    assert [t.name for t in plain.data] == ["prefill (TTFT)", "decode"]   # nothing thought: nothing marked


def test_a_serve_workload_on_a_reasoning_server_records_and_exports_both_first_token_times(fake_server):
    import json

    from playground.charts.serve import request_rows
    from playground.serve import SCHEDULERS, Workload
    from playground.serve.perfetto import workload_json
    from playground.serve.workload import Request
    source = RemoteSource(fake_server.url("reasoning_content"), read_timeout=5)
    workload = Workload(tuple(Request(i, "q", "Hi", 4, 0.0) for i in range(2)), "fixed", 1e3)
    result = SCHEDULERS["concurrent"].create(source).run(workload)
    for record in result.records:
        assert record.thinking_tokens == 3 and record.ttft < record.ttft_answer < record.e2e
        exported = record.to_dict()
        assert exported["ttft_answer"] == record.ttft_answer and exported["thinking_tokens"] == 3
    row = request_rows(result)[0]
    assert row[3] == "6 (3 thinking)" and row[6] == round(result.records[0].ttft_answer, 3)
    events = json.loads(workload_json([result]))["traceEvents"]
    assert sum(e["name"] == "thinking" for e in events) == 2 * 2   # the 2 thoughts after the first, per request
