"""Real servers read as they are, and written as they write: every server figure the playground reads (vLLM's and
llama.cpp's /metrics, llama.cpp's /slots and timings, vLLM's per-request metrics) and every format it writes in
another project's words (finish reasons, OpenTelemetry's GenAI attributes, the queue time, a one-token answer's
timings), held against the projects' own text recorded in tests/recorded.py, each fixture with its source.
"""
from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from prometheus_client.parser import text_string_to_metric_families

from playground.api.prometheus import PROVIDER, ServerMetrics
from playground.api.response_body import finish_reason
from playground.api.timings import llama_timings, vllm_metrics
from playground.remote.report import decode_rate, figures_text, server_lines
from playground.remote.server_metrics import LLAMA_FIGURES, VLLM_FIGURES, read_metrics, summarize_slots
from playground.remote.steps import EventSteps
from playground.serve.concurrent import server_kv_usage
from playground.serve.remote_record import RemoteRecord, ServerFigures, remote_line, server_now
from playground.trace import StopReason
from tests import recorded
from tests.remote.test_remote_watch import hand_made_run


# --- vLLM's /metrics

def test_a_vllm_exporting_both_kv_names_reads_each_engines_real_share_not_their_sum():
    figures = read_metrics(recorded.VLLM_METRICS_TWO_ENGINES, VLLM_FIGURES, recorded.VLLM_SERVED)
    assert figures["kv_pool_used_share_by_engine"] == {"0": 0.8, "1": 0.3}   # each engine's, read once
    assert figures["kv_pool_used_share"] == pytest.approx(0.55)   # their mean, labelled so where it is shown
    assert figures["running"] == 5.0 and figures["waiting"] == 1.0 and figures["engines"] == 2   # counts summed


def test_only_the_served_models_samples_are_read_when_several_share_one_page():
    other = read_metrics(recorded.VLLM_METRICS_TWO_ENGINES, VLLM_FIGURES, "meta-llama/Llama-3.1-8B-Instruct")
    assert other == {"kv_pool_used_share": 0.95, "running": 7.0, "waiting": 4.0}
    assert read_metrics(recorded.VLLM_METRICS_TWO_ENGINES, VLLM_FIGURES, "a model not served here") == {}


def test_the_deprecated_kv_name_is_read_only_when_the_current_one_is_absent():
    assert read_metrics(recorded.VLLM_METRICS_DEPRECATED_ONLY, VLLM_FIGURES, "meta-llama/Llama-3.1-8B-Instruct") == {
        "kv_pool_used_share": 0.42, "running": 8.0}
    # the current name wins: a page whose alias says otherwise is read by the current name alone
    conflicting = recorded.VLLM_METRICS_TWO_ENGINES.replace(
        'vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen3-0.6B",engine="1"} 0.3',
        'vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen3-0.6B",engine="1"} 0.9')
    assert read_metrics(conflicting, VLLM_FIGURES, recorded.VLLM_SERVED)["kv_pool_used_share_by_engine"]["1"] == 0.3


def test_the_watch_view_shows_two_engines_as_two_and_their_requests_summed():
    sample = {"time": 0.5, "when": "during the run",
              **read_metrics(recorded.VLLM_METRICS_TWO_ENGINES, VLLM_FIGURES, recorded.VLLM_SERVED)}
    record = RemoteRecord(["vllm @ gpu:8000"])
    record.add(hand_made_run({"kind": "vllm", "samples": [sample]}), server="vllm @ gpu:8000").wait()
    records = record.since(0.0).records
    said = remote_line(records, record.servers)
    assert server_now(records, "vllm @ gpu:8000") in said
    assert "5 requests running, 1 waiting (summed over its 2 engines)" in said
    assert "engine 0 80.0%, engine 1 30.0%" in said and "55.0%" not in said and "110" not in said


def test_a_vllm_whose_kv_share_is_a_mean_of_engines_says_so_in_the_serve_tabs_kv_note():
    source = NS(figures=lambda: read_metrics(recorded.VLLM_METRICS_TWO_ENGINES, VLLM_FIGURES, recorded.VLLM_SERVED))
    used, total, unit, note = server_kv_usage(source)()
    assert (used, total, unit) == (pytest.approx(0.55), 1.0, "fraction") and "mean of its 2 engines" in note


# --- llama.cpp's /metrics, /slots, timings

def test_llama_servers_metrics_are_read_as_its_readme_names_them():
    assert read_metrics(recorded.LLAMA_METRICS, LLAMA_FIGURES, "model.gguf") == {"running": 2.0, "waiting": 1.0}


def test_llama_servers_slots_are_read_in_both_of_its_shapes():
    readme = summarize_slots(recorded.LLAMA_SLOTS_README)
    assert [(s["id"], s["n_ctx"], s["processing"], s["decoded"]) for s in readme] == [
        (0, 65536, True, 0), (1, 65536, True, 136)]
    assert [s["prompt_tokens"] for s in readme] == [None, None]   # the README's example has no prompt count
    to_json = summarize_slots(recorded.LLAMA_SLOTS_TO_JSON)
    assert to_json == [{"id": 0, "n_ctx": 2048, "processing": True, "prompt_tokens": 37, "decoded": 5},
                       {"id": 1, "n_ctx": 2048, "processing": False, "prompt_tokens": None, "decoded": None}]


def test_slots_that_do_not_say_what_they_hold_give_a_missing_kv_sample_never_zero():
    def usage(slots):
        return server_kv_usage(NS(figures=lambda: {"slots": summarize_slots(slots)}))()
    assert usage(recorded.LLAMA_SLOTS_README) is None
    held, total, unit, _ = usage(recorded.LLAMA_SLOTS_TO_JSON)
    assert (held, total, unit) == (37 + 5, 4096, "tokens")   # the idle slot holds nothing it must say


def test_llama_servers_timings_read_as_its_readme_gives_them():
    figures = ServerFigures.of({"kind": "llama.cpp", "timings": recorded.LLAMA_TIMINGS})
    assert (figures.computed_tokens, figures.cached_tokens, figures.first_token_ms) == (1, 236, 30.958)
    assert figures.decode_ms == 661.064 and figures.decode_tps == pytest.approx(52.94494935437416)


def test_a_one_token_answers_timings_mirror_llama_servers_and_no_view_shows_a_rate_from_them():
    first = NS(time=0.25, wall_ns=2_000_000_000, tokens=1)
    ours = llama_timings(NS(steps=[first], prompt_ids=[1] * 10, cached_tokens=0, server={}))
    floor = {k: recorded.LLAMA_ONE_TOKEN_TIMINGS[k] for k in
             ("predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second")}
    assert {k: ours[k] for k in floor} == floor == {"predicted_n": 1, "predicted_ms": 0.001,
                                                    "predicted_per_token_ms": 0.001, "predicted_per_second": 1e6}
    assert decode_rate(recorded.LLAMA_ONE_TOKEN_TIMINGS) is None
    assert ServerFigures.of({"timings": recorded.LLAMA_ONE_TOKEN_TIMINGS}).decode_tps is None
    lines = " ".join(server_lines(NS(steps=[], server={"kind": "llama.cpp",
                                                       "timings": recorded.LLAMA_ONE_TOKEN_TIMINGS})))
    assert "tok/s" not in lines and "1000000" not in lines and "decode 1 tokens in 0 ms" in lines


# --- vLLM's per-request metrics

def test_vllms_usage_chunk_with_metrics_is_read_as_its_documentation_gives_it():
    maker = EventSteps(42, 0.0)
    assert maker.add(0.5, 0, recorded.VLLM_USAGE_CHUNK_WITH_METRICS) is None   # no token in it
    report = maker.report()
    assert report["metrics"] == recorded.VLLM_USAGE_CHUNK_WITH_METRICS["metrics"]
    figures = ServerFigures.of({"kind": "vllm", **report})
    assert (figures.queue_ms, figures.first_token_ms, figures.decode_ms) == (12.3, 85.2, 1240.5)
    assert figures.decode_tps == pytest.approx(1e3 / 9.1) and figures.output_tokens == 128


def test_queue_time_is_the_wait_for_the_scheduler_only_as_vllms():
    received = 10**9
    first = NS(time=0.2, wall_ns=received + 300_000_000, tokens=1)   # the KV slot at received + 100 ms
    trace = NS(steps=[first], prompt_ids=[1] * 8, cached_tokens=0, queued=0.06, server={"received_ns": received})
    m = vllm_metrics(trace)
    assert set(m) == set(recorded.VLLM_METRICS_FIELDS)
    assert m["queue_time_ms"] == 60.0   # not the 100 ms since the route received it (the body read, tokenized)
    assert m["time_to_first_token_ms"] == 200.0 and m["mean_itl_ms"] is None   # "null for single-token responses"


# --- finish reasons

def test_an_errored_request_ends_error_and_a_cancelled_one_abort_as_vllms_do():
    said = {reason: finish_reason(NS(stop_reason=reason)) for reason in StopReason}
    assert said[StopReason.ERROR] == "error" != said[StopReason.CANCELLED] == "abort"
    assert set(said.values()) - {None} <= set(recorded.VLLM_FINISH_REASONS)
    maker = EventSteps(3, 0.0)   # read back from a server: failed apart from cancelled
    maker.add(0.1, 0, {"choices": [{"index": 0, "delta": {}, "finish_reason": "error"}]})
    assert maker.stop_reason() == StopReason.ERROR
    maker.add(0.1, 0, {"choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]})
    assert maker.stop_reason() == StopReason.CANCELLED


# --- OpenTelemetry's GenAI attributes

def _ended(finish: str, steps=2) -> dict:
    """The endpoint's /metrics after one request that ended with `finish`: {(name, labels): value}."""
    metrics = ServerMetrics(NS(model_id="m", engine_loop=None))
    received = 10**9
    trace = NS(steps=[NS(wall_ns=received + (i + 1) * 50_000_000) for i in range(steps)], prompt_ids=[1] * 4,
               server={"received_ns": received})
    metrics.ended(trace, finish_reason(NS(stop_reason=finish)), "chat")
    text = metrics.exposition()[0].decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if "le" not in s.labels}


@pytest.mark.parametrize("metric", list(recorded.OTEL_SERVER_METRICS))
def test_every_server_metric_carries_the_conventions_required_attributes(metric):
    name = recorded.otel_label(metric) + "_seconds_count"
    samples = [labels for (n, labels) in _ended(StopReason.EOS) if n == name]
    assert samples, name
    for labels in samples:
        keys = dict(labels)
        assert all(recorded.otel_label(a) in keys for a in recorded.OTEL_SERVER_METRICS[metric]["required"])
        assert keys["gen_ai_provider_name"] == PROVIDER


def test_the_provider_name_is_a_custom_value_since_no_well_known_one_applies():
    assert PROVIDER not in recorded.OTEL_PROVIDER_NAMES and PROVIDER == "playground"


def test_a_failed_request_has_its_error_type_and_no_time_to_first_token():
    failed, done = _ended(StopReason.ERROR), _ended(StopReason.EOS)
    duration = {dict(k)["error_type"]: v for (n, k), v in failed.items()
                if n == "gen_ai_server_request_duration_seconds_count"}
    assert "error.type" in recorded.OTEL_SERVER_METRICS["gen_ai.server.request.duration"]["conditionally_required"]
    assert duration == {"engine_error": 1.0}
    for metric in ("gen_ai.server.time_to_first_token", "gen_ai.server.time_per_output_token"):
        assert "for successful responses" in recorded.OTEL_SERVER_METRICS[metric]["brief"]
        name = recorded.otel_label(metric) + "_seconds_count"
        assert not any(n == name and v for (n, _), v in failed.items()), metric
        assert any(n == name and v == 1 for (n, _), v in done.items()), metric
    assert {dict(k)["error_type"] for (n, k) in done if n == "gen_ai_server_request_duration_seconds_count"} == {""}
    assert failed[("vllm:request_success_total", (("finished_reason", "error"), ("model_name", "m")))] == 1
    cancelled = _ended(StopReason.CANCELLED)
    assert cancelled[("vllm:request_success_total", (("finished_reason", "abort"), ("model_name", "m")))] == 1


def test_figures_in_words_say_a_missing_count_is_not_given():
    assert figures_text({"running": 2.0}) == "2 requests running, not given waiting"
