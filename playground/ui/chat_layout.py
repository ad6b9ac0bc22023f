"""The conversation on the Generate tab: its controls, its view, and their wiring.

    chat = chat_section()                             # in Generate's column, under the run's metrics (an accordion)
    wire_chat(c, chat, registry, session, room, remote)   # its events, to chat_handlers.py's functions

The prompt box is the message and "Send as a chat turn" (beside Generate) sends it as the conversation's next turn:
the run streams into Generate's own chips, charts and metrics, with Generate's settings (backend, sampling, max new
tokens), which persist across turns like the system prompt and the template. The accordion holds the system prompt,
the template (the model's own, or one switch per classic miss: thinking, clock, tools), the turns (each with its
prompt as cached + computed, its TTFT with the wait, why it missed), each turn's prompt as a ribbon and the reuse per
turn, and the buttons: retry or edit a turn, new conversation, drop the oldest turns, export (JSON).
API names: /chat_send, /chat_retry, /chat_edit, /chat_new, /chat_drop_oldest, /chat_export.

Left out: the handlers (chat_handlers.py).
"""
from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import gradio as gr

from ..chat_view import turns_html
from ..serve.page_chat import PageChat
from .chat_handlers import (CHAT_OUTPUTS, SWITCHES, ChatState, ChatTab, bound_words, drop_oldest, edit, export, new,
                            retry, send, stopped)
from .common import GENERATE_CONCURRENCY, caption
from .forms import form_inputs
from .generate_handlers import OUTPUTS, GenerateForm, GenerateTab

CHAT_QUEUE = "chat"   # a turn joins the room's engine loop (which holds the machine's CPU slot), never a slot of its own
CHAT_CSS = """
#chat-view .pg-chat { max-height: 420px; overflow-y: auto; }
#chat-view .pg-turn { border-left: 3px solid #0d9488; padding: 2px 8px; margin: 6px 0; }
#chat-view .pg-turn-head { font-weight: 600; font-size: 0.9em; }
#chat-view .pg-miss { font-size: 0.9em; }
#chat-view .pg-miss code { white-space: pre-wrap; word-break: break-all; }
#chat-view .pg-miss mark { background: #fde68a; }
#chat-view .pg-answer { white-space: pre-wrap; }
#chat-view .pg-bound { color: #6b7280; font-size: 0.9em; }
"""
RIBBON_CAPTION = ("Each turn's prompt, token by token: teal was found in the prefix cache, orange was unchanged from "
                  "the previous turn but computed again (past its last full block of 16, evicted, or after the first "
                  "difference, the red cross), blue is new this turn. Hover a token for its text and its message. "
                  "Beside it, per turn: the ideal reuse (the history shared with the previous turn, in full blocks) "
                  "against what the cache gave.")


def send_button() -> gr.Button:
    """The button beside Generate that sends the prompt box as the conversation's next turn."""
    return gr.Button("Send as a chat turn", elem_id="chat-send")


def chat_section() -> SimpleNamespace:
    """The conversation's accordion: its controls and its view; returns the components by name."""
    c = SimpleNamespace()
    with gr.Accordion("Conversation: chat turn after turn, and what the cache kept of each", open=False,
                      elem_id="chat-section"):
        caption("Type in the prompt box above and press “Send as a chat turn”: each turn goes to the room's engine "
                "loop with the whole history, through the chat template, and the settings above hold for every "
                "turn. The answers the model generated go back as the token ids it generated.")
        with gr.Row():
            c.system = gr.Textbox("", label="System prompt", lines=2, max_lines=6, elem_id="chat-system", scale=3)
            c.template = gr.Radio([(label, name) for name, label in SWITCHES.items()], value="model",
                                  label="Template (one switch per classic miss)", elem_id="chat-template", scale=2)
        with gr.Row():
            c.turn = gr.Number(None, label="Turn", precision=0, elem_id="chat-turn", min_width=90)
            c.retry = gr.Button("Retry that turn", size="sm", elem_id="chat-retry")
            c.edit = gr.Button("Edit: the prompt box as that turn", size="sm", elem_id="chat-edit")
            c.new = gr.Button("New conversation", size="sm", elem_id="chat-new")
            c.drop = gr.Button("Drop the oldest turns to fit", size="sm", elem_id="chat-drop")
            c.export = gr.Button("Export (JSON)", size="sm", elem_id="chat-export")
        c.chat_view = gr.HTML(turns_html([], bound_words(PageChat(), None)), elem_id="chat-view", padding=True)
        with gr.Row():
            with gr.Column(scale=3):
                c.ribbon = gr.Plot(show_label=False, elem_id="chat-ribbon")
            with gr.Column(scale=2):
                c.reuse = gr.Plot(show_label=False, elem_id="chat-reuse")
        caption(RIBBON_CAPTION)
        c.files = gr.File(label="The conversation (JSON, each turn with its record)", interactive=False,
                          elem_id="chat-files")
    c.chat = gr.State(ChatState(), delete_callback=ChatState.close)
    return c


def wire_chat(g: SimpleNamespace, c: SimpleNamespace, registry, session, room, remote=None) -> list:
    """Wire the conversation's events (`g`: Generate's components, `c`: chat_section's) to chat_handlers.py's
    functions; returns the handlers, none of which takes a CPU slot (a turn runs in the room's engine loop)."""
    tab = ChatTab(GenerateTab(g, registry, room, remote), c)
    inputs = form_inputs(GenerateForm, g, states=[session]) | {c.system, c.template, c.turn, c.chat}
    streamed = [getattr(g, name) for name in OUTPUTS] + [getattr(c, name) for name in CHAT_OUTPUTS]
    handlers = {name: partial(fn, tab) for name, fn in (("send", send), ("retry", retry), ("edit", edit))}
    events = [button.click(handlers[name], inputs, streamed, api_name=f"chat_{name}",
                           concurrency_limit=GENERATE_CONCURRENCY, concurrency_id=CHAT_QUEUE)
              for name, button in (("send", g.chat_send), ("retry", c.retry), ("edit", c.edit))]
    g.stop.click(None, None, None, cancels=events, queue=False)   # Generate's /stop cancels the run itself
    view = [g.status] + [getattr(c, name) for name in CHAT_OUTPUTS]
    g.stop.click(partial(stopped, tab), {session, c.chat}, view, api_visibility="private", concurrency_limit=None)
    others = [("new", c.new, new, {session, c.chat}, view), ("drop_oldest", c.drop, drop_oldest, inputs, view),
              ("export", c.export, export, {c.chat}, [c.files])]
    for name, button, fn, taken, outputs in others:
        handler = partial(fn, tab)
        button.click(handler, taken, outputs, api_name=f"chat_{name}", concurrency_limit=None)
        handlers[name] = handler
    return list(handlers.values())
