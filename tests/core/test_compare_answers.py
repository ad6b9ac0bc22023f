"""Compare's answers side by side: the text of each, escaped, marked from the first differing token on."""
from __future__ import annotations

from playground.compare import Comparison, answer_tokens, answers_html, token_agreement
from playground.config import GenerationSettings
from playground.trace import Step, Trace


def run(name: str, *texts: str, special_last: bool = False) -> Trace:
    t = Trace("p", "p", [1], GenerationSettings(), name, "cpu", "float32", "m", None)
    t.steps = [Step(index=i, token_id=sum(map(ord, x)), text=x, special=special_last and i == len(texts) - 1, phase="decode", time=0.1 * i, latency=0.1,
                    prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None) for i, x in enumerate(texts)]
    return t


def compared(a: Trace, b: Trace) -> Comparison:
    return Comparison("p", GenerationSettings(), a, b, *token_agreement(*answer_tokens(a, b)))


def test_the_first_differing_token_and_after_are_marked_and_escaped():
    c = compared(run("onnx", "Paris", " is", " <b>big</b>", " &", "<|im_end|>", special_last=True),
                 run("onnx-int8", "Paris", " is", " the", " capital"))
    assert c.first_divergence == 2
    html = answers_html(c)
    a, b = html.split('<div class="cmp-answer">')[1:]
    assert a == ('<h4 class="tok-title">A · onnx · 4 tokens</h4><div class="cmp-text">Paris is'
                 '<mark class="cmp-first"> &lt;b&gt;big&lt;/b&gt;</mark><span class="cmp-diff"> &amp;</span></div></div>')
    assert b.startswith('<h4 class="tok-title">B · onnx-int8 · 4 tokens</h4><div class="cmp-text">Paris is'
                        '<mark class="cmp-first"> the</mark><span class="cmp-diff"> capital</span>')
    assert "(output token 2)" in html and "<b>" not in html and "im_end" not in html


def test_identical_answers_have_nothing_marked_and_a_missing_one_says_so():
    same = answers_html(compared(run("a", "Hi", "!"), run("b", "Hi", "!")))
    assert "identical" in same and "<mark" not in same and same.count("Hi!") == 2
    prefix = answers_html(compared(run("a", "Hi", "!"), run("b")))
    assert '<mark class="cmp-first">Hi</mark><span class="cmp-diff">!</span>' in prefix
    assert "<i>(no tokens)</i>" in prefix and "0 tokens" in prefix


def test_the_finished_status_counts_the_tokens_the_answers_show():
    """The status said 'finished: 8 and 8 tokens' (every Step, the end-of-sequence too) above answers of 7 each."""
    from playground.compare import finished_line
    words = ["Paris", " is", " the", " capital", " of", " France", "."]
    c = compared(run("onnx", *words, "<|im_end|>", special_last=True), run("onnx-int8", *words, "<|im_end|>",
                                                                           special_last=True))
    assert finished_line(c) == ("finished: 7 tokens in each answer (then 1 special token each, such as "
                                "end-of-sequence, not shown)")   # said once, as a person would, not "7 tokens and 7 tokens"
    assert answers_html(c).count("· 7 tokens</h4>") == 2
    assert finished_line(compared(run("a", "Hi"), run("b", "Hi", "!"))) == "finished: 1 token in A's answer, 2 in B's"
