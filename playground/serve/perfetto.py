"""A workload run (or one Generate run) as a Chrome Trace Event JSON file: open it at ui.perfetto.dev.

    workload_json([result_a, result_b])    # A and B, one process each: a track per request, the engine, counters
    watch_json(traffic.since(t0))          # the endpoint's clients since a watch started (serve/traffic.py)
    trace_json(trace)                      # one Generate run: tokenize, prefill, each decode step, KV bytes

The Trace Event format (Chrome's "Trace Event Format" document, which Perfetto and chrome://tracing load):
a JSON object whose `traceEvents` are dicts with `ph` (the phase: "X" a complete event with its `dur`, "C" a
counter, "i" an instant, "M" metadata), `ts` and `dur` in microseconds, `pid` (a process: A or B) and `tid`
(a thread: one track). Here, per run: tid 1 is the engine, one slice per iteration of a batching scheduler
(its rows and tokens in `args`); tid 2 + id is request id's track: waiting, each prefill chunk (or the
prefill as one piece where no chunks were seen), each copy of cached prefix blocks, each decode step (named
"thinking" where a reasoning server thought), and per preemption an instant, the wait that follows, the copy
back and each recompute pass. Counters: KV in use (in the run's unit), requests waiting and running. Times
are seconds since the workload started, as in the records (records.py); slices on one track never overlap (a later one starts where an earlier one ends).

>>> from .workload import Request, Workload
>>> from .records import RequestRecord, WorkloadResult
>>> from ..trace import StopReason
>>> r = RequestRecord(Request(0, "q", "hi", 4, 0.5), admitted=0.75, finished=0.75, stop_reason=StopReason.CANCELLED)
>>> events = workload_events(WorkloadResult("s", "S", "src", Workload((r.request,)), [r]), pid=1)
>>> [(e["ph"], e["name"]) for e in events if e["ph"] != "M"][:2]
[('X', 'waiting'), ('C', 'requests')]
>>> [e for e in events if e["ph"] == "X"][0]["ts"], [e for e in events if e["ph"] == "X"][0]["dur"]
(500000.0, 250000.0)

Left out: flow arrows between a request and the iterations that carried it, and Perfetto's own protobuf
format (the JSON loads everywhere, and the records hold nothing that needs more).
"""
from __future__ import annotations

import json

from ..trace import Phase

ENGINE_TID = 1
US = 1e6   # microseconds per second


def us(seconds: float) -> float:
    """Seconds -> the format's microseconds, to the nanosecond."""
    return round(seconds * US, 3)


def thread_name(pid: int, tid: int, name: str, order: int) -> list[dict]:
    return [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}},
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": order}}]


def process_name(pid: int, name: str) -> list[dict]:
    return [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]


def span(name: str, start: float, end: float, pid: int, tid: int, cat: str, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": us(start), "dur": us(max(0.0, end - start)), "pid": pid,
            "tid": tid, "args": args}


def counter(name: str, t: float, pid: int, **series) -> dict:
    return {"ph": "C", "name": name, "ts": us(t), "pid": pid, "tid": 0, "args": series}


def one_track(spans: list[dict]) -> list[dict]:
    """Spans on one track, in time order, each starting no earlier than the one before it ends (a timer's jitter
    between two records of one moment would otherwise nest one slice inside another)."""
    out, end = [], float("-inf")
    for s in sorted(spans, key=lambda s: s["ts"]):
        stop = s["ts"] + s["dur"]
        s["ts"] = max(s["ts"], end)
        s["dur"] = round(max(0.0, stop - s["ts"]), 3)
        end = s["ts"] + s["dur"]
        out.append(s)
    return out


def step_name(step) -> str:
    """A decode step's slice: "thinking" for a reasoning server's thought, "decode" for the answer."""
    return "thinking" if step.thinking else "decode"


def request_spans(record, pid: int, tid: int) -> list[dict]:
    """One request's track: waiting, cached copies, prefill chunks, decode steps, preemptions."""
    rid, out = record.request.id, []
    admitted = record.admitted
    if admitted is None:   # never started: it waited until it was cancelled or failed
        end = record.finished if record.finished is not None else record.arrival
        return [span("waiting", record.arrival, end, pid, tid, "waiting", request=rid, ended=record.stop_reason)]
    out.append(span("waiting", record.arrival, admitted, pid, tid, "waiting", request=rid))
    for a, b, n in record.cache_copies:
        out.append(span("cached prefix copy", a, b, pid, tid, "prefix cache", request=rid, tokens=n))
    if record.chunks:
        for i, (a, b, n) in enumerate(record.chunks):
            out.append(span("prefill chunk", a, b, pid, tid, Phase.PREFILL, request=rid, chunk=i, tokens=n))
    elif record.first_token is not None:
        out.append(span(Phase.PREFILL, admitted, record.first_token, pid, tid, Phase.PREFILL, request=rid,
                        tokens=record.prompt_tokens))
    resumed_at = {}   # output tokens made before a preemption -> when its recompute ended
    for p in record.preemptions:
        out.append({"ph": "i", "s": "t", "name": "preempted", "cat": "preemption", "ts": us(p.at), "pid": pid,
                    "tid": tid, "args": {"request": rid, "after_tokens": p.after_tokens, "positions": p.positions}})
        back = p.resumed if p.resumed is not None else record.finished
        if back is not None:
            out.append(span("waiting (preempted)", p.at, back, pid, tid, "preemption", request=rid))
        if p.copy is not None:
            out.append(span("cached copy (resume)", *p.copy, pid, tid, "prefix cache", request=rid, tokens=p.cached))
        for i, (a, b, n) in enumerate(p.chunks):
            out.append(span("recompute", a, b, pid, tid, "preemption", request=rid, chunk=i, tokens=n))
        ends = [t for t in (back, p.copy and p.copy[1], *(b for _, b, _ in p.chunks)) if t is not None]
        resumed_at[p.after_tokens] = max(ends, default=p.at)
    steps = record.steps
    for prev, step in zip(steps, steps[1:]):
        start = max(admitted + prev.time, resumed_at.get(step.index, float("-inf")))
        out.append(span(step_name(step), start, admitted + step.time, pid, tid, "decode", request=rid,
                        token=step.index, rows=step.rows, tokens=step.tokens))
    instants = [e for e in out if e["ph"] == "i"]
    return one_track([e for e in out if e["ph"] == "X"]) + instants


def queue_counters(records, pid: int) -> list[dict]:
    """Requests waiting (arrived, not holding KV: before admission and after a preemption) and running, over time."""
    changes = []   # (time, waiting delta, running delta)
    for r in records:
        changes.append((r.arrival, 1, 0))
        if r.admitted is None:
            if r.finished is not None:
                changes.append((r.finished, -1, 0))
            continue
        changes.append((r.admitted, -1, 1))
        for p in r.preemptions:
            changes.append((p.at, 1, -1))
            if p.resumed is not None:
                changes.append((p.resumed, -1, 1))
            elif r.finished is not None:
                changes.append((r.finished, -1, 1))
        if r.finished is not None:
            changes.append((r.finished, 0, -1))
    out, waiting, running = [], 0, 0
    for t, dw, dr in sorted(changes, key=lambda c: c[0]):
        waiting, running = waiting + dw, running + dr
        if out and out[-1]["ts"] == us(t):
            out[-1]["args"] = {"waiting": waiting, "running": running}
        else:
            out.append(counter("requests", t, pid, waiting=waiting, running=running))
    return out


def workload_events(result, pid: int, name: str | None = None) -> list[dict]:
    """The Trace Events of one WorkloadResult, as process `pid` named `name` (default: its scheduler and source)."""
    events = process_name(pid, name or f"{result.scheduler_label} on {result.source}")
    if result.batches:
        events += thread_name(pid, ENGINE_TID, "engine: iterations", 0)
        events += one_track([span(f"iteration · {b.requests} rows", b.start, b.end, pid, ENGINE_TID, "iteration",
                                  rows=b.requests, prefill_tokens=b.prefill_tokens, decode_tokens=b.decode_tokens,
                                  blocks_used=b.blocks_used) for b in result.batches])
    for record in result.records:
        tid = 2 + record.request.id
        events += thread_name(pid, tid, f"request {record.request.id} · {record.request.cls}", tid)
        events += request_spans(record, pid, tid)
    events += queue_counters(result.records, pid)
    if result.kv_unit is not None:
        events += [counter("KV in use", t, pid, **{result.kv_unit: v}) for t, v in result.kv]
    return events


def workload_json(results, names=("A", "B")) -> str:
    """A and B (or one run) in one file: process 1 is A, process 2 is B, on one time axis from 0."""
    events = []
    for pid, (side, result) in enumerate(zip(names, results), start=1):
        events += workload_events(result, pid, f"{side}: {result.scheduler_label} on {result.source}")
    return dumps(events, {"source": "LLM Serving Playground · Serve", "time": "seconds since the workload started, "
                          "in microseconds"})


def watch_json(result) -> str:
    """The endpoint's live record of its clients (the Serve tab's Watch view: serve.traffic.ClientTraffic.since(t0),
    times counted from the watch's start) as one process, with the same tracks as a workload's."""
    events = workload_events(result, 1, f"clients of the OpenAI-compatible endpoint · {result.source}")
    return dumps(events, {"source": "LLM Serving Playground · Serve · Watch (the endpoint's clients)",
                          "time": "seconds since the watch started, in microseconds"})


def trace_events(trace, pid: int = 1) -> list[dict]:
    """One request's Trace (a Generate run): tokenize, prefill, each decode step; KV bytes and positions, each a
    counter track of its own (their units differ)."""
    events = process_name(pid, f"{trace.backend} · {trace.model}") + thread_name(pid, 1, "request", 1)
    spans, steps = [], trace.steps
    spans.append(span("tokenize", 0.0, trace.tokenize_time, pid, 1, "tokenize"))
    if steps:
        spans.append(span(Phase.PREFILL, trace.tokenize_time, steps[0].time, pid, 1, Phase.PREFILL,
                          tokens=len(trace.prompt_ids), cached=trace.cached_tokens))
    for prev, step in zip(steps, steps[1:]):
        spans.append(span(step_name(step), prev.time, step.time, pid, 1, "decode", token=step.index,
                          tokens=step.tokens))
    events += one_track(spans)
    for step in steps:   # one counter track each: chrome://tracing stacks a counter's series in one chart
        if step.kv_bytes is not None:
            events.append(counter("KV cache (bytes)", step.time, pid, kv_bytes=step.kv_bytes))
        if step.seq_len is not None:
            events.append(counter("KV cache (positions)", step.time, pid, positions=step.seq_len))
    return events


def trace_json(trace) -> str:
    return dumps(trace_events(trace), {"source": "LLM Serving Playground · Generate",
                                       "time": "seconds since the request started, in microseconds"})


def dumps(events: list[dict], other: dict) -> str:
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}, ensure_ascii=False)
