"""The app in a subprocess, seen from outside: bytes on the wire, the server's CPU, a paced step source.

    with AppProcess(["app.py", "--backend", "onnx"]) as app:   # or AppProcess.paced(steps_per_s=100)
        client = Client(app.url)                               # through the counting proxy
        before = app.sample()                                  # (wall time, server CPU s, SSE bytes, SSE events)
        ...; after = app.sample()

`CountingProxy` is a loopback TCP proxy between the client and the app: it counts the bytes the app
sends back as they cross it, those of its SSE streams apart (headers and every event, as received, not
re-serialized; downloads of exported files are not among them), and the SSE events (each ends with a
blank line). The server's CPU is psutil's user + system time of
its process. `PacedEngine` makes Steps at a fixed pace with no model behind them (sleeping between
steps): served by the app, all the server's CPU is then the UI's, which is what the 2048-step check reads.

Left out: the rows themselves (bench_ui.py).
"""
from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .engine import Engine
from .trace import Candidate, Step

ROOT = Path(__file__).resolve().parents[1]
WORDS = [" the", " KV", " cache", " keeps", " keys", " and", " values", " of", " past", " tokens", ",", " so",
         " each", " decode", " step", " reads", " them", " instead", " of", " recomputing", " attention", "."]


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


class AppProcess:
    """`python ARGS --port P` (app.py by default) in a subprocess, with a CountingProxy in front of it."""

    def __init__(self, args: list[str], start_timeout: float = 300):
        import psutil
        self.port, self.log = _free_port(), tempfile.TemporaryFile()   # a file: a full pipe would block the app
        self.process = subprocess.Popen([sys.executable, *args, "--port", str(self.port)], cwd=ROOT,
                                        stdout=self.log, stderr=subprocess.STDOUT)
        self.server = psutil.Process(self.process.pid)
        self._wait_until_up(start_timeout)
        self.proxy = CountingProxy(self.port)
        self.url = f"http://127.0.0.1:{self.proxy.port}/"

    @classmethod
    def paced(cls, steps_per_s: float) -> "AppProcess":
        """The app over a PacedEngine (no model: every CPU second of the server is the UI's)."""
        return cls(["-m", "playground.bench_wire", "--steps-per-s", str(steps_per_s)])

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
        self.proxy.close()
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


class PacedEngine(Engine):
    """The tiny model's tokenizer and shapes, but Steps made at `steps_per_s` with no forward pass: a word
    per step, five candidates, KV bytes from the formula. What the app does with them is all it costs."""

    def __init__(self, backend, steps_per_s: float):
        super().__init__(backend)
        self.period = 1.0 / steps_per_s

    def _steps(self, run, prefix=None):
        trace, prev, shape = run.trace, run.t0, self.backend.kv_shape
        for i in range(trace.settings.max_new_tokens):
            time.sleep(max(0.0, run.t0 + (i + 1) * self.period - self.clock()))   # on schedule, whatever else runs
            now, seq_len = self.clock(), len(trace.prompt_ids) + i + 1
            top = tuple(Candidate(100 + (i + j) % len(WORDS), WORDS[(i + j) % len(WORDS)], 0.5 / (j + 1), 1.0 * (j == 0))
                        for j in range(5))
            step = Step(index=i, token_id=top[0].token_id, text=top[0].text, special=False, phase="prefill" if i == 0 else "decode", time=now - run.t0,
                        latency=now - prev, prob=0.5, sample_prob=1.0, top=top, seq_len=seq_len, kv_bytes=shape.formula_bytes(seq_len), wall_ns=time.time_ns())
            prev = now
            trace.steps.append(step)
            yield step
            if run.cancelled:
                trace.stop_reason = "cancelled"
                return
        trace.stop_reason = "length"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_paced(argv: list[str]) -> None:
    """`python -m playground.bench_wire --steps-per-s N --port P`: the app over a PacedEngine."""
    import argparse

    from .backends import create_backend
    from .ui import GENERATE_CONCURRENCY, app_kwargs, build_demo
    p = argparse.ArgumentParser(prog="python -m playground.bench_wire")
    p.add_argument("--steps-per-s", type=float, default=100.0)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    demo = build_demo(PacedEngine(create_backend("torch", "tiny", device="cpu", dtype="float32"), args.steps_per_s))
    demo.queue(default_concurrency_limit=GENERATE_CONCURRENCY).launch(server_name="127.0.0.1", server_port=args.port,
                                                                  app_kwargs=app_kwargs())


if __name__ == "__main__":
    serve_paced(sys.argv[1:])
