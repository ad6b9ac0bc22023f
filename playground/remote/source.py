"""A step source over an OpenAI-compatible server: the server computes, the client times each event's arrival.

    source = RemoteSource("http://127.0.0.1:8080/v1")          # asks /v1/models (model: the first listed)
    source.info.name, source.capabilities.missing()            # "llama.cpp @ 127.0.0.1:8080", [...]
    run = source.run("What is the capital of France?", GenerationSettings(max_new_tokens=16))
    for step in run: ...                                       # streamed; run.cancel() stops it at any moment
    run.trace.server                                           # the server's own figures, labelled by origin
    source.run_ids(ids, settings, ignore_eos=True)             # exact token ids (llama.cpp, vLLM)
    RemoteSource(url, reuse_prefix=True)                        # its runs from exact ids keep the server's prompt cache
    source.yielding(1)                                         # a copy whose requests say `priority: 1` (vLLM's)

t0 is taken as the request is sent (after prompt_ids asked the server's /tokenize, which is no part of
the request); each Step is one event, stamped on arrival. The prompt ids come from the server's own
/tokenize where it has one, else a local copy of the same tokenizer, else cl100k_base (labelled an
approximation in `trace.server["prompt_ids_source"]`). Runs from exact ids ask the server not to reuse a
cached prefix, so a repeat measures a real prefill; with `reuse_prefix` they leave the server's prompt cache as it
ships (llama.cpp's `cache_prompt` on), so a replayed trace measures what the server reuses.

Left out: n > 1 choices, tool calls, and servers that only speak the Responses API.
"""
from __future__ import annotations

import copy
import logging
import time
from typing import Callable

from ..config import GenerationSettings
from ..engine import check_prompt
from ..source import Capabilities, Origin, Run, SourceInfo
from ..trace import Trace
from .client import ServerClient
from .errors import RemoteNotFound
from .local_copy import CL100K, cl100k, local_copy
from .streamed_run import stream_steps
from .servers import detect_kind, logprobs_work

log = logging.getLogger(__name__)


class RemoteSource:
    priority = 0   # vLLM's request priority each request sends (0: none sent, the server's default)

    def __init__(self, base_url: str, api_key: str | None = None, model: str | None = None, *,
                 connect_timeout: float = 5.0, read_timeout: float = 120.0, figure_interval: float = 1.0,
                 clock: Callable[[], float] = time.perf_counter, note: str = "", reuse_prefix: bool = False):
        self.client = ServerClient(base_url, api_key, connect_timeout, read_timeout)
        self.reuse_prefix = reuse_prefix   # runs from exact ids: the server's prompt cache left on (else a fresh prefill)
        self.clock, self.figure_interval = clock, figure_interval
        listed = self.client.get_json("/v1/models")
        entries = {m["id"]: m for m in (listed.get("data") if isinstance(listed, dict) else None) or []
                   if isinstance(m, dict) and isinstance(m.get("id"), str)}
        if model is not None and model not in entries:
            raise RemoteNotFound(self.client.endpoint, f"model {model!r} is not served here; it serves {list(entries)}",
                                 404)
        if not entries:
            raise RemoteNotFound(self.client.endpoint, "/v1/models lists no model", 404)
        self.model = model or next(iter(entries))
        entry = entries[self.model]
        self.kind = detect_kind(self.client, entry)
        self.client.endpoint = name = f"{self.kind.name} @ {self.client.host}"
        self.copy = local_copy(self.model)
        self.tokenizer = self.copy.tokenizer if self.copy else None
        self.prompt_ids_source = ("server /tokenize" if self.kind.tokenize_chat else
                                  self.copy.label if self.copy else CL100K)
        dtype = (entry.get("meta") or {}).get("ftype") or ""
        shown = self.model.rsplit("/", 1)[-1] if self.model.endswith(".gguf") else self.model   # not a server path
        self.info = SourceInfo(name, shown, "remote", "remote", str(dtype), self.kind.context_window(
            self.client, entry), self.copy.kv_shape if self.copy else None, origin=Origin.REMOTE, note=note)
        top_k, self.top_k_note = logprobs_work(self.client, self.model, self.kind)
        if self.top_k_note:
            log.warning("%s: top-k probabilities %s", name, self.top_k_note)
        self.capabilities = Capabilities(kv_bytes=False, top_k=top_k,
                                         local_tokenizer=self.prompt_ids_source != CL100K, no_cache=False,
                                         exact_ids=self.kind.exact_ids)

    # --- input

    def prompt_ids(self, prompt: str, settings: GenerationSettings) -> tuple[str, list[int]]:
        """(the text the server's model reads, its ids) as the server tokenizes it, where it can say."""
        check_prompt(prompt)
        if self.kind.tokenize_chat:
            text, ids = (self.kind.tokenize_chat(self.client, self.model, messages(prompt, settings)) if settings.chat
                         else (prompt, self.kind.tokenize_text(self.client, self.model, prompt, True)))
        elif self.tokenizer is not None:
            text = (self.tokenizer.apply_chat_template(messages(prompt, settings), add_generation_prompt=True,
                                                       tokenize=False) if settings.chat else prompt)
            ids = self.tokenizer(text, add_special_tokens=not settings.chat)["input_ids"]
        else:
            text, ids = prompt, cl100k().encode(prompt, disallowed_special=())
        self._check_length(len(ids))
        return text, ids

    def _check_length(self, n: int) -> None:
        window = self.info.context_window
        if window and n >= window:
            raise ValueError(f"prompt is {n} tokens; {self.info.name} serves a context window of {window} tokens "
                             f"(leave room for at least one new token)")

    def encode(self, text: str) -> list[int]:
        """Token ids of plain text (no template, no special tokens), from the server where it can say."""
        if self.kind.tokenize_text:
            return self.kind.tokenize_text(self.client, self.model, text, False)
        if self.tokenizer is not None:
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return cl100k().encode(text, disallowed_special=())

    # --- running

    def run(self, prompt: str, settings: GenerationSettings | None = None) -> Run:
        settings = (settings or GenerationSettings()).validate()
        text, ids = self.prompt_ids(prompt, settings)
        body = {"messages": messages(prompt, settings)} if settings.chat else {"prompt": prompt}
        path = "/v1/chat/completions" if settings.chat else "/v1/completions"
        return self._start(path, body, Trace(prompt, text, ids, settings, *self._trace_fields()))

    def run_ids(self, ids: list[int], settings: GenerationSettings | None = None, *, ignore_eos: bool = False,
                use_cache: bool = True) -> Run:
        settings = (settings or GenerationSettings()).validate()
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("ids is empty: a run needs at least one prompt token")
        if not self.capabilities.exact_ids or not use_cache:
            raise ValueError(f"{self.info.name} cannot " + ("run without a KV cache (a server keeps its own)"
                             if self.capabilities.exact_ids else f"run from exact token ids ({self.kind.name} takes "
                                                                  "text only)"))
        self._check_length(len(ids))
        body = {"prompt": ids, "ignore_eos": ignore_eos, **({} if self.reuse_prefix else self.kind.fresh_prefill())}
        trace = Trace("", "", ids, settings, *self._trace_fields(), ignore_eos=ignore_eos)
        return self._start("/v1/completions", body, trace, exact=True)

    def _trace_fields(self) -> tuple:
        i = self.info
        return i.name, i.device, i.dtype, i.model, i.kv_shape

    def _start(self, path: str, body: dict, trace: Trace, exact: bool = False) -> Run:
        s = trace.settings
        body = {"model": self.model, "stream": True, "stream_options": {"include_usage": True},
                "max_tokens": s.max_new_tokens, **self.kind.sampling(s), **self.kind.extras, **body}
        if self.priority:
            body["priority"] = self.priority
        if self.capabilities.top_k:
            chat = path.endswith("chat/completions")
            body.update({"logprobs": True, "top_logprobs": s.top_candidates} if chat else {"logprobs": s.top_candidates})
        trace.seed = s.seed
        trace.server = {"origin": f"server-reported by {self.info.name}", "kind": self.kind.name,
                        "model": self.info.model, "prob_meaning": self.kind.prob_meaning,
                        "prompt_ids_source": "exact ids sent" if exact else self.prompt_ids_source,
                        "not_exposed": self.kind.not_exposed}
        if s.top_k and "top_k" not in body:   # the OpenAI API has no top_k: say the server sampled without it
            trace.server["warnings"] = [f"top_k={s.top_k} was not sent: {self.kind.name} takes no top_k"]
        exact_prompt = exact or self.capabilities.local_tokenizer
        return Run(trace, lambda run: stream_steps(self, run, path, body, exact_prompt), self.clock())

    def yielding(self, priority: int = 1) -> "RemoteSource":
        """A copy of this source (the same server and connection) whose requests carry vLLM's `priority`: 1 or more
        yields to the server's other requests where its scheduler honours it (this app's endpoint does; vLLM
        refuses it unless started with --scheduling-policy priority)."""
        if not isinstance(priority, int) or priority < 1:
            raise ValueError(f"a yielding source's priority is a whole number of 1 or more, got {priority!r}")
        mine = copy.copy(self)
        mine.priority = priority
        return mine

    def warm_up(self) -> None:
        """One short request, discarded (the server's own first-call costs stay out of the figures)."""
        self.run("Hello", GenerationSettings(max_new_tokens=2)).wait()

    def figures(self) -> dict:
        """The server's own live figures now (its kind's: /metrics, /slots), for the served model."""
        return self.kind.figures(self.client, self.model)

    def decode(self, token_id: int) -> str:
        """One token's text in the local copy of the tokenizer ('' without one)."""
        return self.tokenizer.decode([token_id]) if self.tokenizer is not None else ""


def messages(prompt: str, settings: GenerationSettings) -> list[dict]:
    """The chat messages of one request: the prompt, after the system prompt when one is given."""
    system = [{"role": "system", "content": settings.system_prompt}] if settings.system_prompt else []
    return [*system, {"role": "user", "content": prompt}]
