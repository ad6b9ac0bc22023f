"""Token boundaries, side by side: exact bytes, char offsets, split characters grouped, escaped chips.

A `TokenizerView` (views.py) turns text into `TokenSpan`s (spans.py): each knows its token id, its exact
bytes and the characters (code points) it touches; the spans' bytes joined are exactly `text.encode()`.
Spans sharing a character (emoji, CJK under byte-level BPE) share a `group`. `compare` (compare.py)
counts characters, words and tokens; `render_chips_html` (chips.py) draws escaped HTML chips.

    hf_view(tokenizer, name=None) -> TokenizerView        the model's own fast HF tokenizer
    tiktoken_view(encoding_name="cl100k_base")            OpenAI encodings (cl100k_base offline)
    get_view(name_or_path, model_tokenizer=None)          "model" | tiktoken name | folder | hub id
    view.encode_spans(text, *, special_tokens=None)       -> list[TokenSpan]
    compare(text, views, *, special_tokens=None)          -> Comparison (counts, summary, notes)
    summary_line(words, tokens)                           "8 words → 9 tokens"
    render_chips_html(spans, max_chips=2000, text=None)   chips + "showing first N of M tokens"
    render_chat(tokenizer, messages, template="model")    a chat rendered: text, ids, each token's message (chat.py);
                                                          TEMPLATES: "model", "thinking", "clock", "tools"

Example:
    >>> view = tiktoken_view()
    >>> [(s.token_id, s.data, s.start, s.end, s.group) for s in view.encode_spans("hi 👍")]
    [(6151, b'hi', 0, 2, None), (62904, b' \\xf0\\x9f\\x91', 2, 4, 1), (235, b'\\x8d', 3, 4, 1)]
    >>> view.encode_spans("hi 👍")[1].display
    '·⟨F0 9F 91⟩'

`special_tokens`: None = each tokenizer's serving default (HF matches its added tokens such as
<|im_start|>; tiktoken reads special-token text in user input as plain text); True/False force it.
"""
from .chat import TEMPLATES, MessageSpan, RenderedChat, render_chat
from .chips import TOKEN_CSS, render_chips_html, visible
from .compare import Comparison, compare, count_words, summary_line, units_text
from .spans import TokenizerUnavailable, TokenizerView, TokenSpan, UnencodableText, clean_text, spans_from_pieces
from .views import get_view, hf_view, tiktoken_view
