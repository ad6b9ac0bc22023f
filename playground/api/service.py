"""The OpenAI-compatible service without HTTP, over the room's engine loop: the guard, one ServedRequest per request.

    config = ApiConfig.from_env()
    room = Room(lambda: registry.get("onnx-gguf4"), "onnx-gguf4", config.loop_size, traffic=ClientTraffic())
    service = ApiService(room, config)             # serve/room.py: the loop the page's Generate runs join too
    room.start_loading()                           # the model loads in a thread; until then: 503 + Retry-After
    served = service.open(asked, client, Received(time.time_ns(), "req-1"))   # tokenize, check sizes (400),
                                                   # admit (429), queue in the loop
    async for steps in served.ticket.updates(): served.answer.chunks(steps)   # (routes.py)
    served.end()                                   # cancel it if still running, true up the client's minute
    service.models(), service.tokenize(body), service.apply_template(body)
    service.health()                               # {"status": "ok"} once the model is ready, else 503
    service.metrics.exposition()                   # Prometheus text under vLLM's names (prometheus.py)

Every request of every client goes into the room's one EngineLoop, so they are batched together. A request's Trace
keeps its token ids but not its text (prompt and prompt_text are empty): a view of client traffic on a
public Space shows no one's prompt. Its `server` dict says when the route received the request
(`received_ns`, time.time_ns(): the server-side start a standard client's TTFT is compared with) and the
client's own `X-Request-ID` (`x_request_id`, so a benchmark can match its records to ours; never logged). The room sizes
its loop once (ApiConfig.loop_size: serve/room.py). The backend it runs:
serve.registry.batching_backend. Prefix caching is on unless `ApiConfig.prefix_cache` is 0: a request whose
prompt begins as an earlier one's did copies those blocks' KV instead of computing them, and its usage says how
many prompt tokens it did not compute (`prompt_tokens_details.cached_tokens`, from its Trace, as OpenAI reports it).
Each request is a turn of a conversation (serve/conversations.py: by the client's key -- the session it names
(`Asked.session`: session_hint.py's `cache_control`, `prompt_cache_key`, the Responses chain, `X-Session-Id`,
`agent_hint`), else `user` -- else by the longest common prefix with the client's recent sequences), and its
record of the lookup (serve/cache_miss.py: why the rest of its prompt was computed) is in its response as
`x_playground.cache`. The session a request names goes with it into the loop and onto its record
(`RequestRecord.session`).

Left out: HTTP (routes.py) and authentication (the guard names the client before `open`).
"""
from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

from ..config import MAX_PROMPT_CHARS
from ..serve.engine_loop import EngineLoop, Ticket
from ..serve.room import Room
from .errors import bad_request, context_exceeded, machine_held, unavailable
from .limits import PRESENTER, Admission, ApiConfig, Guard
from .prometheus import ServerMetrics
from ..serve.conversations import Turn
from .request_body import CHAT, Asked, read_body, rendered, tokenizable
from .response_body import Answer
from .responses import ResponseStore

LOADING_RETRY_S = 5   # the Retry-After sent while the model loads
MAX_REQUEST_ID_CHARS = 128   # a longer X-Request-ID is cut (it only ever labels a record)


@dataclass(frozen=True)
class Received:
    """What the route knew of a request before reading its body: when it came, the client's X-Request-ID."""
    ns: int                        # time.time_ns() when the route received it
    x_request_id: str | None = None

    def server_fields(self) -> dict:
        """The Trace's `server` entries.

        >>> Received(5, "a" * 200).server_fields() == {"received_ns": 5, "x_request_id": "a" * 128}
        True
        """
        fields = {"received_ns": self.ns}
        if self.x_request_id:
            fields["x_request_id"] = self.x_request_id[:MAX_REQUEST_ID_CHARS]
        return fields


@dataclass
class ServedRequest:
    """One HTTP request being served: its ticket in the loop, the answer being shaped, its share of the limits."""
    loop: EngineLoop
    ticket: Ticket
    answer: Answer
    admission: Admission
    metrics: ServerMetrics | None = None

    def cancel(self) -> None:
        self.loop.cancel(self.ticket)

    def end(self) -> None:
        """Cancel the request if it is still running (a client gone, a stop string), return its limits and
        count it in the metrics."""
        if not self.ticket.done:
            self.cancel()
        self.admission.used = self.answer.prompt_tokens + self.answer.tokens
        self.admission.guard.release(self.admission)
        if self.metrics is not None:
            self.metrics.ended(self.ticket.trace, self.answer.finish_reason(self.ticket.trace),
                               "chat" if self.answer.chat else "text_completion")


class ApiService:
    def __init__(self, room: Room, config: ApiConfig | None = None):
        """`room`: the engine loop every request joins (the page's Generate runs too), the machine gate it holds,
        and the record of client traffic it tells (serve/room.py); `config`: keys and limits."""
        self.room, self.config = room, config or ApiConfig()
        self.guard = Guard(self.config)
        self.metrics = ServerMetrics(self)  # GET /metrics
        limits = self.config.limits
        self.responses = ResponseStore(limits.stored_responses, limits.stored_bytes)   # /v1/responses' store
        self.metrics.registry.register(self.responses)
        self._started = time.time()
        self._longest_token: int | None = None
        self._lock = threading.Lock()
        if room.traffic is not None:
            room.traffic.described(limits=self.config.limits)

    # --- the model

    @property
    def engine_loop(self) -> EngineLoop | None:
        """The room's loop, once loaded."""
        return self.room.engine_loop

    @property
    def error(self) -> str | None:
        return self.room.error

    @property
    def model_id(self) -> str:
        loop = self.room.engine_loop
        return "" if loop is None else loop.engine.info.model

    @property
    def longest_token(self) -> int:
        """Characters the vocabulary's longest token covers at most (found once, from the loop's tokenizer)."""
        with self._lock:
            if self._longest_token is None:
                self._longest_token = longest_token(self.loop().engine.tokenizer)
            return self._longest_token

    def loop(self) -> EngineLoop:
        """The room's running loop; ApiError 503 while it loads (Retry-After) or when it failed."""
        self.room.start_loading()
        loop = self.room.engine_loop
        if self.room.get_engine is None:
            raise unavailable("this app has no backend our batching runs")
        if self.room.error or (loop is not None and loop.error):
            raise unavailable(self.room.error or loop.error)
        if loop is None:
            raise unavailable("the model is loading; try again in a few seconds", retry_after=LOADING_RETRY_S)
        return loop

    # --- requests

    def refused(self, error, client: str = "") -> None:
        """Tell the observer of a completion refused before it reached the loop (an ApiError: status, reason), and
        which client sent it ("" when it was refused before the guard named one)."""
        if self.room.traffic is not None:
            self.room.traffic.refused(error.status, error.message, client, error.words)

    def open(self, asked: Asked, client: str, received: Received | None = None) -> ServedRequest:
        """Queue one request; ApiError 400 (too long, over a per-request limit), 429 (a rate limit, or the machine
        held alone by a Serve run: at once, for every client but the presenter's own workload), 503."""
        received = received or Received(time.time_ns())
        paused = self.room.gate.paused()   # the machine held alone, or a Serve run waiting to take it
        if paused is not None and client != PRESENTER:   # told at once, never left waiting in silence
            raise machine_held(paused)
        loop = self.loop()
        self.could_fit(asked, min(self.config.limits.prompt_tokens, loop.capacity - 1))
        _, ids, chat = rendered(loop.engine, asked)
        window = loop.capacity
        if len(ids) >= window:
            raise context_exceeded(len(ids) + (asked.max_tokens or 1), window, _param(asked))
        max_tokens = asked.max_tokens or min(self.config.limits.max_tokens, window - len(ids))
        self.guard.check_size(len(ids), max_tokens)
        if len(ids) + max_tokens > window:
            raise context_exceeded(len(ids) + max_tokens, window, _param(asked))
        settings = asked.settings(max_tokens)
        admission = self.guard.admit(client, len(ids) + max_tokens)
        request_id = ("chatcmpl-" if asked.kind == CHAT else "cmpl-") + secrets.token_hex(12)
        try:
            ticket = loop.submit(ids, settings, ignore_eos=asked.ignore_eos, request_id=request_id, client=client,
                                 server=received.server_fields(), turn=turn_of(asked, chat), session=asked.session,
                                 priority=asked.priority)
        except ValueError as exc:
            admission.guard.release(admission)
            raise bad_request(str(exc), _param(asked)) from None
        except BaseException:
            admission.guard.release(admission)
            raise
        self.metrics.admitted(len(ids))
        answer = Answer(asked, request_id, self.model_id, len(ids), ticket.seq.detok.token_text)
        answer.record = lambda: cache_record(ticket.seq)
        return ServedRequest(loop, ticket, answer, admission, self.metrics)

    def could_fit(self, asked: Asked, tokens: int) -> None:
        """ApiError 400 (prompt_too_long) for a prompt that cannot be `tokens` tokens or fewer, found without
        templating or tokenizing it (which hold the event loop: ~1 s for 200,000 characters, ~20 s for 150,000
        one-letter messages): every message adds at least one token, and no token covers more characters than
        the vocabulary's longest."""
        param = _param(asked)
        if len(asked.messages) > tokens:
            raise bad_request(f"{len(asked.messages):,} messages cannot fit in {tokens} prompt tokens", param,
                              "prompt_too_long")
        chars = sum(len(m["content"]) for m in asked.messages) + len(asked.prompt or "") + asked.tool_chars
        if chars > tokens * self.longest_token:
            raise bad_request(f"the prompt is {chars:,} characters; in {tokens} prompt tokens this model reads at "
                              f"most {tokens * self.longest_token:,}", param, "prompt_too_long")

    # --- the other endpoints

    def models(self) -> dict:
        loop = self.loop()
        return {"object": "list", "data": [{
            "id": self.model_id, "object": "model", "created": int(self._started), "owned_by": "playground",
            "max_model_len": loop.capacity,
            "meta": {"backend": loop.engine.info.name, "slots": loop.batcher.kv.slots,
                     "context_window": int(loop.engine.backend.context_window),
                     "prefix_cache_positions": loop.batcher.config.prefix_cache}}]}

    def tokenize(self, body) -> dict:
        """llama.cpp's /tokenize: {"content", "add_special"?, "with_pieces"?} -> {"tokens": [...]}."""
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            raise bad_request('the body must be {"content": "<text>"}', "content")
        content = tokenizable(body["content"], "content")
        loop = self.loop()
        most = min(MAX_PROMPT_CHARS, loop.capacity * self.longest_token)   # more could never be one request
        if len(content) > most:
            raise bad_request(f"content is {len(content):,} characters; the limit here is {most:,}", "content")
        tok = loop.engine.tokenizer
        ids = tok(content, add_special_tokens=body.get("add_special") is True)["input_ids"]
        if body.get("with_pieces") is True:
            return {"tokens": [{"id": i, "piece": tok.decode([i])} for i in ids]}
        return {"tokens": ids}

    def health(self) -> dict:
        """{"status": "ok"} once the model is loaded (GET /health, as vLLM, TGI and llama.cpp answer it); ApiError
        503 while it loads (with Retry-After) or when it failed."""
        self.loop()
        return {"status": "ok"}

    def apply_template(self, body) -> dict:
        """llama.cpp's /apply-template: {"messages": [...]} -> {"prompt": the text the model reads}."""
        asked = read_body({"messages": (body or {}).get("messages") if isinstance(body, dict) else None}, CHAT)
        loop = self.loop()
        self.could_fit(asked, loop.capacity)
        return {"prompt": rendered(loop.engine, asked)[0]}


def cache_record(seq) -> dict | None:
    """A request's whole record of its prefix-cache lookup, decoded tokens included (for its own response only: its
    Trace keeps the record without them); None before its admission, or with the prefix cache off."""
    return seq.conversation.record.as_dict() if seq.conversation is not None else None


def turn_of(asked: Asked, chat) -> Turn:
    """The request as a turn of a conversation: its key (the session it names, session_hint.py, else `user`) and, for
    a chat, its messages and where each lies in its tokens."""
    key = asked.session.id if asked.session is not None else asked.user
    if chat is None:
        return Turn(key)
    return Turn(key, chat.messages, chat.spans, chat.tools, chat.template)


def longest_token(tokenizer) -> int:
    """The most characters one token of the vocabulary covers: its longest token string (a byte-level token's
    string has a character per byte, and a character takes at least a byte), at least 1."""
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return max([1, *(len(p) for p in pieces if isinstance(p, str))])


def _param(asked: Asked) -> str:
    return "messages" if asked.kind == CHAT else "prompt"
