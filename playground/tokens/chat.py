"""A chat rendered for the model: its text, its token ids, and which message (and which part of it) each token is.

    chat = render_chat(tokenizer, messages)                         # the model's own chat template
    chat = render_chat(tokenizer, messages, template="thinking")    # one of TEMPLATES, by name
    chat = render_chat(tokenizer, messages, template="tools", tools=[...])
    chat.ids, chat.text, chat.spans                                 # spans: MessageSpan over token positions
    chat.at(position)                                               # the MessageSpan a token lies in

The project ships the templates behind the classic prefix-cache misses of a conversation (the bundled model's
own renders only roles and contents), all in ChatML, the bundled model's and the tiny model's markup:

  - "thinking": as Qwen3 with thinking off, the generation prompt carries an empty `<think>\\n\\n</think>\\n\\n`
    that the history never shows again (and any `<think>` block is dropped from an earlier answer), so every
    turn rewrites the one before;
  - "clock": a system prompt that starts with the current time (`now`, default: the time of rendering);
  - "tools": the tool definitions rendered in the system block, one JSON line each in `<tools></tools>`, in the
    order the request lists them (Hermes and Qwen style): a client that sends them in another order, or
    changes one, changes the system block.

Spans come from the rendered ChatML: the text is cut at each `<|im_start|>` into blocks, each block is matched
to the next message of its role whose content it holds; a block no message matches is the template's own (a
default or dated system prompt: `message` None), and a last block left open is the generation prompt. Inside a
message's block the content is part "content" and the markup around it "template"; the lines of a
`<tools>` element are part "tools" (each named by its function). A template that is not ChatML gets one span,
part "unknown". Token positions come from the model's tokenizer (tokens/views.py: each token's characters).

>>> from playground.tiny import build_tiny_tokenizer
>>> chat = render_chat(build_tiny_tokenizer(), [{"role": "user", "content": "Hi"}], template="thinking")
>>> [(s.message, s.role, s.part) for s in chat.spans]
[(0, 'user', 'template'), (0, 'user', 'content'), (0, 'user', 'template'), (None, 'assistant', 'generation prompt')]
>>> chat.text.endswith("<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n")
True

Left out: templates other than ChatML for the spans, and tool calls in answers (the tools template lists the
tools; it parses nothing the model writes).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from .spans import TokenizerUnavailable
from .tools import TOOLS_INTRO, TOOLS_OUTRO, tool_line
from .views import hf_view

MODEL = "model"   # the model's own chat template
START, END = "<|im_start|>", "<|im_end|>"

_CHATML = ("{%- for message in messages %}{%- if message['role'] != 'system' or not system_block %}"
           "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
           "{%- endif %}{%- endfor %}")
THINKING_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- set content = message['content'] %}"
    "{%- if message['role'] == 'assistant' %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' }}{%- endif %}")
CLOCK_TEMPLATE = (
    "{%- set system_block = true %}"
    "{{- '<|im_start|>system\\nThe time is ' + now + '.' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- ' ' + messages[0]['content'] }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}" + _CHATML +
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
TOOLS_TEMPLATE = (   # the block's words are tokens/tools.py's (tools_intro, tools_outro: passed in by render_chat)
    "{%- set system_block = true %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{%- if tools %}{{- tools_intro }}{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- tools_outro }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}" + _CHATML +
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
TEMPLATES = {   # name -> (Jinja template, what it shows); MODEL: the tokenizer's own
    MODEL: (None, "the model's own chat template"),
    "thinking": (THINKING_TEMPLATE, "reasoning style (Qwen3, thinking off): an empty <think> block in the "
                                    "generation prompt, dropped from the history: every turn rewrites the one before"),
    "clock": (CLOCK_TEMPLATE, "a system prompt that starts with the current time: it changes every turn"),
    "tools": (TOOLS_TEMPLATE, "tool definitions in the system block (Hermes/Qwen style), in the order sent"),
}


@dataclass(frozen=True)
class MessageSpan:
    """Token positions [start, end) of one part of one message of a rendered chat."""
    start: int
    end: int
    message: int | None   # index in the messages; None: the template's own text (its system prompt, the
    #                       generation prompt, text before the first block)
    role: str             # the block's role ("" outside any block)
    part: str             # "content" | "template" | "tools" | "generation prompt" | "unknown"
    name: str = ""        # part "tools": the function a line defines

    def as_dict(self) -> dict:
        out = {"start": self.start, "end": self.end, "message": self.message, "role": self.role, "part": self.part}
        return {**out, "name": self.name} if self.name else out


@dataclass(frozen=True)
class RenderedChat:
    text: str
    ids: list[int]
    spans: tuple[MessageSpan, ...]
    messages: tuple[dict, ...]
    template: str
    tools: tuple[str, ...] = ()   # each tool as the JSON line it renders (its order is the request's)

    def at(self, position: int) -> MessageSpan | None:
        return span_at(self.spans, position)


def span_at(spans, position: int) -> MessageSpan | None:
    """The span holding token `position` (spans in order, covering the tokens); None past them."""
    return next((s for s in spans if s.start <= position < s.end), None)


def clock_text() -> str:
    """The current time as the clock template writes it (to the second)."""
    return time.strftime("%Y-%m-%d %H:%M:%S")


def check_template(name: str) -> str:
    """`name` when it is one of TEMPLATES; ValueError naming them otherwise."""
    if name not in TEMPLATES:
        raise ValueError(f"no chat template named {name!r}; the templates are {', '.join(TEMPLATES)}")
    return name


def render_chat(tokenizer, messages, template: str = MODEL, tools=(), now: str | None = None,
                add_generation_prompt: bool = True) -> RenderedChat:
    """The chat as the model reads it (`template` by name, `tools` for the tools template, `now` for the clock's);
    ValueError for an unknown template or a tokenizer without a chat template when MODEL is asked."""
    source = TEMPLATES[check_template(template)][0]
    if source is None and not getattr(tokenizer, "chat_template", None):
        raise ValueError("this tokenizer has no chat template of its own; pick one of " + ", ".join(TEMPLATES))
    messages = tuple({"role": m["role"], "content": m["content"]} for m in messages)
    now = now or clock_text()
    kwargs = dict(tools=list(tools) or None, now=now, tools_intro=TOOLS_INTRO, tools_outro=TOOLS_OUTRO, tokenize=False)
    if source is not None:
        kwargs["chat_template"] = source
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt, **kwargs)
    try:
        tokens = hf_view(tokenizer).encode_spans(text, special_tokens=True)
        ids, starts = [t.token_id for t in tokens], [t.start for t in tokens]
    except TokenizerUnavailable:   # no character offsets: the ids, and one span over them
        ids, starts = tokenizer(text, add_special_tokens=False)["input_ids"], None
    rendered = [tool_line(t) for t in tools]
    spans = (token_spans(char_owners(text, messages), starts) if starts is not None
             else (MessageSpan(0, len(ids), None, "", "unknown"),))
    return RenderedChat(text, ids, spans, messages, template, tuple(rendered))


# --- characters to parts

Owner = tuple   # (message, role, part, name)


def char_owners(text: str, messages) -> list[tuple[int, Owner]]:
    """[(first character, owner)] in order: who each run of characters of a rendered ChatML text belongs to."""
    if START not in text:
        return [(0, (None, "", "unknown", ""))]
    runs: list[tuple[int, Owner]] = []
    first = text.index(START)
    if first:
        runs.append((0, (None, "", "template", "")))
    starts = [i for i in _find_all(text, START)]
    following = 0   # the next message a block may be
    for k, begin in enumerate(starts):
        stop = starts[k + 1] if k + 1 < len(starts) else len(text)
        header_end = text.find("\n", begin, stop)
        role = text[begin + len(START):header_end if header_end >= 0 else stop]
        body_start = header_end + 1 if header_end >= 0 else stop
        closed = text.find(END, body_start, stop)
        body_end = closed if closed >= 0 else stop
        body = text[body_start:body_end]
        index, found = _match(messages, following, role, body)
        if index is None:
            part = "generation prompt" if closed < 0 and k == len(starts) - 1 else "template"
            runs.append((begin, (None, role, part, "")))
            runs += _tools(text, body_start, body_end, (None, role, part, ""))
            continue
        following = index + 1
        owner = (index, role, "template", "")
        runs.append((begin, owner))
        content_start = body_start + found
        content_end = content_start + len(_shown(messages[index], body))
        runs += _tools(text, body_start, content_start, owner)
        runs.append((content_start, (index, role, "content", "")))
        runs += _tools(text, content_start, content_end, (index, role, "content", ""))   # a block in the content
        runs.append((content_end, owner))
        runs += _tools(text, content_end, body_end, owner)
    return runs


def _find_all(text: str, needle: str):
    i = text.find(needle)
    while i >= 0:
        yield i
        i = text.find(needle, i + len(needle))


def _shown(message: dict, body: str) -> str:
    """The message's content as the block shows it (a template may drop an answer's <think> block)."""
    content = message["content"]
    if content in body:
        return content
    return content.split("</think>")[-1].lstrip("\n")


def _match(messages, following: int, role: str, body: str) -> tuple[int | None, int]:
    """(index of the next message of `role` from `following` whose content `body` shows, where it starts)."""
    for index in range(following, len(messages)):
        message = messages[index]
        if message["role"] == role:
            shown = _shown(message, body)
            where = body.find(shown)
            return (index, where) if where >= 0 else (None, 0)
    return None, 0


def _tools(text: str, start: int, end: int, owner: Owner) -> list[tuple[int, Owner]]:
    """The runs of a `<tools>` element between `start` and `end`: each line is part "tools", named by its function;
    the text after the element goes back to `owner`."""
    open_at = text.find("<tools>\n", start, end)
    close_at = text.find("\n</tools>", open_at, end) if open_at >= 0 else -1
    if open_at < 0 or close_at < 0:
        return []
    runs, line = [], open_at + len("<tools>\n")
    for piece in text[line:close_at].split("\n"):
        runs.append((line, (owner[0], owner[1], "tools", _tool_name(piece))))
        line += len(piece) + 1
    runs.append((close_at, owner))
    return runs


def _tool_name(line: str) -> str:
    try:
        tool = json.loads(line)
    except ValueError:
        return ""
    if not isinstance(tool, dict):
        return ""
    function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return str(function.get("name", ""))


def token_spans(runs: list[tuple[int, Owner]], starts: list[int]) -> tuple[MessageSpan, ...]:
    """MessageSpans over token positions: each token takes the owner of its first character; runs of tokens with
    one owner make one span."""
    spans: list[MessageSpan] = []
    r = 0
    for position, char in enumerate(starts):
        while r + 1 < len(runs) and runs[r + 1][0] <= char:
            r += 1
        owner = runs[r][1]
        last = spans[-1] if spans else None
        if last is not None and (last.message, last.role, last.part, last.name) == owner:
            spans[-1] = MessageSpan(last.start, position + 1, *owner)
        else:
            spans.append(MessageSpan(position, position + 1, *owner))
    return tuple(spans)
