"""The page's runs on remote servers (`--endpoint`) as a live record: the room's requests seen from this client,
each with the server's own figures beside it.

    record = RemoteRecord(["server @ 127.0.0.1:8080"])
    run = record.add(source.run(prompt, settings), client=page_client("7f3a"), pressed=clicked)   # the same Run
    view = record.since(t0)           # a WorkloadResult: one RemoteRequest per run, times counted from t0
    remote_line(view.records)         # every state counted; what each server reports, the difference named
    server_rows(view.records)         # the table: client-side times beside the server's figures

A remote server batches and queues its requests itself, out of sight: the client sees when it sent a request
and when each event arrived (remote/streamed_run.py, the Steps the page shows), and the server may say what it
did at the end of the stream. So per request: `arrival` is when the person pressed Generate, `admitted` when the
request was sent (the Run's t0), the Steps as the page received them, `finished` when the Run ended (its
`on_end`). Beside them, `ServerFigures` from what the server sent: llama.cpp's `timings` (prompt tokens computed
and reused from its cache, `prompt_ms`, `predicted_ms`, tok/s), vLLM's `metrics` (--enable-per-request-metrics:
queue, time to first token, generation) and `usage` (prompt and cached tokens). A server that sends none has its
figures missing, labelled so, never 0. The client's TTFT from sending less the server's first-token time is
named: llama.cpp times no queue, so the difference is the network and the server's queue; vLLM times its queue,
so what is left is delivery (the network and the event stream).

    >>> t = ServerFigures.of({"timings": {"prompt_n": 8, "cache_n": 29, "prompt_ms": 27.4, "predicted_n": 12,
    ...                                   "predicted_ms": 258.4, "predicted_per_second": 46.4}})
    >>> t.computed_tokens, t.cached_tokens, t.first_token_ms, t.decode_tps, t.short()
    (8, 29, 27.4, 46.4, 'server: prompt 8 + 29 cached in 27 ms · 46.4 tok/s')
    >>> ServerFigures.of({"kind": "openai-compatible"}).short()
    'server figures missing (it sent none)'
    >>> ServerFigures.of({"usage": {"prompt_tokens": 7, "completion_tokens": 3}}).short()
    'server times missing (it sent token counts only)'

The status line also says what each server's own live figures were at their latest sample (`server_now`: requests
summed over its engines, each engine's KV share on its own), read by remote/server_metrics.py's rule.

Left out: the server's own live figures over time (its KV pool, its slots: the Serve tab's concurrent workloads
sample them), and other clients of the same server (a server tells no client about the others).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from ..remote.report import decode_rate, figures_text
from ..trace import COMPLETED, StopReason
from .engine_loop import client_origin
from .records import RequestRecord, WorkloadResult
from .schedulers import Clock
from .shares import ClientNames
from .workload import Request, Workload

LABEL = "the page's requests to remote servers (each server batches them itself; times from this client)"
ADMITTED_MEANS = "the page sent the request to the server (its queue and prefill are inside the TTFT seen here)"
MISSING = "missing"
NOT_YET = "not yet"   # a running request: a server sends its figures with the last event
GAP_QUEUE = "network + queue on the server"   # client TTFT - a server's prompt time that leaves its queue out
GAP_DELIVERY = "delivery: the network and the event stream"   # ... - a server's queue + time to first token
SHORT_MAX_TOKENS = 256   # the same classes as the endpoint's record (serve/traffic.py)


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(value) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ServerFigures:
    """One request as its server reported it (None: the server did not say). Times in ms, as servers send them."""
    kind: str = ""                       # the server's kind ("llama.cpp", "vLLM", …), from the trace
    reports: tuple[str, ...] = ()        # what it sent: "timings" (llama.cpp), "metrics" (vLLM), "usage"
    prompt_tokens: int | None = None     # the prompt as the server counted it, cached ones too
    computed_tokens: int | None = None   # prompt tokens it computed
    cached_tokens: int | None = None     # prompt tokens it reused from its cache
    queue_ms: float | None = None        # waiting in its queue (vLLM)
    first_token_ms: float | None = None  # its prompt time: llama.cpp's prompt_ms, vLLM's time_to_first_token_ms
    decode_ms: float | None = None       # first token -> last: llama.cpp's predicted_ms, vLLM's generation_time_ms
    decode_tps: float | None = None      # llama.cpp's predicted_per_second (none from one token); vLLM: 1000 / mean_itl_ms
    output_tokens: int | None = None

    @classmethod
    def of(cls, server: dict | None) -> "ServerFigures":
        """From a remote trace's `server` dict (remote/steps.py's report: timings, metrics, usage)."""
        s = server or {}
        t = s.get("timings") if isinstance(s.get("timings"), dict) else {}
        m = s.get("metrics") if isinstance(s.get("metrics"), dict) else {}
        u = s.get("usage") if isinstance(s.get("usage"), dict) else {}
        computed, cached = _count(t.get("prompt_n")), _count(t.get("cache_n"))
        if cached is None:
            cached = _count((u.get("prompt_tokens_details") or {}).get("cached_tokens"))
        prompt = _count(u.get("prompt_tokens"))
        if prompt is None and computed is not None:
            prompt = computed + (cached or 0)
        if computed is None and prompt is not None and cached is not None:
            computed = prompt - cached
        itl = _number(m.get("mean_itl_ms"))
        first = _number(t.get("prompt_ms"))
        return cls(kind=str(s.get("kind") or ""),
                   reports=tuple(k for k, v in (("timings", t), ("metrics", m), ("usage", u)) if v),
                   prompt_tokens=prompt, computed_tokens=computed, cached_tokens=cached,
                   queue_ms=_number(m.get("queue_time_ms")),
                   first_token_ms=first if first is not None else _number(m.get("time_to_first_token_ms")),
                   decode_ms=_number(t.get("predicted_ms")) if t else _number(m.get("generation_time_ms")),
                   decode_tps=decode_rate(t) if t else (1e3 / itl if itl else None),
                   output_tokens=_count(t.get("predicted_n")) if t else _count(u.get("completion_tokens")))

    @property
    def missing(self) -> bool:
        """The server sent no per-request figure at all."""
        return not self.reports

    @property
    def server_ttft_ms(self) -> float | None:
        """The server's count of the first token: its queue (where it times one) and its prompt time."""
        if self.first_token_ms is None:
            return None
        return self.first_token_ms + (self.queue_ms or 0.0)

    @property
    def gap_means(self) -> str:
        """What the client's TTFT holds beyond the server's count of it."""
        return GAP_DELIVERY if self.queue_ms is not None else GAP_QUEUE

    def short(self) -> str:
        """The figures in a Gantt row's few words."""
        if self.missing:
            return "server figures missing (it sent none)"
        if self.first_token_ms is None and self.decode_ms is None:
            return "server times missing (it sent token counts only)"
        parts = []
        if self.computed_tokens is not None:
            parts.append(f"prompt {self.computed_tokens:,}" + (f" + {self.cached_tokens:,} cached"
                                                                  if self.cached_tokens else ""))
        if self.first_token_ms is not None:
            parts[-1:] = [(parts[-1] + " in " if parts else "first token in ") + f"{self.first_token_ms:.0f} ms"]
        if self.decode_tps is not None:
            parts.append(f"{self.decode_tps:.1f} tok/s")
        return "server: " + " · ".join(parts)


@dataclass
class RemoteRequest(RequestRecord):
    """One of the page's runs on a remote server: the client-side record, the server's figures beside it."""
    client: str = ""                     # the page session's client name (engine_loop.page_client)
    server_name: str = ""                # the source it ran on ("llama.cpp @ 127.0.0.1:8080")

    @property
    def server(self) -> ServerFigures:
        return ServerFigures.of(self.trace.server if self.trace is not None else None)

    @property
    def client_ttft_ms(self) -> float | None:
        """Sent -> the first token's event, at this client (the server's part and the network's)."""
        return None if self.prefill is None else self.prefill * 1e3

    @property
    def gap_ms(self) -> float | None:
        """The client's TTFT from sending less the server's count of it (None where either is not known)."""
        server = self.server.server_ttft_ms
        return None if server is None or self.client_ttft_ms is None else self.client_ttft_ms - server

    @property
    def server_note(self) -> str:
        """The server's figures on the request's Gantt row (a running request's come with its last event)."""
        if self.stop_reason is None:
            return "server figures come at its end"
        return self.server.short()

    @property
    def server_detail(self) -> str:
        """The client's TTFT beside the server's, the difference named (a Gantt hover)."""
        gap, figures = self.gap_ms, self.server
        if gap is None:
            return ("" if self.stop_reason is None else
                    f"the server's first-token time: {MISSING} (it did not send one); client TTFT from sending "
                    f"{_ms(self.client_ttft_ms)}")
        return (f"client TTFT from sending {_ms(self.client_ttft_ms)} = server {figures.server_ttft_ms:.0f} ms + "
                f"{gap:.0f} ms ({figures.gap_means})")


def _ms(value: float | None) -> str:
    return MISSING if value is None else f"{value:.0f} ms"


def request_class(prompt_tokens: int) -> str:
    """short/long by prompt tokens, as the endpoint's record classes its requests.

    >>> request_class(37), request_class(900)
    ('short', 'long')
    """
    return "short" if prompt_tokens <= SHORT_MAX_TOKENS else "long"


class RemoteRecord:
    """The page's runs on the remote servers named `servers`, kept `keep_s` seconds after they end. `clock`: the
    endpoint's record's, where the app serves one too (so one watch's t0 counts for both)."""

    def __init__(self, servers=(), keep_s: float = 600.0, clock: Clock | None = None):
        self.servers, self.keep_s = list(servers), keep_s
        self.clock = clock or Clock()
        self.result = WorkloadResult("remote", LABEL, ", ".join(self.servers) or "remote servers", Workload(()), [],
                                     admitted_means=ADMITTED_MEANS, started=self.clock.start,
                                     kv_note="a remote server's KV cache: not in this record (the Serve tab's "
                                             "concurrent workloads sample it)")
        self._runs: dict[int, object] = {}   # id(record) -> its Run, while it runs (its t0 is set as it is sent)
        self._next_id = 0
        self._lock = threading.Lock()
        self._names = ClientNames()   # a page session's client name -> "page N", as the other views name it

    def add(self, run, client: str = "", pressed: float | None = None, server: str = ""):
        """Keep `run` (a remote source's Run, just made) as one of the page's requests; `pressed`: perf_counter()
        when its person pressed Generate (default: the run's start); `server`: the source's name in the app (default:
        the trace's backend). Returns the run."""
        trace = run.trace
        with self._lock:
            sent = self.clock.since(run.t0)
            request = Request(self._next_id, request_class(len(trace.prompt_ids)), "", trace.settings.max_new_tokens,
                              sent if pressed is None else min(self.clock.since(pressed), sent), trace.ignore_eos)
            self._next_id += 1
            record = RemoteRequest(request, prompt_tokens=len(trace.prompt_ids), admitted=sent, trace=trace,
                                   origin=client_origin(client) if client else "",
                                   client=self._names(client) if client else "",
                                   server_name=server or trace.backend)
            self.result.records.append(record)
            self._runs[id(record)] = run
            self._forget(self.clock.now() - self.keep_s)
        run.on_end(lambda ended: self._ended(record, ended))
        return run

    def _ended(self, record: RemoteRequest, run) -> None:
        with self._lock:
            record.admitted = self.clock.since(run.t0)
            record.finished = self.clock.now()
            record.stop_reason, record.error = run.trace.stop_reason or StopReason.CANCELLED, run.trace.error
            self._runs.pop(id(record), None)

    def _forget(self, before: float) -> None:
        self.result.records = [x for x in self.result.records if x.finished is None or x.finished >= before]

    def now(self) -> float:
        return self.clock.now()

    def snapshot(self) -> WorkloadResult:
        """A copy to draw from another thread (the Traces are shared, still growing)."""
        with self._lock:
            for record in self.result.records:   # a running request's t0 is set once it is sent
                run = self._runs.get(id(record))
                if run is not None:
                    record.admitted = self.clock.since(run.t0)
            records = [replace(x) for x in self.result.records]
        return replace(self.result, records=records, workload=Workload(tuple(x.request for x in records)),
                       elapsed=self.clock.now())

    def since(self, t0: float) -> WorkloadResult:
        """The requests pressed at t0 or later, every time counted from t0 (Steps count from their sending already)."""
        r = self.snapshot()
        records = [replace(x, request=replace(x.request, arrival=x.arrival - t0), admitted=x.admitted - t0,
                           finished=None if x.finished is None else x.finished - t0)
                   for x in r.records if x.arrival >= t0]
        return replace(r, records=records, workload=Workload(tuple(x.request for x in records)),
                       started=r.started + t0, elapsed=r.elapsed - t0)


def remote_counts(records) -> dict:
    """The page's remote requests by state: sent and running, done, stopped (its person pressed Stop or left),
    failed (the server refused or broke off: the reason is on its row).

    >>> from types import SimpleNamespace as S
    >>> remote_counts([S(stop_reason=StopReason.EOS), S(stop_reason=None), S(stop_reason=StopReason.ERROR)])
    {'requests': 3, 'done': 1, 'running': 1, 'stopped': 0, 'failed': 1}
    """
    return {"requests": len(records), "done": sum(r.stop_reason in COMPLETED for r in records),
            "running": sum(r.stop_reason is None for r in records),
            "stopped": sum(r.stop_reason == StopReason.CANCELLED for r in records),
            "failed": sum(r.stop_reason == StopReason.ERROR for r in records)}


REPORTS = {"timings": "prompt tokens computed and reused from its cache, its prompt time, decode time and tok/s "
                      "(llama.cpp's timings)",
           "metrics": "its queue, time to first token and generation time (vLLM's per-request metrics)",
           "usage": "token counts (usage)"}


def server_says(records, server: str) -> str:
    """What `server` reported of the page's requests that ended there, and what its figures leave to the network.

    >>> from types import SimpleNamespace as S
    >>> rec = lambda **s: S(server_name="llama.cpp @ h:1", stop_reason=StopReason.EOS, server=ServerFigures.of(s))
    >>> server_says([rec(timings={"prompt_ms": 20.0}, usage={"prompt_tokens": 3})], "llama.cpp @ h:1")[:90]
    'llama.cpp @ h:1 (remote) reports per request: prompt tokens computed and reused from its c'
    >>> server_says([rec(timings={"prompt_ms": 20.0})], "llama.cpp @ h:1").split("; ")[-1]
    'no queue time: client TTFT − its prompt time = network + queue on the server'
    >>> server_says([rec()], "llama.cpp @ h:1")
    'llama.cpp @ h:1 (remote) sends no per-request figures: they are marked missing (never 0)'
    >>> server_says([rec(usage={"prompt_tokens": 7})], "llama.cpp @ h:1")
    'llama.cpp @ h:1 (remote) reports token counts only (usage): its times are marked missing (never 0)'
    >>> server_says([], "vLLM @ gpu:8000")
    'vLLM @ gpu:8000 (remote): what it reports is known once a request of this page has ended there'
    """
    ended = [r for r in records if r.server_name == server and r.stop_reason is not None]
    if not ended:
        return f"{server} (remote): what it reports is known once a request of this page has ended there"
    seen = [r.server for r in ended]
    reports = {k for f in seen for k in f.reports}
    kinds = sorted({f.kind for f in seen if f.kind and f.kind not in server})
    server = f"{server} ({', '.join(kinds)})" if kinds else server
    if not reports:
        return f"{server} (remote) sends no per-request figures: they are marked missing (never 0)"
    if not reports & {"timings", "metrics"}:
        return f"{server} (remote) reports token counts only (usage): its times are marked missing (never 0)"
    said = ", ".join(REPORTS[k] for k in REPORTS if k in reports)
    queue = any(f.queue_ms is not None for f in seen)
    rest = (f"its queue timed: client TTFT − (queue + its time to first token) = {GAP_DELIVERY}" if queue else
            f"no queue time: client TTFT − its prompt time = {GAP_QUEUE}")
    return f"{server} (remote) reports per request: {said}; {rest}"


def server_now(records, server: str) -> str:
    """The latest of `server`'s own live figures sampled during the page's requests there (its /metrics, /slots), in
    words: requests summed over its engines, each engine's KV share on its own; "" where none was sampled.

    >>> from types import SimpleNamespace as S
    >>> sample = {"time": 0.5, "when": "during the run", "running": 3.0, "waiting": 0.0, "engines": 2,
    ...           "kv_pool_used_share": 0.45, "kv_pool_used_share_by_engine": {"0": 0.3, "1": 0.6}}
    >>> r = S(server_name="vLLM @ gpu:8000", admitted=2.0, trace=S(server={"samples": [sample]}))
    >>> server_now([r], "vLLM @ gpu:8000")[:88]
    'vLLM @ gpu:8000 said at 2.5 s: 3 requests running, 0 waiting (summed over its 2 engines)'
    >>> server_now([r], "llama.cpp @ h:1")
    ''
    """
    latest, at = None, None
    for r in records:
        if r.server_name != server or getattr(r, "trace", None) is None:
            continue
        for sample in (r.trace.server or {}).get("samples") or []:
            when = r.admitted + sample.get("time", 0.0)
            if at is None or when >= at:
                latest, at = sample, when
    said = figures_text(latest) if latest else ""
    return f"{server} said at {at:.1f} s: {said}" if said else ""


def remote_line(records, servers=()) -> str:
    """The Watch view's status for the page's remote requests: every state counted (a zero too), output tokens as
    this client counted them, then what each server reports.

    >>> from types import SimpleNamespace as S
    >>> print(remote_line([S(stop_reason=None, output_tokens=4, server_name="s @ h:1")], ["s @ h:1"]))
    1 request from this page to remote servers: 0 done · 1 running · 0 stopped · 0 failed · 4 output tokens · s @ h:1 (remote): what it reports is known once a request of this page has ended there
    """
    c = remote_counts(records)
    names = list(dict.fromkeys([*servers, *(r.server_name for r in records)]))
    return (f"{c['requests']} request{'s' * (c['requests'] != 1)} from this page to remote servers: {c['done']} done · "
            f"{c['running']} running · {c['stopped']} stopped · {c['failed']} failed · "
            f"{sum(r.output_tokens for r in records)} output tokens"
            + "".join(f" · {server_says(records, name)}" for name in names)
            + "".join(f" · {now}" for now in (server_now(records, name) for name in names) if now))


SERVER_HEADERS = ["id", "origin", "server", "sent (s)", "client TTFT from sending (ms)", "server's first token (ms)",
                  "difference (ms)", "difference is", "prompt tokens: computed + cached (server)",
                  "decode (ms, server)", "decode tok/s (server)", "tokens: client / server", "end"]


def server_rows(records) -> list[list]:
    """One row per request: the client's times beside the server's own figures ("missing" where it sent none,
    "not yet" while the request runs: a server sends them at the end).

    >>> from types import SimpleNamespace as S
    >>> f = ServerFigures.of({"timings": {"prompt_n": 8, "cache_n": 29, "prompt_ms": 27.0, "predicted_n": 4,
    ...                                   "predicted_ms": 60.0, "predicted_per_second": 66.7}})
    >>> r = S(request=S(id=0), origin="page", server_name="llama.cpp @ h:1", admitted=0.5, client_ttft_ms=41.0,
    ...       gap_ms=14.0, server=f, output_tokens=4, stop_reason=StopReason.EOS)
    >>> server_rows([r])[0]
    [0, 'page', 'llama.cpp @ h:1', 0.5, 41, 27, 14, 'network + queue on the server', '8 + 29', 60, 66.7, '4 / 4', 'eos']
    >>> server_rows([S(**{**vars(r), "server": ServerFigures.of({}), "gap_ms": None})])[0][5:11]
    ['missing', 'missing', '—', 'missing', 'missing', 'missing']
    """
    rows = []
    for r in records:
        f, absent = r.server, NOT_YET if r.stop_reason is None else MISSING

        def shown(v, digits=0):
            return absent if v is None else round(v, digits) if digits else round(v)
        prompt = (absent if f.computed_tokens is None else
                  f"{f.computed_tokens:,} + {f.cached_tokens if f.cached_tokens is not None else MISSING}")
        rows.append([r.request.id, r.origin or "—", r.server_name, round(r.admitted, 3), shown(r.client_ttft_ms),
                     shown(f.server_ttft_ms), shown(r.gap_ms), f.gap_means if r.gap_ms is not None else "—", prompt,
                     shown(f.decode_ms), shown(f.decode_tps, 1),
                     f"{r.output_tokens} / {f.output_tokens if f.output_tokens is not None else absent}",
                     str(r.stop_reason or "running")])
    return rows
