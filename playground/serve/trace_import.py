"""Agent traces of other tools read as session rows (agent_trace.py): AIPerf's agentic Weka traces and ATIF
trajectories.

    trace = read_trace(path)                 # any trace file: session lines, Weka, ATIF; None for a workload.json
    trace = weka_trace(json.loads(text))     # a SessionTrace: one session per agent, hash_ids at the trace's block size
    trace = atif_trace(json.loads(text))     # a SessionTrace: one turn per agent step, its chat as `messages`

**Weka** (WEKA's kv-cache-tester agentic coding traces, which AIPerf's `weka_trace` loader reads: one JSON object,
`{"id", "block_size", "hash_id_scope", "requests": [...]}`). Each request of type "n" or "s" is a turn of the
trace's session (`id`): `in` is input_length, `out` output_length, `hash_ids` its blocks (of `block_size`
tokens), `t` (seconds) the first turn's timestamp. The gap before a later turn is its `think_time` (seconds: the
client's delay after the previous answer, what kv-cache-tester's default timing replays), else the idle time
`t - (previous t + previous api_time)`, else `t - previous t` (never below 0). A previous turn that stopped on
`tool_use` marks the gap as a tool's (`tool_gap`). A `subagent` entry is a session of its own
(`<id>::<agent_id>`) whose first turn is released at the entry's `t`.

**ATIF** (the Agent Trajectory Interchange Format, Harbor's RFC 0001: `{"schema_version": "ATIF-v1.x",
"session_id", "agent", "steps": [...]}`). Each step with `source: "agent"` is a turn of the trajectory's session:
its prompt is the chat before it as `messages` (system and user steps as their roles; an earlier agent step's
`message` and its `tool_calls` as the assistant's turn, in the `<tool_call>` form tokens/tools.py writes; its
`observation.results` as the tool's answers), its output_length is `metrics.completion_tokens` (else the
message's length in characters over four, labelled an estimate in a note). The gap before a later turn is the
difference of the two steps' ISO 8601 `timestamp`s (ATIF stamps a step once, so the gap includes the previous
step's own generation: an upper bound of the tool's time); without timestamps, no gap.

>>> weka_trace({"id": "w", "block_size": 64, "requests": [{"t": 0.0, "type": "n", "in": 100, "out": 9,
...     "hash_ids": [1, 2], "stop": "tool_use", "api_time": 1.0}, {"t": 5.0, "type": "n", "in": 160, "out": 4,
...     "hash_ids": [1, 2, 3]}]}).rows[1].delay        # 5 s after the start, the first ran 1 s: a 4 s gap
4000.0

Left out: a Weka subagent's join (its parent's next turn does not wait for it here) and `hash_id_scope: "global"`
(ids across files); ATIF's `subagent_trajectory_ref` (another file), reasoning content and logprobs.
"""
from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

from ..tokens.tools import call_text, response_text
from . import agent_trace
from .agent_trace import BLOCK_TOKENS, SessionRow, SessionTrace, read_rows

WEKA_TURNS = ("n", "s")


def read_trace(path, block_size: int = BLOCK_TOKENS) -> SessionTrace | None:
    """The file as a SessionTrace: session lines (Mooncake's, with or without AIPerf's session fields:
    agent_trace.py), a Weka trace or an ATIF trajectory; None for a workload.json (Workload.from_dict reads it).
    ValueError in words: too big, not a trace, a line or field that is wrong."""
    path = Path(path)
    size, most = path.stat().st_size, agent_trace.MAX_TRACE_BYTES
    if size > most:
        raise ValueError(f"{path.name} is {size / 2**20:,.1f} MiB; a trace of at most {most // 2**20} MiB is read "
                         "here: cut it to its first lines")
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and "requests" in whole and "arrival" in whole:
        return None   # a workload.json
    if isinstance(whole, dict) and is_weka(whole):
        return weka_trace(whole)
    if isinstance(whole, dict) and is_atif(whole):
        return atif_trace(whole)
    notes: list[str] = []
    return SessionTrace(read_rows(text.splitlines(), notes=notes), block_size, notes=notes)


def is_weka(d: dict) -> bool:
    return isinstance(d.get("requests"), list) and "block_size" in d and "arrival" not in d


def is_atif(d: dict) -> bool:
    return isinstance(d.get("steps"), list) and str(d.get("schema_version", "ATIF")).startswith("ATIF")


def _seconds(d: dict, name: str, where: str, required: bool = False) -> float | None:
    v = d.get(name)
    if v is None:
        if required:
            raise ValueError(f"{where}.{name} is missing")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{where}.{name} must be a number of seconds >= 0, got {v!r}")
    return float(v)


def _count(d: dict, name: str, where: str) -> int:
    v = d.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{where}.{name} must be a whole number >= 0, got {v!r}")
    return v


def _weka_turns(requests, session: str, where: str, start: float | None) -> list[SessionRow]:
    rows, previous = [], None   # previous: (its t, its api_time, its stop)
    for i, r in enumerate(requests):
        here = f"{where}[{i}]"
        if not isinstance(r, dict) or r.get("type") not in WEKA_TURNS:
            continue
        t = _seconds(r, "t", here, required=True)
        hashes = r.get("hash_ids", [])
        if not isinstance(hashes, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in hashes):
            raise ValueError(f"{here}.hash_ids must be a list of whole numbers >= 0")
        length, out = _count(r, "in", here), _count(r, "out", here)
        if length < 1:
            raise ValueError(f"{here}.in must be at least 1")
        think = _seconds(r, "think_time", here)
        if previous is None:
            rows.append(SessionRow(length, out, tuple(hashes), (start if start is not None else t) * 1000, session))
        else:
            before, api, stop = previous
            gap = think if think is not None else max(0.0, t - before - (api or 0.0))
            rows.append(SessionRow(length, out, tuple(hashes), None, session, round(gap * 1000, 3),
                                   tool_gap=stop == "tool_use"))
        previous = (t, _seconds(r, "api_time", here), r.get("stop"))
    return rows


def weka_trace(d: dict) -> SessionTrace:
    """A Weka trace's turns as session rows; ValueError naming the field that is wrong."""
    block = d.get("block_size")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block_size must be a whole number >= 1, got {block!r}")
    trace_id = str(d.get("id", "trace"))
    rows = _weka_turns(d["requests"], trace_id, "requests", None)
    for i, entry in enumerate(d["requests"]):
        if isinstance(entry, dict) and entry.get("type") == "subagent":
            inner = entry.get("requests")
            if not isinstance(inner, list):
                raise ValueError(f"requests[{i}].requests must be a list")
            name = f"{trace_id}::{entry.get('agent_id', i)}"
            rows += _weka_turns(inner, name, f"requests[{i}].requests", _seconds(entry, "t", f"requests[{i}]", True))
    if not rows:
        raise ValueError("the Weka trace has no requests of type n or s")
    return SessionTrace(rows, block, "Weka trace")


def _when(step: dict, where: str) -> float | None:
    stamp = step.get("timestamp")
    if stamp is None:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"{where}.timestamp must be an ISO 8601 time, got {stamp!r}") from None


def atif_trace(d: dict) -> SessionTrace:
    """An ATIF trajectory's agent steps as session rows with their chat as messages; ValueError naming the field."""
    session = str(d.get("session_id", "trajectory"))
    chat, rows, notes, last_at, called, estimated = [], [], [], None, False, 0
    for i, step in enumerate(d["steps"]):
        where = f"steps[{i}]"
        if not isinstance(step, dict) or step.get("source") not in ("system", "user", "agent"):
            raise ValueError(f"{where}.source must be system, user or agent")
        message = step.get("message", "")
        if not isinstance(message, str):
            raise ValueError(f"{where}.message must be text")
        if step["source"] != "agent":
            chat.append({"role": step["source"], "content": message})
            continue
        at = _when(step, where)
        metrics = step.get("metrics") if isinstance(step.get("metrics"), dict) else {}
        out = metrics.get("completion_tokens")
        if isinstance(out, bool) or not isinstance(out, int) or out < 0:
            out, estimated = max(1, len(message) // 4), estimated + 1
        if not rows:
            rows.append(SessionRow(None, out, (), 0.0, session, None, tuple(chat)))
        else:
            gap = 0.0 if at is None or last_at is None else round(max(0.0, at - last_at) * 1000, 3)
            rows.append(SessionRow(None, out, (), None, session, gap, tuple(chat), tool_gap=called))
        calls = step.get("tool_calls") or []
        if not isinstance(calls, list):
            raise ValueError(f"{where}.tool_calls must be a list")
        said = [message] if message else []
        for j, call in enumerate(calls):
            if not isinstance(call, dict) or not isinstance(call.get("function_name"), str):
                raise ValueError(f"{where}.tool_calls[{j}].function_name must be the tool's name")
            said.append(call_text(call["function_name"], call.get("arguments") or {}))
        chat.append({"role": "assistant", "content": "\n".join(said)})
        observation = step.get("observation") if isinstance(step.get("observation"), dict) else {}
        for result in observation.get("results") or []:
            if isinstance(result, dict) and result.get("content") is not None:
                chat.append({"role": "tool", "content": response_text(str(result["content"]))})
        last_at, called = at, bool(calls)
    if not rows:
        raise ValueError("the ATIF trajectory has no agent steps")
    if estimated:
        notes.append(f"{estimated} agent step(s) without metrics.completion_tokens: their output length is an "
                     "estimate (characters / 4)")
    return SessionTrace(rows, source="ATIF trajectory", notes=notes)
