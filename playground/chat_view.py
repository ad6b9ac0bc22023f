"""A conversation's turns in words: each turn's prompt as cached + computed, and why a turn missed the cache.

    prompt_words(record)            # '412 prompt tokens = 400 cached + 12 computed'
    miss_html(record)               # the record of the lookup (serve/cache_miss.py) as a card: the cause, the first
    #                                 differing position, the tokens around it, its message and part, computed again
    turns_html(turns, bound)        # the page's conversation: each turn (anything with `user`, `answer`, `record`,
    #                                 `ttft`, `trace`, `note`), newest last, with its card

A record is the JSON of a CacheRecord (`as_dict()`); one without decoded tokens (what a Trace keeps) says the text
was not kept. What a record cannot say is "unknown", never a zero: a turn without a record (a run outside the engine
loop, the prefix cache off) says so.

>>> prompt_words({"prompt_tokens": 40, "cached": 32})
'40 prompt tokens = 32 cached + 8 computed'
>>> prompt_words(None)
'prompt tokens cached: unknown (no record of the cache lookup)'

Left out: the figures (charts/conversation.py) and the page's controls (ui/).
"""
from __future__ import annotations

import html

from .tokens import visible
from .trace import StopReason
from .units import format_seconds


ENDS = {StopReason.EOS: "the model ended its turn", StopReason.LENGTH: "max new tokens reached",
        StopReason.CONTEXT: "the window is full", StopReason.CANCELLED: "stopped", StopReason.ERROR: "failed"}


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _token(text: str) -> str:
    return _esc(visible(text.encode("utf-8", errors="surrogateescape")) or "∅")


def prompt_words(record: dict | None) -> str:
    """A turn's prompt tokens as cached + computed (computed: the rest of the prompt, read by prefill)."""
    if not record:
        return "prompt tokens cached: unknown (no record of the cache lookup)"
    n, cached = record["prompt_tokens"], record["cached"]
    return f"{n:,} prompt tokens = {cached:,} cached + {n - cached:,} computed"


def where_words(where: dict | None) -> str:
    """Where a token lies: its message and part ("unknown" when the record cannot say).

    >>> where_words({"message": 3, "role": "user", "part": "content", "name": ""}), where_words(None)
    ('message 3 (user, content)', 'unknown')
    >>> where_words({"message": None, "role": "assistant", "part": "answer", "name": ""})
    'the answer the model generated (assistant)'
    """
    if not where:
        return "unknown"
    if where.get("part") == "answer" and where.get("message") is None:
        return f"the answer the model generated ({where.get('role') or 'assistant'})"
    part = where["part"] + (f": {where['name']}" if where.get("name") else "")
    who = f"message {where['message']}" if where.get("message") is not None else "the template's own text"
    return f"{who} ({where.get('role') or 'no role'}, {part})"


def miss_html(record: dict | None) -> str:
    """Why the turn's prompt was not all found in the cache, as a card (class pg-miss)."""
    if not record:
        return ('<div class="pg-miss"><b>Why it missed:</b> unknown: this turn has no record of the cache lookup '
                "(a run outside the engine loop, or the prefix cache off)</div>")
    cause = record["cause"]
    lines = [f'<b>Cause:</b> <span class="pg-cause">{_esc(cause)}</span>: {_esc(record.get("detail", ""))}',
             f"<b>Ideal reuse:</b> {record['ideal']:,} tokens (the history shared with the previous turn, "
             f"{record['common_prefix']:,} tokens, in full blocks); <b>found:</b> {record['cached']:,}",
             f"<b>Computed again</b> (prompt − 16·⌊common prefix / 16⌋): {record['recomputed']:,} tokens"]
    first = record.get("first_difference")
    if first is not None:
        lines.append(f'<b>First difference:</b> token <span class="pg-first">{first:,}</span>, in '
                     f"{_esc(where_words(record.get('message')))}; the cached sequence had "
                     f"{_esc(where_words(record.get('was')))} there")
        if "now" in record:
            before = "".join(_token(t) for t in record.get("before", ()))
            now = "".join(_token(t) for t in record.get("now", ()))
            then = "".join(_token(t) for t in record.get("then", ()))
            lines.append(f'<b>This prompt:</b> <code>{before}<mark>{now}</mark></code>')
            lines.append(f'<b>The cached one:</b> <code>{before}<mark>{then}</mark></code>')
        else:
            lines.append("<b>The tokens around it:</b> not kept (a Trace keeps no text)")
    elif record["turn"] > 1:
        lines.append("<b>First difference:</b> none: this prompt continues what the cache held")
    return '<div class="pg-miss">' + "<br>".join(lines) + "</div>"


def turn_words(number: int, turn) -> str:
    """A turn's heading: its number, prompt tokens as cached + computed, its TTFT (the wait included), its end."""
    trace = turn.trace
    ttft = turn.ttft
    wait = ("TTFT with the wait: missing (no token yet)" if trace is None or not trace.steps else
            "TTFT with the wait: missing (the wait was not measured)" if ttft is None else
            f"TTFT {format_seconds(ttft)}, {format_seconds(trace.queued)} of it waiting for a turn")
    end = "running" if trace is None or not trace.finished else ENDS.get(trace.stop_reason, str(trace.stop_reason))
    note = f" · {turn.note}" if turn.note else ""
    return f"Turn {number}{note} · {prompt_words(turn.record)} · {wait} · {end}"


def turns_html(turns, bound: str) -> str:
    """The conversation, one block per turn (its heading, the message, the answer, why it missed), then the bound."""
    if not turns:
        return f'<div class="pg-chat"><p class="pg-bound">No turns yet. {_esc(bound)}</p></div>'
    blocks = []
    for k, turn in enumerate(turns, 1):
        answer = turn.answer if turn.answer.strip() else visible(turn.answer.encode()) if turn.answer else (
            "…" if turn.trace is not None and not turn.trace.finished else "(no answer)")
        cancelled = turn.trace is not None and turn.trace.stop_reason == StopReason.CANCELLED
        blocks.append(
            f'<div class="pg-turn" data-turn="{k}"><div class="pg-turn-head">{_esc(turn_words(k, turn))}</div>'
            f'<div class="pg-user"><b>You:</b> {_esc(turn.user)}</div>'
            f'<div class="pg-answer"><b>Model:</b> {_esc(answer)}{" <i>(stopped)</i>" if cancelled else ""}</div>'
            f"<details{' open' if k == len(turns) else ''}><summary>Why this turn missed the cache</summary>"
            f"{miss_html(turn.record)}</details></div>")
    return f'<div class="pg-chat">{"".join(blocks)}<p class="pg-bound">{_esc(bound)}</p></div>'
