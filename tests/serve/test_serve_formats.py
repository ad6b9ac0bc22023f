"""Exports in other tools' formats (serve/perfetto.py): a workload run and a Generate run as Chrome Trace Event
JSON, checked field by field against the Trace Event Format (what ui.perfetto.dev and chrome://tracing load)."""
from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest

from playground.config import GenerationSettings
from playground.serve import SCHEDULERS, Workload
from playground.serve.batcher import BatchConfig
from playground.serve.cli import main
from playground.serve.mooncake import is_trace, read_rows, results_jsonl, to_workload
from playground.serve.perfetto import ENGINE_TID, trace_json, watch_json, workload_json
from playground.serve.prefix_cache import BLOCK_SIZE
from playground.serve.workload import Request
from tests import recorded

QUESTIONS = ["Where are the poems?", "Where is a book about Rome?", "Where are recipes?", "Where is physics?"]
PHASES = {"X", "C", "M", "i"}


def check_trace_events(text: str) -> dict:
    """The Trace Event Format's fields: every event a known `ph` with a `pid` and `tid`; `ts` and `dur` numbers of
    microseconds; complete events (X) with a name and a `dur` >= 0, never overlapping partly on one thread;
    counters (C) with numeric series in `args`; metadata (M) naming every thread that holds a slice."""
    doc = json.loads(text)
    events = doc["traceEvents"]
    assert isinstance(events, list) and events and doc["displayTimeUnit"] in ("ms", "ns")
    named, slices = set(), defaultdict(list)
    for e in events:
        assert e["ph"] in PHASES and isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert isinstance(e["name"], str) and e["name"]
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            slices[e["pid"], e["tid"]].append(e)
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
        elif e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")
        elif e["name"] == "thread_name":
            named.add((e["pid"], e["tid"]))
            assert isinstance(e["args"]["name"], str)
    assert set(slices) <= named
    for track in slices.values():   # complete events on one thread nest or follow, never overlap partly
        track.sort(key=lambda e: (e["ts"], -e["dur"]))
        for a, b in zip(track, track[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-3 or b["ts"] + b["dur"] <= a["ts"] + a["dur"] + 1e-3, (a, b)
    return doc


@pytest.fixture(scope="module")
def pressured(tiny_onnx_engine):
    """Our batching under a KV budget with prefix caching: chunks, cached copies, preemptions and recomputes."""
    requests = tuple(Request(i, "q", QUESTIONS[i % 4], 40, 0.001 * i, ignore_eos=True) for i in range(8))
    return SCHEDULERS["batching"].create(tiny_onnx_engine, batch=BatchConfig(
        slots=4, prefill_chunk=16, kv_budget=8 * BLOCK_SIZE, prefix_cache=1024)).run(Workload(requests, "fixed", 1e3))


def test_a_workload_in_perfetto_has_a_track_per_request_the_engine_and_counters(pressured, tiny_onnx_engine):
    one = SCHEDULERS["one-at-a-time"].create(tiny_onnx_engine).run(pressured.workload)
    doc = check_trace_events(workload_json([pressured, one]))
    events = doc["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names[1, ENGINE_TID] == "engine: iterations" and (2, ENGINE_TID) not in names   # B has no iterations
    assert sorted(t for p, t in names if p == 2) == [2 + r.request.id for r in one.records]
    by = defaultdict(list)
    for e in events:
        by[e["pid"], e.get("cat"), e["name"]].append(e)
    iterations = [e for e in events if e["pid"] == 1 and e["tid"] == ENGINE_TID and e["ph"] == "X"]
    assert len(iterations) == len(pressured.batches)
    assert [e["args"]["rows"] for e in iterations] == [b.requests for b in pressured.batches]
    # each decode step, each prefill chunk, each preemption, each cached copy: from the records, in microseconds
    assert len(by[1, "decode", "decode"]) == sum(len(r.steps) - 1 for r in pressured.records)
    assert len(by[1, "prefill", "prefill chunk"]) == sum(len(r.chunks) for r in pressured.records)
    preemptions = [p for r in pressured.records for p in r.preemptions]
    assert preemptions and len(by[1, "preemption", "preempted"]) == len(preemptions)
    assert len(by[1, "preemption", "recompute"]) == sum(len(p.chunks) for p in preemptions)
    assert len(by[1, "prefix cache", "cached prefix copy"]) == sum(len(r.cache_copies) for r in pressured.records)
    first = pressured.records[0]
    [waiting] = [e for e in by[1, "waiting", "waiting"] if e["tid"] == 2 + first.request.id]
    assert waiting["ts"] == pytest.approx(first.arrival * 1e6) and waiting["dur"] == pytest.approx(first.waiting * 1e6)
    assert len(by[2, "prefill", "prefill"]) == len(one.records)   # one at a time: the prefill in one piece
    kv = [e for e in events if e["ph"] == "C" and e["name"] == "KV in use" and e["pid"] == 1]
    assert len(kv) == len(pressured.kv) and all(e["args"]["bytes"] >= 0 for e in kv)
    queue = [e["args"] for e in events if e["ph"] == "C" and e["name"] == "requests" and e["pid"] == 1]
    assert max(a["waiting"] for a in queue) > 0 and queue[-1] == {"waiting": 0, "running": 0}
    assert max(a["running"] for a in queue) <= pressured.pool["slots"]


def test_a_generate_run_in_perfetto_is_tokenize_prefill_and_each_decode_step(tiny_engine):
    trace = tiny_engine.generate("The capital of France", GenerationSettings(max_new_tokens=6, top_candidates=1))
    doc = check_trace_events(trace_json(trace))
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in spans] == ["tokenize", "prefill"] + ["decode"] * (len(trace.steps) - 1)
    assert spans[-1]["ts"] + spans[-1]["dur"] == pytest.approx(trace.steps[-1].time * 1e6, abs=1e-3)
    kv = [e["args"] for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "KV cache (positions)"]
    assert [a["positions"] for a in kv] == [s.seq_len for s in trace.steps]


def test_kv_bytes_and_positions_are_two_counter_tracks_not_one_stacked_chart(tiny_engine):
    """The Trace Event Format draws a counter's series stacked in one chart (tests/recorded.py): bytes and positions
    have different units, so each is a counter of its own, one series each, as the format's own example is."""
    trace = tiny_engine.generate("The capital of France", GenerationSettings(max_new_tokens=4, top_candidates=1))
    counters = [e for e in check_trace_events(trace_json(trace))["traceEvents"] if e["ph"] == "C"]
    assert {len(e["args"]) for e in counters} == {len(recorded.TRACE_EVENT_COUNTER["args"])} == {1}
    by_name = {e["name"]: [] for e in counters}
    for e in counters:
        by_name[e["name"]].append(e["args"])
    assert by_name == {"KV cache (bytes)": [{"kv_bytes": s.kv_bytes} for s in trace.steps],
                       "KV cache (positions)": [{"positions": s.seq_len} for s in trace.steps]}


def test_the_watch_record_of_the_endpoints_clients_in_perfetto_counts_from_the_watchs_start(tiny_onnx_engine):
    """The Serve tab's Watch view downloads the clients' requests since the watch started: the spec's fields, a
    track per request (none from before the watch), the engine's iterations, times from the watch's start."""
    from playground.serve.engine_loop import EngineLoop
    from playground.serve.traffic import ClientTraffic
    from playground.ui.serve_job import ServeJob
    from playground.ui.serve_tab import export_watch
    traffic = ClientTraffic()
    loop = EngineLoop(tiny_onnx_engine, BatchConfig(slots=2), 256, observer=traffic)
    settings = GenerationSettings(max_new_tokens=4)
    try:
        before = loop.submit(tiny_onnx_engine.encode("Before the watch"), settings)
        while not before.done:
            time.sleep(0.01)
        t0 = traffic.now()
        tickets = [loop.submit(tiny_onnx_engine.encode(q), settings) for q in QUESTIONS[:3]]
        while not all(t.done for t in tickets):
            time.sleep(0.01)
    finally:
        loop.close()
    watched = traffic.since(t0)
    doc = check_trace_events(watch_json(watched))
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names.pop(ENGINE_TID) == "engine: iterations"
    assert sorted(names) == [2 + r.request.id for r in watched.records] and len(names) == 3
    decode = [e for e in doc["traceEvents"] if e.get("cat") == "decode"]
    assert len(decode) == sum(len(r.steps) - 1 for r in watched.records) == 3 * 3
    waits = [e for e in doc["traceEvents"] if e["name"] == "waiting"]
    assert sorted(e["ts"] for e in waits) == pytest.approx(sorted(r.arrival * 1e6 for r in watched.records))
    assert "since the watch started" in doc["otherData"]["time"]
    job = ServeJob()
    try:
        path, sessions = export_watch(traffic)(t0, job)
        assert path.endswith("clients-perfetto.json") and sessions.endswith("clients-sessions.jsonl")
        assert json.loads(open(path, encoding="utf-8").read())["traceEvents"]
        lines = [json.loads(line) for line in open(sessions, encoding="utf-8")]
        assert [row["input_length"] for row in lines] == [len(r.trace.prompt_ids) for r in watched.records]
    finally:
        job.close()


# --- Mooncake traces (serve/mooncake.py)


def trace_file(tmp_path, rows, name="trace.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def row(ms, n, out, ids):
    return {"timestamp": ms, "input_length": n, "output_length": out, "hash_ids": ids}


def test_a_replayed_trace_keeps_its_arrival_gaps_scaled_and_shares_blocks_by_hash_id(tmp_path, tiny_onnx_engine):
    rows = read_rows(trace_file(tmp_path, [row(1000, 600, 3, [0, 1]), row(1200, 600, 5, [0, 2]),
                                           row(1700, 700, 1, [3, 1])]).read_text().splitlines())
    tok = tiny_onnx_engine.tokenizer
    workload, _ = to_workload(rows, tok)
    assert [r.arrival for r in workload.requests] == [0.0, 0.2, 0.7]   # from the first timestamp, ms -> s
    assert [r.arrival for r in to_workload(rows, tok, time_scale=0.5)[0].requests] == [0.0, 0.1, 0.35]
    a, b, c = (r.prompt_ids for r in workload.requests)
    assert [len(a), len(b), len(c)] == [600, 600, 700] and [r.max_new_tokens for r in workload.requests] == [3, 5, 1]
    assert a[:512] == b[:512] and a[512:] != b[512:]    # block 0 shared, blocks 1 and 2 differ
    assert c[512:600] == a[512:600] and c[:512] != a[:512]   # block 1 is block 1's tokens wherever it stands
    assert not set(a) & set(tok.all_special_ids) and all(r.ignore_eos for r in workload.requests)
    cut, notes = to_workload(rows, tok, block_size=256, limit=2)
    assert len(cut.requests) == 2 and "the trace has 3 requests: replaying the first 2" in notes[0]
    assert cut.requests[0].prompt_ids[:256] == cut.requests[1].prompt_ids[:256] != cut.requests[0].prompt_ids[256:512]
    with pytest.raises(ValueError, match="line 2 is not a Mooncake row"):
        read_rows([json.dumps(row(0, 5, 1, [0])), '{"timestamp": 1, "input_length": 5}'])


def test_repeated_hash_ids_hit_the_prefix_cache_and_different_ones_do_not(tmp_path, tiny_onnx_engine):
    path = trace_file(tmp_path, [row(0, 300, 4, [0]), row(300, 300, 4, [0]), row(600, 300, 4, [1])])
    workload, _ = to_workload(read_rows(path.read_text().splitlines()), tiny_onnx_engine.tokenizer)
    result = SCHEDULERS["batching"].create(tiny_onnx_engine, batch=BatchConfig(slots=2, prefix_cache=1024)).run(workload)
    assert [r.prompt_tokens for r in result.records] == [300, 300, 300]   # the ids as they are: no template
    assert [r.output_tokens for r in result.records] == [4, 4, 4]
    first, repeat, other = (r.cached_tokens for r in result.records)
    assert first == 0 and repeat >= 256 and other == 0
    alone = SCHEDULERS["one-at-a-time"].create(tiny_onnx_engine).run(workload)   # from the same exact ids
    assert [r.trace.prompt_ids for r in alone.records] == [list(r.prompt_ids) for r in workload.requests]
    assert [r.output_tokens for r in alone.records] == [4, 4, 4]


def test_a_workload_exported_as_mooncake_and_read_back_keeps_requests_lengths_and_arrivals(tmp_path,
                                                                                         tiny_onnx_engine):
    rows = [row(0, 100, 3, [0, 1, 2, 3]), row(40, 120, 2, [0, 1, 2, 4]), row(90, 50, 4, [5, 6]),
            row(95, 100, 1, [0, 1, 2, 3])]
    workload, _ = to_workload(read_rows(trace_file(tmp_path, rows).read_text().splitlines()),
                              tiny_onnx_engine.tokenizer, block_size=32)
    result = SCHEDULERS["batching"].create(tiny_onnx_engine, batch=BatchConfig(slots=2)).run(workload)
    text = results_jsonl([result], block_size=32)
    assert text.count("\n") == 4 and all(set(json.loads(line)) == {"timestamp", "input_length", "output_length",
                                                                     "hash_ids"} for line in text.splitlines())
    back = read_rows(text.splitlines())
    assert [(r.timestamp, r.input_length, r.output_length) for r in back] == [
        (x["timestamp"], x["input_length"], x["output_length"]) for x in rows]
    assert [len(r.hash_ids) for r in back] == [4, 4, 2, 4]
    # equal names exactly where the blocks are equal: requests 0 and 3 share all, 1 shares 0's first three blocks
    assert back[0].hash_ids == back[3].hash_ids and back[1].hash_ids[:3] == back[0].hash_ids[:3]
    assert back[1].hash_ids[3] != back[0].hash_ids[3] and not set(back[2].hash_ids) & set(back[0].hash_ids)
    again, _ = to_workload(back, tiny_onnx_engine.tokenizer, block_size=32)
    assert [(r.arrival, len(r.prompt_ids), r.max_new_tokens) for r in again.requests] == [
        (r.arrival, len(r.prompt_ids), r.max_new_tokens) for r in workload.requests]


@pytest.mark.slow
def test_the_cli_replays_a_mooncake_trace_and_writes_every_workload_as_one(tmp_path, capsys):
    trace = trace_file(tmp_path, [row(0, 40, 2, [0]), row(100, 40, 2, [0]), row(200, 20, 2, [1])], "day.jsonl")
    assert is_trace(trace) and not is_trace(trace_file(tmp_path, [], "workload.json"))
    out = tmp_path / "replay"
    assert main(["--model", "tiny", "--backend", "onnx", "--workload", str(trace), "--block-size", "16",
                 "--time-scale", "2", "--requests", "2", "--scheduler", "batching", "--out", str(out)]) == 0
    said = capsys.readouterr().err
    assert "the trace has 3 requests: replaying the first 2" in said and "× 2 (slower)" in said
    workload = json.loads((out / "workload.json").read_text())
    assert [r["arrival"] for r in workload["requests"]] == [0.0, 0.2]
    assert len(Workload.from_dict(workload).requests[1].prompt_ids) == 40   # workload.json replays the same ids
    written = read_rows((out / "mooncake.jsonl").read_text().splitlines())
    assert [(r.timestamp, r.input_length, r.output_length) for r in written] == [(0, 40, 2), (200, 40, 2)]
    drawn = tmp_path / "drawn"   # a drawn workload: input_length is what the model read, chat template included
    assert main(["--model", "tiny", "--backend", "onnx", "--requests", "2", "--max-new-tokens", "2",
                 "--scheduler", "batching", "--out", str(drawn)]) == 0
    records = [json.loads((drawn / "batching" / "requests" / f"{i:03d}.json").read_text()) for i in range(2)]
    assert [r.input_length for r in read_rows((drawn / "mooncake.jsonl").read_text().splitlines())] == [
        r["prompt_tokens"] for r in records]
    assert all(r["trace"]["prompt_text"].startswith("<|im_start|>") for r in records)
