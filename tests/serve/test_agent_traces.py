"""Agent traces (serve/agent_trace.py, serve/trace_import.py): each format parsed from a real example, bad files
refused naming the line and field, a two-session trace replayed on the tiny model with each session's turns in
order and each released its gap after its predecessor ended (the workload clock's own marks), and a run written
as session lines and read back.

The fixtures (tests/data/agent_traces/, README.md there) and their sources:
  aiperf_sessions.jsonl                 AIPerf's documented Mooncake lines (ai-dynamo/aiperf mooncake_trace.py's
                                        docstring; docs/benchmark-modes/trace-replay.md)
  weka_kv_cache_tester_trace_0504.json  callanjfox/kv-cache-tester traces/trace_0504.json (a real agentic trace)
  aiperf_weka_one_subagent.json         ai-dynamo/aiperf tests/fixtures/weka_traces/one_subagent.json
  atif_rfc_0001_example.json            Harbor's ATIF RFC 0001, section IV's example trajectory
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from playground.serve import agent_trace
from playground.serve.agent_trace import SessionRow, SessionTrace, read_rows, sessions_jsonl, to_workload
from playground.serve.trace_import import read_trace
from playground.serve.batching import BatchConfig, ContinuousBatching
from playground.serve.one_at_a_time import OneAtATime
from playground.serve.run import replay_file
from playground.serve.workload import RequestClass, Workload
from playground.tokens.tools import call_text
from playground.trace import COMPLETED

DATA = Path(__file__).resolve().parents[1] / "data" / "agent_traces"


# --- each format from its fixture

def test_aiperf_session_lines_keep_sessions_delays_messages_and_plain_mooncake_rows():
    trace = read_trace(DATA / "aiperf_sessions.jsonl")   # AIPerf's documented examples
    rows = trace.rows
    assert [r.session_id for r in rows] == ["abc-123", "abc-123", "sess-1", "sess-1", None]
    assert (rows[1].delay, rows[1].input_length, rows[1].output_length) == (2.0, 150, 20)
    assert rows[3].messages[-1] == {"role": "user", "content": "How are you?"} and rows[3].input_length is None
    assert (rows[4].timestamp, rows[4].hash_ids) == (0.0, (46, 47))


def test_a_real_weka_trace_is_one_session_with_think_times_as_gaps_and_tool_boundaries():
    trace = read_trace(DATA / "weka_kv_cache_tester_trace_0504.json")   # kv-cache-tester's trace_0504
    assert (trace.source, trace.block_size) == ("Weka trace", 64)
    assert [r.session_id for r in trace.rows] == ["trace_0504"] * 3
    assert [r.input_length for r in trace.rows] == [11133, 11300, 11306]
    assert [r.output_length for r in trace.rows] == [139, 96, 102]
    assert [r.delay for r in trace.rows] == [None, 4000.0, 3058000.0]   # think_time, seconds -> ms
    assert [r.tool_gap for r in trace.rows] == [False, True, True]      # each previous one stopped on tool_use
    assert trace.rows[1].hash_ids[:173] == trace.rows[0].hash_ids       # the history is the next turn's prefix


def test_a_weka_subagent_is_a_session_of_its_own_released_at_its_spawn():
    trace = read_trace(DATA / "aiperf_weka_one_subagent.json")   # AIPerf's own Weka fixture
    by_session = {}
    for row in trace.rows:
        by_session.setdefault(row.session_id, []).append(row)
    assert list(by_session) == ["trace_sa", "trace_sa::agent_001"]
    assert [r.delay for r in by_session["trace_sa"]] == [None, 500.0]
    assert by_session["trace_sa::agent_001"][0].timestamp == 2000.0


def test_an_atif_trajectory_replays_each_agent_step_with_the_chat_before_it():
    trace = read_trace(DATA / "atif_rfc_0001_example.json")   # ATIF RFC 0001's example
    first, second = trace.rows
    assert {r.session_id for r in trace.rows} == {"025B810F-B3A2-4C67-93C0-FE7A142A947A"}
    assert (first.output_length, second.output_length) == (80, 44)    # metrics.completion_tokens
    assert first.messages == ({"role": "user", "content": "What is the current trading price of Alphabet (GOOGL)?"},)
    said = second.messages[1]["content"]
    assert said.startswith("I will search") and call_text("financial_search", {"ticker": "GOOGL", "metric": "volume"}) in said
    assert [m["role"] for m in second.messages] == ["user", "assistant", "tool", "tool"]
    assert "$185.35" in second.messages[2]["content"]
    assert (second.delay, second.tool_gap) == (3000.0, True)   # 10:30:02 -> 10:30:05, after its tool calls


def test_a_workload_json_is_not_a_trace_and_replays_as_written(tmp_path, tiny_onnx_engine):
    path = tmp_path / "workload.json"
    workload = Workload.build([RequestClass("short", "Hi", 2, 1.0)], 2)
    path.write_text(json.dumps(workload.to_dict()))
    assert read_trace(path) is None
    assert replay_file(path, tiny_onnx_engine)[0] == workload


# --- bad files, huge files

@pytest.mark.parametrize("lines, said", [
    (['{"timestamp": 0, "input_length": 5, "output_length": 1}', '{"timestamp": 1, "output_length": 1}'],
     "line 2: input_length is missing"),
    (['{"session_id": "a", "input_length": 5, "output_length": 1, "delay": -4}'], "line 1: delay must be"),
    (['{"input_length": 5, "output_length": 1}', "", '{"messages": [{"role": "robot", "content": "x"}], '
                                                    '"output_length": 1}'], "line 3: messages[0].role"),
    (['{"input_length": 5, "output_length": 1, "hash_ids": [1, "a"]}'], "line 1: hash_ids"),
    (["not json"], "line 1 is not JSON"),
])
def test_a_bad_line_is_refused_naming_its_line_and_field(lines, said):
    with pytest.raises(ValueError, match=said.replace("[", r"\[").replace("]", r"\]")):
        read_rows(lines)


def test_a_bad_weka_or_atif_file_names_its_field(tmp_path):
    weka = tmp_path / "w.json"
    weka.write_text(json.dumps({"id": "x", "block_size": 64, "requests": [{"t": 0, "type": "n", "in": 10}]}))
    with pytest.raises(ValueError, match=r"requests\[0\]\.out must be a whole number"):
        read_trace(weka)
    atif = tmp_path / "a.json"
    atif.write_text(json.dumps({"schema_version": "ATIF-v1.4", "session_id": "s", "steps": [
        {"step_id": 1, "source": "agent", "message": "x", "timestamp": "yesterday"}]}))
    with pytest.raises(ValueError, match=r"steps\[0\]\.timestamp must be an ISO 8601 time"):
        read_trace(atif)


def test_huge_files_are_bounded_in_bytes_and_rows(tmp_path, monkeypatch):
    path = tmp_path / "big.jsonl"
    path.write_text("".join('{"timestamp": %d, "input_length": 4, "output_length": 1}\n' % i for i in range(30)))
    monkeypatch.setattr(agent_trace, "MAX_TRACE_BYTES", 100)
    with pytest.raises(ValueError, match="a trace of at most 0 MiB is read here"):
        read_trace(path)
    notes = []
    assert len(read_rows(path.read_text().splitlines(), most=10, notes=notes)) == 10
    assert notes == ["the trace has more than 10 rows: reading the first 10"]


# --- a replay keeps each session's order and gap

def two_sessions() -> SessionTrace:
    """Two agents, two turns each: a's second turn waits 0.3 s after its first ends, b's 0.2 s."""
    return SessionTrace([SessionRow(20, 3, (1,), 0.0, "a"), SessionRow(24, 3, (2,), 0.0, "b"),
                         SessionRow(36, 3, (1, 3), None, "a", 300.0), SessionRow(40, 3, (2, 4), None, "b", 200.0)],
                        block_size=16)


@pytest.mark.parametrize("harness", ["batching", "one-at-a-time"])
def test_a_session_turn_is_released_its_gap_after_its_predecessor_ends(tiny_onnx_engine, harness):
    workload, _ = to_workload(two_sessions(), tiny_onnx_engine.tokenizer)
    assert [(r.session, r.after, r.delay) for r in workload.requests] == [
        ("a", None, 0.0), ("b", None, 0.0), ("a", 0, 0.3), ("b", 1, 0.2)]
    scheduler = ContinuousBatching(tiny_onnx_engine, BatchConfig(slots=4)) if harness == "batching" else \
        OneAtATime(tiny_onnx_engine)
    result = scheduler.run(workload)
    assert all(r.stop_reason in COMPLETED for r in result.records)
    records = result.records
    for later, earlier in ((records[2], records[0]), (records[3], records[1])):
        # on the workload's own clock: released after its predecessor ended plus its gap, admitted after that
        assert later.released is not None and later.released >= earlier.finished + later.request.delay
        assert later.admitted >= later.released and later.arrival == later.released
        assert later.ttft == later.first_token - later.released   # its wait counts from its release
    assert records[0].released is None and records[0].arrival == 0.0   # a first turn: at its timestamp
    # the order of events: each session's turns one after the other; the first turns together
    events = sorted([(r.arrival, "release", r.request.id) for r in records]
                    + [(r.finished, "end", r.request.id) for r in records])
    order = [(kind, rid) for _, kind, rid in events]
    assert order.index(("end", 0)) < order.index(("release", 2))
    assert order.index(("end", 1)) < order.index(("release", 3))
    assert order.index(("release", 1)) < order.index(("end", 0))


# --- written and read back

def test_a_run_written_as_session_lines_reads_back_with_its_sessions_gaps_and_lengths(tiny_onnx_engine, tmp_path):
    workload, _ = to_workload(two_sessions(), tiny_onnx_engine.tokenizer)
    result = ContinuousBatching(tiny_onnx_engine, BatchConfig(slots=4)).run(workload)
    path = tmp_path / "sessions.jsonl"
    path.write_text(sessions_jsonl([result], block_size=16))
    back = read_trace(path)
    by_id = {r.request.id: r for r in result.records}
    written = sorted(result.records, key=lambda r: r.arrival)
    assert [r.session_id for r in back.rows] == [r.request.session for r in written]
    assert [r.input_length for r in back.rows] == [len(r.trace.prompt_ids) for r in written]
    assert [r.output_length for r in back.rows] == [r.output_tokens for r in written]
    for row, record in zip(back.rows, written):
        if record.request.after is None:
            assert row.delay is None and row.timestamp == pytest.approx(record.arrival * 1000, abs=0.001)
        else:   # the gap measured from the predecessor's end to this turn's release
            gap = (record.released - by_id[record.request.after].finished) * 1000
            assert row.timestamp is None and row.delay == pytest.approx(gap, abs=0.001) and row.delay >= 300 * (
                record.request.session == "a") + 200 * (record.request.session == "b")
    a = [row for row in back.rows if row.session_id == "a"]
    assert a[1].hash_ids[:1] == a[0].hash_ids[:1] != [row for row in back.rows if row.session_id == "b"][0].hash_ids[:1]
    replayed, _ = to_workload(back, tiny_onnx_engine.tokenizer, limit=8)
    assert [(r.session, r.after is not None) for r in replayed.requests] == [
        (r.request.session, r.request.after is not None) for r in written]
