"""Exports in other tools' formats (serve/perfetto.py): a workload run and a Generate run as Chrome Trace Event
JSON, checked field by field against the Trace Event Format (what ui.perfetto.dev and chrome://tracing load)."""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from playground.config import GenerationSettings
from playground.serve import SCHEDULERS, Workload
from playground.serve.batching import BatchConfig
from playground.serve.perfetto import ENGINE_TID, trace_json, workload_json
from playground.serve.prefix_cache import BLOCK_SIZE
from playground.serve.workload import Request

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
    kv = [e["args"] for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [a["positions"] for a in kv] == [s.seq_len for s in trace.steps]
