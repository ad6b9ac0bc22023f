"""Who may call the endpoint and how much: bearer keys, requests in flight, tokens per request and per minute.

    config = ApiConfig.from_env()          # PLAYGROUND_API_KEYS, PLAYGROUND_API_LIMITS (see below)
    guard = Guard(config)
    client = guard.client(authorization_header, peer_address)     # 401 (ApiError) for a missing or wrong key
    guard.check_size(prompt_tokens, max_tokens)                    # 400: over a per-request limit
    with guard.admit(client, prompt_tokens + max_tokens) as admission:   # 429 + Retry-After: over a rate limit
        ...; admission.used = prompt_tokens + completion_tokens    # what the minute's budget is charged

    >>> parse_limits("in_flight=2, tokens_per_minute=900")
    {'in_flight': 2, 'tokens_per_minute': 900}
    >>> g = Guard(ApiConfig(keys=("k1",), limits=ApiLimits(in_flight_per_client=1)))
    >>> c = g.client("Bearer k1", "10.0.0.7"); c
    'client 1'
    >>> with g.admit(c, 10):
    ...     g.admit(c, 10)
    Traceback (most recent call last):
    playground.api.errors.ApiError: 1 request in flight from this client; the limit is 1 at a time

Keys come from PLAYGROUND_API_KEYS (comma-separated); none set: the endpoint is open (limits still apply,
each client known by its address). A key is compared in constant time and never logged, shown or put in a
record: clients are named "client 1", "client 2", … in the order they first came. Limits from
PLAYGROUND_API_LIMITS ("name=value,…", names as in ApiLimits). The prefix cache's size in KV positions from
PLAYGROUND_API_PREFIX_CACHE (0: off; unset: sized when the model loads from the memory the KV slots leave,
serve/room.py's cache_positions). A session's cached blocks are held across its gaps for the TTL it asks, at
most PLAYGROUND_API_SESSION_SHARE of the cache (a share from 0 to 1; 0.5 unset); a session that asks no TTL (named
by prompt_cache_key, the Responses chain, X-Session-Id) is held PLAYGROUND_API_SESSION_TTL seconds (300 unset; 0:
only sessions that ask a TTL are held). PLAYGROUND_API_PER_REQUEST_METRICS=1 puts
vLLM's per-request `metrics` object in every response (as vLLM's --enable-per-request-metrics does; without it a
request asks with `"per_request_metrics": true`). The KV slots (requests the engine holds at once) from
PLAYGROUND_API_SLOTS; unset or 0: sized when the model loads from the memory the machine has then and the context
a request may use (serve/room.py's room_slots: a room of ROOM held at once where memory allows; a request beyond the slots waits
in the engine's queue, not refused, up to `in_flight` in all). Over a per-request limit (max_tokens, prompt
tokens) is a bad request (400: asking again cannot help); over a rate limit (requests in flight, for one
client or in all; tokens per minute, one client's prompt + completion tokens over the last 60 s, reserved
at admission and trued up at the end) is 429 with a Retry-After.
A body over `body_bytes` is 413, before it is read whole (routes.py). Without keys a client is named by its
address: the connection's, or, behind the Space's proxy (`trust_forwarded`, set when SPACE_ID is), the last
entry of X-Forwarded-For, the one that proxy wrote (forwarded_client), so a client cannot name itself.

The app's own Serve tab sends its workload through the endpoint with a key made at start-up
(`presenter_key`, never shown): that client is counted but never refused, so the presenter's requests share
the engine with the audience's without being throttled as one of them.

Left out: persistence (limits are per process) and per-key limits (every client has the same).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field, fields, replace

from ..serve.room import CLIENT_SHARE, MOST_SLOTS, SESSION_SHARE, SESSION_TTL_S, LoopSize
from .errors import bad_request, too_many, unauthorized

WINDOW_S = 60.0
PRESENTER = "the presenter"   # the client name of the app's own Serve tab (ApiConfig.presenter_key)
MOST_ASKED_SLOTS = 64   # PLAYGROUND_API_SLOTS at most (BatchConfig's bound)


@dataclass(frozen=True)
class ApiLimits:
    in_flight_per_client: int = CLIENT_SHARE   # one client's requests at once (streaming or not)
    in_flight: int = 2 * MOST_SLOTS   # every client's requests at once: those beyond the KV slots wait in the
    #                                   engine's queue (a room of ROOM, one request each, is all let in)
    max_tokens: int = 512             # new tokens one request may ask for (and the default when it asks none)
    prompt_tokens: int = 896          # prompt tokens one request may send (after the chat template)
    tokens_per_minute: int = 20_000   # one client's prompt + completion tokens over the last 60 s
    body_bytes: int = 4_000_000       # one request's body (read in pieces; 413 past it): a whole prompt fits
    stored_responses: int = 1024      # /v1/responses kept for previous_response_id (the oldest evicted first)
    stored_bytes: int = 64_000_000    # their histories' JSON at most, in all


def parse_limits(text: str | None) -> dict:
    """{'name': int} from "name=value,…" (PLAYGROUND_API_LIMITS); ValueError naming a bad entry."""
    names = {f.name for f in fields(ApiLimits)}
    out = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in names or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"PLAYGROUND_API_LIMITS: {part.strip()!r} is not one of {sorted(names)} = a whole "
                             "number >= 1")
        out[name] = int(value)
    return out


@dataclass(frozen=True)
class ApiConfig:
    keys: tuple[str, ...] = field(default=(), repr=False)   # bearer keys; empty: no key needed
    limits: ApiLimits = ApiLimits()
    slots: int = 0                # KV slots: requests held at once (more wait for a free slot); 0: room_slots
    capacity: int = 1024          # positions per slot: prompt + new tokens of one request (at most the window)
    prefix_cache: int | None = None   # positions of KV kept for prompts that begin alike; 0: off; None: sized from
    #                                   the memory available when the model loads (serve/room.py)
    trust_forwarded: bool = False  # name clients by X-Forwarded-For's last address (added by a known proxy)
    presenter_key: str | None = field(default=None, repr=False)   # the app's own Serve tab: no per-client limits
    per_request_metrics: bool = False   # every response carries vLLM's `metrics` object (not only those asking)
    session_share: float = SESSION_SHARE   # the share of the prefix cache sessions may hold across their gaps
    session_ttl: float = SESSION_TTL_S     # seconds a session that asks no TTL is held (0: only those asking)

    @classmethod
    def from_env(cls, **overrides) -> "ApiConfig":
        keys = tuple(k.strip() for k in os.environ.get("PLAYGROUND_API_KEYS", "").split(",") if k.strip())
        limits = replace(ApiLimits(), **parse_limits(os.environ.get("PLAYGROUND_API_LIMITS")))
        cache = parse_positions(os.environ.get("PLAYGROUND_API_PREFIX_CACHE"), None)
        metrics = os.environ.get("PLAYGROUND_API_PER_REQUEST_METRICS", "").strip().lower() in ("1", "true", "yes")
        slots = parse_slots(os.environ.get("PLAYGROUND_API_SLOTS"))
        share = parse_number(os.environ.get("PLAYGROUND_API_SESSION_SHARE"), SESSION_SHARE, 1.0,
                             "PLAYGROUND_API_SESSION_SHARE", "share of the prefix cache sessions may hold")
        ttl = parse_number(os.environ.get("PLAYGROUND_API_SESSION_TTL"), SESSION_TTL_S, 86_400.0,
                           "PLAYGROUND_API_SESSION_TTL", "seconds a session that asks no TTL is held")
        return cls(keys, limits, trust_forwarded=bool(os.environ.get("SPACE_ID")),
                   **{"prefix_cache": cache, "per_request_metrics": metrics, "slots": slots,
                      "session_share": share, "session_ttl": ttl, **overrides})

    @property
    def loop_size(self) -> LoopSize:
        """The engine loop's size these settings ask for (the room sizes its loop once: serve/room.py)."""
        return LoopSize(self.slots, self.capacity, self.prefix_cache, self.session_share, self.session_ttl)


def parse_number(text: str | None, default: float, most: float, name: str, what: str) -> float:
    """A number from 0 to `most` (an environment variable `name`: the `what`), `default` when unset; ValueError else.

    >>> parse_number(None, 0.5, 1.0, "X", "a share"), parse_number(" 0.25 ", 0.5, 1.0, "X", "a share")
    (0.5, 0.25)
    """
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= most:
        raise ValueError(f"{name}: {text.strip()!r} is not a number from 0 to {most:g} (the {what})")
    return value


def parse_slots(text: str | None) -> int:
    """PLAYGROUND_API_SLOTS: KV slots from 1 to MOST_ASKED_SLOTS; unset or 0: 0 (sized from memory); ValueError else.

    >>> parse_slots(None), parse_slots("0"), parse_slots(" 48 ")
    (0, 0, 48)
    """
    if text is None or not text.strip():
        return 0
    if not text.strip().isdigit() or int(text) > MOST_ASKED_SLOTS:
        raise ValueError(f"PLAYGROUND_API_SLOTS: {text.strip()!r} is not a number of KV slots from 1 to "
                         f"{MOST_ASKED_SLOTS} (0 or unset: sized from the memory available)")
    return int(text)


def parse_positions(text: str | None, default: int | None) -> int | None:
    """PLAYGROUND_API_PREFIX_CACHE: a whole number of positions (0: off), `default` when unset; ValueError else.

    >>> parse_positions(None, 4096), parse_positions(" 0 ", 4096), parse_positions("8192", 4096)
    (4096, 0, 8192)
    """
    if text is None or not text.strip():
        return default
    if not text.strip().isdigit() or int(text) > 1 << 20:
        raise ValueError(f"PLAYGROUND_API_PREFIX_CACHE: {text.strip()!r} is not a number of KV positions from 0 "
                         f"(no prefix caching) to {1 << 20}")
    return int(text)


def forwarded_client(header: str | None) -> str | None:
    """The client's address as the proxy in front of us saw it: X-Forwarded-For's last entry.

    Each proxy appends the address it received the request from, so only the last entry was written by the
    proxy we trust (the Space's); everything before it came with the request and the client can write any
    of it. Taking the first entry would let a client pick its own name, and a fresh one per request.

    >>> forwarded_client("203.0.113.9"), forwarded_client("6.6.6.6, 10.1.2.3, 203.0.113.9 "), forwarded_client(" ")
    ('203.0.113.9', '203.0.113.9', None)
    """
    last = (header or "").split(",")[-1].strip()
    return last or None


@dataclass
class Admission:
    """One admitted request's share of the limits; leaving the `with` block returns it."""
    guard: "Guard"
    client: str
    entry: list            # [time, tokens] in the client's minute window
    used: int | None = None  # tokens actually used (prompt + completion); None: keep the reservation

    def __enter__(self) -> "Admission":
        return self

    def __exit__(self, *exc) -> None:
        self.guard.release(self)


class Guard:
    def __init__(self, config: ApiConfig, clock=time.monotonic):
        self.config, self.limits, self.clock = config, config.limits, clock
        self._digests = [hashlib.sha256(k.encode()).digest() for k in config.keys]
        self._presenter = hashlib.sha256(config.presenter_key.encode()).digest() if config.presenter_key else None
        self._names: dict[str, str] = {}                   # a client's identity -> "client N"
        self._in_flight: dict[str, int] = {}
        self._minute: dict[str, deque] = {}
        self._lock = threading.Lock()

    def client(self, authorization: str | None, address: str | None, forwarded: str | None = None) -> str:
        """The caller's name ("client N", or PRESENTER for the app's own Serve tab); ApiError 401 when keys are set
        and none of them was sent."""
        scheme, _, key = (authorization or "").partition(" ")
        digest = hashlib.sha256(key.strip().encode()).digest()
        if self._presenter is not None and scheme.lower() == "bearer" and hmac.compare_digest(digest, self._presenter):
            return PRESENTER
        if self._digests:
            matches = [hmac.compare_digest(digest, d) for d in self._digests]
            if scheme.lower() != "bearer" or not any(matches):
                raise unauthorized(sent=bool((authorization or "").strip()))
            identity = f"key {matches.index(True)}"
        else:
            proxied = forwarded_client(forwarded) if self.config.trust_forwarded else None
            identity = f"address {proxied or address or 'unknown'}"
        with self._lock:
            return self._names.setdefault(identity, f"client {len(self._names) + 1}")

    def check_size(self, prompt_tokens: int, max_tokens: int) -> None:
        """ApiError 400 when one request asks more than any request may."""
        lim = self.limits
        if max_tokens > lim.max_tokens:
            raise bad_request(f"max_tokens is {max_tokens}; the limit here is {lim.max_tokens}", "max_tokens")
        if prompt_tokens > lim.prompt_tokens:
            raise bad_request(f"the prompt is {prompt_tokens} tokens; the limit here is {lim.prompt_tokens}",
                              "messages", "prompt_too_long")
        if prompt_tokens + max_tokens > lim.tokens_per_minute:
            raise bad_request(f"this request needs {prompt_tokens + max_tokens} tokens (prompt + max_tokens); a "
                              f"client may use {lim.tokens_per_minute} a minute", "max_tokens")

    def admit(self, client: str, tokens: int) -> Admission:
        """Reserve one request in flight and `tokens` of the client's minute; ApiError 429 when over a limit."""
        lim, now = self.limits, self.clock()
        with self._lock:
            mine = self._in_flight.get(client, 0)
            if client == PRESENTER:   # the presenter's workload: counted, never refused (the Batcher queues it)
                self._in_flight[client] = mine + 1
                return Admission(self, client, [now, tokens])
            if mine >= lim.in_flight_per_client:
                raise too_many(f"{mine} request{'s' if mine > 1 else ''} in flight from this client; the limit is "
                               f"{lim.in_flight_per_client} at a time", retry_after=1)
            if sum(self._in_flight.values()) >= lim.in_flight:
                raise too_many(f"{lim.in_flight} requests in flight on this server; try again shortly",
                               retry_after=1)
            window = self._minute.setdefault(client, deque())
            while window and window[0][0] <= now - WINDOW_S:
                window.popleft()
            spent = sum(n for _, n in window)
            if spent + tokens > lim.tokens_per_minute:
                raise too_many(f"this client used {spent} of its {lim.tokens_per_minute} tokens per minute; this "
                               f"request needs {tokens}", retry_after=self._wait(window, spent + tokens, now))
            entry = [now, tokens]
            window.append(entry)
            self._in_flight[client] = mine + 1
        return Admission(self, client, entry)

    def _wait(self, window: deque, needed: int, now: float) -> float:
        """Seconds until enough of the window has expired for `needed` tokens to fit."""
        over = needed - self.limits.tokens_per_minute
        for t, n in window:
            over -= n
            if over <= 0:
                return t + WINDOW_S - now
        return WINDOW_S

    def release(self, admission: Admission) -> None:
        with self._lock:
            self._in_flight[admission.client] -= 1
            if admission.used is not None:
                admission.entry[1] = admission.used
