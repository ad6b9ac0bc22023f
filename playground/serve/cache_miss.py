"""Why a turn missed the prefix cache, from token ids: one record per request of a conversation.

    record = explain(prompt_ids, cached, previous, spans=chat.spans, messages=chat.messages, decode=decode)
    record.cause, record.first_difference, record.recomputed, record.ribbon
    record.as_dict()                                  # JSON: the endpoint's x_playground.cache
    record.as_dict(text=False)                        # without the decoded tokens: what a Trace keeps

`previous` is what the cache held for the conversation: the previous turn's whole sequence (its prompt, then
every token it generated), with its messages and their spans (tokens/chat.py); None for a new conversation.
The record says:

  - `common_prefix`: the tokens this prompt shares with that sequence from position 0, and
    `first_difference`, the first position where they part (None: the prompt continues it whole);
  - `ideal`: what the cache could give at best: the common prefix's full blocks, within the positions the
    previous turn left KV for (its last token was never fed: 16·⌊(sequence − 1)/16⌋) and leaving this prompt's
    last token to compute; `cached` (what the lookup found) against it;
  - `recomputed` = prompt − 16·⌊common prefix / 16⌋: the tokens computed;
  - the ribbon, per token of the prompt: found in the cache [0, cached), unchanged from the previous turn but
    computed again [cached, common prefix), new this turn (the rest);
  - the tokens around the first difference, decoded (AROUND each side), as this prompt has them and as the
    cached sequence had them, and the message and part of it they lie in, on both sides;
  - one cause (`Cause`), first that applies: below one block (the prompt leaves no full block to reuse); a new
    conversation; evicted (fewer blocks found than the ideal, and the eviction log names the first missing
    block: when, why (least recently used, a session's TTL expired, released over the held share, or pressure) and
    what took its room); unknown (fewer found and no eviction on record); then, where the
    prompt parts from the cached sequence, what changed there: tools reordered or changed (a tools line),
    volatile system prompt (the system block, while every other message is unchanged), earlier turn edited
    (a message's content differs), answer re-tokenized differently (the previous answer sent back as the same
    text, read as other ids than were generated: they part inside its text or right after it, as when the answer
    was cut inside a character whose bytes its text cannot carry), template rewrite (the same messages rendered
    otherwise);
    below one block again when the shared history is shorter than a block; else no miss.

Unknown is "unknown", never a zero: a record without messages (a raw prompt) places a difference nowhere.

>>> prev = Previous(ids=tuple(range(40)) + (90, 91), prompt=40)
>>> r = explain(list(range(40)) + [90, 91, 5, 6], cached=32, previous=prev)
>>> r.cause.value, r.first_difference, r.ideal, r.recomputed, r.ribbon
('no miss', None, 32, 12, {'cached': 32, 'recomputed': 10, 'new': 2})

Left out: a cause per block (one cause per turn: the first that applies), and a difference past the end of
the cached sequence (the prompt continuing it is a normal turn, not a miss).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import Enum

from ..tokens.chat import span_at
from .prefix_cache import BLOCK_SIZE, EVICTION_LOG, Eviction

AROUND = 12   # tokens decoded on each side of the first difference


class Cause(str, Enum):
    NONE = "no miss"
    NEW = "new conversation"
    BELOW = "below one block"
    EVICTED = "evicted"
    TEMPLATE = "template rewrite"
    EDITED = "earlier turn edited"
    RETOKENIZED = "answer re-tokenized differently"
    SYSTEM = "volatile system prompt"
    TOOLS = "tools reordered or changed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Previous:
    """What the cache held for a conversation: its previous turn's whole sequence, and what it was made of."""
    ids: tuple[int, ...]            # its prompt, then every token it generated
    prompt: int                     # how many of `ids` were its prompt
    messages: tuple[dict, ...] = ()  # its prompt's messages (role, content); () for a raw prompt
    spans: tuple = ()               # its prompt's MessageSpans (tokens/chat.py)
    answer: str = ""                # its answer as text (what a client sends back as the next turn's message)
    tools: tuple[str, ...] = ()     # its tool lines, as rendered
    turn: int = 1                   # its turn in the conversation
    at: float | None = None         # time.time() when it ended


@dataclass(frozen=True)
class Where:
    """A token's place in a rendered chat: its message (None: the template's own text) and the part of it."""
    message: int | None
    role: str
    part: str
    name: str = ""


@dataclass(frozen=True)
class CacheRecord:
    turn: int                       # this request's turn in its conversation (1: a new one)
    conversation: str               # the conversation's name ("" for a new one not yet named)
    matched_by: str                 # "key" (the client's), "prefix" (longest common prefix), "none"
    prompt_tokens: int
    cached: int                     # prompt tokens the lookup found in the cache
    ideal: int                      # the most it could have found (see the module's docstring)
    common_prefix: int              # tokens shared with the cached sequence from position 0
    recomputed: int                 # prompt − 16·⌊common prefix / 16⌋
    first_difference: int | None    # where the prompt parts from the cached sequence; None: it does not
    cause: Cause
    detail: str                     # the cause in a sentence
    ribbon: dict                    # {"cached", "recomputed", "new"}: token counts, in that order in the prompt
    message: Where | None = None    # where the first difference lies in this prompt (None: unknown)
    was: Where | None = None        # and in the cached sequence ("answer": the tokens it generated)
    before: tuple[str, ...] = ()    # the AROUND tokens before the difference, decoded
    now: tuple[str, ...] = ()       # this prompt's tokens from the difference on
    then: tuple[str, ...] = ()      # the cached sequence's tokens from the difference on
    evicted: dict | None = None     # cause evicted: {"at", "seconds_before", "by", "block", "reason", "session",
    #                                 "log_bound"}: reason is prefix_cache.Reason's (TTL expired, pressure, …)
    spans: tuple = field(default=(), repr=False)   # this prompt's MessageSpans: the ribbon's hover

    def as_dict(self, text: bool = True) -> dict:
        """JSON; `text` False leaves out the decoded tokens (`before`, `now`, `then`): a Trace keeps no client's
        text, only the request's own response carries them."""
        out = asdict(self)
        out["cause"] = self.cause.value
        out["spans"] = [s.as_dict() for s in self.spans]
        if not text:
            for name in ("before", "now", "then"):
                del out[name]
        return out


def common_prefix(a, b) -> int:
    """How many tokens `a` and `b` share from position 0.

    >>> common_prefix([1, 2, 3], [1, 2, 4, 5]), common_prefix([], [1]), common_prefix([1, 2], [1, 2])
    (2, 0, 2)
    """
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _full(n: int, block: int) -> int:
    return block * (max(0, n) // block)


def explain(prompt, cached: int, previous: Previous | None, *, spans=(), messages=(), tools=(), decode=None,
            eviction: Eviction | None = None, conversation: str = "", matched_by: str = "none",
            block: int = BLOCK_SIZE, now: float | None = None) -> CacheRecord:
    """The record of one lookup: `prompt` (its ids), `cached` (tokens the lookup found), `previous` (what the
    cache held for the conversation, None: new), this prompt's `spans` / `messages` / `tools` (tool lines),
    `decode` (ids -> text; None: the ids written as numbers), `eviction` (the log's entry for the first block
    of the prompt that the lookup did not find, None: none on record)."""
    prompt, n = list(prompt), len(prompt)
    decode = decode or (lambda ids: " ".join(str(i) for i in ids))
    turn = previous.turn + 1 if previous is not None else 1
    held = list(previous.ids) if previous is not None else []
    common = common_prefix(prompt, held)
    ideal = min(_full(common, block), _full(len(held) - 1, block), _full(n - 1, block))
    differs = previous is not None and common < min(n, len(held))
    first = common if differs else None
    unchanged = max(0, min(common, n) - cached)
    ribbon = {"cached": cached, "recomputed": unchanged, "new": n - cached - unchanged}
    cause, detail, evicted = _cause(n, cached, ideal, common, previous, first, prompt, spans, messages, tools,
                                    eviction, block, now)
    where = was = None
    before = after_now = after_then = ()
    if first is not None:
        where = _where(spans, first)
        was = _where(previous.spans, first) if first < previous.prompt else Where(None, "assistant", "answer")
        before = tuple(decode([t]) for t in prompt[max(0, first - AROUND):first])
        after_now = tuple(decode([t]) for t in prompt[first:first + AROUND + 1])
        after_then = tuple(decode([t]) for t in held[first:first + AROUND + 1])
    return CacheRecord(turn, conversation, matched_by, n, cached, ideal, common, n - _full(common, block), first,
                       cause, detail, ribbon, where, was, before, after_now, after_then, evicted, tuple(spans))


def _where(spans, position: int) -> Where | None:
    span = span_at(spans, position)
    return Where(span.message, span.role, span.part, span.name) if span is not None else None


def _cause(n, cached, ideal, common, previous, first, prompt, spans, messages, tools, eviction, block, now):
    """(Cause, its sentence, the eviction's dict or None): the first cause that applies (see the docstring)."""
    if n - 1 < block:
        return Cause.BELOW, (f"the prompt is {n} tokens: a block is {block} positions and its last token is "
                             "always computed, so no block of it can be reused"), None
    if previous is None:
        return Cause.NEW, "no earlier sequence of this client continues into this prompt", None
    if cached < ideal:
        lost = ideal - cached
        if eviction is not None:
            now = time.time() if now is None else now
            ago = max(0.0, now - eviction.at)
            by = eviction.by or "an unnamed request"
            why = eviction.reason.value + (f" (session {eviction.session})" if eviction.session else "")
            return Cause.EVICTED, (f"{lost} tokens of the history were cached and evicted {ago:.1f} s before this "
                                   f"lookup ({why}), their room taken by {by}"), {
                "at": eviction.at, "seconds_before": round(ago, 3), "by": eviction.by, "block": eviction.block,
                "reason": eviction.reason.value, "session": eviction.session, "log_bound": EVICTION_LOG}
        return Cause.UNKNOWN, (f"{lost} tokens of the history were not in the cache, and the eviction log (the last "
                               f"{EVICTION_LOG} evictions) has no record of them: never kept (a cache full of "
                               "blocks running requests held) or evicted before the log's oldest entry"), None
    if first is not None:
        return _changed(first, prompt, previous, spans, messages, tools)
    if ideal == 0:
        return Cause.BELOW, (f"the history this prompt shares is {common} tokens: no full block of {block} "
                             "positions, with the last token left to compute, could be reused"), None
    return Cause.NONE, "every full block the previous turn left was found", None


def _changed(first, prompt, previous, spans, messages, tools):
    """What changed where the prompt parts from the cached sequence (position `first`)."""
    now = _where(spans, first)
    then = _where(previous.spans, first) if first < previous.prompt else Where(None, "assistant", "answer")
    if now is None or then is None or not messages or not previous.messages:
        return Cause.UNKNOWN, (f"the prompt parts from the cached sequence at token {first}, in no message known "
                               "(a raw prompt, or a template that is not ChatML)"), None
    if "tools" in (now.part, then.part):
        order = "reordered" if sorted(tools) == sorted(previous.tools) else "changed"
        return Cause.TOOLS, f"the tool definitions were {order} (at tool {now.name or then.name or '?'})", None
    old = previous.messages
    edited = next((i for i, (a, b) in enumerate(zip(messages, old)) if a != b), None)
    turns_same = [m for m in messages if m["role"] != "system"][:len([m for m in old if m["role"] != "system"])] \
        == [m for m in old if m["role"] != "system"]
    if "system" in (now.role, then.role) and first < previous.prompt and turns_same:
        what = "the system message" if edited is not None else "the template's system prompt"
        return Cause.SYSTEM, f"{what} changed while the turns did not", None
    if first >= previous.prompt:   # inside the answer the previous turn generated
        sent = messages[now.message]["content"] if now.message is not None else None
        if now.message is not None and messages[now.message]["role"] == "assistant" and sent != previous.answer:
            return Cause.EDITED, f"message {now.message} (the previous answer) was sent back changed", None
        content = next((s for s in spans if s.message == now.message and s.part == "content"), None)
        if sent == previous.answer and content is not None and first >= content.start:
            return Cause.RETOKENIZED, (f"message {now.message} is the previous answer's text, read as other token "
                                       "ids than were generated"), None
        return Cause.TEMPLATE, "the template rendered the previous answer otherwise than it was generated", None
    if edited is not None and (now.message is None or edited <= now.message):
        return Cause.EDITED, f"message {edited} ({messages[edited]['role']}) differs from the previous turn's", None
    if edited is None or then.part == "generation prompt":
        return Cause.TEMPLATE, (f"the same messages, rendered otherwise: the previous turn's {then.part} "
                                f"(message {then.message if then.message is not None else 'none'}) is not in "
                                "this prompt's history"), None
    return Cause.UNKNOWN, f"the prompt parts from the cached sequence at token {first}", None
