"""Errors in OpenAI's JSON shape: `{"error": {"message", "type", "param", "code"}}` with the HTTP status.

    raise bad_request("max_tokens must be between 1 and 512, got 0", param="max_tokens")
    error.body(), error.status, error.headers          # what the route sends

    >>> e = too_many("3 requests in flight from this client; the limit is 3", retry_after=2.4)
    >>> e.status, e.headers, e.body()["error"]["type"]
    (429, {'Retry-After': '3'}, 'rate_limit_error')
    >>> context_exceeded(600, 512).body()["error"]["code"]
    'context_length_exceeded'

Statuses: 400 bad input or over the context window, 401 a missing or wrong key, 404 an unknown model or
route, 413 a body over the size limit, 429 over a limit (with Retry-After, whole seconds, rounded up), 500
a failure of ours (`server_error`: the message names an incident id; the log has the detail under it), 503
the model still loading (with Retry-After) or failed to load. Messages never carry a key or a prompt.

Left out: the HTTP layer itself (routes.py turns an ApiError into a response).
"""
from __future__ import annotations

import math


class ApiError(Exception):
    def __init__(self, status: int, message: str, type: str, code: str | None = None, param: str | None = None,
                 retry_after: float | None = None, words: str = ""):
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type, code, param
        self.retry_after = retry_after
        self.words = words   # the refusal in a few words, where its status alone says too little ("wrong key")

    @property
    def headers(self) -> dict:
        return {} if self.retry_after is None else {"Retry-After": str(max(1, math.ceil(self.retry_after)))}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", code, param)


def context_exceeded(tokens: int, window: int, param: str = "messages") -> ApiError:
    return ApiError(400, f"this request needs {tokens} tokens (prompt + max_tokens); the context window here "
                         f"is {window} tokens", "invalid_request_error", "context_length_exceeded", param)


NO_KEY, WRONG_KEY = "no key", "wrong key"


def unauthorized(sent: bool) -> ApiError:
    """401 for a request without a key (`sent` False) or with one that is not this server's, each saying which.

    >>> unauthorized(False).words, unauthorized(True).message.startswith("the API key sent is not")
    ('no key', True)
    """
    message = ("the API key sent is not one of this server's: send a valid one as 'Authorization: Bearer <key>'"
               if sent else "no API key was sent: send it as 'Authorization: Bearer <key>'")
    return ApiError(401, message, "invalid_request_error", "invalid_api_key", words=WRONG_KEY if sent else NO_KEY)


def not_found(message: str, code: str = "not_found", param: str | None = None) -> ApiError:
    return ApiError(404, message, "invalid_request_error", code, param)


def too_large(size: int | None, limit: int) -> ApiError:
    said = f"{size:,} bytes" if size is not None else f"over {limit:,} bytes"
    return ApiError(413, f"the request body is {said}; the limit here is {limit:,} bytes", "invalid_request_error",
                    "request_too_large")


ENGINE_ERROR = "engine_error"   # the code of a request the engine failed (also its OpenTelemetry error.type)


def engine_failed(message: str | None) -> ApiError:
    """The 500 of a request the engine loop failed (its finish reason is "error")."""
    return ApiError(500, message or "the engine loop failed", "server_error", ENGINE_ERROR)


def internal(incident: str) -> ApiError:
    return ApiError(500, f"the server failed on this request (incident {incident}: the server's log has the detail "
                         "under this id)", "server_error", "internal_error")


def too_many(message: str, retry_after: float) -> ApiError:
    return ApiError(429, message, "rate_limit_error", "rate_limit_exceeded", retry_after=retry_after)


HELD_RETRY_S = 5.0   # Retry-After while the machine is held alone: a Serve run's end cannot be known ahead


def machine_held(paused: tuple[str, float]) -> ApiError:
    """429 at once for a request that arrives while work holds the machine alone (a Serve run), or waits to take it
    (MachineGate.paused: ("held" or "taking", seconds so far)): the engine loop pauses until it ends, and a client
    told nothing would wait in silence.

    >>> e = machine_held(("held", 12.4))
    >>> e.status, e.headers, e.words, e.message.split(":")[0]
    (429, {'Retry-After': '5'}, 'machine held alone', 'the machine is held alone by a Serve run (12 s so far)')
    >>> machine_held(("taking", 0.4)).message.split(":")[0]
    'a Serve run is taking the machine alone (0 s so far)'
    """
    return ApiError(429, f"{held_words(paused)}: no request is served until it ends; retry after the time "
                         "given", "rate_limit_error", "machine_held_alone", retry_after=HELD_RETRY_S,
                    words="machine held alone")


def held_words(paused: tuple[str, float]) -> str:
    """What pauses the engine loop, in words (MachineGate.paused: its state and seconds so far).

    >>> held_words(("held", 3.2)), held_words(("taking", 1.0))
    ('the machine is held alone by a Serve run (3 s so far)', 'a Serve run is taking the machine alone (1 s so far)')
    """
    state, seconds = paused
    if state == "taking":
        return f"a Serve run is taking the machine alone ({seconds:.0f} s so far)"
    return f"the machine is held alone by a Serve run ({seconds:.0f} s so far)"


def unavailable(message: str, retry_after: float | None = None) -> ApiError:
    return ApiError(503, message, "server_error", "model_not_ready", retry_after=retry_after)
