"""Steps from a server's event stream: one Step per event that carries tokens, timed on the event's arrival.

    maker = EventSteps(prompt_len=37, t0=stream.t0)
    step = maker.add(arrived, wall_ns, event)      # a Step, or None for an event without tokens
    maker.stop_reason(), maker.report()            # after the stream: "eos" | "length" | …; what the server said

An event carries tokens when it has content, reasoning content or logprobs; the role-only first chunk does
not, so TTFT is the first event that does. `tokens` is the length of the event's `logprobs.content`
(else 1, and the count is checked against the server's usage at the end); the time between events is
never split among the tokens inside one. A Step's token id, probability and top-k come from the logprobs
where the event carries exactly one token (llama.cpp names ids; vLLM does with return_tokens_as_token_ids).
Reasoning content (`reasoning`, vLLM's name since it dropped `reasoning_content`, llama.cpp's) is kept as a Step
marked `thinking` (and `special`): shown as chips, not part of the answer's text; the metrics time the first
answer token apart from the first token. The server's count of them is usage's
`completion_tokens_details.reasoning_tokens` (kept with the usage in `trace.server`).

    >>> m = EventSteps(prompt_len=3, t0=0.0)
    >>> m.add(0.1, 0, {"choices": [{"delta": {"role": "assistant", "content": None}}]}) is None
    True
    >>> s = m.add(0.5, 0, {"choices": [{"delta": {"content": "Hi"}, "logprobs": {"content": [
    ...     {"id": 9, "token": "Hi", "logprob": 0.0, "top_logprobs": [{"id": 9, "token": "Hi", "logprob": 0.0}]}]}}]})
    >>> s.token_id, s.text, s.phase, s.time, s.prob, s.seq_len, s.top[0].token_id
    (9, 'Hi', <Phase.PREFILL: 'prefill'>, 0.5, 1.0, 3, 9)

Left out: several choices per request (n > 1): only the first choice is read.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

from ..next_token import new_step
from ..trace import Candidate, Step, StopReason

STOP_REASONS = {"stop": StopReason.EOS, "length": StopReason.LENGTH,   # finish_reason -> the engine's stop reasons
                "abort": StopReason.CANCELLED, "error": StopReason.ERROR}   # vLLM's: cancelled apart from failed


class TokenEntry(NamedTuple):
    token_id: int | None
    text: str
    prob: float | None
    top: tuple[Candidate, ...] | None


def parse_token(token, data=None) -> tuple[int | None, str]:
    """(id, text) of one logprobs entry: llama.cpp's "id", vLLM's "token_id:123" strings, "bytes" for the text.

    >>> parse_token("token_id:42"), parse_token("Hi"), parse_token("ÃĢ", [195, 162])
    ((42, ''), (None, 'Hi'), (None, 'â'))
    """
    text = bytes(data).decode("utf-8", "replace") if isinstance(data, list) else None
    if isinstance(token, str) and token.startswith("token_id:") and token[9:].lstrip("-").isdigit():
        return int(token[9:]), text or ""
    return None, text if text is not None else str(token or "")


def _prob(logprob) -> float | None:
    return math.exp(logprob) if isinstance(logprob, (int, float)) and math.isfinite(logprob) else None


def token_entries(logprobs, decode: Callable[[int], str] | None = None) -> list[TokenEntry]:
    """The tokens of one event's logprobs: the chat/llama.cpp form ({"content": [...]}) or the legacy one."""
    if not isinstance(logprobs, dict):
        return []
    out = []
    if isinstance(logprobs.get("content"), list):
        for e in logprobs["content"]:
            tid, text = parse_token(e.get("token"), e.get("bytes"))
            tid = e["id"] if isinstance(e.get("id"), int) else tid
            top = tuple(_candidate(c.get("id"), c.get("token"), c.get("bytes"), c.get("logprob"), decode)
                        for c in e.get("top_logprobs") or ())
            out.append(TokenEntry(tid, text, _prob(e.get("logprob")), top or None))
    elif isinstance(logprobs.get("tokens"), list):   # legacy completions: tokens, token_logprobs, top_logprobs
        tops = logprobs.get("top_logprobs") or [None] * len(logprobs["tokens"])
        for token, lp, top in zip(logprobs["tokens"], logprobs.get("token_logprobs") or [], tops):
            tid, text = parse_token(token)
            cands = tuple(_candidate(None, t, None, v, decode) for t, v in (top or {}).items())
            out.append(TokenEntry(tid, text, _prob(lp), tuple(sorted(cands, key=lambda c: -c.prob)) or None))
    return out


def _candidate(tid, token, data, logprob, decode) -> Candidate:
    parsed, text = parse_token(token, data)
    tid = tid if isinstance(tid, int) else parsed
    if not text and tid is not None and decode is not None:
        text = decode(tid)
    return Candidate(tid, text, _prob(logprob) or 0.0)


class EventSteps:
    def __init__(self, prompt_len: int, t0: float, exact_prompt: bool = True,
                 decode: Callable[[int], str] | None = None):
        self.prompt_len, self.t0, self.exact_prompt, self.decode = prompt_len, t0, exact_prompt, decode
        self.steps: list[Step] = []
        self.t_prev, self.counted, self.with_logprobs = t0, 0, 0
        self.finish: str | None = None
        self.usage: dict | None = None
        self.timings: dict | None = None   # llama-server's per-request figures
        self.metrics: dict | None = None   # vLLM's (--enable-per-request-metrics; this app's endpoint when asked)
        self.entries: list[TokenEntry] = []   # every token's entry, for the tokenizer check

    def add(self, arrived: float, wall_ns: int, event: dict) -> Step | None:
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]
        if isinstance(event.get("metrics"), dict):
            self.metrics = event["metrics"]
        choice = (event.get("choices") or [None])[0]
        if not isinstance(choice, dict):
            return None
        self.finish = choice.get("finish_reason") or self.finish
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        content = delta.get("content") or choice.get("text") or ""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        entries = token_entries(choice.get("logprobs"), self.decode)
        if not (content or reasoning or entries):
            return None
        tokens = len(entries) or 1
        self.counted += tokens
        self.with_logprobs += bool(entries)
        self.entries += entries
        one = entries[0] if len(entries) == 1 else TokenEntry(None, "", None, None)
        thinking = bool(reasoning) and not content
        step = new_step(self.steps, token_id=one.token_id, text=reasoning + content, special=thinking,
                        thinking=thinking, time=arrived - self.t0, latency=arrived - self.t_prev, prob=one.prob, top=one.top,
                        seq_len=self.prompt_len + self.counted - 1 if self.exact_prompt else None, wall_ns=wall_ns,
                        tokens=tokens)
        self.t_prev = arrived
        return step

    def stop_reason(self) -> StopReason | str | None:
        return STOP_REASONS.get(self.finish, self.finish)

    def report(self) -> dict:
        """What the server said about the request, and how the client counted its tokens."""
        out: dict = {"finish_reason": self.finish}
        if self.usage is not None:
            out["usage"] = self.usage
        if self.timings is not None:
            out["timings"] = self.timings
        if self.metrics is not None:
            out["metrics"] = self.metrics
        how = ("logprobs: one entry per token" if self.steps and self.with_logprobs == len(self.steps)
               else "events: 1 token assumed per event without logprobs")
        reported = (self.usage or {}).get("completion_tokens")
        out["token_count_source"] = how if reported in (None, self.counted) else (
            f"{how}; the client counted {self.counted}, the server's usage says {reported} completion tokens")
        return out

    def warnings(self, prompt_len: int, prompt_source: str, tokenizer=None, label: str = "") -> list[str]:
        """What does not fit: the server read another number of prompt tokens than the ids here, or its
        token ids name other text than the local tokenizer's (a different model's tokenizer)."""
        out = []
        read = (self.usage or {}).get("prompt_tokens")
        if isinstance(read, int) and read != prompt_len:
            out.append(f"the server read {read} prompt tokens; the prompt ids here ({prompt_source}) are {prompt_len}")
        vocab = len(tokenizer) if tokenizer is not None else 0
        for e in self.entries if tokenizer is not None else ():
            if e.token_id is None or not e.text or "\ufffd" in e.text:
                continue   # no id, or a piece of a character: nothing to compare
            mine = tokenizer.decode([e.token_id]) if 0 <= e.token_id < vocab else None
            if mine != e.text:
                out.append(f"the server's token ids do not match the {label}: id {e.token_id} is {e.text!r} on the "
                           f"server, {mine!r} here (a different model's tokenizer?)")
                break
        return out
