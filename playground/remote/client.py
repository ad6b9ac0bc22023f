"""One server's HTTP client (httpx): JSON calls, and event streams read in a thread that Stop can abort.

    client = ServerClient("http://127.0.0.1:8080/v1", api_key=None)
    client.get_json("/v1/models")                            # raises a RemoteError subclass on failure
    stream = client.stream("/v1/chat/completions", body)     # starts reading at once; stream.t0 = request start
    for arrived, wall_ns, event in stream.events(stop=lambda: run.cancelled): ...
    stream.abort()                                           # any thread, any moment

A reader thread sends the request and parses the SSE (httpx-sse), stamping each event with the clock the
moment it is parsed; the consumer waits on a queue in short slices, so Stop ends a run within `POLL`
seconds even while the server sends nothing. Abort also shuts the socket down, which wakes the reader
out of a blocking read; a request whose response headers never came ends at the read timeout at worst.
The key (if any) goes in the Authorization header of requests to this server only: redirects are not
followed and errors are scrubbed of it.

Left out: retries, HTTP/2, and proxies' quirks (httpx reads the usual proxy environment variables).
"""
from __future__ import annotations

import json
import queue
import socket
import threading
import time
from typing import Callable, Iterator
from urllib.parse import urlsplit

import httpx
from httpx_sse import EventSource, SSEError

from .errors import RemoteMalformed, error_for_exception, error_for_status

POLL = 0.05             # seconds the consumer waits on the queue before checking Stop again
_END = object()


def split_endpoint(url: str) -> tuple[str, str]:
    """(the server's root URL, without a trailing /v1; 'host:port' to name it). ValueError if unusable.

    >>> split_endpoint("http://127.0.0.1:8080/v1/")
    ('http://127.0.0.1:8080', '127.0.0.1:8080')
    >>> split_endpoint("https://gpu.example.com/openai/v1")
    ('https://gpu.example.com/openai', 'gpu.example.com/openai')
    """
    parts = urlsplit(str(url).strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint must be an http:// or https:// URL with a host, got {url!r}")
    if parts.username or parts.password:
        raise ValueError("an endpoint URL must not carry credentials: put the key in an environment variable "
                         "and name it with --api-key-env")
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}://{netloc}{path}", netloc + path


class ServerClient:
    def __init__(self, url: str, api_key: str | None = None, connect_timeout: float = 5.0,
                 read_timeout: float = 120.0):
        self.root, self.host = split_endpoint(url)
        self.endpoint = self.host          # how errors name the server (the source adds the server's kind)
        self._secret = api_key or None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=self.root, headers=headers, follow_redirects=False,
                                 timeout=httpx.Timeout(read_timeout, connect=connect_timeout))

    def request(self, method: str, path: str, body: dict | None = None, timeout: float | None = None,
                as_json: bool = True):
        try:
            r = self.http.request(method, path, json=body, **({"timeout": timeout} if timeout else {}))
        except Exception as exc:   # noqa: BLE001 - mapped to a RemoteError naming the endpoint
            raise error_for_exception(self.endpoint, exc, self._secret) from exc
        if r.status_code >= 400:
            raise error_for_status(self.endpoint, r.status_code, r.content, self._secret)
        if not as_json:
            return r.text
        try:
            return r.json()
        except ValueError:
            raise RemoteMalformed(self.endpoint, f"{path} did not answer JSON: {r.text[:80]!r}", r.status_code) \
                from None

    def get_json(self, path: str, timeout: float | None = None):
        return self.request("GET", path, timeout=timeout)

    def post_json(self, path: str, body: dict, timeout: float | None = None):
        return self.request("POST", path, body, timeout=timeout)

    def stream(self, path: str, body: dict, clock: Callable[[], float] = time.perf_counter) -> "EventStream":
        return EventStream(self, path, body, clock)

    def close(self) -> None:
        self.http.close()


class EventStream:
    """The SSE events of one POST, read by a reader thread; iterate `events()`; `abort()` from any thread."""

    def __init__(self, client: ServerClient, path: str, body: dict, clock: Callable[[], float]):
        self.client, self.path, self.body, self.clock = client, path, body, clock
        self.done = False                  # the server sent [DONE]
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._aborted = threading.Event()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._read, daemon=True, name="remote-stream")
        self.t0 = clock()                  # request start: the engine's t0
        self._thread.start()

    def events(self, stop: Callable[[], bool] = lambda: False) -> Iterator[tuple[float, int, dict]]:
        """(arrival time on `clock`, time.time_ns() at arrival, parsed event); ends at [DONE], the end of the
        stream, or once `stop()` is true (then the stream is aborted). Errors arrive as RemoteErrors."""
        while True:
            try:
                item = self._queue.get(timeout=POLL)
            except queue.Empty:
                if stop():
                    self.abort()
                    return
                continue
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def abort(self) -> None:
        """Stop reading now: the reader's blocking read fails at once and its thread ends."""
        self._aborted.set()
        for sock in list(self._sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass   # already closed

    def _remember(self, network_stream) -> None:
        sock = network_stream.get_extra_info("socket") if network_stream is not None else None
        if sock is not None:
            self._sockets.append(sock)
            if self._aborted.is_set():
                self.abort()

    def _trace(self, event: str, info: dict) -> None:   # httpcore's hook: a fresh connection's socket
        if event == "connection.connect_tcp.complete":
            self._remember(info.get("return_value"))

    def _read(self) -> None:
        client, started = self.client, False
        try:
            headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
            with client.http.stream("POST", self.path, json=self.body, headers=headers,
                                    extensions={"trace": self._trace}) as response:
                self._remember(response.extensions.get("network_stream"))
                if response.status_code >= 400:
                    response.read()
                    raise error_for_status(client.endpoint, response.status_code, response.content, client._secret)
                started = True
                for sse in EventSource(response).iter_sse():
                    arrived, wall_ns = self.clock(), time.time_ns()
                    if self._aborted.is_set():
                        return
                    if sse.data.strip() == "[DONE]":
                        self.done = True
                        return
                    if not sse.data.strip():
                        continue   # a keep-alive or comment-only event
                    try:
                        event = json.loads(sse.data)
                    except ValueError:
                        raise RemoteMalformed(client.endpoint, f"an event is not JSON: {sse.data[:80]!r}") from None
                    if not isinstance(event, dict):
                        raise RemoteMalformed(client.endpoint, f"an event is not a JSON object: {sse.data[:80]!r}")
                    self._queue.put((arrived, wall_ns, event))
        except SSEError as exc:
            if not self._aborted.is_set():
                self._queue.put(RemoteMalformed(client.endpoint, str(exc)))
        except Exception as exc:   # noqa: BLE001 - handed to the consumer as a RemoteError
            if not self._aborted.is_set():
                self._queue.put(error_for_exception(client.endpoint, exc, client._secret, started))
        finally:
            self._queue.put(_END)
