"""What can go wrong with a server, as exceptions that name the endpoint, the HTTP status and what to do.

    >>> str(error_for_status("llama.cpp @ 127.0.0.1:8080", 401, '{"error": {"message": "Invalid API Key"}}'))
    'llama.cpp @ 127.0.0.1:8080: HTTP 401, not authorized (check the key named by --api-key-env): Invalid API Key'
    >>> type(error_for_status("vllm @ gpu:8000", 503, "overloaded")).__name__
    'RemoteServerError'

Every class is a `RemoteError`, itself the seam's `SourceError`, so a view shows the message and a run
that fails keeps its partial trace. Messages never carry the API key: `scrub` blanks it wherever a
server echoes it back.

Left out: retries (a failed request is reported, not repeated: a retry would hide what the server did).
"""
from __future__ import annotations

import json
import ssl

import httpx

from ..source import SourceError


class RemoteError(SourceError):
    """A server's failure; `endpoint` names the server, `status` is the HTTP status (None: no response)."""
    hint = ""

    def __init__(self, endpoint: str, detail: str, status: int | None = None):
        self.endpoint, self.status, self.detail = endpoint, status, detail
        where = ", ".join(x for x in (f"HTTP {status}" if status is not None else "", self.hint) if x)
        super().__init__(f"{endpoint}: {where}: {detail}" if where else f"{endpoint}: {detail}")


class RemoteUnreachable(RemoteError):
    hint = "could not connect (is the server running, and is the URL right?)"


class RemoteTLSError(RemoteError):
    hint = "TLS failed (a certificate the client does not trust, or http:// and https:// mixed up)"


class RemoteTimeout(RemoteError):
    hint = "the server did not answer in time"


class RemoteAuthError(RemoteError):
    hint = "not authorized (check the key named by --api-key-env)"


class RemoteNotFound(RemoteError):
    hint = "not found (a model the server does not serve, or an endpoint it does not have)"


class RemoteRateLimited(RemoteError):
    hint = "rate limited (too many requests; try again later)"


class RemoteBadRequest(RemoteError):
    hint = "the server refused the request"


class RemoteServerError(RemoteError):
    hint = "the server failed"


class RemoteStreamCut(RemoteError):
    hint = "the stream was cut before the answer finished (the tokens so far are kept)"


class RemoteMalformed(RemoteError):
    hint = "the server sent something that is not an OpenAI-compatible event stream"


BY_STATUS = {401: RemoteAuthError, 403: RemoteAuthError, 404: RemoteNotFound, 429: RemoteRateLimited}


def scrub(text: str, secret: str | None) -> str:
    """`text` with the secret blanked out (a server may echo a bad key back in its error message)."""
    return text.replace(secret, "***") if secret else text


def server_message(body: str | bytes, limit: int = 300) -> str:
    """The error message inside a server's response body (OpenAI, llama.cpp, vLLM, FastAPI shapes), else the body.

    >>> server_message('{"error": {"code": 404, "message": "model not found"}}'), server_message("<h1>Bad</h1>")
    ('model not found', '<h1>Bad</h1>')
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:limit] or "(empty body)"
    if isinstance(data, dict):
        inner = data.get("error", data)
        if isinstance(inner, dict):
            inner = inner.get("message") or inner.get("detail") or inner
        elif "detail" in data and inner is data:
            inner = data["detail"]
        return (inner if isinstance(inner, str) else json.dumps(inner))[:limit]
    return text.strip()[:limit]


def error_for_status(endpoint: str, status: int, body: str | bytes, secret: str | None = None) -> RemoteError:
    cls = BY_STATUS.get(status) or (RemoteServerError if status >= 500 else RemoteBadRequest)
    return cls(endpoint, scrub(server_message(body), secret), status)


def error_for_exception(endpoint: str, exc: Exception, secret: str | None = None, started: bool = False) -> Exception:
    """httpx's exception as a RemoteError; `started`: the stream had begun (a broken read means it was cut)."""
    detail = scrub(f"{type(exc).__name__}: {exc}", secret)
    if isinstance(exc, RemoteError):
        return exc
    if isinstance(exc, httpx.ConnectError) and _caused_by(exc, ssl.SSLError):
        return RemoteTLSError(endpoint, detail)
    if isinstance(exc, httpx.TimeoutException):
        return RemoteTimeout(endpoint, detail)
    if isinstance(exc, (httpx.ConnectError, httpx.UnsupportedProtocol)):
        return RemoteUnreachable(endpoint, detail)
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)) and started:
        return RemoteStreamCut(endpoint, detail)
    if isinstance(exc, httpx.HTTPError):
        return RemoteMalformed(endpoint, detail) if isinstance(exc, httpx.RemoteProtocolError) \
            else RemoteUnreachable(endpoint, detail)
    return exc


def _caused_by(exc: BaseException, kind: type) -> bool:
    """`exc` or an exception in its chain is a `kind` (or says it is an SSL failure)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind) or "[SSL" in str(exc)[:200]:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
