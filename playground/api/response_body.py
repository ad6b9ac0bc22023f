"""OpenAI response bodies from a request's Steps: whole answers, and streamed chunks as the Steps come.

    answer = Answer(asked, request_id, model, prompt_tokens, token_text)
    for steps in ticket.updates(): chunks = answer.chunks(steps)      # stream: chunk dicts, in order
    answer.end_chunks(trace)                                          # the finish chunk (+ usage, if asked),
                                                                      # the last one with the server's figures
    answer.read(steps) ...; answer.whole(trace)                        # no stream: the whole response
    sse(chunk), DONE                                                  # the wire form: `data: {...}\\n\\n`

The text is the non-special Steps' text; a `stop` string ends the answer where it begins (the stop itself is
not sent), and while the text so far ends with the start of a stop string that piece is held back, so no
streamed chunk ever carries text that a stop then takes back. Logprobs come from each Step: `logprob` =
log(Step.prob), the model's probability at temperature 1 before any warper (as llama.cpp and vLLM report
by default), `top_logprobs` from Step.top; each entry also names the token `id` (llama.cpp's extension).
Completions get the legacy form (tokens, token_logprobs, top_logprobs, text_offset) and the same `content`
list. finish_reason (`finish_reason`, vLLM's FinishReason strings, for every route): "stop" (an end-of-sequence
token or a stop string), "length" (max_tokens or the context window), "abort" (cancelled: the client went away)
and "error" (the engine failed: the client gets a 500 or an error event, never a finish chunk).
The server's own figures for the request (timings.py) ride on the whole response and on a stream's end, each
where its own server puts it: llama-server's `timings` always, on the last chunk (the usage chunk when asked
for, else the finish chunk); vLLM's `metrics` when the request says `"per_request_metrics": true` or the
endpoint runs with PLAYGROUND_API_PER_REQUEST_METRICS=1 (vLLM's `--enable-per-request-metrics`), on the final
usage chunk only, so a stream without `stream_options.include_usage` carries none, as vLLM's does. The
playground's own figures go in one extension object beside them, `x_playground` (the whole response and a
stream's last chunk): `x_playground.cache` is the request's record of its prefix-cache lookup
(serve/cache_miss.py: what the cache held for its conversation, what it found, where and why the prompt parted
from it, the tokens there decoded), absent when no record was made (the prefix cache off). The record comes from
`Answer.record` (the service sets it), else from the Trace, which keeps it without the decoded tokens.

    >>> held = StopText(("END",)); held.feed("one E"), held.feed("N"), held.feed("D two"), held.stopped
    ('one ', '', '', True)

Left out: several choices (n > 1) and tool calls.
"""
from __future__ import annotations

import json
import math
import time

from .request_body import CHAT, Asked
from .timings import llama_timings, vllm_metrics
from ..trace import StopReason

DONE = "data: [DONE]\n\n"
NO_PROB = -9999.0   # a probability of 0 (JSON has no -inf; vLLM sends the same)
FINISH = {StopReason.EOS: "stop", "stop": "stop", StopReason.LENGTH: "length", StopReason.CONTEXT: "length",
          StopReason.CANCELLED: "abort", StopReason.ERROR: "error"}   # vllm/v1/engine FINISH_REASON_STRINGS


def finish_reason(trace, stopped: bool = False) -> str | None:
    """How a request ended, in vLLM's words (every route's, and the metrics' `finished_reason`): a stop string
    ends it with "stop" even though the request is then cancelled; None while it runs.

    >>> from types import SimpleNamespace as NS
    >>> [finish_reason(NS(stop_reason=r)) for r in (StopReason.EOS, StopReason.CANCELLED, StopReason.ERROR, None)]
    ['stop', 'abort', 'error', None]
    >>> finish_reason(NS(stop_reason=StopReason.CANCELLED), stopped=True)
    'stop'
    """
    return "stop" if stopped else FINISH.get(trace.stop_reason)


def sse(chunk: dict) -> str:
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"


def logprob(prob: float | None) -> float:
    return math.log(prob) if prob else NO_PROB


class StopText:
    """The answer's text with stop strings applied: feed pieces, get what is safe to send now."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops, self.held, self.stopped = stops, "", False
        self.stop: str | None = None   # the stop string that ended the text

    def feed(self, piece: str) -> str:
        if self.stopped:
            return ""
        text = self.held + piece
        found = [(i, s) for i, s in ((text.find(s), s) for s in self.stops) if i >= 0]
        if found:
            at, self.stop = min(found, key=lambda f: f[0])
            self.stopped, self.held = True, ""
            return text[:at]
        keep = max((k for s in self.stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        self.held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def flush(self) -> str:
        """At the end of the answer: the held-back text (no stop string completed it)."""
        out, self.held = self.held, ""
        return out


class Answer:
    """One request's answer as it grows: its text, token count and logprobs, shaped for chat or completions."""

    def __init__(self, asked: Asked, request_id: str, model: str, prompt_tokens: int, token_text):
        self.asked, self.id, self.model, self.prompt_tokens = asked, request_id, model, prompt_tokens
        self.token_text = token_text      # token id -> its text on its own (the Detokenizer's)
        self.created = int(time.time())
        self.text = StopText(asked.stop)
        self.tokens = 0                   # completion tokens up to the stop (what usage counts)
        self.content = ""                 # the answer's text read so far (less what a stop string holds back)
        self.entries: list[dict] = []     # its logprob entries so far
        self.chat = asked.kind == CHAT
        self.record = None                # () -> the request's whole cache record (with its text), or None

    @property
    def stopped(self) -> bool:
        """A stop string ended the answer: the request should be cancelled."""
        return self.text.stopped

    def read(self, steps) -> tuple[str, list[dict]]:
        """(text safe to send, logprob entries) for new Steps; nothing after a stop string."""
        pieces, entries = [], []
        for step in steps:
            if self.text.stopped:
                break
            self.tokens += 1
            if not step.special:
                pieces.append(self.text.feed(step.text))
            if self.asked.logprobs and not step.special:
                entries.append(self._entry(step))
        text = "".join(pieces)
        self.content += text
        self.entries += entries
        return text, entries

    def _entry(self, step) -> dict:
        token = self.token_text(step.token_id)
        top = [{"id": c.token_id, "token": c.text, "logprob": logprob(c.prob), "bytes": list(c.text.encode())}
               for c in (step.top or ())[:self.asked.top_logprobs]]
        return {"id": step.token_id, "token": token, "logprob": logprob(step.prob), "bytes": list(token.encode()),
                "top_logprobs": top}

    def finish_reason(self, trace) -> str | None:
        return finish_reason(trace, self.stopped)

    def usage(self, trace=None) -> dict:
        """OpenAI's usage; `prompt_tokens_details.cached_tokens`: prompt tokens the prefix cache served (the trace's)."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.tokens,
                "total_tokens": self.prompt_tokens + self.tokens,
                "prompt_tokens_details": {"cached_tokens": trace.cached_tokens if trace is not None else 0}}

    # --- streamed

    def first_chunks(self) -> list[dict]:
        """Chat streams open with the assistant's role (OpenAI's first chunk); completions with nothing."""
        return [self._chunk({"role": "assistant", "content": ""})] if self.chat else []

    def chunks(self, steps) -> list[dict]:
        """One chunk per token, as llama.cpp and vLLM stream (a client counts tokens and times them by chunk),
        even when the loop made several Steps before the reader woke."""
        out = []
        for step in steps:
            text, entries = self.read([step])
            if text or entries:
                out.append(self._chunk({"content": text} if self.chat else text, entries))
        return out

    def end_chunks(self, trace) -> list[dict]:
        rest = self.text.flush()
        self.content += rest
        out = [self._chunk({"content": rest} if self.chat else rest)] if rest else []
        out.append(self._chunk({} if self.chat else "", finish=self.finish_reason(trace)))
        if self.asked.include_usage:
            usage = {**self._head(), "choices": [], "usage": self.usage(trace)}
            if self.asked.per_request_metrics:   # vLLM: on the final usage chunk, and only there
                usage["metrics"] = vllm_metrics(trace, self.tokens)
            out.append(usage)
        out[-1]["timings"] = llama_timings(trace, self.tokens)   # llama-server: on the last chunk
        out[-1].update(self.extension(trace))
        return out

    def figures(self, trace) -> dict:
        """The server's own figures for the Steps answered (timings.py), for a whole response: llama-server's
        `timings` always, vLLM's `metrics` when asked for."""
        out = {"timings": llama_timings(trace, self.tokens)}
        if self.asked.per_request_metrics:
            out["metrics"] = vllm_metrics(trace, self.tokens)
        return {**out, **self.extension(trace)}

    def extension(self, trace) -> dict:
        """The playground's own figures, in one object: {"x_playground": {"cache": the lookup's record}}; {} when
        there is none."""
        record = (self.record() if self.record is not None else None) or trace.cache
        return {"x_playground": {"cache": record}} if record else {}

    def _head(self) -> dict:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def _chunk(self, delta, entries=(), finish=None) -> dict:
        start = len(self.content) - (len(delta) if isinstance(delta, str) else 0)
        choice = {"index": 0, ("delta" if self.chat else "text"): delta,
                  "logprobs": self._logprobs(list(entries), start) if entries else None, "finish_reason": finish}
        return {**self._head(), "choices": [choice], **({"usage": None} if self.asked.include_usage else {})}

    def _logprobs(self, entries: list[dict], start: int = 0) -> dict:
        if self.chat:
            return {"content": entries}
        offsets = []
        for e in entries:   # completions: where each token's text starts in the answer
            offsets.append(start)
            start += len(e["token"])
        return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [{c["token"]: c["logprob"] for c in e["top_logprobs"]} for e in entries],
                "text_offset": offsets, "content": entries}

    # --- whole

    def whole(self, trace) -> dict:
        """The whole response, once every Step has been `read` (the route reads them as they come, so a stop
        string cancels the request at once)."""
        self.content += self.text.flush()
        text = self.content
        logprobs = self._logprobs(self.entries) if self.asked.logprobs else None
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                      "finish_reason": self.finish_reason(trace)}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": self.finish_reason(trace)}
        kind = "chat.completion" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [choice],
                "usage": self.usage(trace), **self.figures(trace)}
