"""Anthropic's Messages API (POST /v1/messages) over the same engine: its body, its events, its errors.

    turn = read_messages(body)                     # ApiError 400 naming the field
    served = service.open(turn.asked, client, received)                  # as a chat request (service.py)
    writer = MessageWriter(turn, served.answer, message_id, model)
    writer.opening(); writer.feed(steps); writer.close(trace)            # the stream's events, in order
    writer.whole(trace)                                                  # or the message, not streamed
    anthropic_error(error)                                               # an ApiError in Anthropic's shape

Read: `messages` (`role` user or assistant; content as text or a list of blocks: `text`, `tool_use` (`id`, `name`,
`input`), `tool_result` (`tool_use_id`, `content` as text or text blocks, `is_error`)), `system` (text or text
blocks), `max_tokens` (required, as Anthropic's), `stop_sequences` (up to 4), `temperature`, `top_p`, `top_k`,
`stream`, `tools` (`name`, `description`, `input_schema`) and `tool_choice` (`{"type": "none"}` renders no tools;
"auto", "any" or a named tool render them all: nothing forces a call, tokens/tools.py). The key is read from
`x-api-key` (where Anthropic's SDK sends it) or `Authorization: Bearer`; any `anthropic-version` or
`anthropic-beta` header is accepted. Read and ignored: `metadata`, `thinking` (no reasoning model),
`cache_control` on any block or tool (it names the request's session and the TTL asked, session_hint.py; the
prefix cache needs no marks to keep blocks), `service_tier`, `container`,
`mcp_servers`, `context_management`, tools of other types (Anthropic's server tools: `web_search_…`, `bash_…`,
`text_editor_…`, `code_execution_…`, `computer_…`), and blocks of type `thinking` and `redacted_thinking`. Any
other block (an image, a document) is a 400: this model reads text only.

The stream (SSE, each with its `event:` line): `message_start` (the message with empty content), then per block
`content_block_start`, `content_block_delta`… (`text_delta`, or one `input_json_delta` with a call's whole
input), `content_block_stop`; then `message_delta` (stop_reason, stop_sequence, usage, and the turn's record of its
prefix-cache lookup as `x_playground.cache`, as the whole message has it: serve/cache_miss.py) and `message_stop`. A
failure after the stream began is an `error` event, the last.

    ending                   stop_reason
    end of sequence          end_turn
    a stop sequence          stop_sequence (and which, in stop_sequence)
    a call                   tool_use (a tool_use block per call)
    max_tokens (or the       max_tokens
    context window)
    the engine failed        an `error` event of type api_error (a status 500 before the stream begins)
    cancelled (not by the    an `error` event of type cancelled: never reported as the model's ending
    client: it is gone)

Usage: `input_tokens + cache_creation_input_tokens + cache_read_input_tokens` is the prompt's tokens (after the
template), on every event that carries usage. `cache_read_input_tokens` is what the prefix cache served,
`input_tokens` what was computed, `cache_creation_input_tokens` always 0 (the prefix cache keeps blocks without
being asked to; none is written on request). On `message_start`, sent before the request takes a KV slot, the
cache has not yet been looked up: the whole prompt is `input_tokens` there. The figures are final on
`message_delta` (cumulative, as Anthropic's: the SDK's snapshot takes them) and in a message not streamed.

>>> anthropic_error(bad_request("max_tokens is required", "max_tokens"))
{'type': 'error', 'error': {'type': 'invalid_request_error', 'message': 'max_tokens is required'}}

Left out: images and documents, citations, batches, token counting (`/v1/messages/count_tokens`), and
`pause_turn` / `refusal` endings (no server tools, no refusals here).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..tokens.tools import ToolCall
from .errors import ApiError, bad_request, engine_failed
from .request_body import Asked
from .response_body import Answer
from .responses import sse_event
from .turn import Chat, Ending, TurnWriter, client_tools, ident, text_of

ROLES = ("user", "assistant")
IGNORED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               503: "overloaded_error"}
MAX_BLOCKS = 4096   # content blocks one request may send, over all its messages


def anthropic_error(error: ApiError) -> dict:
    """An ApiError's body in Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`)."""
    message = error.message.replace("'Authorization: Bearer <key>'", "'x-api-key: <key>'")   # where its SDK sends it
    return {"type": "error", "error": {"type": ERROR_TYPES.get(error.status, "api_error"), "message": message}}


@dataclass(frozen=True)
class MessagesTurn:
    """One /v1/messages request, read: the chat the engine runs, and its tools."""
    asked: Asked
    tools: tuple


def read_messages(body) -> MessagesTurn:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise bad_request(f"max_tokens must be a whole number >= 1, got {max_tokens!r}", "max_tokens")
    choice = body.get("tool_choice")
    none = isinstance(choice, dict) and choice.get("type") == "none"
    tools = () if none else _tools(body.get("tools"))
    chat = Chat(system=_system(body.get("system")), tools=tools)
    _conversation(chat, body.get("messages"))
    stops = body.get("stop_sequences")
    asked = chat.asked(max_tokens=max_tokens, temperature=body.get("temperature"), top_p=body.get("top_p"),
                       top_k=body.get("top_k"), stop=stops if stops else None, stream=_stream(body),
                       priority=body.get("priority"))
    return MessagesTurn(asked, tools)


def _stream(body: dict) -> bool:
    value = body.get("stream")
    if value is not None and not isinstance(value, bool):
        raise bad_request(f"stream must be true or false, got {value!r}", "stream")
    return bool(value)


def _system(value) -> str:
    if value is None:
        return ""
    return text_of(value, "system", ("text",))


def _conversation(chat: Chat, messages) -> None:
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list of {role, content} objects", "messages")
    blocks = 0
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise bad_request(f"{param}.role must be user or assistant", f"{param}.role")
        role, content = message["role"], message.get("content")
        if isinstance(content, str):
            chat.say(role, text_of(content, f"{param}.content", ("text",)))
            continue
        if not isinstance(content, list):
            raise bad_request(f"{param}.content must be text or a list of blocks", f"{param}.content")
        blocks += len(content)
        if blocks > MAX_BLOCKS:
            raise bad_request(f"the messages have over {MAX_BLOCKS:,} content blocks", "messages")
        for j, block in enumerate(content):
            _block(chat, role, block, f"{param}.content[{j}]")


def _block(chat: Chat, role: str, block, param: str) -> None:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind in IGNORED_BLOCKS:
        return
    if kind == "text":
        chat.say(role, text_of(block.get("text"), f"{param}.text", ("text",)))
    elif kind == "tool_use" and role == "assistant":
        name, given = block.get("name"), block.get("input", {})
        if not isinstance(name, str) or not name or not isinstance(given, dict):
            raise bad_request(f"{param} must have a name and an input object", param)
        text_of(json.dumps(given, ensure_ascii=False), f"{param}.input", ("text",))
        chat.call(text_of(name, f"{param}.name", ("text",)), given)
    elif kind == "tool_result" and role == "user":
        output = block.get("content", "")
        output = text_of(output, f"{param}.content", ("text",)) if output else ""
        chat.result(f"Error: {output}" if block.get("is_error") is True else output)
    else:
        raise bad_request(f"{param} is a block of type {kind!r}, which this server does not read in a {role} "
                          "message (blocks: text; tool_use from the assistant; tool_result from the user)",
                          f"{param}.type")


def _tools(value) -> tuple:
    """Client tools in the chat form the system block lists; Anthropic's server tools are left out."""
    return client_tools(value, (None, "custom"), "input_schema", "tool", ("text",))


STOP_REASONS = {Ending.END: "end_turn", Ending.STOP: "stop_sequence", Ending.TOOL_CALL: "tool_use",
                Ending.LENGTH: "max_tokens"}


class MessageWriter(TurnWriter):
    """One message's events as its Steps come, and the message they build."""

    def __init__(self, turn: MessagesTurn, answer: Answer, message_id: str, model: str):
        super().__init__(answer, bool(turn.tools))
        self.turn, self.id, self.model = turn, message_id, model
        self.content: list[dict] = []

    def message(self, trace=None, stop_reason=None, stop_sequence=None) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [dict(b) for b in self.content], "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": self.usage(trace)}

    def usage(self, trace=None) -> dict:
        """Anthropic's usage; before the request is admitted (no trace), the cache is not yet looked up."""
        cached = trace.cached_tokens if trace is not None else 0
        return {"input_tokens": self.answer.prompt_tokens - cached, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached, "output_tokens": self.answer.tokens}

    def opening(self) -> list[str]:
        return [sse_event({"type": "message_start", "message": self.message()})]

    def text_start(self) -> list[str]:
        self.content.append({"type": "text", "text": ""})
        return [sse_event({"type": "content_block_start", "index": len(self.content) - 1,
                           "content_block": {"type": "text", "text": ""}})]

    def text_delta(self, text: str) -> list[str]:
        self.content[-1]["text"] += text
        return [sse_event({"type": "content_block_delta", "index": len(self.content) - 1,
                           "delta": {"type": "text_delta", "text": text}})]

    def text_stop(self) -> list[str]:
        return [sse_event({"type": "content_block_stop", "index": len(self.content) - 1})]

    def call(self, call: ToolCall) -> list[str]:
        block = {"type": "tool_use", "id": ident("toolu_"), "name": call.name, "input": {}}
        self.content.append(block)
        index = len(self.content) - 1
        out = [sse_event({"type": "content_block_start", "index": index, "content_block": dict(block)}),
               sse_event({"type": "content_block_delta", "index": index,
                          "delta": {"type": "input_json_delta", "partial_json": call.arguments}}),
               sse_event({"type": "content_block_stop", "index": index})]
        block["input"] = call.input
        return out

    def stop_sequence(self, ending: Ending) -> str | None:
        return self.answer.text.stop if ending == Ending.STOP else None

    def terminal(self, ending: Ending, trace, failure: str | None) -> list[str]:
        if ending == Ending.ERROR:
            return [sse_event(anthropic_error(engine_failed(failure or trace.error)))]
        if ending == Ending.CANCELLED:
            said = "the request was cancelled before the model finished"
            return [sse_event({"type": "error", "error": {"type": Ending.CANCELLED.value, "message": said}})]
        delta = {"stop_reason": STOP_REASONS[ending], "stop_sequence": self.stop_sequence(ending)}
        return [sse_event({"type": "message_delta", "delta": delta, "usage": self.usage(trace),
                           **self.answer.extension(trace)}),
                sse_event({"type": "message_stop"})]

    def whole(self, trace) -> dict:
        """The message, not streamed: every Step already fed (an error is the route's 500, a cancel its client gone),
        with the turn's record of its prefix-cache lookup (`x_playground`)."""
        self.close(trace)
        return {**self.message(trace, STOP_REASONS.get(self.ended), self.stop_sequence(self.ended)),
                **self.answer.extension(trace)}
