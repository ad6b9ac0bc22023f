"""What a workload run leaves: one `RequestRecord` per request, the scheduler's batches, KV use over time.

Times are seconds since the workload started (one perf_counter clock for every scheduler). Per request:

    arrival ──waiting──► admitted ──prefill (TTFT from admission)──► first token ──decode──► last token
    waiting + prefill + decode = E2E (= last token - arrival);  TTFT = first token - arrival

`admitted` is when the scheduler began the request's prefill (a remote source: when it was sent; the
server's own queue is then inside the prefill time, and `admitted_means` says so). The request's Steps
live in `trace` (Step.time = seconds since admission), so `trace.metrics()` gives TTFT-from-admission,
TPOT and ITL with the project's one set of definitions. `chunks` are the prefill pieces a chunked-prefill
scheduler ran (start, end, prompt tokens); empty where the prefill was one piece not seen from outside.
With prefix caching, `cache_copies` are the copies of cached blocks into its KV slot (start, end, prompt
tokens copied): at admission, and before a chunk when another request has cached more of the same
beginning meanwhile; `cached_tokens` says how many prompt tokens it did not compute.
Our batching says where the time to the first token went (`wait_parts`: the Trace's, wait_parts.py: the wait for a
slot by the batcher's reasons, cached tokens copied, its chunks computed, other requests' steps), and while a
request waits for a slot what for (`waiting_for`: the latest plan's reason).
Under a KV budget a request may be preempted: each `Preemption` says after which output token its KV
was dropped, when it was admitted again, what was copied back from the prefix cache and its recompute's
passes (the request's Steps go on where they stopped: the token after it is the recompute's).

Left out: summaries across requests (summary.py) and drawing (charts/serve.py).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ..trace import Phase, StopReason, Trace
from .workload import Request, Workload


@dataclass
class Preemption:
    """A request's KV dropped under a KV budget, then recomputed (seconds since the workload started)."""
    at: float                         # when its KV was dropped
    after_tokens: int                 # output tokens it had made: the event comes after Step after_tokens - 1
    positions: int                    # KV positions dropped
    resumed: float | None = None      # when it was admitted again (None: not yet, or never)
    cached: int = 0                   # positions copied back from the prefix cache on resuming
    copy: tuple[float, float] | None = None                           # that copy (start, end)
    chunks: list[tuple[float, float, int]] = field(default_factory=list)   # its recompute's passes

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RequestRecord:
    request: Request
    prompt_tokens: int | None = None     # after the chat template (None: the source has no tokenizer here)
    admitted: float | None = None        # None: never started (cancelled while waiting)
    trace: Trace | None = None
    chunks: list[tuple[float, float, int]] = field(default_factory=list)
    finished: float | None = None        # when the scheduler saw the request end (last token, cancel, error)
    stop_reason: StopReason | None = None
    error: str | None = None
    cache_copies: list[tuple[float, float, int]] = field(default_factory=list)   # cached blocks copied in
    preemptions: list[Preemption] = field(default_factory=list)
    origin: str = ""                     # who sent it, where a room's record tells them apart: "page" | "API"
    client: str = ""                     # and which of them, by a name that identifies no one: "page 2", "client 3"
    alone: str = ""                      # why it ran outside the room's engine loop, on a CPU slot of its own
    # (traffic.AloneReason: "speculative decoding"); "": it ran in the loop, or the record is no room's
    session: object = None               # the sessions.Session the request named (the endpoint's), or None
    released: float | None = None        # when a session's later turn was released (its predecessor's end + its
    #                                      delay, or later); None: released at its arrival
    waiting_for: str | None = None       # our batching, while it waits for a slot: the latest plan's reason
    gap_blocks: dict | None = None       # our batching, a session's later turn: its previous turn's blocks in the
    #                                      prefix cache when it was released (PrefixCache.chain_state), measured

    @property
    def wait_parts(self):
        """Our batching: where its time from arrival to its first token went, in parts (wait_parts.WaitParts; its
        wait for a slot alone until the first token); None: not measured."""
        return getattr(self.trace, "waits", None) if self.trace is not None else None

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache at its admission (not prefilled)."""
        return self.trace.cached_tokens if self.trace is not None else 0

    @property
    def steps(self):
        return self.trace.steps if self.trace is not None else []

    @property
    def arrival(self) -> float:
        """When it was released: a session's later turn when its harness released it, else its planned arrival."""
        return self.request.arrival if self.released is None else self.released

    @property
    def first_token(self) -> float | None:
        steps = self.steps
        return self.admitted + steps[0].time if steps else None

    @property
    def first_answer_token(self) -> float | None:
        """When the first answer token came (a reasoning server's thinking before it left out): the first token's
        time where nothing was thought."""
        answer = next((s for s in self.steps if not s.thinking), None)
        return None if answer is None else self.admitted + answer.time

    @property
    def last_token(self) -> float | None:
        steps = self.steps
        return self.admitted + steps[-1].time if steps else None

    @property
    def waiting(self) -> float | None:
        return None if self.admitted is None else self.admitted - self.arrival

    @property
    def prefill(self) -> float | None:
        """TTFT from admission."""
        steps = self.steps
        return steps[0].time if steps else None

    @property
    def decode(self) -> float | None:
        steps = self.steps
        return steps[-1].time - steps[0].time if steps else None

    @property
    def ttft(self) -> float | None:
        first = self.first_token
        return None if first is None else first - self.arrival

    @property
    def ttft_answer(self) -> float | None:
        """Arrival -> the first answer token (TTFT is the first token: a reasoning server's first thought)."""
        first = self.first_answer_token
        return None if first is None else first - self.arrival

    @property
    def thinking_tokens(self) -> int:
        return sum(s.tokens for s in self.steps if s.thinking)

    @property
    def e2e(self) -> float | None:
        last = self.last_token
        return None if last is None else last - self.arrival

    @property
    def output_tokens(self) -> int:
        return sum(s.tokens for s in self.steps)

    @property
    def tpot(self) -> float | None:
        return self.trace.metrics().tpot if self.steps else None

    def token_times(self) -> list[tuple[float, int]]:
        """(time since the workload started, tokens) per Step."""
        return [(self.admitted + s.time, s.tokens) for s in self.steps]

    def to_dict(self) -> dict:
        keys = ("arrival", "admitted", "first_token", "last_token", "finished", "waiting", Phase.PREFILL,
                Phase.DECODE, "ttft", "ttft_answer", "tpot", "e2e", "output_tokens", "thinking_tokens")
        return {"id": self.request.id, "class": self.request.cls, "request": asdict(self.request),
                "prompt_tokens": self.prompt_tokens, **{k: getattr(self, k) for k in keys},
                "prefill_chunks": [{"start": a, "end": b, "tokens": n} for a, b, n in self.chunks],
                "stop_reason": self.stop_reason, "error": self.error, "cached_tokens": self.cached_tokens,
                "cache_copies": [{"start": a, "end": b, "tokens": n} for a, b, n in self.cache_copies],
                "preemptions": [p.to_dict() for p in self.preemptions],
                "first_token_parts": None if self.wait_parts is None else self.wait_parts.as_dict(),
                "waiting_for": self.waiting_for, "gap_blocks": self.gap_blocks,
                "session": None if self.session is None else self.session.to_dict(),
                "trace": self.trace.to_dict() if self.trace is not None else None}


@dataclass(frozen=True)
class BatchStep:
    """One forward pass of a batching scheduler: which requests it carried and what it cost."""
    start: float
    end: float
    requests: int
    prefill_tokens: int     # prompt tokens read in this pass (chunks of one or more prefills)
    decode_tokens: int      # requests that each decoded one token
    blocks_used: int        # KV blocks allocated after the pass


@dataclass
class WorkloadResult:
    scheduler: str                   # registry name: "one-at-a-time" | "batching" | "concurrent"
    scheduler_label: str
    source: str                      # the step source, described
    workload: Workload
    records: list[RequestRecord]
    admitted_means: str = "the scheduler began the request's prefill"
    batches: list[BatchStep] = field(default_factory=list)
    kv: list[tuple[float, float]] = field(default_factory=list)   # (time, KV in use), measured
    kv_unit: str | None = None       # "blocks" | "bytes" | "fraction"; None: not measured (labelled missing)
    kv_total: float | None = None    # the pool's size in kv_unit (None: no fixed pool)
    kv_note: str = ""                # where the KV figure comes from
    pool: dict | None = None         # the batching scheduler's KV pool (blocks or slots), as sized
    slot_map: list[tuple[float, tuple[tuple[int, int, int], ...]]] = field(default_factory=list)
    # after each iteration of continuous batching on ONNX Runtime: (time, ((slot, request id, positions), ...))
    cache_map: list = field(default_factory=list)
    # the prefix cache when it changed: (time, blocks kept, ((request id, (ids of the blocks it holds)), ...))
    notes: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    cancelled: bool = False
    done: bool = False
    started: float | None = None     # perf_counter() at the start (a live view's "now"; not exported)

    def now(self) -> float | None:
        """Seconds since the workload started (its end once done); None before it starts."""
        return self.elapsed if self.done else None if self.started is None else time.perf_counter() - self.started

    def to_dict(self, with_traces: bool = True) -> dict:
        from .summary import summarize
        records = [r.to_dict() for r in self.records]
        if not with_traces:
            for r in records:
                r.pop("trace")
        return {"scheduler": self.scheduler, "scheduler_label": self.scheduler_label, "source": self.source,
                "admitted_means": self.admitted_means, "workload": self.workload.to_dict(),
                "summary": summarize(self), "batches": [asdict(b) for b in self.batches],
                "kv": {"unit": self.kv_unit, "total": self.kv_total, "note": self.kv_note,
                       "samples": [list(p) for p in self.kv]},
                "pool": self.pool, "slot_map": [[t, [list(h) for h in held]] for t, held in self.slot_map],
                "prefix_cache_map": [[t, n, [[rid, list(ids)] for rid, ids in held]] for t, n, held in self.cache_map],
                "notes": self.notes, "elapsed": self.elapsed, StopReason.CANCELLED: self.cancelled,
                "requests": records}


def new_result(scheduler, source: str, workload: Workload) -> WorkloadResult:
    return WorkloadResult(scheduler.name, scheduler.label, source, workload,
                          [RequestRecord(r) for r in workload.requests])
