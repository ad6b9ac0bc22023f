"""An OpenAI request body read into what the engine needs: the prompt, the settings, how to answer.

    asked = read_body(body, CHAT)                      # ApiError 400 naming the field for bad input
    text, ids = prompt_ids(engine, asked)              # the chat template applied (chat), or the raw text / ids
    settings = asked.settings(max_tokens)              # GenerationSettings for the Batcher

    >>> a = read_body({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stop": "\\n",
    ...                "logprobs": True, "top_logprobs": 2, "stream": True,
    ...                "stream_options": {"include_usage": True}}, CHAT)
    >>> a.max_tokens, a.stop, a.top_logprobs, a.include_usage, a.settings(8).top_candidates
    (8, ('\\n',), 2, True, 2)
    >>> read_body({"prompt": "Hi", "temperature": 9}, COMPLETION)
    Traceback (most recent call last):
    playground.api.errors.ApiError: temperature must be between 0.0 and 5.0, got 9

Fields read (the others are ignored, as llama.cpp and vLLM ignore what they do not know): `messages`
(chat: system, developer, user, assistant; content as text or a list of text parts) or `prompt`
(completions: text, or a list of token ids as vLLM and llama.cpp take), `max_tokens` /
`max_completion_tokens`, `temperature`, `top_p`, `seed`, `stop` (a string or up to 4), `logprobs` and
`top_logprobs` (chat) or `logprobs: N` (completions), `stream`, `stream_options.include_usage`, and the
extras `top_k`, `ignore_eos`, `per_request_metrics` (true: vLLM's per-request `metrics` object in the
response, which vLLM itself sends only when started with --enable-per-request-metrics) and `priority` (vLLM's:
0 by default; 1 or more yields to the other requests, in admission and prefill, serve/plan.py; never below 0,
so no client goes ahead of the room's people: 0 to MAX_PRIORITY). Which conversation a
request continues (serve/conversations.py) is named by the session it names (`session`, read on every route by
session_hint.py: `prompt_cache_key`, `X-Session-Id` and the others), else `user` (each a string of up to
MAX_KEY_CHARS). The extension object `x_playground` may name a
chat template the project ships (`{"template": "thinking"}`: tokens/chat.py's TEMPLATES; default: the
model's own), and `tools` (a list of objects, OpenAI's function tools) are rendered by a template that shows
them (the "tools" one; the bundled model's own ignores them). Text a tokenizer cannot read (a lone surrogate) is refused with a 400 naming
its field, by the rule the page's own prompts follow (config.check_text). `model` may name any model: the one this engine serves answers (as
llama.cpp does). `n` must be 1.

Left out: tool calls in answers, response formats, images, penalties, `logit_bias`, `echo`, `suffix`, `best_of`.
"""
from __future__ import annotations

from dataclasses import dataclass

import json

from ..config import MAX_PROMPT_CHARS, MAX_TOP_CANDIDATES, GenerationSettings, check_text
from ..serve.sessions import MAX_ID_CHARS
from ..tokens.chat import MODEL, RenderedChat, check_template, render_chat
from .errors import ApiError, bad_request

CHAT, COMPLETION = "chat", "completion"
MAX_STOPS = 4
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
SETTINGS_PARAM = {"max_new_tokens": "max_tokens", "top_candidates": "top_logprobs"}   # engine name -> API name
MAX_KEY_CHARS = MAX_ID_CHARS   # a conversation key (prompt_cache_key, user) at most, as a session id
MAX_TOOLS = 128       # tool definitions one request may list
MAX_PRIORITY = 100    # `priority` at most: 0 first, a larger number later


@dataclass(frozen=True)
class Asked:
    """What one request asks for, checked; the prompt is tokenized later (prompt_ids)."""
    kind: str                          # CHAT | COMPLETION
    messages: tuple[dict, ...] = ()    # chat: {"role", "content"} with content as text
    prompt: str | None = None          # completions: the text
    prompt_ids: tuple[int, ...] = ()   # completions: exact token ids instead of text
    max_tokens: int | None = None      # None: the server's default (the most it allows, within the window)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False
    ignore_eos: bool = False
    per_request_metrics: bool = False  # add vLLM's per-request `metrics` object to the response (timings.py)
    priority: int = 0                  # vLLM's: 0, or more to yield to the other requests (serve/plan.py)
    prompt_cache_key: str = ""         # the client's conversation key ("": none sent)
    user: str = ""                     # OpenAI's end-user id: a conversation key when no other is sent
    template: str = MODEL              # the chat template, by name (tokens/chat.py)
    tools: tuple[dict, ...] = ()       # function tools, for a template that renders them
    session: object = None             # the serve.sessions.Session it names (session_hint.py), or None

    @property
    def tool_chars(self) -> int:
        """Characters the tools add to the prompt, about (each as its JSON line)."""
        return sum(len(json.dumps(t, ensure_ascii=False)) for t in self.tools)

    def settings(self, max_tokens: int) -> GenerationSettings:
        """GenerationSettings for the Batcher; ApiError 400 naming the API's field for a value out of range."""
        try:
            return GenerationSettings(max_new_tokens=max_tokens, temperature=self.temperature, top_k=self.top_k,
                                      top_p=self.top_p, seed=self.seed, chat=self.kind == CHAT,
                                      top_candidates=max(1, self.top_logprobs)).validate()
        except ValueError as exc:
            name = str(exc).split(" ", 1)[0]
            raise bad_request(str(exc).replace(name, SETTINGS_PARAM.get(name, name), 1),
                              SETTINGS_PARAM.get(name, name)) from None


def read_body(body, kind: str) -> Asked:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    n = body.get("n", 1)
    if n not in (1, None):
        raise bad_request("n must be 1: one choice per request here", "n")
    fields = dict(kind=kind, stream=_bool(body, "stream"), ignore_eos=_bool(body, "ignore_eos"),
                  per_request_metrics=_bool(body, "per_request_metrics"), stop=_stops(body.get("stop")),
                  **_sampling(body))
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise bad_request("stream_options must be an object", "stream_options")
        fields["include_usage"] = _bool(options, "include_usage", "stream_options.include_usage")
    fields.update(prompt_cache_key=_key(body, "prompt_cache_key"), user=_key(body, "user"))
    if body.get("priority") is not None:
        fields["priority"] = _int(body, "priority", 0, MAX_PRIORITY)
    if kind == CHAT:
        fields["messages"] = _messages(body.get("messages"))
        fields["tools"] = _tools(body.get("tools"))
        fields["template"] = _template(body.get("x_playground"))
        fields["logprobs"] = _bool(body, "logprobs")
        top = body.get("top_logprobs")
        fields["top_logprobs"] = _int(body, "top_logprobs", 0, MAX_TOP_CANDIDATES) if top is not None else 0
        if fields["top_logprobs"] and not fields["logprobs"]:
            raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
    else:
        fields.update(_prompt(body.get("prompt")))
        if body.get("logprobs") is not None:
            fields["top_logprobs"] = _int(body, "logprobs", 0, MAX_TOP_CANDIDATES)
            fields["logprobs"] = True
    asked = Asked(**fields)
    chars = sum(len(m["content"]) for m in asked.messages) + len(asked.prompt or "") + asked.tool_chars
    if chars > MAX_PROMPT_CHARS:
        raise bad_request(f"the prompt is {chars:,} characters; the limit is {MAX_PROMPT_CHARS:,}",
                          "messages" if kind == CHAT else "prompt", "prompt_too_long")
    return asked


def prompt_ids(engine, asked: Asked) -> tuple[str, list[int]]:
    """(the text the model reads, its token ids): the chat template over the messages, or the raw prompt."""
    text, ids, _ = rendered(engine, asked)
    return text, ids


def rendered(engine, asked: Asked) -> tuple[str, list[int], RenderedChat | None]:
    """(the text the model reads, its token ids, the rendered chat with each token's message, or None for a raw
    prompt or a chat on a tokenizer without a template of its own when none is named)."""
    tok = engine.tokenizer
    if asked.kind == CHAT and (asked.template != MODEL or getattr(tok, "chat_template", None)):
        chat = render_chat(tok, asked.messages, template=asked.template, tools=asked.tools)
        return chat.text, chat.ids, chat
    if asked.kind == CHAT:   # no template: the messages one per line, as a plain completion
        text = "\n".join(f"{m['role']}: {m['content']}" for m in asked.messages) + "\nassistant:"
        return text, tok(text, add_special_tokens=False)["input_ids"], None
    if asked.prompt_ids:
        vocab = len(tok)
        if any(not 0 <= i < vocab for i in asked.prompt_ids):
            raise bad_request(f"prompt token ids must be between 0 and {vocab - 1}", "prompt")
        return tok.decode(list(asked.prompt_ids)), list(asked.prompt_ids), None
    return asked.prompt, tok(asked.prompt, add_special_tokens=True)["input_ids"], None


# --- the fields, one reader each

def _bool(body: dict, name: str, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"{param or name} must be true or false, got {value!r}", param or name)
    return value


def _int(body: dict, name: str, low: int, high: int) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise bad_request(f"{name} must be a whole number between {low} and {high}, got {value!r}", name)
    return value


def _number(body: dict, name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_request(f"{name} must be a number, got {value!r}", name)
    return value


def _sampling(body: dict) -> dict:
    out = {"temperature": _number(body, "temperature", 1.0), "top_p": _number(body, "top_p", 1.0)}
    if body.get("top_k") is not None:
        out["top_k"] = max(0, _int(body, "top_k", -1, 1000))   # llama.cpp's -1 and vLLM's 0 both mean off
    if body.get("seed") is not None:
        out["seed"] = _int(body, "seed", 0, 2**63 - 1)
    for name in ("max_completion_tokens", "max_tokens"):   # the newer name wins when both are sent
        if body.get(name) is not None:
            out["max_tokens"] = _int(body, name, 1, 1 << 30)
            break
    out_of_range = GenerationSettings(temperature=out["temperature"], top_p=out["top_p"])
    try:
        out_of_range.validate()
    except ValueError as exc:
        raise bad_request(str(exc), str(exc).split(" ", 1)[0]) from None
    return out


def _stops(value) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else value if isinstance(value, list) else None
    if value is None:
        return ()
    if stops is None or len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
        raise bad_request(f"stop must be a non-empty string or a list of up to {MAX_STOPS} of them", "stop")
    return tuple(tokenizable(s, "stop") for s in stops)


def _messages(value) -> tuple[dict, ...]:
    if not isinstance(value, list) or not value:
        raise bad_request("messages must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in ROLES:
            raise bad_request(f"messages[{i}] must have a role of {', '.join(ROLES)}", f"messages[{i}].role")
        out.append({"role": ROLES[m["role"]], "content": _content(m.get("content"), f"messages[{i}].content")})
    if not any(m["content"].strip() for m in out):
        raise bad_request("the messages are empty: no text for the model to read", "messages")
    return tuple(out)


def _key(body: dict, name: str) -> str:
    value = body.get(name)
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_KEY_CHARS:
        raise bad_request(f"{name} must be a string of at most {MAX_KEY_CHARS} characters", name)
    return value


def _tools(value) -> tuple[dict, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TOOLS or not all(isinstance(t, dict) for t in value):
        raise bad_request(f"tools must be a list of up to {MAX_TOOLS} objects", "tools")
    for i, tool in enumerate(value):
        tokenizable(json.dumps(tool, ensure_ascii=False), f"tools[{i}]")
    return tuple(value)


def _template(value) -> str:
    if value is None:
        return MODEL
    if not isinstance(value, dict) or not isinstance(value.get("template", MODEL), str):
        raise bad_request('x_playground must be an object such as {"template": "thinking"}', "x_playground")
    try:
        return check_template(value.get("template", MODEL))
    except ValueError as exc:
        raise bad_request(str(exc), "x_playground.template") from None


def tokenizable(value: str, param: str) -> str:
    """`value` when a tokenizer can read it (config.check_text, the page's own rule); else 400 naming `param`."""
    try:
        return check_text(value, param)
    except ValueError as exc:
        raise bad_request(str(exc), param) from None


def _content(value, param: str) -> str:
    if isinstance(value, str):
        return tokenizable(value, param)
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(
            p.get("text"), str) for p in value):
        return tokenizable("".join(p["text"] for p in value), param)
    raise bad_request(f"{param} must be text or a list of text parts (this model reads text only)", param)


def _prompt(value) -> dict:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]   # a batch of one
    if isinstance(value, str) and value.strip():
        return {"prompt": tokenizable(value, "prompt")}
    if isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return {"prompt_ids": tuple(value)}
    raise bad_request("prompt must be non-empty text or a list of token ids (one prompt per request)", "prompt")


__all__ = ["ApiError", "Asked", "CHAT", "COMPLETION", "prompt_ids", "read_body", "rendered", "tokenizable"]
