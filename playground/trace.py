"""The records every view reads: one `Step` per generated token, and the `Trace` of a whole run.

One stream of Steps is the single source of truth: token chips, metrics, charts, exports and the
benchmarks all read these records, and nothing is computed twice. Times are seconds since the request
started (t0), taken after the token is available (after a CUDA synchronize on GPU).

Left out: batching; a Trace is one request with batch size 1.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field

from .config import GenerationSettings


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
    token_id: int
    text: str
    prob: float


@dataclass(frozen=True)
class Step:
    index: int          # 0 for the first output token
    token_id: int
    text: str           # UTF-8-safe piece: "" while a character is incomplete, whole once it completes
    special: bool       # a special token (e.g. <|im_end|>): shown, but not part of the answer text
    phase: str          # "prefill" (the first token) | "decode"
    time: float         # t_i - t0, seconds
    latency: float      # t_i - t_(i-1); for the first token, TTFT
    prob: float         # probability of the chosen token in the distribution it was drawn from
    top: tuple[Candidate, ...]  # the most likely next tokens in that distribution, best first
    seq_len: int        # tokens held in the KV cache after this step's forward pass
    kv_bytes: int       # measured: summed over the real cache tensors after this step


@dataclass
class Trace:
    prompt: str                     # what the user typed
    prompt_text: str                # what the model reads (chat template applied when settings.chat)
    prompt_ids: list[int]
    settings: GenerationSettings
    backend: str                    # e.g. "torch", "onnx-int8"
    device: str
    dtype: str
    model: str
    kv_shape: KVShape
    tokenize_time: float = 0.0      # seconds from t0 until the prompt was tokenized
    steps: list[Step] = field(default_factory=list)
    stop_reason: str | None = None  # None while running; "eos" | "length" | "context" | "cancelled" | "error"
    error: str | None = None

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.steps if not s.special)

    @property
    def output_ids(self) -> list[int]:
        return [s.token_id for s in self.steps]

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    def metrics(self):
        from .metrics import compute_metrics
        return compute_metrics(self)

    # --- export

    def to_dict(self) -> dict:
        d = asdict(self)
        d["text"] = self.text
        d["metrics"] = asdict(self.metrics())
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=1)

    CSV_COLUMNS = ("index", "token_id", "text", "special", "phase", "time", "latency", "prob",
                   "seq_len", "kv_bytes", "kv_formula_bytes", "top")

    def to_csv(self) -> str:
        """One row per generated token."""
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(self.CSV_COLUMNS)
        for s in self.steps:
            top = " | ".join(f"{c.token_id}:{c.text!r}:{c.prob:.4f}" for c in s.top)
            writer.writerow([s.index, s.token_id, s.text, s.special, s.phase, f"{s.time:.6f}",
                             f"{s.latency:.6f}", f"{s.prob:.6f}", s.seq_len, s.kv_bytes,
                             self.kv_shape.formula_bytes(s.seq_len), top])
        return out.getvalue()
