"""One server's HTTP client (httpx): JSON calls that fail as RemoteErrors, and event streams (stream.py).

    client = ServerClient("http://127.0.0.1:8080/v1", api_key=None)
    client.get_json("/v1/models")                            # raises a RemoteError subclass on failure
    stream = client.stream("/v1/chat/completions", body)     # an EventStream, reading at once

Connect and read timeouts are set once per client. The key (if any) goes in the Authorization header of
requests to this server only: redirects are not followed and errors are scrubbed of it. One client
serves concurrent requests (httpx's connection pool is thread-safe).

Left out: retries, HTTP/2, and proxies' quirks (httpx reads the usual proxy environment variables).
"""
from __future__ import annotations

import time
from typing import Callable
from urllib.parse import urlsplit

import httpx

from .errors import RemoteMalformed, error_for_exception, error_for_status


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

    def stream(self, path: str, body: dict, clock: Callable[[], float] = time.perf_counter):
        from .stream import EventStream
        return EventStream(self, path, body, clock)

    def close(self) -> None:
        self.http.close()
