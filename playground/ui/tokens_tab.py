"""The Tokens tab: the prompt as typed and as the model reads it, model tokenizer vs cl100k_base.

It reads the tokenizer of the backend picked in the Generate tab (all backends of one model share it).
API name: /tokens. Left out: tokenizers other than these two.
"""
from __future__ import annotations

import gradio as gr

from ..config import coerce_settings
from ..source import SourceError
from ..prompt_tokens import prompt_tokens
from .common import engine_or_message, error_html


def tokens_tab(registry, prompt, chat, backend) -> None:
    def show(text, chat_on, name):
        engine = engine_or_message(registry, name)
        if isinstance(engine, str):
            return error_html(engine), "", gr.skip()
        try:
            v = prompt_tokens(engine, text, coerce_settings(chat=bool(chat_on)))
        except (ValueError, SourceError) as exc:   # SourceError: a server's /tokenize failed
            return error_html(str(exc)), "", gr.skip()
        return v.summary, v.html, v.figure

    with gr.Tab("Tokens", id="tokens") as tab:
        gr.Markdown("The model never sees words: it reads token ids. Each chip is one token "
                    "(hover for id and bytes; · is a space, ↵ a newline).")
        button = gr.Button("Show the prompt's tokens", variant="secondary")
        summary = gr.Markdown()
        figure = gr.Plot(label="Tokenizers compared")
        chips = gr.HTML()
    gr.on([button.click, tab.select], show, [prompt, chat, backend], [summary, chips, figure], api_name="tokens",
          concurrency_limit=None)
