"""What the agent APIs share: a conversation with tool calls turned into the chat the model reads, and one turn's
answer read into text blocks and calls, then shaped by each API's writer (responses.py, messages.py).

    chat = Chat(system="Be brief.", tools=[weather])     # tools in OpenAI's chat form
    chat.say("user", "Weather in Paris?"); chat.call("get_weather", '{"city": "Paris"}'); chat.result("18 C")
    asked = chat.asked(max_tokens=64, temperature=0.0, stream=True)     # a chat Asked, as /v1/chat/completions's
    writer = SomeWriter(answer, ...)                      # a TurnWriter: feed(steps) -> wire events; close(trace)

The chat is what the model reads: the system prompt with the tools block after it (tokens/tools.py), each
message as its role, an assistant's calls written into its turn as `<tool_call>` lines (after its text, one per
line), and the tools' results as the next user turn, each in `<tool_response>` tags (Qwen2.5's form; several
results in a row are one turn). The model's own chat template renders it, as it renders a chat request.

A turn's answer is read as it streams: the text through the request's stop strings (response_body.StopText,
via Answer), then through the call reader (tokens/tools.py). Whitespace shows only when text follows it: a text
block never starts with whitespace alone (a model writes a newline between two calls) nor ends with it; a turn
that wrote nothing at all still gets one empty text block.
With `parallel` false the turn stops at its first call (the request is cancelled, as a stop string cancels it).
How it ended (Ending) is read once, at the end, in this order: the loop failed (ERROR), a call was made
(TOOL_CALL), a stop string (STOP), end of sequence (END), max tokens or the context window (LENGTH), else
it was cancelled (CANCELLED: the client went away, or the server stopped it).

Left out: the APIs' own shapes (responses.py, messages.py) and HTTP (routes.py).
"""
from __future__ import annotations

import enum
import json
import secrets
from dataclasses import dataclass, field

from ..tokens.tools import CallReader, ToolCall, call_text, response_text, with_tools
from ..trace import StopReason
from .errors import bad_request
from .request_body import CHAT, Asked, read_body, tokenizable
from .response_body import Answer, finish_reason


class Ending(enum.Enum):
    """How one turn ended, before each API names it."""
    END = "end"              # the model's end-of-sequence token
    STOP = "stop"            # one of the request's stop strings
    LENGTH = "length"        # max tokens, or the context window
    TOOL_CALL = "tool_call"  # the model called a tool
    ERROR = "error"          # the engine failed
    CANCELLED = StopReason.CANCELLED.value   # the client went away, or the server stopped the request


# How a turn that the engine ended itself ends in the APIs' words (next_token.py decided the reason)
ENDINGS = {StopReason.EOS: Ending.END, StopReason.LENGTH: Ending.LENGTH, StopReason.CONTEXT: Ending.LENGTH}


def client_tools(value, kinds: tuple, schema: str, noun: str, parts) -> tuple:
    """A route's `tools` in the chat form the system block lists: those whose `type` is one of `kinds` (the others
    are left out), each named, described and with its parameters' JSON schema under `schema`; 400 naming the field
    when malformed, or when the tools as text are not text (`parts`: request_body.text_of's)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise bad_request("tools must be a list", "tools")
    out = []
    for i, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise bad_request(f"tools[{i}] must be an object", f"tools[{i}]")
        if tool.get("type") not in kinds:
            continue
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise bad_request(f"tools[{i}].name must be the {noun}'s name", f"tools[{i}].name")
        function = {"name": tool["name"]}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        if isinstance(tool.get(schema), dict):
            function["parameters"] = tool[schema]
        out.append({"type": "function", "function": function})
    text_of(json.dumps(out, ensure_ascii=False), "tools", parts)
    return tuple(out)


def ident(prefix: str) -> str:
    """A fresh id for an item or a response: `prefix` and 24 hex digits."""
    return prefix + secrets.token_hex(12)


@dataclass
class Chat:
    """A conversation as chat messages (role and text), with the tools the system block lists."""
    system: str = ""
    tools: tuple = ()
    messages: list = field(default_factory=list)

    def say(self, role: str, text: str) -> None:
        """A message; an assistant's text right after its own calls (or a second system prompt) joins that turn."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == role and role == "assistant":
            last["content"] = f"{last['content']}\n{text}" if last["content"] else text
        else:
            self.messages.append({"role": role, "content": text})

    def call(self, name: str, arguments) -> None:
        """An assistant's call, written into its turn."""
        self.say("assistant", call_text(name, arguments))

    def result(self, output: str) -> None:
        """A tool's result: the next user turn (results in a row share it)."""
        last = self.messages[-1] if self.messages else None
        text = response_text(output)
        if last is not None and last["role"] == "user" and last.get("results"):
            last["content"] += "\n" + text
        else:
            self.messages.append({"role": "user", "content": text, "results": True})

    def as_messages(self) -> list[dict]:
        system = with_tools(self.system, self.tools)
        head = [{"role": "system", "content": system}] if system else []
        return head + [{"role": m["role"], "content": m["content"]} for m in self.messages]

    def asked(self, **fields) -> Asked:
        """The chat request the engine runs; `fields`: a chat body's (max_tokens, temperature, top_p, top_k,
        stop, stream, priority), read and checked as /v1/chat/completions reads them (ApiError 400)."""
        return read_body({"messages": self.as_messages(), **{k: v for k, v in fields.items() if v is not None}},
                         CHAT)


def text_of(value, param: str, kinds: tuple[str, ...]) -> str:
    """Text from a string or a list of parts whose `type` is one of `kinds` (each with a string `text`); ApiError
    400 naming `param` otherwise (this model reads text only) or for text no tokenizer reads."""
    if isinstance(value, str):
        return tokenizable(value, param)
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") in kinds and isinstance(p.get("text"), str)
                                       for p in value):
        return tokenizable("".join(p["text"] for p in value), param)
    raise bad_request(f"{param} must be text or a list of parts of type {' or '.join(kinds)} (this model reads "
                      "text only)", param)


class TurnWriter:
    """One turn's answer as it streams: text blocks and calls, shaped by a subclass into its API's events."""

    def __init__(self, answer: Answer, tools: bool, parallel: bool = True):
        self.answer, self.tools, self.parallel = answer, tools, parallel
        self.reader = CallReader() if tools else None
        self.calls: list[ToolCall] = []
        self.text_open = False      # a text block is open
        self.pending = ""           # whitespace not yet shown (it opens no block on its own)
        self.blocks = 0             # text blocks and calls so far
        self.called = False         # with parallel false: the first call is in, the turn is over
        self.ended: Ending | None = None
        self.finished = False       # the terminal event is written

    # what ServedRequest.end reads of its answer
    @property
    def prompt_tokens(self) -> int:
        return self.answer.prompt_tokens

    @property
    def tokens(self) -> int:
        return self.answer.tokens

    @property
    def chat(self) -> bool:
        return True

    @property
    def stopped(self) -> bool:
        """The answer is over before the engine ended it: a stop string, or the one call allowed."""
        return self.answer.stopped or self.called

    def finish_reason(self, trace) -> str | None:
        """vLLM's finished_reason for the metrics (response_body.finish_reason): a call or a stop string is "stop"."""
        return finish_reason(trace, self.stopped)

    # --- reading

    def feed(self, steps) -> list[str]:
        out: list[str] = []
        if self.called:
            return out
        text, _ = self.answer.read(steps)
        self._pieces(self.reader.feed(text) if self.reader else [text], out)
        return out

    def _pieces(self, pieces, out: list[str]) -> None:
        for piece in pieces:
            if self.called:
                return
            if isinstance(piece, ToolCall):
                self.pending = ""
                if self.text_open:
                    out += self.text_stop()
                    self.text_open = False
                self.calls.append(piece)
                out += self.call(piece)
                self.blocks += 1
                self.called = not self.parallel
                continue
            text = self.pending + piece
            body = text.rstrip()
            self.pending = text[len(body):]   # whitespace shows only when text follows it in the same block
            if not body:
                continue
            if not self.text_open:
                out += self.text_start()
                self.text_open = True
                self.blocks += 1
            out += self.text_delta(body)

    def close(self, trace, failure: str | None = None) -> list[str]:
        """The rest of the answer and the terminal event(s); `failure`: why the request failed, when it did."""
        out: list[str] = []
        if failure is None and trace.stop_reason != StopReason.ERROR:
            rest = self.answer.text.flush()
            self.answer.content += rest
            pieces = (self.reader.feed(rest) + self.reader.end()) if self.reader else [rest]
            self._pieces(pieces, out)
        self.ended = self.ending(trace, failure)
        if self.ended != Ending.ERROR and not self.blocks:   # nothing written: one empty text block
            out += self.text_start()
            self.text_open = True
            self.blocks += 1
        if self.text_open:
            out += self.text_stop()
            self.text_open = False
        out += self.terminal(self.ended, trace, failure)
        self.finished = True
        return out

    def fail(self, trace, failure: str) -> list[str]:
        """The terminal event of a turn that failed on the way (the blocks open are left as they are)."""
        self.ended, self.finished = Ending.ERROR, True
        return self.terminal(Ending.ERROR, trace, failure)

    def ending(self, trace, failure: str | None) -> Ending:
        if failure is not None or trace.stop_reason == StopReason.ERROR:
            return Ending.ERROR
        if self.calls:
            return Ending.TOOL_CALL
        if self.answer.stopped:
            return Ending.STOP
        return ENDINGS.get(trace.stop_reason, Ending.CANCELLED)

    # --- the API's shapes (subclasses)

    def text_start(self) -> list[str]:
        raise NotImplementedError

    def text_delta(self, text: str) -> list[str]:
        raise NotImplementedError

    def text_stop(self) -> list[str]:
        raise NotImplementedError

    def call(self, call: ToolCall) -> list[str]:
        raise NotImplementedError

    def terminal(self, ending: Ending, trace, failure: str | None) -> list[str]:
        raise NotImplementedError
