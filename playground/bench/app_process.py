"""The app in a subprocess, seen from outside: its URL through a counting proxy, the server's CPU.

    with AppProcess(["app.py", "--backend", "onnx"]) as app:   # or AppProcess.paced(steps_per_s=100)
        client = Client(app.url)                               # through the counting proxy
        before = app.sample()                                  # (wall time, server CPU s, SSE bytes, SSE events)
        ...; after = app.sample()

The server's CPU is psutil's user + system time of its process; the bytes and events are the
CountingProxy's (proxy.py: downloads of exported files are not among the SSE bytes).

Left out: the rows themselves (ui.py).
"""
from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..ports import free_port
from .proxy import CountingProxy

ROOT = Path(__file__).resolve().parents[2]


class AppProcess:
    """`python ARGS --port P` (app.py by default) in a subprocess, with a CountingProxy in front of it (`proxied`;
    without, `url` is the app's own port); `env`: its environment (default: this one)."""

    def __init__(self, args: list[str], start_timeout: float = 300, env: dict | None = None, proxied: bool = True):
        import psutil
        self.port, self.log = free_port(), tempfile.TemporaryFile()   # a file: a full pipe would block the app
        self.process = subprocess.Popen([sys.executable, *args, "--port", str(self.port)], cwd=ROOT,
                                        stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.server = psutil.Process(self.process.pid)
        self._wait_until_up(start_timeout)
        self.proxy = CountingProxy(self.port) if proxied else None
        self.url = f"http://127.0.0.1:{self.proxy.port if proxied else self.port}/"

    @classmethod
    def paced(cls, steps_per_s: float) -> "AppProcess":
        """The app over a PacedEngine (paced.py; no model: every CPU second of the server is the UI's)."""
        return cls(["-m", "playground.bench", "paced-app", "--steps-per-s", str(steps_per_s)])

    def _wait_until_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"the app exited: {self.log.read().decode(errors='replace')[-800:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"the app did not start within {timeout:.0f} s")

    def sample(self) -> tuple[float, float, int, int]:
        """(wall-clock time, server CPU seconds so far, SSE bytes received so far, SSE events so far)."""
        cpu = self.server.cpu_times()
        return time.time(), cpu.user + cpu.system, self.proxy.sse, self.proxy.events

    def __enter__(self) -> "AppProcess":
        return self

    def __exit__(self, *exc) -> None:
        if self.proxy is not None:
            self.proxy.close()
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
