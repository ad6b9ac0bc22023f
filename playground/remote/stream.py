"""The SSE events of one streamed request, read by a reader thread; Stop can abort it at any moment.

    stream = client.stream("/v1/chat/completions", body)     # starts reading at once; stream.t0 = request start
    for arrived, wall_ns, event in stream.events(stop=lambda: run.cancelled): ...
    stream.abort()                                           # any thread, any moment

The reader thread sends the request and parses the SSE (httpx-sse), stamping each event with the clock the
moment it is parsed; the consumer waits on a queue in short slices, so Stop ends a run within `POLL`
seconds even while the server sends nothing. Abort also shuts the socket down (found through httpcore's
connect hook, or the response), which wakes the reader out of a blocking read; a request on a reused
connection whose response headers never came ends at the read timeout at worst.

Left out: reconnecting (a cut stream is reported, not resumed).
"""
from __future__ import annotations

import json
import queue
import socket
import threading
import time
from typing import Callable, Iterator

from httpx_sse import EventSource, SSEError

from .errors import RemoteMalformed, error_for_exception, error_for_status

POLL = 0.05             # seconds the consumer waits on the queue before checking Stop again
_END = object()


class EventStream:
    """The SSE events of one POST, read by a reader thread; iterate `events()`; `abort()` from any thread."""

    def __init__(self, client, path: str, body: dict, clock: Callable[[], float]):
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
