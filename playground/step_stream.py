"""A run's steps as a compact, numbered, append-only stream: what the Generate page draws from.

One JSON document per line: a head, then one array per Step (fields named by `FIELDS`, the first
being its sequence number), then an end line with the full Plotly figures of charts/run.py (as specs: the
dicts plotly writes, their shared template sent once).

    {"run": "3f2a…", "prompt_tokens": 9, "backend": "onnx", "greedy": true, "speculation": null, "kv": [30, 3, 64, 4],
     "fields": [...]}
    [1, 504, " The", "·The", false, "decode", 0.1534, 0.0300, 1733…, 0.41, 1.0, 10, 245760, 1, [[504, "·The", 0.41, 1.0], …],
     null, null]
    {"end": "length", "steps": 64, "error": null, "figures": {"timeline": {…}, …, "topk": …}, "template": {…}}

The text only grows during a run, so Gradio's streaming diff sends each update as an "append" of the
new lines: O(new steps) on the wire, and a browser that skipped an update (Gradio keeps only the last
value per animation frame) still finds every step in the next one. The page checks the sequence
numbers and says so if one is missing. A speculative run (speculative.py) names its k and n-gram size in
the head, and each step says whether its token was a draft accepted or replaced and which forward pass
made it (the page colours the chips by that). `shown` is the token made visible (tokens.visible: whitespace
drawn, controls and split characters named); it is plain text, never HTML: the page sets it with
textContent and escapes it for Plotly. A figure the source does not give is null (drawn "missing").

    >>> from playground.trace import Phase, Step
    >>> stream = StepStream(SimpleNamespace(prompt_ids=[1, 2], backend="fake", kv_shape=None,
    ...                                     settings=SimpleNamespace(greedy=True)), run_id="r1")
    >>> text = stream.add([Step(index=0, token_id=7, text="<b>", special=False, phase=Phase.DECODE, time=0.5,
    ...                         latency=0.5, prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None,
    ...                         wall_ns=9)])
    >>> text.splitlines()[1]
    '[0, 7, "<b>", "<b>", false, "decode", 0.5, 0.5, 9, null, null, null, null, 1, null, null, null]'
    >>> head, steps, end = read_stream(text)
    >>> head["run"], steps[0]["shown"], steps[0]["kv_bytes"], end
    ('r1', '<b>', None, None)

Left out: drawing (playground/ui/live/) and gradio (playground/ui/ wires the stream to a component).
"""
from __future__ import annotations

import json
import threading
import uuid
import weakref
from types import SimpleNamespace  # noqa: F401 - used by the doctest

from .tokens import visible

FIELDS = ("seq", "token_id", "text", "shown", "special", "phase", "time", "latency", "wall_ns", "prob",
          "sample_prob", "seq_len", "kv_bytes", "tokens", "top", "draft", "forward_pass")
TOP_FIELDS = ("token_id", "shown", "prob", "sample_prob")   # each top-k candidate


def _round(x, digits: int):
    return None if x is None else round(x, digits)


def shown(text: str) -> str:
    """The token as a reader sees it (tokens.visible); '∅' for a token ending inside a character."""
    return visible(text.encode("utf-8", "surrogatepass")) or "∅"


def step_record(step) -> list:
    """One Step as a list in FIELDS order: times to the microsecond, probabilities to 5 decimals."""
    top = None if step.top is None else [[c.token_id, shown(c.text), _round(c.prob, 5), _round(c.sample_prob, 5)]
                                         for c in step.top]
    return [step.index, step.token_id, step.text, shown(step.text), step.special, step.phase, round(step.time, 6),
            round(step.latency, 6), step.wall_ns, _round(step.prob, 5), _round(step.sample_prob, 5), step.seq_len,
            step.kv_bytes, step.tokens, top, step.draft, step.forward_pass]


def _speculation_settings(counts) -> dict | None:
    """A speculative run's k and n-gram size (what the page's legend names), None for a plain run."""
    return {"k": counts["k"], "ngram": counts["ngram"]} if counts else None


def _line(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": ")) + "\n"


class StepStream:
    """The stream of one run; `add` and `finish` return the whole text so far (thread-safe, idempotent).

    Listeners (`listen`) are called after every change, from the thread that made it; `since(seq)` is the
    text from step `seq`'s line on, so a reader that has steps 0..seq-1 can resume. An open stream can be
    found by its run id (`StepStream.find`) as long as something holds it (the session does).
    """

    _open: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def __init__(self, trace, run_id: str | None = None):
        shape = trace.kv_shape
        self.trace, self.run_id = trace, run_id or uuid.uuid4().hex   # 122 random bits: not guessable
        self.head = {"run": self.run_id, "prompt_tokens": len(trace.prompt_ids),
                     "prefill_chunk": getattr(trace, "prefill_chunk", None), "backend": trace.backend,
                     "greedy": bool(trace.settings.greedy),
                     "speculation": _speculation_settings(getattr(trace, "speculation", None)),
                     "kv": None if shape is None else [shape.layers, shape.kv_heads, shape.head_dim,
                                                       shape.bytes_per_element],
                     "fields": list(FIELDS)}
        self.text, self.packed, self.ended = _line(self.head), 0, False
        self._line_ends = [len(self.text)]   # where step k's line starts: _line_ends[k]
        self._lock = threading.Lock()
        self._listeners: set = set()
        StepStream._open[self.run_id] = self

    @classmethod
    def find(cls, run_id: str) -> "StepStream | None":
        return cls._open.get(run_id)

    def listen(self, callback) -> None:
        with self._lock:
            self._listeners.add(callback)

    def unlisten(self, callback) -> None:
        with self._lock:
            self._listeners.discard(callback)

    @property
    def watched(self) -> bool:
        return bool(self._listeners)

    @property
    def readers(self) -> int:
        return len(self._listeners)

    def _changed(self) -> None:
        for callback in list(self._listeners):
            callback()

    def add(self, steps) -> str:
        """Append the Steps not yet in the stream (by sequence number) and return the whole text."""
        with self._lock:
            new = [s for s in steps if s.index >= self.packed] if not self.ended else []
            if new:
                lines, end = [_line(step_record(s)) for s in new], len(self.text)
                for line in lines:
                    end += len(line)
                    self._line_ends.append(end)
                self.text += "".join(lines)
                self.packed = new[-1].index + 1
            text = self.text
        if new:
            self._changed()
        return text

    def since(self, seq: int) -> tuple[str, int, bool]:
        """(the lines from step `seq` on, the end line included once written; the next step's number; ended)."""
        with self._lock:
            return self.text[self._line_ends[max(0, min(seq, self.packed))]:], self.packed, self.ended

    def finish(self, figures: dict | None = None, template: dict | None = None) -> str:
        """Append every step left, then the end line (once): stop reason, step count, the figures (specs: the dicts
        plotly writes, by name, without a template) and the template they share (sent once)."""
        self.add(self.trace.steps[self.packed:])
        with self._lock:
            ended_now = not self.ended
            if ended_now:
                end = {"end": self.trace.stop_reason, "steps": self.packed, "error": self.trace.error,
                       "figures": figures or {}, "template": template if figures else None}
                self.text += json.dumps(end, ensure_ascii=False, separators=(",", ":")) + "\n"
                self.ended = True
            text = self.text
        if ended_now:
            self._changed()
        return text


def read_stream(text: str) -> tuple[dict, list[dict], dict | None]:
    """(head, steps as dicts by field name, end or None); ValueError when a sequence number is missing."""
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not lines or "run" not in lines[0]:
        raise ValueError("not a step stream: the first line is not a head")
    head, fields = lines[0], lines[0]["fields"]
    steps = [dict(zip(fields, r)) for r in lines[1:] if isinstance(r, list)]
    for expected, step in enumerate(steps):
        if step["seq"] != expected:
            raise ValueError(f"step {expected} is missing from the stream (next is {step['seq']})")
    for step in steps:
        if step["top"] is not None:
            step["top"] = [dict(zip(TOP_FIELDS, c)) for c in step["top"]]
    end = next((r for r in lines[1:] if isinstance(r, dict) and "end" in r), None)
    return head, steps, end
