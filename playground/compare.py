"""Two engines, one prompt: both traces, their speed side by side, and how far their tokens agree.

    c = compare_backends("Why is the sky blue?", GenerationSettings(max_new_tokens=32), onnx, int8)  # two sources
    c.rows()                  # [{"backend": "onnx", "ttft": 0.21, "decode_tps": 40.1, ...}, {...}]
    c.agreement, c.first_divergence   # e.g. 0.84, 27 (None when every position matches)

The runs are sequential, never concurrent, so neither steals cores from the other; on a shared
machine the order still matters a little (caches warm up), which is why the bench repeats runs.

Token agreement is position by position over the answers' tokens (special tokens left out: a server does
not stream the end-of-sequence token): after the first divergence the two texts usually drift apart
entirely, so a low share means "diverged early", not "mostly different tokens". `explain` says why two
runs differ: different prompts (another chat template) or, from the same ids, arithmetic. `answers_html`
shows both answers' text side by side, the first differing token and everything after it marked.
Left out: comparing sampled runs (agreement is only meaningful for greedy, or with one seed).
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from .config import GenerationSettings
from .trace import Trace
from .units import tokens


def token_agreement(a: list[int], b: list[int]) -> tuple[float, int | None]:
    """(share of positions holding the same token, first differing position or None).

    Positions are counted up to the longer run: tokens one run has and the other lacks disagree.
    >>> token_agreement([1, 2, 3, 4], [1, 2, 5, 4])
    (0.75, 2)
    >>> token_agreement([1, 2], [1, 2, 3])
    (0.6666666666666666, 2)
    """
    n = max(len(a), len(b))
    if n == 0:
        return 1.0, None
    same = [i < len(a) and i < len(b) and a[i] == b[i] for i in range(n)]
    first = next((i for i, s in enumerate(same) if not s), None)
    return sum(same) / n, first


@dataclass
class Comparison:
    prompt: str
    settings: GenerationSettings
    a: Trace
    b: Trace
    agreement: float             # share of identical tokens, position by position
    first_divergence: int | None  # index of the first differing output token; None = identical

    @property
    def traces(self) -> tuple[Trace, Trace]:
        return self.a, self.b

    def rows(self) -> list[dict]:
        """One row per run, for a side-by-side table (times in seconds, None where undefined)."""
        out = []
        for t in self.traces:
            m = t.metrics()
            out.append({"backend": t.backend, "device": t.device, "dtype": t.dtype, "tokens": m.output_tokens,
                        "ttft": m.ttft, "tpot": m.tpot, "decode_tps": m.decode_tps, "e2e": m.e2e,
                        "kv_bytes": m.kv_bytes, "stop_reason": t.stop_reason})
        return out


def answer_tokens(a: Trace, b: Trace) -> tuple[list, list]:
    """What to compare position by position: the answers' token ids (their text pieces where either source
    names no ids). Special tokens are left out: a server does not stream the end-of-sequence token a local
    run records, and both runs ending there is agreement, not a difference."""
    steps = [[s for s in t.steps if not s.special] for t in (a, b)]
    by_id = all(s.token_id is not None for run in steps for s in run)
    return tuple([s.token_id if by_id else s.text for s in run] for run in steps)


def explain(c: "Comparison") -> str:
    """Why two runs differ, in one sentence, from what each read ('' when they agree throughout)."""
    a, b = c.a, c.b
    if c.first_divergence is None:
        return ""
    if a.prompt_ids != b.prompt_ids:
        why = ("their chat templates differ (e.g. another default system prompt)" if a.prompt_text != b.prompt_text
               else "their tokenizers split it differently")
        return (f"They read different prompts, {len(a.prompt_ids)} and {len(b.prompt_ids)} tokens: {why}, "
                "so they need not agree from the first token on.")
    return ("Both read the same prompt ids, so the difference is arithmetic: weights stored another way "
            "(e.g. Q4_1 blocks on llama.cpp against their float32 dequantization here), other kernels and "
            "summation order shift the logits a little, and a near-tie between two tokens flips." + _tie(c))


def _tie(c: "Comparison") -> str:
    """The two picks at the first divergence, with each side's probability for both (where both give top-k)."""
    k = c.first_divergence
    x, y = ([s for s in t.steps if not s.special][k:k + 1] for t in c.traces)
    if not (x and y and x[0].top and y[0].top):
        return ""
    x, y = x[0], y[0]

    def p(step, token) -> str:
        found = [cand.prob for cand in step.top if (cand.token_id == token.token_id if token.token_id is not None
                                                    else cand.text == token.text)]
        return f"{found[0]:.3f}" if found else "below its top-k"
    return (f" At output token {k}, {c.a.backend} gave {x.text!r} p={p(x, x)} and {y.text!r} p={p(x, y)}; "
            f"{c.b.backend} gave {y.text!r} p={p(y, y)} and {x.text!r} p={p(y, x)}.")


def compare_backends(prompt: str, settings: GenerationSettings | None, source_a, source_b) -> Comparison:
    """Run the same prompt and settings on source_a, then on source_b; compare what came out."""
    settings = (settings or GenerationSettings()).validate()
    a = source_a.run(prompt, settings).wait()
    b = source_b.run(prompt, settings).wait()
    share, first = token_agreement(*answer_tokens(a, b))
    return Comparison(prompt, settings, a, b, share, first)


def finished_line(c: "Comparison") -> str:
    """The status after a comparison: each answer's tokens as the answers below count them (special tokens, such
    as the end-of-sequence a local run records, said apart)."""
    counts = [len(x) for x in answer_tokens(c.a, c.b)]
    special = [sum(s.special for s in t.steps) for t in c.traces]
    extra = (f" (then {both(*special, 'special token')}, such as end-of-sequence, not shown)" if any(special) else "")
    return f"finished: {both(*counts, 'token', 'answer')}{extra}"


def both(a: int, b: int, noun: str, where: str = "") -> str:
    """A's and B's counts of `noun`, as a person says them: once when they are equal; `where`: what each count is
    in ("answer").

    >>> both(7, 7, "token", "answer"), both(1, 2, "token", "answer")
    ('7 tokens in each answer', "1 token in A's answer, 2 in B's")
    >>> both(1, 1, "special token"), both(0, 2, "special token"), both(3, 0, "special token")
    ('1 special token each', "none in A's, 2 in B's", "3 special tokens in A's, none in B's")
    """
    def count(n: int) -> str:
        return tokens(n).replace("token", noun)
    if a == b:
        return f"{count(a)} in each {where}" if where else f"{count(a)} each"
    return (f"{'none' if a == 0 else count(a)} in A's{' ' + where if where else ''}, "
            f"{'none' if b == 0 else f'{b:,}'} in B's")


ANSWERS_CSS = (
    ".cmp-answers { display: flex; flex-wrap: wrap; gap: 12px; }\n"
    ".cmp-answer { flex: 1 1 300px; min-width: 0; }\n"
    ".cmp-text { white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.5; }\n"
    ".cmp-first { background: #fdd835; color: #000; border-radius: 3px; outline: 2px solid #f57f17; }\n"
    ".cmp-diff { background: #fff3c4; color: #000; }\n"
    "body.present .cmp-text, body.present .cmp-note { font-size: 20px !important; }\n"
)


def answers_html(c: "Comparison") -> str:
    """Both answers' text side by side, escaped; from the first differing token on, each side is marked
    (that token in `cmp-first`, the rest in `cmp-diff`). Tokens are those `answer_tokens` compares."""
    k = c.first_divergence
    note = ("The two answers are identical." if k is None else
            f"Marked: the first token where they differ (output token {k}) and everything after it.")
    columns = []
    for side, trace in zip("AB", c.traces):
        pieces = [s.text for s in trace.steps if not s.special]
        same, rest = (pieces, []) if k is None else (pieces[:k], pieces[k:])
        body = html.escape("".join(same), quote=True)
        if rest:
            body += (f'<mark class="cmp-first">{html.escape(rest[0], quote=True)}</mark>'
                     f'<span class="cmp-diff">{html.escape("".join(rest[1:]), quote=True)}</span>')
        columns.append(f'<div class="cmp-answer"><h4 class="tok-title">{side} · {html.escape(trace.backend)} · '
                       f'{tokens(len(pieces))}</h4><div class="cmp-text">{body or "<i>(no tokens)</i>"}</div></div>')
    return f'<p class="cmp-note">{note}</p><div class="cmp-answers">{"".join(columns)}</div>'
