"""OpenAI's Responses API (POST /v1/responses) over the same engine: its body, its events, its stored responses.

    turn = read_responses(body, store)      # ApiError 400 naming the field; an unknown previous_response_id too
    served = service.open(turn.asked, client, received)                  # as a chat request (service.py)
    writer = ResponseWriter(turn, served.answer, response_id, model)
    writer.opening(); writer.feed(steps); writer.close(trace)            # the stream's events, in order
    writer.whole(trace)                                                  # or the response object, not streamed
    store.put(response_id, writer.history())                             # with store: true (the default)

Input: `input` as a string (one user message) or a list of items: messages (`role` user, system, developer or
assistant; content as text or a list of `input_text` / `output_text` / `text` parts), `function_call` (`call_id`,
`name`, `arguments`), `function_call_output` (`call_id`, `output`), and Codex's `custom_tool_call` /
`custom_tool_call_output` (its `input` is the call's one argument). `instructions` (the system prompt, not
carried to the next response, as OpenAI's), `tools` (function tools: `name`, `description`, `parameters`),
`tool_choice` ("none" renders no tools; "auto", "required" or a named function render them all: nothing forces
a call, tokens/tools.py), `parallel_tool_calls` (false: the turn ends at the model's first call),
`max_output_tokens`, `temperature`, `top_p`, `stream`, `store` and `previous_response_id`. The turn is the chat
the model reads (turn.py): instructions and tools in the system block, the items in order.

Read and ignored (never a 400), what Codex and the Agents SDK send that cannot apply to this model here:
`reasoning` (no reasoning model), `include` (no encrypted reasoning or logprobs to include), `text` (plain
text only: a JSON schema is not enforced), `truncation` (a prompt over the context is a 400 either way),
`metadata` (echoed back), `service_tier`, `user`, `prompt_cache_key` (it names the request's session: session_hint.py,
as on every route),
`safety_identifier`, `background`, `stream_options`, `top_logprobs`; tools of other types (`custom`,
`web_search`, `web_search_preview`, `local_shell`, `file_search`, `mcp`, `code_interpreter`, `computer_use_preview`,
`image_generation`: listed to no one, since the model can call only functions); input items of type
`reasoning`, `web_search_call`, `local_shell_call`, `local_shell_call_output`, `file_search_call`,
`image_generation_call`, `code_interpreter_call`, `mcp_list_tools`, `mcp_call` and `compaction` (left out of
the chat). Any other item type, a part that is not text, or an `item_reference` (items are not stored one by
one) is a 400 naming it.

The stream: every event has `type` and a rising `sequence_number` (from 0), written as SSE with its `event:`
line. `response.created`, `response.in_progress`; for text, `response.output_item.added` (a message),
`response.content_part.added`, `response.output_text.delta`…, `response.output_text.done`,
`response.content_part.done`, `response.output_item.done` (the whole item); for a call,
`response.output_item.added` (a `function_call`), `response.function_call_arguments.delta` and `.done`,
`response.output_item.done`; then exactly one terminal event. Text and part events carry `item_id`,
`output_index` and `content_index`; argument events `item_id` and `output_index`. The first two are sent at once,
before the request takes a KV slot: a client waiting for the machine has heard from the server.

    ending                   terminal event        response
    end of sequence          response.completed    status "completed"
    a stop string            response.completed    status "completed"
    a call                   response.completed    status "completed", a function_call item per call
    max_output_tokens        response.incomplete   status "incomplete", incomplete_details.reason
                             (or the context)      "max_output_tokens"
    the engine failed        response.failed       status "failed", error {code "server_error", message}
    cancelled (not by the    response.incomplete   status "incomplete", incomplete_details.reason
    client: it is gone)                            `cancelled`; an error is never reported as one

`usage`: `input_tokens` (the prompt, after the template), `input_tokens_details.cached_tokens` (of them, read from
the prefix cache, not computed), `output_tokens` (`output_tokens_details.reasoning_tokens` 0), `total_tokens`. The
response as it ended (whole, or in the terminal event) carries the turn's record of its prefix-cache lookup as
`x_playground.cache` (serve/cache_miss.py), as a chat completion does.

Stored responses (`store`, true by default as OpenAI's): the turn's whole history -- the items it was given, the
previous response's before them, its own output after -- kept in memory under its id, so the next request names
it with `previous_response_id` and sends only what is new. The store is bounded by count and bytes
(ApiLimits.stored_responses, stored_bytes: PLAYGROUND_API_LIMITS), the oldest evicted first; an evicted or unknown
id is a 400 (`previous_response_not_found`) that says which. Each stored response remembers the session it was a
turn of, so a request that continues it is a turn of the same session (`session_of`: session_hint.py's chain). A response that failed is not stored. A client that
sends the whole history each turn with `store: false` (Codex) reads the same model input.

>>> store = ResponseStore(responses=2, size=10_000)
>>> for i in range(3): store.put(f"resp_{i}", ({"type": "message", "role": "user", "content": "hi"},))
>>> len(store), store.evicted
(2, 1)
>>> store.get("resp_0")
Traceback (most recent call last):
playground.api.errors.ApiError: previous response 'resp_0' was evicted from this server's store of 2 responses (the oldest goes first); send the whole conversation as input instead

Left out: GET / DELETE of a stored response, background responses, conversations objects, and logprobs.
"""
from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..tokens.tools import ToolCall
from .errors import ApiError, bad_request
from .request_body import Asked
from .turn import Chat, Ending, TurnWriter, client_tools, ident, text_of
from .response_body import Answer

ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text")
IGNORED_ITEMS = frozenset({"reasoning", "web_search_call", "local_shell_call", "local_shell_call_output",
                           "file_search_call", "image_generation_call", "code_interpreter_call", "mcp_list_tools",
                           "mcp_call", "mcp_approval_request", "mcp_approval_response", "compaction"})
FORGOTTEN_IDS = 4096   # evicted ids remembered, to tell evicted from unknown
MAX_ITEMS = 4096       # input items one request may send


class ResponseStore:
    """Stored responses' histories, in memory: at most `responses` of them and `size` bytes (their JSON), the
    oldest evicted first. Thread-safe."""

    def __init__(self, responses: int, size: int):
        self.responses, self.size = responses, size
        self._items: OrderedDict[str, tuple[tuple, int]] = OrderedDict()
        self._sessions: dict[str, str] = {}                 # stored id -> the session it continues (session_of)
        self._gone: OrderedDict[str, str] = OrderedDict()   # evicted id -> why
        self.bytes = 0
        self.evicted = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, response_id: str, items, session: str = "") -> None:
        """Keep a response's history under its id; `session`: the session it was a turn of ("": it named none, so
        a response that continues it is a turn of the chain that starts here: session_of)."""
        items = tuple(items)
        size = len(json.dumps(items, ensure_ascii=False).encode())
        with self._lock:
            if size > self.size:
                self._forget(response_id, f"was not stored: its history is {size:,} bytes, over this server's store "
                                          f"of {self.size:,} bytes")
                return
            self._items[response_id] = (items, size)
            self._sessions[response_id] = session or response_id
            self.bytes += size
            while len(self._items) > self.responses or self.bytes > self.size:
                old, (_, old_size) = self._items.popitem(last=False)
                self._sessions.pop(old, None)
                self.bytes -= old_size
                self.evicted += 1
                self._forget(old, f"was evicted from this server's store of {self.responses:,} responses (the "
                                  "oldest goes first)" if len(self._items) >= self.responses else
                             f"was evicted from this server's store of {self.size:,} bytes (the oldest goes first)")

    def _forget(self, response_id: str, why: str) -> None:
        self._gone[response_id] = why
        while len(self._gone) > FORGOTTEN_IDS:
            self._gone.popitem(last=False)

    def get(self, response_id: str) -> tuple:
        """The stored history; ApiError 400 saying whether the id was evicted or never known here."""
        with self._lock:
            found = self._items.get(response_id)
            why = self._gone.get(response_id)
        if found is not None:
            return found[0]
        said = why or "is not known to this server (responses are kept in memory, until it restarts)"
        raise ApiError(400, f"previous response {response_id!r} {said}; send the whole conversation as input "
                            "instead", "invalid_request_error", "previous_response_not_found", "previous_response_id")

    def session_of(self, response_id: str) -> str | None:
        """The session a response that continues `response_id` is a turn of: the one that response was a turn of,
        or, where it named none, the first response id of its chain; None when the id is not stored."""
        with self._lock:
            return self._sessions.get(response_id)

    def collect(self):
        """Prometheus: the store's responses and bytes, its bounds, and the evictions (a collector for /metrics)."""
        kept = GaugeMetricFamily("playground:responses_stored", "Responses kept for previous_response_id")
        size = GaugeMetricFamily("playground:responses_stored_bytes", "Bytes of stored responses' histories (JSON)")
        most = GaugeMetricFamily("playground:responses_store_capacity", "The store's bounds", labels=("bound",))
        gone = CounterMetricFamily("playground:responses_evicted", "Stored responses evicted, oldest first")
        with self._lock:
            kept.add_metric([], len(self._items))
            size.add_metric([], self.bytes)
            gone.add_metric([], self.evicted)
        most.add_metric(["responses"], self.responses)
        most.add_metric(["bytes"], self.size)
        return [kept, size, most, gone]


@dataclass(frozen=True)
class ResponsesTurn:
    """One /v1/responses request, read: the chat the engine runs and what the response echoes."""
    asked: Asked
    items: tuple          # the history through this request's input (the previous response's, then its own)
    tools: tuple          # function tools, in the chat form the system block lists (empty: none rendered)
    parallel: bool
    store: bool
    echo: dict = field(default_factory=dict)   # the request's fields the response object repeats
    chained: str | None = None   # the session of the stored response previous_response_id names (session_of)


def read_responses(body, store: ResponseStore | None) -> ResponsesTurn:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise bad_request("previous_response_id must be a string", "previous_response_id")
    history = store.get(previous) if previous and store is not None else ()
    if previous and store is None:
        raise bad_request("this server keeps no responses", "previous_response_id", "previous_response_not_found")
    items = history + _input(body.get("input"))
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad_request("instructions must be a string", "instructions")
    choice = body.get("tool_choice")
    tools = () if choice == "none" else _tools(body.get("tools"))
    parallel = _flag(body, "parallel_tool_calls", True)
    stored = _flag(body, "store", True)
    max_out = body.get("max_output_tokens")
    if max_out is not None and (isinstance(max_out, bool) or not isinstance(max_out, int) or max_out < 1):
        raise bad_request(f"max_output_tokens must be a whole number >= 1, got {max_out!r}", "max_output_tokens")
    chat = Chat(system=tokenizable_text(instructions or "", "instructions"), tools=tools)
    for item in items:
        _say(chat, item)
    asked = chat.asked(max_tokens=max_out, temperature=body.get("temperature"), top_p=body.get("top_p"),
                       stream=_flag(body, "stream", False), priority=body.get("priority"))
    echo = {"instructions": instructions, "tools": body.get("tools") if isinstance(body.get("tools"), list) else [],
            "tool_choice": choice if choice is not None else "auto", "parallel_tool_calls": parallel,
            "max_output_tokens": max_out, "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
            "previous_response_id": previous, "store": stored,
            "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
            "text": {"format": {"type": "text"}}, "truncation": "disabled",
            "reasoning": {"effort": None, "summary": None}}
    chained = store.session_of(previous) if previous and store is not None else None
    return ResponsesTurn(asked, items, tools, parallel, stored, echo, chained)


def tokenizable_text(value: str, param: str) -> str:
    return text_of(value, param, TEXT_PARTS)


def _flag(body: dict, name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"{name} must be true or false, got {value!r}", name)
    return value


def _input(value) -> tuple:
    """The input as items, each checked and reduced to what the chat needs (and the store keeps)."""
    if isinstance(value, str):
        if not value.strip():
            raise bad_request("input is empty: no text for the model to read", "input")
        return ({"type": "message", "role": "user", "content": text_of(value, "input", TEXT_PARTS)},)
    if not isinstance(value, list) or not value:
        raise bad_request("input must be text or a non-empty list of items", "input")
    if len(value) > MAX_ITEMS:
        raise bad_request(f"input has {len(value):,} items; at most {MAX_ITEMS:,} here", "input")
    out = []
    for i, item in enumerate(value):
        param = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{param} must be an object", param)
        kind = item.get("type", "message" if "role" in item else None)
        if kind in IGNORED_ITEMS:
            continue
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise bad_request(f"{param}.role must be one of {', '.join(ROLES)}", f"{param}.role")
            out.append({"type": "message", "role": role,
                        "content": text_of(item.get("content", ""), f"{param}.content", TEXT_PARTS)})
        elif kind in ("function_call", "custom_tool_call"):
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise bad_request(f"{param}.name must be the function's name", f"{param}.name")
            value_name = "arguments" if kind == "function_call" else "input"
            argument = item.get(value_name, "" if kind == "custom_tool_call" else "{}")
            if not isinstance(argument, str):
                raise bad_request(f"{param}.{value_name} must be a string", f"{param}.{value_name}")
            out.append({"type": kind, "call_id": str(item.get("call_id", "")), "name": text_of(name, f"{param}.name",
                        TEXT_PARTS), value_name: text_of(argument, f"{param}.{value_name}", TEXT_PARTS)})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output", "")
            out.append({"type": kind, "call_id": str(item.get("call_id", "")),
                        "output": text_of(output, f"{param}.output", TEXT_PARTS)})
        else:
            raise bad_request(f"{param} is of type {kind!r}, which this server does not read (items: message, "
                              "function_call, function_call_output)", f"{param}.type")
    return tuple(out)


def _say(chat: Chat, item: dict) -> None:
    kind = item["type"]
    if kind == "message":
        chat.say(ROLES[item["role"]], item["content"])
    elif kind == "function_call":
        chat.call(item["name"], _arguments(item["arguments"]))
    elif kind == "custom_tool_call":
        chat.call(item["name"], {"input": item["input"]})
    else:
        chat.result(item["output"])


def _arguments(text: str):
    """A call's arguments as the history shows them: the object, or, when they are not JSON, the text."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


def _tools(value) -> tuple:
    """Function tools in the chat form the system block lists; tools of other types are left out."""
    return client_tools(value, ("function",), "parameters", "function", TEXT_PARTS)


def sse_event(event: dict) -> str:
    """An event on the wire: its `event:` line (what SSE clients dispatch on) and its JSON."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


class ResponseWriter(TurnWriter):
    """One response's events as its Steps come, and the response object they build."""

    def __init__(self, turn: ResponsesTurn, answer: Answer, response_id: str, model: str):
        super().__init__(answer, bool(turn.tools), turn.parallel)
        self.turn, self.id, self.model = turn, response_id, model
        self.created = int(time.time())
        self.sequence = 0
        self.output: list[dict] = []     # the output items so far (the open message's text as it grows)
        self.trace = None

    def event(self, kind: str, **fields) -> str:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse_event(event)

    def response(self, status: str, trace=None, **fields) -> dict:
        usage = self.usage(trace) if trace is not None and status != "in_progress" else None
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "model": self.model, "output": [dict(item) for item in self.output], "usage": usage, "error": None,
                "incomplete_details": None, "user": None, **self.turn.echo, **fields}

    def usage(self, trace) -> dict:
        return {"input_tokens": self.answer.prompt_tokens,
                "input_tokens_details": {"cached_tokens": trace.cached_tokens},
                "output_tokens": self.answer.tokens, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.answer.prompt_tokens + self.answer.tokens}

    def opening(self) -> list[str]:
        head = self.response("in_progress")
        return [self.event("response.created", response=head), self.event("response.in_progress", response=head)]

    # --- items

    def _message(self) -> dict:
        return self.output[-1]

    def text_start(self) -> list[str]:
        item = {"id": ident("msg_"), "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        self.output.append(item)
        index = len(self.output) - 1
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        added = self.event("response.output_item.added", output_index=index, item={**item, "content": []})
        item["content"] = [dict(part)]
        return [added, self.event("response.content_part.added", item_id=item["id"], output_index=index,
                                  content_index=0, part=part)]

    def text_delta(self, text: str) -> list[str]:
        item = self._message()
        item["content"][0]["text"] += text
        return [self.event("response.output_text.delta", item_id=item["id"], output_index=len(self.output) - 1,
                           content_index=0, delta=text, logprobs=[])]

    def text_stop(self) -> list[str]:
        item, index = self._message(), len(self.output) - 1
        part = item["content"][0]
        item["status"] = "completed"
        return [self.event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                           text=part["text"], logprobs=[]),
                self.event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                           part=dict(part)),
                self.event("response.output_item.done", output_index=index, item=_copy(item))]

    def call(self, call: ToolCall) -> list[str]:
        item = {"id": ident("fc_"), "type": "function_call", "status": "in_progress", "call_id": ident("call_"),
                "name": call.name, "arguments": ""}
        self.output.append(item)
        index = len(self.output) - 1
        out = [self.event("response.output_item.added", output_index=index, item=dict(item)),
               self.event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                          delta=call.arguments)]
        item.update(arguments=call.arguments, status="completed")
        return out + [self.event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                 name=call.name, arguments=call.arguments),
                      self.event("response.output_item.done", output_index=index, item=dict(item))]

    def terminal(self, ending: Ending, trace, failure: str | None) -> list[str]:
        self.trace = trace
        final = self.final(ending, trace, failure)
        kind = {"completed": "response.completed", "incomplete": "response.incomplete",
                "failed": "response.failed"}[final["status"]]
        return [self.event(kind, response=final)]

    def final(self, ending: Ending, trace, failure: str | None) -> dict:
        """The response as it ended, with the turn's record of its prefix-cache lookup (`x_playground`)."""
        mine = self.answer.extension(trace)
        if ending == Ending.ERROR:
            return self.response("failed", trace, error={"code": "server_error",
                                                         "message": failure or trace.error or "the engine failed"},
                                 **mine)
        if ending == Ending.LENGTH:
            return self.response("incomplete", trace, incomplete_details={"reason": "max_output_tokens"}, **mine)
        if ending == Ending.CANCELLED:
            return self.response("incomplete", trace, incomplete_details={"reason": Ending.CANCELLED.value}, **mine)
        return self.response("completed", trace, **mine)

    def whole(self, trace, failure: str | None = None) -> dict:
        """The response object, not streamed: every Step already fed."""
        self.close(trace, failure)
        return self.final(self.ended, trace, failure)

    def history(self) -> tuple:
        """What a next request's previous_response_id continues: this turn's items, then its output."""
        out = []
        for item in self.output:
            if item["type"] == "message":
                out.append({"type": "message", "role": "assistant", "content": item["content"][0]["text"]})
            else:
                out.append({"type": "function_call", "call_id": item["call_id"], "name": item["name"],
                            "arguments": item["arguments"]})
        return self.turn.items + tuple(out)


def _copy(item: dict) -> dict:
    return {**item, "content": [dict(p) for p in item.get("content", [])]}
