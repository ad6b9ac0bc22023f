"""Agent traces in and out: Mooncake lines with AIPerf's session extension, replayed with each session's turns in
order and written from what ran.

    trace = read_trace(path)    # trace_import.py: a SessionTrace (rows, their block size); None: a workload.json
    workload, notes = to_workload(trace, tokenizer, time_scale=0.5, limit=16)   # sessions kept in order
    text = sessions_jsonl(results)                  # what ran (a workload's runs, or the Watch view's record)

One JSON object a line, a superset of Mooncake's (serve/mooncake.py), each field with its source:

    timestamp      ms    Mooncake: when the request arrives (a session's first turn; a row of no session)
    input_length   n     Mooncake: prompt tokens
    output_length  n     Mooncake: tokens generated (the replay runs to it, EOS ignored)
    hash_ids       [..]  Mooncake: the prompt's blocks (equal ids, equal blocks; BLOCK_TOKENS each, or the
                         trace's own block size: an imported Weka trace's)
    session_id     str   AIPerf's multi-turn extension: the session the turn belongs to
    delay          ms    AIPerf's multi-turn extension: the gap before the turn, counted from the END of the
                         session's previous turn (the turn waits for it, then the gap)
    messages       [..]  AIPerf's pre-formatted messages: the chat the turn sends (role, content), rendered by the
                         model's chat template, so a template's effects replay; the prompt is then these messages,
                         not input_length and hash_ids
    tool_gap       bool  this project's: the gap before the turn was a tool call's (Weka's `stop: "tool_use"`,
                         ATIF's tool_calls); informational

A plain Mooncake line is a valid row: it is its own session, released at its timestamp. A session's first turn is
released at its timestamp (0 when absent); each later turn with a `delay` is released that long after its
predecessor ends (sessions.Releases); a later turn with a timestamp and no delay keeps its timestamp; with
neither, it follows its predecessor at once. Times are scaled by `time_scale`, as Mooncake's.

Bounds: a file of at most MAX_TRACE_BYTES is read, and at most MAX_TRACE_ROWS rows (the rest are left out and a
note says so); the replay takes the first `limit` turns (workload.MAX_REQUESTS by default). A line that is not a
row is a ValueError naming the line and the field.

Writing (`sessions_jsonl`) takes each request's record: its session (the one the endpoint read, or the replayed
trace's), its arrival (a first turn's timestamp), the gap from its session's previous turn's end to its own
release (`delay`), the prompt's token count, the tokens it made, and its blocks' hash chain numbered as Mooncake's
export numbers them (mooncake.Names).

>>> rows = read_rows(['{"session_id": "a", "timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [1]}',
...                   '{"session_id": "a", "delay": 1500, "input_length": 9, "output_length": 2, "hash_ids": [1, 2]}'])
>>> rows[1].session_id, rows[1].delay, rows[1].timestamp
('a', 1500.0, None)

Left out: AIPerf's `message_mode: "delta"` (live answers threaded into later turns), `tools` and `extra` (read and
ignored), a Weka subagent's join (its parent's next turn does not wait for it here), and prompts that mean anything
where a row has no messages (random tokens with the trace's sharing, as Mooncake's replay).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from .mooncake import BLOCK_TOKENS, Names, ordinary_ids, prompt_ids
from .workload import MAX_REQUESTS, TRACE, Request, Workload

MAX_TRACE_BYTES = 64 * 2**20   # a trace file read at most (the Mooncake arxiv trace is ~2 MiB)
MAX_TRACE_ROWS = 100_000       # rows read at most; a replay takes far fewer (MAX_REQUESTS)
ROLES = ("system", "user", "assistant", "tool")
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids", "session_id", "delay", "messages", "tool_gap")


@dataclass(frozen=True)
class SessionRow:
    input_length: int | None          # None: the messages are the prompt
    output_length: int
    hash_ids: tuple[int, ...] = ()
    timestamp: float | None = None    # ms
    session_id: str | None = None
    delay: float | None = None        # ms after the session's previous turn ends
    messages: tuple[dict, ...] = ()
    tool_gap: bool = False

    def to_json(self) -> str:
        out = {}
        if self.session_id is not None:
            out["session_id"] = self.session_id
        if self.timestamp is not None:
            out["timestamp"] = _number(self.timestamp)
        if self.delay is not None:
            out["delay"] = _number(self.delay)
        if self.input_length is not None:
            out["input_length"] = self.input_length
        out["output_length"] = self.output_length
        if self.input_length is not None:
            out["hash_ids"] = list(self.hash_ids)
        if self.messages:
            out["messages"] = list(self.messages)
        if self.tool_gap:
            out["tool_gap"] = True
        return json.dumps(out, ensure_ascii=False)


@dataclass
class SessionTrace:
    rows: list[SessionRow]
    block_size: int = BLOCK_TOKENS    # tokens per hash id
    source: str = "session lines"     # what it was read from: "session lines", "Weka trace", "ATIF trajectory"
    notes: list[str] = field(default_factory=list)


def _number(x: float):
    return int(x) if float(x).is_integer() else round(float(x), 3)


def _fail(number: int, name: str, why: str):
    raise ValueError(f"line {number}: {name} {why}")


def read_row(d, number: int) -> SessionRow:
    """One line's object as a SessionRow; ValueError naming the line and the field."""
    if not isinstance(d, dict):
        _fail(number, "the line", "is not a JSON object")

    def count(name, required=True):
        v = d.get(name)
        if v is None:
            if required:
                _fail(number, name, "is missing")
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or int(v) != v:
            _fail(number, name, f"must be a whole number >= 0, got {v!r}")
        return int(v)

    def ms(name):
        v = d.get(name)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            _fail(number, name, f"must be a number of milliseconds >= 0, got {v!r}")
        return float(v)

    messages = d.get("messages")
    if messages is not None:
        if not isinstance(messages, list) or not messages:
            _fail(number, "messages", "must be a non-empty list of {role, content} objects")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ROLES:
                _fail(number, f"messages[{i}].role", f"must be one of {', '.join(ROLES)}")
            if not isinstance(m.get("content", ""), (str, type(None))):
                _fail(number, f"messages[{i}].content", "must be text")
        messages = tuple({"role": m["role"], "content": m.get("content") or ""} for m in messages)
    length = count("input_length", required=messages is None)
    if length is not None and length < 1:
        _fail(number, "input_length", "must be at least 1")
    hashes = d.get("hash_ids", [] if messages is not None or length is not None else None)
    if not isinstance(hashes, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in hashes):
        _fail(number, "hash_ids", "must be a list of whole numbers >= 0")
    session = d.get("session_id")
    if session is not None and not isinstance(session, (str, int)):
        _fail(number, "session_id", f"must be text, got {session!r}")
    tool_gap = d.get("tool_gap", False)
    if not isinstance(tool_gap, bool):
        _fail(number, "tool_gap", "must be true or false")
    return SessionRow(length, count("output_length"), tuple(hashes), ms("timestamp"),
                      None if session is None else str(session), ms("delay"), messages or (), tool_gap)


def read_rows(lines, most: int = MAX_TRACE_ROWS, notes: list | None = None) -> list[SessionRow]:
    """The rows of session lines (blank lines skipped), at most `most` (a note in `notes` says when more were left
    out); ValueError naming the first line that is not a row, and its field."""
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if len(rows) == most:
            if notes is not None:
                notes.append(f"the trace has more than {most:,} rows: reading the first {most:,}")
            break
        try:
            d = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {number} is not JSON: {exc}") from None
        rows.append(read_row(d, number))
    if not rows:
        raise ValueError("the trace has no rows")
    return rows


def render(messages, tokenizer) -> list[int]:
    """The ids the model reads for a chat: its own template over the messages, else one message a line."""
    chat = [{"role": m["role"] if m["role"] != "tool" else "user", "content": m["content"]} for m in messages]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    else:
        text = "\n".join(f"{m['role']}: {m['content']}" for m in chat) + "\nassistant:"
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def to_workload(trace: SessionTrace, tokenizer, time_scale: float = 1.0,
                limit: int = MAX_REQUESTS) -> tuple[Workload, list[str]]:
    """(the first `limit` rows as a Workload, lines saying what was done to the trace): each session's later turns
    wait for their predecessor (Request.after, delay); rows of no session replay as Mooncake's."""
    if not time_scale > 0:
        raise ValueError(f"the time scale must be > 0; got {time_scale}")
    rows, notes = trace.rows, list(trace.notes)
    if len(rows) > limit:
        notes.append(f"the trace has {len(rows):,} requests: replaying the first {limit}")
        rows = rows[:limit]
    stamps = [r.timestamp for r in rows if r.timestamp is not None]
    start, vocab = min(stamps, default=0.0), ordinary_ids(tokenizer)
    last: dict[str, Request] = {}      # session id -> its latest turn so far
    requests = []
    for i, row in enumerate(rows):
        ids = render(row.messages, tokenizer) if row.messages else prompt_ids(row, trace.block_size, vocab, i)
        previous = last.get(row.session_id) if row.session_id is not None else None
        at = None if row.timestamp is None else round((row.timestamp - start) / 1000 * time_scale, 6)
        after, delay = None, 0.0
        if previous is not None and (row.delay is not None or row.timestamp is None):
            after, delay = previous.id, round((row.delay or 0.0) / 1000 * time_scale, 6)
            at = previous.arrival if at is None else at   # before its release: where it sorts
        request = Request(i, TRACE, tokenizer.decode(ids), max(1, row.output_length), at or 0.0, ignore_eos=True,
                          prompt_ids=tuple(ids), session=row.session_id, after=after, delay=delay)
        requests.append(request)
        if row.session_id is not None:
            last[row.session_id] = request
    sessions = len({r.session_id for r in rows if r.session_id is not None})
    pace = " (slower)" if time_scale > 1 else " (faster)" if time_scale < 1 else ""
    notes.append(f"{trace.source}: " + (f"{len(rows)} requests in {sessions} session{'s' * (sessions != 1)} (each turn "
                                        "after a session's first waits for its predecessor to end, then its delay); "
                                        if sessions else "")
                 + f"arrivals: the trace's timestamps from its first, × {time_scale:g}{pace}; prompts: "
                 + ("the messages through the model's chat template where a turn has them, else " if any(
                     r.messages for r in rows) else "")
                 + f"{trace.block_size}-token blocks, equal hash_ids equal tokens; outputs run to output_length")
    return Workload(tuple(requests), TRACE), notes


def session_rows(result, block_size: int = BLOCK_TOKENS) -> list[SessionRow]:
    """A run's requests as session rows, in order of arrival (see the module's docstring); a request whose prompt
    ids are not known here (no run read it) is left out."""
    names, rows, ends = Names(), [], {}
    records = sorted(result.records, key=lambda r: r.arrival)
    for record in records:
        trace = record.trace
        ids = list(trace.prompt_ids) if trace is not None and trace.prompt_ids else (
            None if record.request.prompt_ids is None else list(record.request.prompt_ids))
        if not ids:
            continue
        session = record.session.id if record.session is not None else record.request.session
        hashes = tuple(names.ids(ids, block_size))
        made = record.output_tokens if record.steps else record.request.max_new_tokens
        end = ends.get(session) if session is not None else None
        if end is None:
            rows.append(SessionRow(len(ids), made, hashes, round(record.arrival * 1000, 3), session))
        else:
            rows.append(SessionRow(len(ids), made, hashes, None, session, round(max(0.0, record.arrival - end) * 1000, 3)))
        if session is not None and record.finished is not None:
            ends[session] = record.finished
    return rows


def sessions_jsonl(results, block_size: int = BLOCK_TOKENS) -> str:
    """The first run of `results` (a list of WorkloadResults, or one) as session lines, one turn a line."""
    result = results[0] if isinstance(results, (list, tuple)) else results
    return "".join(row.to_json() + "\n" for row in session_rows(result, block_size))
