"""The Tokens tab: the prompt as typed and as the model reads it, model tokenizer vs cl100k_base (OpenAI's
GPT-4 tokenizer).

Its own prompt box is kept in step with the Generate tab's (a prompt typed in either shows in both); it
reads the tokenizer of the backend picked in the Generate tab (all backends of one model share it). The
counts, chips and chart follow typing. The chart compares the tokenizers on the prompt as typed; what the
model reads with its chat template is one bar apart. One line under the box says what the chips' marks
mean. API name: /tokens.
Left out: tokenizers other than these two.
"""
from __future__ import annotations

import gradio as gr

from ..config import coerce_settings
from ..source import SourceError
from ..charts.tokens import plot_token_comparison
from ..tokens.prompt import prompt_tokens
from .common import SourceUnavailable, error_html, source


LEGEND = ("Marks: · a space, → a tab, ↵ a newline; ⟨F0 9F⟩ the bytes (in hex) of a character split across "
          "tokens, drawn with a red dashed border.")


def tokens_tab(registry, prompt, chat, backend) -> None:
    def show(text, chat_on, name):
        try:
            v = prompt_tokens(source(registry, name), text, coerce_settings(chat=bool(chat_on)))
        except (SourceUnavailable, ValueError, SourceError) as exc:   # SourceError: a server's /tokenize failed
            return error_html(str(exc)), "", None   # the previous prompt's chips and chart go: not this one's
        return v.summary, v.html, plot_token_comparison(v.typed, v.templated)

    with gr.Tab("Tokens", id="tokens") as tab:
        gr.Markdown("The model never sees words: it reads token ids. Each chip is one token; hover for its id "
                    "and bytes. cl100k_base is OpenAI's GPT-4 tokenizer.")
        own = gr.Textbox(label="Prompt (the Generate tab's; edit it in either)", value=prompt.value, lines=3,
                         max_lines=8, elem_id="tokens-prompt")
        button = gr.Button("Show the prompt's tokens", variant="secondary", elem_id="tokens-run")
        gr.Markdown(LEGEND, elem_classes="caption", elem_id="tokens-legend")
        summary = gr.Markdown(elem_id="tokens-summary")
        figure = gr.Plot(label="Tokenizers compared")
        chips = gr.HTML(padding=True)
    prompt.change(lambda text: text, prompt, own, api_visibility="private", queue=False)   # Generate's prompt shows here
    own.input(lambda text: text, own, prompt, api_visibility="private", queue=False)      # and a prompt typed here there
    # the counts follow typing: each edit asks again, and only the latest pending one runs (always_last)
    gr.on([button.click, tab.select, own.submit, own.input], show, [own, chat, backend], [summary, chips, figure],
          api_name="tokens", concurrency_limit=None, trigger_mode="always_last")
