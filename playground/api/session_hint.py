"""Which agent session a request belongs to, read from its body and headers on every route.

    session = read_session(body, headers.get("x-session-id"))                 # chat, completions, messages
    session = read_session(body, header, chained=store.session_of(previous))  # responses: the chain's session
    asked = replace(asked, session=session)     # the service gives it to the engine loop; its record keeps it

A request names its session by, in this order (the first that names one wins; serve/sessions.py's Session):

  1. Anthropic's `cache_control` -- a mark on any block (`system`, a message's content, a tool) or on the body
     itself: its session is named by the conversation's opening (its system prompt and first message, which
     every turn resends: sessions.opening_id), with the mark's `ttl` ("5m" | "1h"; "5m" when absent; the
     longest when several marks ask) -- or OpenAI's `prompt_cache_key` (Codex sends its conversation id);
  2. the Responses chain: `previous_response_id` continues the session of the stored response it names (that
     response's own session, or, when it named none, the chain's first response id);
  3. the `X-Session-Id` header, or a field shaped like vLLM's `agent_hint` (RFC #52113:
     `{"session_id": …, "cache_control": {"type": "ephemeral", "ttl": seconds}}`).

The TTL asked is the `cache_control` mark's, else `agent_hint.cache_control.ttl` (seconds, 0 to 3600; 300 when
the object is sent without one), else None (not asked). Every route reads the same fields (a chat request may carry
`cache_control` on its content parts, as OpenRouter's clients send them). What is well formed is never refused;
a TTL that is not one of those values, a `cache_control` or `agent_hint` that is not an object, or an id that is
not text of at most MAX_ID_CHARS characters is a 400 naming the field, in the route's own error shape. An
`X-Session-Id` header is cut to MAX_ID_CHARS (a header is not the body's to refuse).

>>> read_session({"prompt_cache_key": "conv-1", "agent_hint": {"session_id": "w7"}}, "s9").id
'conv-1'
>>> s = read_session({"messages": [{"role": "user", "content": "Hi"}], "agent_hint": {"session_id": "w7",
...                   "cache_control": {"type": "ephemeral", "ttl": 60}}}, None)
>>> s.id, s.source.value, s.ttl_s
('w7', 'agent_hint', 60.0)
>>> read_session({"messages": []}, None) is None
True

Left out: what a TTL does to the session's KV (the prefix cache's).
"""
from __future__ import annotations

from ..serve.sessions import (MAX_ID_CHARS, Session, SessionSource, agent_hint_ttl, anthropic_ttl, opening_id)
from .errors import bad_request

BLOCK_LISTS = ("system", "tools", "messages", "input")   # where a body keeps blocks a cache_control may mark
SYSTEM_ROLES = ("system", "developer")


def read_session(body, header: str | None, chained: str | None = None) -> Session | None:
    """The session `body` (a dict), the X-Session-Id `header` and the Responses `chained` session id name; None
    when none does. ApiError 400 naming the field for a malformed TTL, mark or id."""
    if not isinstance(body, dict):
        return None
    marks = _marks(body)
    ttl = max(marks) if marks else _hint_ttl(body)
    if marks:
        return Session(opening_id(*_opening(body)), SessionSource.CACHE_CONTROL, ttl)
    named = [(_id(body.get("prompt_cache_key"), "prompt_cache_key"), SessionSource.PROMPT_CACHE_KEY),
             (chained, SessionSource.RESPONSES_CHAIN),
             ((header or "")[:MAX_ID_CHARS], SessionSource.HEADER),
             (_id(_hint(body).get("session_id"), "agent_hint.session_id"), SessionSource.AGENT_HINT)]
    return next((Session(name, source, ttl) for name, source in named if name), None)


def _id(value, param: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_ID_CHARS:
        raise bad_request(f"{param} must be a string of at most {MAX_ID_CHARS} characters", param)
    return value


def _hint(body: dict) -> dict:
    hint = body.get("agent_hint")
    if hint is None:
        return {}
    if not isinstance(hint, dict):
        raise bad_request('agent_hint must be an object such as {"session_id": "worker-7", "cache_control": '
                          '{"type": "ephemeral", "ttl": 300}}', "agent_hint")
    return hint


def _hint_ttl(body: dict) -> float | None:
    control = _hint(body).get("cache_control")
    if control is None:
        return None
    param = "agent_hint.cache_control"
    if not isinstance(control, dict):
        raise bad_request(f'{param} must be an object such as {{"type": "ephemeral", "ttl": 300}}', param)
    try:
        return agent_hint_ttl(control.get("ttl"), f"{param}.ttl")
    except ValueError as exc:
        raise bad_request(str(exc), f"{param}.ttl") from None


def _marks(body: dict) -> list[float]:
    """The TTL of every cache_control mark in the body: on the body, and on any block of its block lists (one level
    of content inside a message or an input item)."""
    found = []

    def mark(holder, param: str) -> None:
        control = holder.get("cache_control")
        if control is None:
            return
        if not isinstance(control, dict):
            raise bad_request(f'{param}.cache_control must be an object such as {{"type": "ephemeral", "ttl": "5m"}}',
                              f"{param}.cache_control")
        try:
            found.append(anthropic_ttl(control.get("ttl"), f"{param}.cache_control.ttl"))
        except ValueError as exc:
            raise bad_request(str(exc), f"{param}.cache_control.ttl") from None

    mark(body, "body")
    for name in BLOCK_LISTS:
        blocks = body.get(name)
        for i, block in enumerate(blocks if isinstance(blocks, list) else ()):
            if not isinstance(block, dict):
                continue
            mark(block, f"{name}[{i}]")
            content = block.get("content")
            for j, part in enumerate(content if isinstance(content, list) else ()):
                if isinstance(part, dict):
                    mark(part, f"{name}[{i}].content[{j}]")
    return found


def _opening(body: dict) -> tuple:
    """(the system prompt, the first message) as the body sends them, in any of the routes' shapes."""
    system = body.get("system", body.get("instructions"))
    messages = body.get("messages")
    if not isinstance(messages, list):
        entry = body.get("input", body.get("prompt"))
        messages = entry if isinstance(entry, list) else [entry]
    chat_system = [m for m in messages if isinstance(m, dict) and m.get("role") in SYSTEM_ROLES]
    first = next((m for m in messages if not (isinstance(m, dict) and m.get("role") in SYSTEM_ROLES)), None)
    if isinstance(first, dict):   # what is read, without the marks (they move from turn to turn)
        content = first.get("content")
        first = [_unmarked(p) for p in content] if isinstance(content, list) else content
    system = [_unmarked(b) for b in system] if isinstance(system, list) else system
    return (system if system is not None else [m.get("content") for m in chat_system]), first


def _unmarked(block):
    return {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block
