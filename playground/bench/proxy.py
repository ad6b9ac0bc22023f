"""A loopback TCP proxy that counts what a server sends back: all bytes, its SSE streams' bytes and events.

    proxy = CountingProxy(app_port)   # clients connect to 127.0.0.1:proxy.port instead
    ...; proxy.received, proxy.sse, proxy.events; proxy.close()

It counts the bytes as they cross it, those of SSE streams apart (headers and every event, as received,
not re-serialized), and the SSE events (each ends with a blank line). The bench's ui rows read the app's
wire cost through it (app_process.AppProcess puts one in front of the app).

Left out: TLS, and anything but 127.0.0.1.
"""
from __future__ import annotations

import socket
import threading


class CountingProxy:
    """127.0.0.1:port -> 127.0.0.1:target; counts the bytes coming back: all, those of SSE streams (a
    response of type text/event-stream, headers included) and the SSE events among them."""

    def __init__(self, target: int):
        self.target, self.received, self.sse, self.events = target, 0, 0, 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True, name="proxy").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return   # closed
            server = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        tail, sse = b"", False
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if count:   # from the response that says text/event-stream on (a browser reuses connections)
                    sse = sse or b"content-type: text/event-stream" in data.lower()
                    with self._lock:
                        self.received += len(data)
                        if sse:
                            self.sse += len(data)
                            self.events += (tail + data).count(b"\n\n")   # an event ends with a blank line
                    tail = data[-1:]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._listener.close()
