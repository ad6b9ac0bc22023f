"""The conversation on the Generate tab: its handlers, module-level functions of the tab (`ChatTab`), callable without
Gradio.

    tab = ChatTab(generate_tab, c)                  # Generate's tab (components, registry, room) and the chat's
    for update in send(tab, values): ...            # /chat_send: the prompt box as the next turn, streamed as Generate
    retry(tab, values), edit(tab, values)           # turn N again, or the prompt box as turn N (turns N.. dropped)
    stopped(tab, values), new(tab, values), drop_oldest(tab, values), export(tab, values), view(tab, chat)

A turn is a Generate run with the chat template: the page's conversation (serve/page_chat.py, one per page session
in gr.State) renders the history through the template asked (tokens/chat.py: the model's own, or `thinking`,
`clock`, `tools`) with the generated answers spliced back as their ids, and the run joins the room's engine loop
with a `Turn` (serve/conversations.py, the conversation's key), so its lookup of the prefix cache leaves a record
(serve/cache_miss.py). The turn streams through Generate's own path (generate_handlers.follow: the chips, the four
charts, the metrics), then the final update adds the conversation: each turn with its prompt as cached + computed,
its TTFT with the wait, why it missed (chat_view.py), the ribbon and the reuse chart (charts/conversation.py).
Stop cancels the run (Generate's /stop); `stopped` then keeps the turn with its partial answer.

Refused with a message, nothing run: an empty turn; a conversation at its bound (MAX_TURNS); a turn whose prompt and
new tokens are over the engine's window (how many over, and how many of the oldest turns to drop: `drop_oldest`);
a backend the room's engine loop does not batch (a conversation is the loop's: its prefix cache keeps the history).

Left out: the layout and the wiring (chat_layout.py).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from types import SimpleNamespace

from ..charts.conversation import plot_reuse, plot_ribbon
from ..chat_view import prompt_words, turns_html
from ..serve.conversations import Turn
from ..serve.engine_loop import page_client
from ..serve.page_chat import MAX_TURNS, ChatTurn, PageChat, clean_text
from ..tokens.chat import MODEL, TEMPLATES
from .common import loading_line, warn
from .export_folder import ExportFolder
from .forms import read_form
from .generate_handlers import LIVE_METRICS, GenerateForm, GenerateTab, follow, form_settings

CHAT_OUTPUTS = ("chat_view", "ribbon", "reuse")   # every chat event updates these (and Generate's status)
SWITCHES = {   # the template radio's choices: (label, template name); each a classic miss but the first
    MODEL: "the model's own template",
    "thinking": "thinking: an empty <think> block, dropped from the history",
    "clock": "clock: the system prompt starts with the time",
    "tools": "tools: the tool list reordered each turn",
}
assert set(SWITCHES) == set(TEMPLATES)


@dataclass(frozen=True)
class ChatTab:
    """What the chat's handlers act on: Generate's tab (its components, registry and Room) and the chat's components
    by name: `system`, `template`, `turn` (the turn a retry or an edit names), `chat` (the gr.State of a ChatState),
    the outputs CHAT_OUTPUTS and `files` (the export)."""
    generate: GenerateTab
    c: SimpleNamespace


class ChatState:
    """A page session's conversation and the folder of its export."""

    def __init__(self):
        self.chat, self.exports = PageChat(), ExportFolder("chat-")

    def close(self) -> None:
        for turn in self.chat.turns:
            if turn.run is not None and not turn.ended:
                turn.run.cancel()
        self.exports.remove()

    def __deepcopy__(self, memo):   # gr.State copies its initial value per session: start each one fresh
        return type(self)()


def bound_words(chat: PageChat, window: int | None) -> str:
    """The conversation's bound, as the page shows it under the turns.

    >>> print(bound_words(PageChat(), 512))
    Bound: 0 of 64 turns kept; each turn's prompt and new tokens within the engine's window of 512 tokens.
    """
    size = f"within the engine's window of {window:,} tokens" if window else "within the engine's window"
    return f"Bound: {len(chat.turns)} of {MAX_TURNS} turns kept; each turn's prompt and new tokens {size}."


def view(tab: ChatTab, state: ChatState, loop=None) -> dict:
    """The chat's outputs: the turns (chat_view.turns_html), the ribbon and the reuse chart of the turns so far."""
    c, chat = tab.c, state.chat
    chat.settle()
    loop = loop or tab.generate.room.engine_loop
    window = loop.capacity if loop is not None else None
    numbered = [(k, t) for k, t in enumerate(chat.turns, 1) if t.record]
    records = [{**t.record, "turn": k} for k, t in numbered]
    decode = loop.engine.tokenizer.decode if loop is not None else None
    texts = [_texts(t, decode) for _, t in numbered]
    return {c.chat_view: turns_html(chat.turns, bound_words(chat, window)),
            c.ribbon: plot_ribbon(records, tokens=texts), c.reuse: plot_reuse(records, current=len(chat.turns))}


def _texts(turn: ChatTurn, decode) -> list[str] | None:
    """The turn's prompt tokens as text, one each (decoded once per turn, kept on it)."""
    if decode is None:
        return None
    if getattr(turn, "texts", None) is None:
        turn.texts = [decode([i]) for i in turn.prompt_ids]
    return turn.texts


def refused(tab: ChatTab, state: ChatState, message: str) -> dict:
    """A turn refused before it ran: the warning in Generate's status, the conversation as it was."""
    return {tab.generate.c.status: warn(message), **view(tab, state)}


def _turn_number(value, chat: PageChat) -> int:
    """The turn a retry or an edit names (1 to the number of turns); ValueError saying which are there."""
    try:
        n = int(float(value))
    except (TypeError, ValueError):
        n = 0
    if not 1 <= n <= len(chat.turns):
        there = f"turns 1 to {len(chat.turns)}" if chat.turns else "no turns yet"
        raise ValueError(f"pick a turn of this conversation to retry or edit ({there}), got {value!r}")
    return n


# --- /chat_send, /chat_retry, /chat_edit

def send(tab: ChatTab, values: dict):
    """The prompt box as the conversation's next turn."""
    yield from _turn(tab, values, None)


def retry(tab: ChatTab, values: dict):
    """Turn N asked again (its message as it was): turns N.. dropped, N run again."""
    yield from _again(tab, values, "retry", keep_message=True)


def edit(tab: ChatTab, values: dict):
    """The prompt box as turn N: turns N.. dropped, the edited turn run (the edit is itself a miss to explain)."""
    yield from _again(tab, values, "edit", keep_message=False)


def _again(tab: ChatTab, values: dict, what: str, keep_message: bool):
    state = values[tab.c.chat]
    try:
        n = _turn_number(values[tab.c.turn], state.chat)
    except ValueError as exc:
        yield refused(tab, state, str(exc))
        return
    message = state.chat.turns[n - 1].user if keep_message else None
    yield from _turn(tab, values, n - 1, message=message, note=f"{what} of turn {n}")


def _turn(tab: ChatTab, values: dict, upto: int | None, message: str | None = None, note: str = ""):
    g, c = tab.generate, tab.c
    form = read_form(GenerateForm, g.c, values)
    session, state = values[g.c.session], values[c.chat]
    chat = state.chat
    chat.settle()
    message = clean_text(form.prompt if message is None else message)
    system, template = clean_text(values[c.system]).strip(), values[c.template] or MODEL
    if not message.strip():
        yield refused(tab, state, "type a message first: an empty turn sends nothing")
        return
    if upto is None and len(chat.turns) >= MAX_TURNS:
        yield refused(tab, state, f"this conversation is at its bound of {MAX_TURNS} turns: start a new "
                                  "conversation, or drop the oldest turns")
        return
    if any(t.run is not None and not t.ended for t in chat.turns):
        yield refused(tab, state, "a turn of this conversation is still running: stop it or wait for its end")
        return
    loop = g.room.ready_for(form.backend)
    if loop is None:
        for line in g.registry.loading(form.backend):
            yield {g.c.status: loading_line(line)}
        loop = g.room.loop_for(form.backend)
    if loop is None:
        batched = g.room.backend
        yield refused(tab, state, "a conversation runs in the room's engine loop, whose prefix cache keeps its "
                                  "history; " + (f"it batches {batched}: pick that backend" if batched else
                                                 "this app has none (it serves no local batching backend)"))
        return
    try:
        settings = form_settings(replace(form, chat=True))
        asked = chat.prompt(loop.engine.tokenizer, message, template=template, system=system, upto=upto)
    except (ValueError, TypeError) as exc:
        yield refused(tab, state, str(exc))
        return
    if len(asked.ids) + settings.max_new_tokens > loop.capacity:
        fit = chat.fits(loop.engine.tokenizer, message, settings.max_new_tokens, loop.capacity, template=template,
                        system=system, upto=upto)
        yield refused(tab, state, fit.words())
        return
    turn = Turn(chat.key, asked.messages, asked.spans, asked.tools, template)
    try:
        run = loop.run(asked.ids, settings, prompt=message, text=asked.text, backend=loop.engine.info.name,
                       client=page_client(f"{id(session):x}"), turn=turn)
    except (ValueError, TypeError) as exc:   # ValueError: the loop closed
        yield refused(tab, state, str(exc))
        return
    chat.begin(ChatTurn.of(asked, message, run, system, note), upto)
    yield view(tab, state, loop)
    for update in follow(g, run, loop.engine, form, session, loop=loop):
        if update.get(g.c.metrics) in (None, LIVE_METRICS):
            yield update
            continue
        chat.settle()   # the final update: the turn's answer and record, then the conversation
        latest = chat.turns[-1] if chat.turns else None
        if latest is not None:
            update[g.c.status] += " · " + prompt_words(latest.record)
        yield {**update, **view(tab, state, loop)}


# --- the other events

def stopped(tab: ChatTab, values: dict) -> dict:
    """After Stop (Generate's /stop cancels the run): the turn kept with its partial answer."""
    session, state = values[tab.generate.c.session], values[tab.c.chat]
    session.stop()
    for turn in state.chat.turns:
        if turn.run is not None and not turn.ended:
            turn.run.cancel()
            _wait_end(turn)
    return view(tab, state)


def _wait_end(turn: ChatTurn, timeout: float = 5.0) -> None:
    """Wait (up to `timeout` s) for a cancelled run's request to end: the loop ends it at its next iteration."""
    ticket = getattr(turn.run, "ticket", None)
    if ticket is None:
        return
    ended = threading.Event()
    poke = lambda: ticket.done and ended.set()   # noqa: E731 - called in the loop's thread
    ticket.listen(poke)
    try:
        if not ticket.done:
            ended.wait(timeout)
    finally:
        ticket.unlisten(poke)


def new(tab: ChatTab, values: dict) -> dict:
    """A new conversation: the turns forgotten, a new key (its first turn is a new conversation to the cache)."""
    state = values[tab.c.chat]
    stopped(tab, values)
    state.chat.new()
    return {tab.generate.c.status: "A new conversation: its first turn starts it.", **view(tab, state)}


def drop_oldest(tab: ChatTab, values: dict) -> dict:
    """Drop the oldest turns so that the prompt box, as the next turn, fits the engine's window."""
    g, state = tab.generate, values[tab.c.chat]
    chat = state.chat
    chat.settle()
    loop = g.room.engine_loop
    if loop is None or not chat.turns:
        return refused(tab, state, "nothing to drop: " + ("no turns yet" if loop is not None else "no engine loop"))
    form = read_form(GenerateForm, g.c, values)
    try:
        settings = form_settings(replace(form, chat=True))
        fit = chat.fits(loop.engine.tokenizer, clean_text(form.prompt) or " ", settings.max_new_tokens,
                        loop.capacity, template=values[tab.c.template] or MODEL,
                        system=clean_text(values[tab.c.system]).strip())
    except (ValueError, TypeError) as exc:
        return refused(tab, state, str(exc))
    if not fit.over:
        return {g.c.status: "The next turn fits the engine's window: no turn dropped.", **view(tab, state)}
    if not fit.drop:
        return refused(tab, state, fit.words())
    chat.drop_oldest(fit.drop)
    return {g.c.status: f"Dropped the oldest {fit.drop} turn{'s' if fit.drop != 1 else ''}: the next turn fits "
                        "(its history changed: the cache finds none of it).", **view(tab, state)}


def export(tab: ChatTab, values: dict) -> dict:
    """The conversation as conversation.json: every turn with its record of the cache lookup."""
    state = values[tab.c.chat]
    state.chat.settle()
    return {tab.c.files: state.exports.write({"conversation.json": state.chat.export()})}
