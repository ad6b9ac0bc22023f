"""Tools the model can call, in the Hermes / Qwen form: the definitions in the system block, a call as JSON inside
`<tool_call>` tags in the model's answer, a tool's result inside `<tool_response>` tags in the next turn.

    system = with_tools("You are terse.", [weather])     # the system prompt, with the tools block after it
    reader = CallReader()
    for piece in pieces: out = reader.feed(piece)       # [str | ToolCall]: text to show, calls as they close
    out = reader.end()                                  # what was held back, at the end of the answer
    call_text("get_weather", {"city": "Paris"})         # a call as an assistant turn writes it (history)
    response_text("18 C")                               # a tool's result as the next user turn carries it

The system block, as Qwen2.5's and Hermes 2 Pro's templates write it (each tool one JSON line, in the order
the request lists them; a tool is OpenAI's chat form, `{"type": "function", "function": {"name", "description",
"parameters"}}`):

    # Tools

    You may call one or more functions to assist with the user query.

    You are provided with function signatures within <tools></tools> XML tags:
    <tools>
    {"type": "function", "function": {"name": "get_weather", ...}}
    </tools>

    For each function call, return a json object with function name and arguments within <tool_call></tool_call>
    XML tags:
    <tool_call>
    {"name": <function-name>, "arguments": <args-json-object>}
    </tool_call>

A call the reader accepts is a JSON object with a string `name` and `arguments` that is an object (or a JSON
string holding one; missing: `{}`) between `<tool_call>` and `</tool_call>`; whitespace around it is ignored.
A closing tag may be missing at the very end of the answer (a model that stops at its end-of-sequence token
instead). Anything else between the tags -- not JSON, no name -- stays text, tags and all: the client sees what the
model wrote. Text is held back only while it could be the start of an opening tag, so no text that turns out
to be a call is ever shown.

>>> reader = CallReader()
>>> reader.feed("Let me look.<tool_") + reader.feed('call>\\n{"name": "get_weather", "arguments": {"city": "Paris"}}')
['Let me look.']
>>> reader.feed("\\n</tool_call>")
[ToolCall(name='get_weather', arguments='{"city": "Paris"}')]
>>> CallReader().feed("<tool_call>not json</tool_call>")
['<tool_call>not json</tool_call>']

Left out: constrained decoding (a named or required tool choice is rendered, never enforced: the model may
answer in text), and any other call syntax (Llama 3's `<|python_tag|>`, Mistral's `[TOOL_CALLS]`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

OPEN, CLOSE = "<tool_call>", "</tool_call>"
TOOLS_INTRO = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_OUTRO = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
               "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
               "<args-json-object>}\n</tool_call>")


@dataclass(frozen=True)
class ToolCall:
    """One call the model wrote: the function's name and its arguments as JSON text (an object)."""
    name: str
    arguments: str

    @property
    def input(self) -> dict:
        """The arguments as an object."""
        return json.loads(self.arguments)


def tool_line(tool: dict) -> str:
    """One tool's line in the block: its JSON as Jinja's `tojson` writes it in a chat template."""
    return json.dumps(tool, ensure_ascii=False)


def tools_block(tools) -> str:
    """The tools section of the system prompt ("" for no tools).

    >>> print(tools_block([{"type": "function", "function": {"name": "f"}}]).splitlines()[6])
    {"type": "function", "function": {"name": "f"}}
    """
    if not tools:
        return ""
    return TOOLS_INTRO + "".join("\n" + tool_line(t) for t in tools) + TOOLS_OUTRO


def with_tools(system: str, tools) -> str:
    """The system prompt with the tools block after it (a blank line between); the prompt alone without tools.

    >>> with_tools("Be brief.", []), with_tools("", [{"type": "function", "function": {"name": "f"}}])[:7]
    ('Be brief.', '# Tools')
    """
    block = tools_block(tools)
    if not block:
        return system
    return f"{system}\n\n{block}" if system else block


def call_text(name: str, arguments) -> str:
    """A call as the assistant's turn shows it in the history (`arguments`: an object, or its JSON text).

    >>> call_text("f", '{"x": 1}')
    '<tool_call>\\n{"name": "f", "arguments": {"x": 1}}\\n</tool_call>'
    """
    if isinstance(arguments, str):
        arguments = _arguments(arguments)
        arguments = {} if arguments is None else json.loads(arguments)
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE}"


def response_text(output: str) -> str:
    """A tool's result as the next turn carries it (Qwen2.5's form, inside a user turn)."""
    return f"<tool_response>\n{output}\n</tool_response>"


def _arguments(value) -> str | None:
    """The arguments as compact-enough JSON text of an object; None when they are not one."""
    if value is None:
        return "{}"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else None


def parse_call(inner: str) -> ToolCall | None:
    """The call written between the tags, or None when it is not one.

    >>> parse_call(' {"name": "f", "arguments": "{\\\\"x\\\\": 1}"} '), parse_call('{"arguments": {}}')
    (ToolCall(name='f', arguments='{"x": 1}'), None)
    """
    try:
        value = json.loads(inner)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = _arguments(value.get("arguments", value.get("parameters")))
    return None if arguments is None else ToolCall(value["name"], arguments)


class CallReader:
    """The model's answer read as it streams: text pieces and calls, in the order written."""

    def __init__(self):
        self.held = ""          # text that may still be the start of an opening tag
        self.inside: str | None = None   # a call's text so far, once its opening tag is read
        self.calls = 0

    def feed(self, piece: str) -> list:
        out: list = []
        text = self.held + piece
        self.held = ""
        while text:
            if self.inside is not None:
                self.inside += text
                text = ""
                end = self.inside.find(CLOSE)
                if end < 0:
                    break
                inner, text = self.inside[:end], self.inside[end + len(CLOSE):]
                self.inside = None
                out.append(self._call(inner))
                continue
            start = text.find(OPEN)
            if start >= 0:
                if start:
                    out.append(text[:start])
                self.inside, text = "", text[start + len(OPEN):]
                continue
            keep = max((k for k in range(1, len(OPEN)) if text.endswith(OPEN[:k])), default=0)
            shown, self.held = text[:len(text) - keep], text[len(text) - keep:]
            if shown:
                out.append(shown)
            text = ""
        return _joined(out)

    def end(self) -> list:
        """The rest at the end of the answer: held text, or a call whose closing tag never came."""
        out, held, inside = [], self.held, self.inside
        self.held, self.inside = "", None
        if inside is not None:
            call = parse_call(inside)
            out.append(call if call is not None else OPEN + inside)
            if call is not None:
                self.calls += 1
        elif held:
            out.append(held)
        return _joined(out)

    def _call(self, inner: str):
        call = parse_call(inner)
        if call is None:
            return OPEN + inner + CLOSE
        self.calls += 1
        return call


def _joined(pieces: list) -> list:
    """Adjacent text pieces as one."""
    out: list = []
    for p in pieces:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        elif not isinstance(p, str) or p:
            out.append(p)
    return out
