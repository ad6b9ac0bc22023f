"""Sessions: which agent session a request belongs to, and when a replayed session's turn is released.

    session = Session("codex-7f3a", SessionSource.PROMPT_CACHE_KEY)          # api/session_hint.py reads one per request
    session = Session(opening_id(system, first), SessionSource.CACHE_CONTROL, ttl_s=3600.0)
    ttl = anthropic_ttl("1h", "system[0].cache_control.ttl")               # 3600.0; ValueError naming the field
    ttl = agent_hint_ttl(300, "agent_hint.cache_control.ttl")              # vLLM's seconds, 0 to 3600
    releases = Releases(result.records); releases.release_at(record)       # a turn: its predecessor's end + delay

An agent's traffic is a session: a turn, a tool call that runs while the model waits, then a turn carrying
everything before it. A request names its session by one value: the id, what named it (`SessionSource`), and the
time its client asked the server to keep the session's KV (`ttl_s`, seconds; None: not asked). The endpoint reads
it on every route (api/session_hint.py); the engine loop carries it from the request to its record
(serve/traffic.py: `RequestRecord.session`), which the Watch view and the exports read. What the server does with
the TTL (holding blocks across a gap) is the prefix cache's, not this module's.

A replayed session (serve/agent_trace.py) keeps its turns in order: a later turn names its predecessor (`after`,
a request id) and is released `delay` seconds after that predecessor ENDS, as an agent sends its next turn when
the tool it called returns; a first turn, or a request of no session, is released at its arrival.

>>> anthropic_ttl("5m", "cache_control.ttl"), agent_hint_ttl(60, "agent_hint.cache_control.ttl")
(300.0, 60.0)
>>> anthropic_ttl("10m", "messages[0].content[0].cache_control.ttl")
Traceback (most recent call last):
ValueError: messages[0].content[0].cache_control.ttl must be "5m" or "1h" (Anthropic's two TTLs), got '10m'
>>> opening_id("Be brief.", "Hi") == opening_id("Be brief.", "Hi"), opening_id("Be brief.", "Hi") == opening_id("", "Hi")
(True, False)

Left out: keeping a session's KV for its TTL (the prefix cache's), and sessions across server restarts.
"""
from __future__ import annotations

import enum
import hashlib
import json
import math
from dataclasses import dataclass

ANTHROPIC_TTLS = {"5m": 300.0, "1h": 3600.0}   # cache_control.ttl: the two Anthropic takes; "5m" when absent
AGENT_HINT_TTL_S = 300.0                       # vLLM RFC #52113: agent_hint.cache_control.ttl's default, seconds
AGENT_HINT_MOST_TTL_S = 3600.0                 # and its most
MAX_ID_CHARS = 256                             # a session id at most (prompt_cache_key, X-Session-Id, agent_hint)


class SessionSource(str, enum.Enum):
    """What named a request's session, in the order the endpoint asks (api/session_hint.py)."""
    CACHE_CONTROL = "cache_control"            # Anthropic's mark: the session is named by the conversation's opening
    PROMPT_CACHE_KEY = "prompt_cache_key"      # OpenAI's key (Codex sends its conversation id there)
    RESPONSES_CHAIN = "previous_response_id"   # the session of the stored response this one continues
    HEADER = "x-session-id"                    # the X-Session-Id header
    AGENT_HINT = "agent_hint"                  # vLLM RFC #52113's agent_hint.session_id
    TRACE = "trace"                            # a replayed trace's session_id (serve/agent_trace.py)


@dataclass(frozen=True)
class Session:
    id: str
    source: SessionSource
    ttl_s: float | None = None   # how long the client asked the server to keep the session's KV; None: not asked

    def to_dict(self) -> dict:
        """
        >>> Session("s1", SessionSource.HEADER).to_dict()
        {'id': 's1', 'source': 'x-session-id', 'ttl_s': None}
        """
        return {"id": self.id, "source": self.source.value, "ttl_s": self.ttl_s}


def trace_session(session_id) -> Session | None:
    """A replayed request's Session (its trace's session_id, no TTL asked: the operator's default applies); None
    for a request of no session.

    >>> trace_session("a").source.value, trace_session(None)
    ('trace', None)
    """
    return None if session_id is None else Session(str(session_id), SessionSource.TRACE)


def anthropic_ttl(value, param: str) -> float:
    """Seconds of an Anthropic `cache_control.ttl` ("5m" when absent); ValueError naming `param` otherwise."""
    if value is None:
        return ANTHROPIC_TTLS["5m"]
    if not isinstance(value, str) or value not in ANTHROPIC_TTLS:
        raise ValueError(f'{param} must be "5m" or "1h" (Anthropic\'s two TTLs), got {value!r}')
    return ANTHROPIC_TTLS[value]


def agent_hint_ttl(value, param: str) -> float:
    """Seconds of vLLM's `agent_hint.cache_control.ttl` (a number from 0 to 3600; 300 when absent); ValueError
    naming `param` otherwise."""
    if value is None:
        return AGENT_HINT_TTL_S
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= AGENT_HINT_MOST_TTL_S:
        raise ValueError(f"{param} must be a number of seconds from 0 to {AGENT_HINT_MOST_TTL_S:g}, got {value!r}")
    return float(value)


def opening_id(system, first) -> str:
    """A session's id from the conversation's opening (its system prompt and first message, as sent): every turn of
    one conversation resends them, so its turns share the id; two conversations that open alike share it too."""
    text = json.dumps([system, first], sort_keys=True, ensure_ascii=False, default=str)
    return "opening-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class Releases:
    """When each request of a workload is released, on the workload's clock: at its arrival, or, a session's later
    turn (`Request.after`), `Request.delay` seconds after its predecessor's record ended."""

    def __init__(self, records):
        self.by_id = {r.request.id: r for r in records}

    def release_at(self, record) -> float | None:
        """The time `record` is released; None while its predecessor has not ended."""
        after = record.request.after
        if after is None:
            return record.request.arrival
        previous = self.by_id.get(after)
        if previous is None:
            return record.request.arrival
        if previous.finished is None:
            return None
        return previous.finished + record.request.delay

    def next(self, pending) -> tuple[object, float] | None:
        """(the pending record released first, when) among those whose time is known; None: none is known."""
        known = [(r, t) for r in pending if (t := self.release_at(r)) is not None]
        return min(known, key=lambda x: x[1], default=None)

    def take(self, record, pending: list, now: float):
        """`record` released at `now`: out of `pending`, and a session's later turn marked `released`."""
        pending.remove(record)
        if record.request.after is not None:
            record.released = now
        return record

    def take_due(self, pending: list, now: float) -> list:
        """The pending records due at `now`, in the order they are due, taken out of `pending` (take)."""
        due = sorted(((r, t) for r in pending if (t := self.release_at(r)) is not None and t <= now),
                     key=lambda x: x[1])
        return [self.take(r, pending, now) for r, _ in due]
