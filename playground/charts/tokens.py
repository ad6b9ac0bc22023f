"""Tokenizers compared in one figure: token count per tokenizer, and how many bytes their tokens hold.

Left: one bar per tokenizer on the prompt as typed (the same text, so fewer tokens = a larger vocabulary
fits it better), and apart, hatched, what the model reads once its chat template is applied.
Right: share of tokens holding 1, 2, … bytes (the last bin collects longer ones), one bar group per
tokenizer. Bytes, not characters, because a split emoji or CJK character is several 1-2 byte tokens.

Example:
    >>> from playground.tokens import compare, tiktoken_view
    >>> fig = plot_token_comparison(compare("Hello, world!", [tiktoken_view()]))
    >>> [trace.type for trace in fig.data], list(fig.data[0].y)
    (['bar', 'bar'], [4])

A pure function of a `Comparison`: no state, no I/O. The bins are counted here so the figure carries
a dozen numbers, not one per token (a 50,000-word text has ~70,000 tokens per tokenizer).
Left out: per-position plots (the chips show positions).
"""
from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..tokens.compare import units_text

MAX_BYTES_BIN = 8   # tokens with >= this many bytes share the last bin
COLOURS = ["#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2"]


# --- figure

def byte_length_shares(spans) -> list[float]:
    """Share of spans with 1, 2, …, MAX_BYTES_BIN+ bytes (zero-byte spans count in the first bin)."""
    counts = Counter(min(max(len(s.data), 1), MAX_BYTES_BIN) for s in spans)
    total = max(len(spans), 1)
    return [counts[n] / total for n in range(1, MAX_BYTES_BIN + 1)]


def tick_label(name: str) -> str:
    """A tokenizer's name on two lines under its bar, never rotated into the legend.

    >>> tick_label("model (SmolLM2-135M-Instruct)"), tick_label("cl100k_base")
    ('model<br>(SmolLM2-135M-Instruct)', 'cl100k_base')
    """
    return name.replace(" (", "<br>(", 1)


def plot_token_comparison(comparison, templated: int | None = None) -> go.Figure:
    """`comparison`: the prompt as typed, in each tokenizer (the same text: the counts compare). `templated`:
    the ids the model gets with its chat template applied, drawn apart as one hatched bar and labelled so
    (another tokenizer reading that model's template would split its special tokens into pieces)."""
    names = list(comparison.spans)
    counts = [len(comparison.spans[n]) for n in names]
    colours = [COLOURS[k % len(COLOURS)] for k in range(len(names))]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.45, 0.55], horizontal_spacing=0.12,
                        subplot_titles=(f"tokens for {units_text(comparison.words, comparison.unspaced)}, as typed",
                                        "bytes per token"))
    per_word = [f"{c / comparison.units:.2f} {comparison.per_unit}" if comparison.units else "" for c in counts]
    fig.add_trace(go.Bar(x=[tick_label(n) for n in names], y=counts, marker_color=colours,
                         text=[f"{c:,}" for c in counts], textposition="outside", cliponaxis=False,
                         customdata=per_word, showlegend=False,
                         hovertemplate="%{x}: %{y:,} tokens as typed<br>%{customdata}<extra></extra>"), row=1, col=1)
    if templated is not None:
        fig.add_trace(go.Bar(x=["model, with the<br>chat template"], y=[templated], marker_color="#ffffff",
                             marker_line_color=colours[0], marker_line_width=2, marker_pattern_shape="/",
                             marker_pattern_fgcolor=colours[0], text=[f"{templated:,}"], textposition="outside",
                             cliponaxis=False, showlegend=False, name="with the chat template",
                             hovertemplate="the ids the model reads, chat template applied: %{y:,}<extra></extra>"),
                      row=1, col=1)
    bins = [str(n) for n in range(1, MAX_BYTES_BIN)] + [f"{MAX_BYTES_BIN}+"]
    for name, colour in zip(names, colours):
        fig.add_trace(go.Bar(x=bins, y=byte_length_shares(comparison.spans[name]), name=name,
                             marker_color=colour, hovertemplate=f"{name}: %{{y:.1%}} of tokens have %{{x}} bytes"
                             "<extra></extra>"), row=1, col=2)
    tallest = max(counts + ([templated] if templated is not None else []) + [1])
    fig.update_yaxes(title_text="tokens", range=[0, tallest * 1.2], row=1, col=1)   # room for the counts above
    fig.update_yaxes(title_text="share of tokens", tickformat=".0%", row=1, col=2)
    fig.update_xaxes(tickangle=0, row=1, col=1)
    fig.update_xaxes(title_text="bytes in the token", row=1, col=2)
    fig.update_layout(barmode="group", template="plotly_white", font=dict(size=16), height=460,
                      margin=dict(t=100, l=60, r=20, b=70),   # the legend above the titles, clear of the labels
                      legend=dict(orientation="h", x=1, xanchor="right", y=1.12, yanchor="bottom"))
    return fig
