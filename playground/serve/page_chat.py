"""A page's conversation: its turns, the token ids the model generated for them, its bounds, its export.

    chat = PageChat()                                        # one per page session (a new key each conversation)
    asked = chat.prompt(tokenizer, "Hi", template="model", system="Be brief.")   # the next turn's prompt
    asked = chat.prompt(tokenizer, "Hi again", upto=1)       # an edit or a retry of turn 2: turns 2.. dropped
    chat.begin(ChatTurn.of(asked, "Hi", run), upto=None)     # the turn in the conversation, with its run
    chat.settle()                                            # each turn whose run ended takes its answer and record
    chat.export()                                            # JSON: every turn with its record of the cache lookup

The prompt is the chat rendered through the template asked (tokens/chat.py), except that each answer the model
generated on this page goes back as the ids it generated, not as its text read again: the page's own turns never
re-tokenize, so an unchanged history is the previous turn's whole sequence again and the prefix cache finds it up
to its last full block. An answer is spliced back only where the rendered chat shows it whole (a template that
rewrites an answer keeps its own text, which is the miss it shows).

The "tools" template renders TOOLS in the system block, in an order rotated each turn: the reordering a client
that builds its tool list from a dict makes, and the miss it causes.

Bounds: at most MAX_TURNS turns, and each turn's prompt and new tokens within the engine's window (`fits`, which
says how many tokens are over and how many of the oldest turns to drop).

>>> from playground.tiny import build_tiny_tokenizer
>>> tok = build_tiny_tokenizer()
>>> chat = PageChat()
>>> asked = chat.prompt(tok, "Hi", system="Be brief.")
>>> [m["role"] for m in asked.messages], asked.ids == render_chat(tok, asked.messages).ids   # nothing generated yet
(['system', 'user'], True)

Left out: persistence (a conversation lives as long as its page session) and tool calls in answers.
"""
from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field, replace

from ..tokens.chat import MODEL, MessageSpan, RenderedChat, check_template, render_chat  # noqa: F401 - doctest

_SURROGATES = re.compile("[\ud800-\udfff]")
MAX_TURNS = 64          # turns a page's conversation keeps at most
TOOLS = ({"type": "function", "function": {"name": "timetable", "description": "Trains between two stations"}},
         {"type": "function", "function": {"name": "fares", "description": "The price of a ticket"}},
         {"type": "function", "function": {"name": "weather", "description": "The weather at a station"}})


def clean_text(text) -> str:
    """A message as valid UTF-8 text: None as "", lone surrogates (broken UTF-8) as U+FFFD.

    >>> clean_text("caf\\udce9 ok"), clean_text(None)
    ('caf� ok', '')
    """
    return _SURROGATES.sub("\ufffd", "" if text is None else str(text))


def tools_for(turn: int) -> list[dict]:
    """The tools the "tools" template renders at page turn `turn` (1 on): TOOLS rotated by one each turn.

    >>> [t["function"]["name"] for t in tools_for(1)], [t["function"]["name"] for t in tools_for(2)]
    (['timetable', 'fares', 'weather'], ['fares', 'weather', 'timetable'])
    """
    k = (turn - 1) % len(TOOLS)
    return list(TOOLS[k:] + TOOLS[:k])


@dataclass
class ChatTurn:
    """One turn of the page's conversation: what was asked, the prompt the model read, and its answer."""
    user: str                           # the message typed
    prompt_ids: list[int]               # the prompt the model read
    spans: tuple                        # its MessageSpans (tokens/chat.py)
    template: str
    system: str = ""
    note: str = ""                      # "edit of turn 2", "retry of turn 3"; "": a new turn
    run: object = field(default=None, repr=False)   # the run while it goes; its Trace stays as `trace`
    trace: object = field(default=None, repr=False)
    answer: str = ""                    # the answer's text
    answer_ids: tuple[int, ...] = ()    # the ids the model generated for it (its text's tokens, no end token)
    record: dict | None = None          # the record of its prefix-cache lookup (serve/cache_miss.py), decoded text in

    @classmethod
    def of(cls, asked: RenderedChat, user: str, run, system: str = "", note: str = "") -> "ChatTurn":
        return cls(user, list(asked.ids), asked.spans, asked.template, system, note, run, run.trace)

    @property
    def ended(self) -> bool:
        return self.trace is not None and self.trace.finished

    def settle(self, record=None) -> None:
        """Take the answer and the record from the run (`record`: the whole record, decoded tokens in; default: the
        Trace's, without them)."""
        trace = self.trace
        if trace is None:
            return
        ids = []
        for step in trace.steps:
            if step.special:
                break
            ids.append(step.token_id)
        self.answer, self.answer_ids = "".join(s.text for s in trace.steps[:len(ids)]), tuple(ids)
        if record is not None:
            self.record = record
        elif self.record is None and trace.cache:
            self.record = dict(trace.cache)

    @property
    def ttft(self) -> float | None:
        """Seconds from the turn's request to its first token, the wait for a turn included; None: no token yet,
        or its wait not measured."""
        trace = self.trace
        if trace is None or not trace.steps or trace.queued is None:
            return None
        return trace.queued + trace.steps[0].time

    def as_dict(self, number: int) -> dict:
        trace = self.trace
        return {"turn": number, "user": self.user, "answer": self.answer, "note": self.note,
                "template": self.template, "system": self.system, "prompt_tokens": len(self.prompt_ids),
                "output_tokens": len(trace.steps) if trace is not None else 0,
                "stop_reason": str(trace.stop_reason) if trace is not None and trace.stop_reason else None,
                "ttft_s": self.ttft, "queued_s": trace.queued if trace is not None else None,
                "cached_tokens": trace.cached_tokens if trace is not None else None,
                "answer_ids": list(self.answer_ids), "cache": self.record}


@dataclass(frozen=True)
class Fit:
    """Whether a prompt fits the engine's window with its new tokens: `over` tokens past it (0: it fits), and
    `drop`, the oldest turns to leave out so that it would (None: even with none of them it would not)."""
    tokens: int
    window: int
    over: int
    drop: int | None

    def words(self) -> str:
        if not self.over:
            return ""
        fix = (f"drop the oldest {self.drop} turn{'s' if self.drop != 1 else ''} to fit it" if self.drop
               else "shorten the message or ask for fewer new tokens: dropping turns would not make it fit")
        return (f"this turn is {self.tokens:,} tokens (its prompt and the new tokens asked), {self.over:,} over the "
                f"engine's window of {self.window:,}: {fix}")


class PageChat:
    def __init__(self):
        self.key = _new_key()
        self.turns: list[ChatTurn] = []

    def new(self) -> None:
        """A new conversation: no turns, a new key (the cache's book starts it afresh)."""
        self.key, self.turns = _new_key(), []

    def messages(self, upto: int | None = None) -> list[dict]:
        """The history of turns[:upto] (all by default) as messages: each user message and its answer."""
        out = []
        for turn in self.turns[:upto]:
            out += [{"role": "user", "content": turn.user}, {"role": "assistant", "content": turn.answer}]
        return out

    def prompt(self, tokenizer, user: str, *, template: str = MODEL, system: str = "", upto: int | None = None,
               now: str | None = None) -> RenderedChat:
        """The prompt of a turn asking `user` after turns[:upto] (default: every turn), rendered by `template` with
        the system prompt `system` ("" none), each generated answer spliced back as its ids."""
        check_template(template)
        kept = self.turns[:upto]
        messages = ([{"role": "system", "content": system}] if system else []) + self.messages(upto)
        messages.append({"role": "user", "content": user})
        tools = tools_for(len(kept) + 1) if template == "tools" else ()
        chat = render_chat(tokenizer, messages, template=template, tools=tools, now=now)
        first = 1 if system else 0
        answers = {first + 2 * k + 1: t.answer_ids for k, t in enumerate(kept) if t.answer_ids}
        return splice(chat, answers, tokenizer.decode)

    def begin(self, turn: ChatTurn, upto: int | None = None) -> None:
        """`turn` as the conversation's next, after turns[:upto] (the later ones dropped: an edit, a retry)."""
        self.turns = self.turns[:upto] + [turn]

    def settle(self) -> None:
        for turn in self.turns:
            if turn.ended and turn.run is not None:
                turn.settle(_whole_record(turn.run))
                turn.run = None

    def drop_oldest(self, n: int) -> None:
        self.turns = self.turns[n:]

    def fits(self, tokenizer, user: str, new_tokens: int, window: int, **how) -> Fit:
        """Whether the next turn's prompt asking `user` (`how`: prompt's keywords) and `new_tokens` fit `window`."""
        total = len(self.prompt(tokenizer, user, **how).ids) + new_tokens
        over = max(0, total - window)
        drop = None
        if over:
            for n in range(1, len(self.turns) + 1):
                trimmed = PageChat()
                trimmed.turns = self.turns[n:]
                if len(trimmed.prompt(tokenizer, user, **how).ids) + new_tokens <= window:
                    drop = n
                    break
        return Fit(total, window, over, drop)

    def export(self) -> str:
        """The conversation as JSON: its key and every turn, each with its record of the cache lookup."""
        return json.dumps({"conversation": self.key, "bound": {"turns": MAX_TURNS},
                           "turns": [t.as_dict(k + 1) for k, t in enumerate(self.turns)]}, indent=1,
                          ensure_ascii=False, default=str)

    def __deepcopy__(self, memo):   # gr.State copies its initial value per session: start each one fresh
        return type(self)()


def _new_key() -> str:
    return f"chat-{secrets.token_hex(4)}"


def _whole_record(run) -> dict | None:
    """The run's whole record (decoded tokens in) when it ran in the engine loop; None otherwise."""
    ticket = getattr(run, "ticket", None)
    conversation = getattr(getattr(ticket, "seq", None), "conversation", None)
    return conversation.record.as_dict() if conversation is not None else None


def splice(chat: RenderedChat, answers: dict[int, tuple[int, ...]], decode) -> RenderedChat:
    """`chat` with the content of each message index in `answers` replaced by those ids, where the template rendered
    that content unchanged: its tokens read as the ids' text, or as the message's text (an answer cut inside a
    multi-byte character has ids for bytes its text lacks; the model read them all). A template that rewrites an
    answer keeps its own. Spans shifted to match.

    >>> spans = (MessageSpan(0, 2, 0, "user", "content"), MessageSpan(2, 4, 1, "assistant", "content"),
    ...          MessageSpan(4, 5, None, "assistant", "generation prompt"))
    >>> chat = RenderedChat("", [1, 2, 30, 40, 9], spans, (), "model")
    >>> out = splice(chat, {1: (7, 8, 9)}, lambda ids: "same")
    >>> out.ids, [(s.start, s.end) for s in out.spans]
    ([1, 2, 7, 8, 9, 9], [(0, 2), (2, 5), (5, 6)])
    >>> cut = RenderedChat("", [1, 2, 30, 9], spans[:1] + (MessageSpan(2, 3, 1, "assistant", "content"),
    ...                    MessageSpan(3, 4, None, "assistant", "generation prompt")),
    ...                    ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "A"}), "model")
    >>> text = {(30,): "A", (30, 240): "A\ufffd"}   # 240: half a character
    >>> splice(cut, {1: (30, 240)}, lambda ids: text[tuple(ids)]).ids
    [1, 2, 30, 240, 9]
    """
    ids, spans, shift = [], [], 0
    last = 0
    for span in chat.spans:
        piece = chat.ids[span.start:span.end]
        generated = answers.get(span.message) if span.part == "content" and span.role == "assistant" else None
        if generated and decode(list(piece)) in (decode(list(generated)), _content(chat, span.message)):
            piece = list(generated)
        ids += piece
        spans.append(replace(span, start=span.start + shift, end=span.start + shift + len(piece)))
        shift += len(piece) - (span.end - span.start)
        last = span.end
    ids += chat.ids[last:]
    return replace(chat, ids=ids, spans=tuple(spans))


def _content(chat: RenderedChat, message: int) -> str | None:
    """The text message `message` was sent with (None: no such message)."""
    return chat.messages[message].get("content") if 0 <= message < len(chat.messages) else None
