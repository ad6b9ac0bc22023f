"""The records every view reads: one `Step` per generated token, and the `Trace` of a whole run.

One stream of Steps is the single source of truth: token chips, metrics, charts, exports and the
benchmarks all read these records, and nothing is computed twice. Times are seconds since the request
started (t0), taken after the token is available (after a CUDA synchronize on GPU).

Probabilities: `prob` is the model's own (softmax of the logits at temperature 1, before any warper);
`sample_prob` is the one the token was drawn with (after temperature, top-k, top-p). Exports name both.

Left out: batching; a Trace is one request (a workload holds many, see serve/).
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field
from enum import Enum

from .config import GenerationSettings


class TextEnum(str, Enum):
    """An enum whose members are their strings: equal to, printed, formatted and serialized as the value.

    The same as Python 3.11's `enum.StrEnum`.

    >>> class Colour(TextEnum):
    ...     RED = "red"
    >>> Colour.RED == "red", str(Colour.RED), f"{Colour.RED}", "{:>4}".format(Colour.RED), Colour("red")
    (True, 'red', 'red', ' red', <Colour.RED: 'red'>)
    >>> import json; json.dumps({"c": Colour.RED})
    '{"c": "red"}'
    """

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Phase(TextEnum):
    """Which pass made a token: the prompt's prefill (the first token) or one decode step.

    A TextEnum: it compares equal to, and serializes as, its value, so exports keep their text.

    >>> Phase.DECODE == "decode", f"{Phase.DECODE}", Phase("decode") is Phase.DECODE
    (True, 'decode', True)
    """
    PREFILL = "prefill"
    DECODE = "decode"


class StopReason(TextEnum):
    """Why a run ended (`Trace.stop_reason`; None while it runs). Serialized as its string.

    >>> [r.value for r in StopReason]
    ['eos', 'length', 'context', 'cancelled', 'error']
    >>> StopReason.LENGTH in COMPLETED, StopReason.CANCELLED in COMPLETED
    (True, False)
    """
    EOS = "eos"              # the model emitted an end-of-sequence token
    LENGTH = "length"        # max_new_tokens reached
    CONTEXT = "context"      # the context window is full
    CANCELLED = "cancelled"  # the user (or a closed page) stopped it
    ERROR = "error"          # the source failed; Trace.error says how


@dataclass(frozen=True)
class KVShape:
    """What the KV-cache formula needs: 2 x layers x kv_heads x head_dim x seq_len x bytes_per_element."""
    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_element: int

    def formula_bytes(self, seq_len: int) -> int:
        """The estimate drawn beside the measurement (labelled 'formula' wherever it is shown)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * seq_len * self.bytes_per_element


@dataclass(frozen=True)
class Candidate:
    token_id: int | None               # None: the source named the token only by its text
    text: str
    prob: float                        # the model's probability: softmax of the logits at temperature 1
    sample_prob: float | None = None   # under the sampling distribution (after temperature, top-k, top-p)


@dataclass(frozen=True, kw_only=True)
class Step:
    """One output token (or, from a remote server, one streamed event carrying `tokens` tokens).

    Optional fields are None where the source cannot give them (a server without logprobs has no
    `top`; a client cannot measure a server's KV cache): views label them missing, never zero.
    """
    index: int                  # 0 for the first output token
    token_id: int | None        # None: the source did not say which token it was
    text: str                   # UTF-8-safe piece: "" while a character is incomplete, whole once it completes
    special: bool               # a special token (e.g. <|im_end|>): shown, but not part of the answer text
    phase: Phase                # PREFILL (the first token) | DECODE
    time: float                 # t_i - t0, seconds
    latency: float              # t_i - t_(i-1); for the first token, TTFT
    prob: float | None          # the model's probability of this token (softmax at temperature 1, before warpers)
    sample_prob: float | None   # the probability it was drawn with (after the warpers; greedy: 1.0)
    top: tuple[Candidate, ...] | None  # the model's most likely next tokens, best first; None: not given
    seq_len: int | None         # tokens held in the KV cache after this step's forward pass
    kv_bytes: int | None        # measured: summed over the real cache tensors after this step; None: not measurable
    wall_ns: int = 0            # time.time_ns() when the token was available (comparable with a browser's Date.now())
    tokens: int = 1             # output tokens this step carries (a server's event may carry several)
    cpu: float | None = None    # CPU seconds this process spent on the step (local sources)
    rows: int | None = None     # rows of the forward pass that made the token (a batch: one per request)
    graph: str | None = None    # which graph ran that pass (continuous batching: "decode graph" | "prefill graph")
    draft: str | None = None    # speculative decoding: "accepted" (a proposal the model agreed with) | "replaced"
    #                             (the model's own token where it rejected the proposal) | None (no proposal)
    forward_pass: int | None = None   # speculative decoding: which forward pass made the token (0: prefill)
    thinking: bool = False      # the model's thinking, not its answer: a reasoning server's `reasoning` (vLLM's
    #                             name; `reasoning_content` before, llama.cpp's) streamed before the answer


COMPLETED = (StopReason.EOS, StopReason.LENGTH, StopReason.CONTEXT)   # a run that ended on its own


@dataclass
class Trace:
    prompt: str                     # what the user typed ("" for a run from exact token ids)
    prompt_text: str                # what the model reads (chat template applied when settings.chat)
    prompt_ids: list[int]           # the exact ids the model reads (a remote source: as its tokenizer says)
    settings: GenerationSettings
    backend: str                    # the step source's name, e.g. "torch", "onnx-int8", "llama.cpp @ host"
    device: str
    dtype: str
    model: str
    kv_shape: KVShape | None        # None: the model's shape is unknown (no KV formula to draw)
    tokenize_time: float = 0.0      # seconds from t0 until the prompt was tokenized
    steps: list[Step] = field(default_factory=list)
    stop_reason: StopReason | str | None = None  # None while running; a str: a server's own finish_reason
    error: str | None = None
    seed: int | None = None         # the sampler's seed: the one asked for, or the one it drew
    ignore_eos: bool = False        # the run went on past end-of-sequence tokens (experiments)
    use_cache: bool = True          # False: every step re-read the whole context (no KV cache)
    cached_tokens: int = 0          # prompt tokens served from a cached prefix (not prefilled by this run)
    queued: float | None = None     # seconds it waited before t0: for a KV slot in a batching engine, for a CPU
    #                                 slot on the page; None: not measured (a run started where it was asked)
    waits: object = None            # continuous batching: a wait_parts.WaitParts, where the time from its arrival to
    #                                 its first token went on the server (set at its first token); None: not measured
    prefill_chunk: int | None = None   # prompt tokens one pass computes at most (continuous batching reads a longer
    #                                    prompt in chunks, between other requests' steps); None: all in one pass
    replay: dict = field(default_factory=dict)  # what a replay must match: runtime, threads, CPU, versions
    speculation: dict = field(default_factory=dict)  # speculative decoding: settings and counts (speculative.py)
    server: dict = field(default_factory=dict)  # a remote source's own figures, labelled by origin (remote/);
    #                                             the endpoint's (api/): received_ns, the client's x_request_id
    cache: dict = field(default_factory=dict)   # a conversation's turn in the engine loop: the record of its prefix
    #                                             cache lookup (serve/cache_miss.py); empty: none was made

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.steps if not s.special)

    @property
    def output_ids(self) -> list[int | None]:
        return [s.token_id for s in self.steps]

    @property
    def output_tokens(self) -> int:
        return sum(s.tokens for s in self.steps)

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    def metrics(self):
        from .metrics import compute_metrics
        return compute_metrics(self)

    # --- export

    FIELDS = {  # what the exported step fields mean (written into every JSON export)
        "prob": "the model's probability of the token: softmax of the logits at temperature 1, before any warper",
        "sample_prob": "the probability the token was drawn with: after the warpers (temperature, top-k, top-p); "
                       "1.0 for greedy",
        "top": "the model's most likely next tokens (prob as above; sample_prob under the sampling distribution)",
        "kv_bytes": "measured from the runtime's cache tensors after the step; null: the source cannot measure it",
        "time": "seconds from the request start (t0) until the token was available",
        "queued": "seconds the request waited before t0 (a KV slot in the engine loop, a CPU slot on the page): "
                  "time to first token from the request's arrival is queued + the first step's time; null: "
                  "not measured",
        "waits": "continuous batching: the time from the request's arrival in the engine to its first token in "
                 "named parts, each with its clock (server: the engine loop's marks; the reasons it waited for a KV "
                 "slot are the batcher's plans'); they add up to server_ttft; null: not measured",
        "prefill_chunk": "prompt tokens one pass computed at most (continuous batching); null: the prompt in one pass",
        "wall_ns": "time.time_ns() when the token was available",
        "tokens": "output tokens the step carries (a server's streamed event may carry several)",
        "rows": "rows of the forward pass that made the token (continuous batching: one per request in it); "
                "null: not reported",
        "graph": "which graph ran that forward pass (continuous batching); null: not reported",
        "draft": "speculative decoding: accepted (a proposed token the model's own pick agreed with), replaced "
                 "(the model's pick where it rejected the proposal) or null (nothing was proposed for it)",
        "forward_pass": "speculative decoding: which forward pass made the token (0: prefill; several tokens "
                        "can share one)",
        "speculation": "speculative decoding: k, ngram, forward passes, tokens proposed and accepted",
        "thinking": "the step is the model's thinking (a reasoning server's `reasoning` / `reasoning_content`), not "
                    "its answer: shown, not part of the answer's text",
        "replay": "what a replay must match: backend, dtype, threads, CPU features, library versions; with seed",
        "server": "a remote source: what the server itself reported (usage, timings, metrics, slots), "
                  "each labelled by origin; the step times are measured at the client on each event's arrival. "
                  "This app's OpenAI-compatible endpoint: received_ns (time.time_ns() when its route received "
                  "the request) and the client's x_request_id (its X-Request-ID header)",
        "cache": "a conversation's turn in this app's engine loop: the record of its prefix-cache lookup (what the "
                 "cache held for the conversation, what it found, the first token where the prompt parted from it "
                 "and why); empty: no record was made",
    }

    def to_dict(self) -> dict:
        d = asdict(self)
        d["text"] = self.text
        d["waits"] = self.waits.as_dict() if self.waits is not None else None
        d["metrics"] = asdict(self.metrics())
        d["fields"] = dict(self.FIELDS)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=1)

    CSV_COLUMNS = ("index", "token_id", "text", "special", "phase", "tokens", "time_s", "latency_s", "wall_ns",
                   "model_prob_T1", "sample_prob", "seq_len", "kv_bytes_measured", "kv_bytes_formula_estimate",
                   "top_k_model_prob_T1", "first_token_parts_s")

    def to_csv(self) -> str:
        """One row per step; an empty cell is a figure this source does not give (never a zero). The first row's
        last cell: where the time to it went (`waits`: each part, its seconds and its clock)."""
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(self.CSV_COLUMNS)
        parts = "" if self.waits is None else " | ".join(f"{p.key}={p.seconds:.6f} ({p.clock})"
                                                          for p in self.waits.named())
        for s in self.steps:
            top = "" if s.top is None else " | ".join(f"{c.token_id}:{c.text!r}:{c.prob:.4f}" for c in s.top)
            formula = self.kv_shape.formula_bytes(s.seq_len) if self.kv_shape and s.seq_len is not None else ""
            writer.writerow([s.index, _cell(s.token_id), s.text, s.special, s.phase, s.tokens, f"{s.time:.6f}",
                             f"{s.latency:.6f}", s.wall_ns, _cell(s.prob, "{:.6f}"), _cell(s.sample_prob, "{:.6f}"),
                             _cell(s.seq_len), _cell(s.kv_bytes), formula, top, parts if s.index == 0 else ""])
        return out.getvalue()


def _cell(value, fmt: str = "{}") -> str:
    return "" if value is None else fmt.format(value)
