"""The Generate page's formatters (ui/live/format.js) write every figure as the Python ones do.

While a run streams, the page writes its chips' titles, metrics cards, top-k labels and latency ticks in
JavaScript; after the run the server's own text (run_view.py, charts/run.py) stands beside them. Here
each JS formatter runs in Chromium on a blank page, on the same values as its Python counterpart:
bytes, durations, probabilities (ties included: JavaScript's toFixed rounds 0.0625 up, Python keeps
the even digit), tokens as the page shows them (whitespace, controls, emoji, CJK, markup, split
characters), chip titles, log-axis and time-axis ticks and the metrics cards.

Left out: drawing (tests/ui/test_browser.py drives the page).
"""
from __future__ import annotations

import html
import re
from types import SimpleNamespace

import pytest

from playground.charts.run import _label, log_ms_ticks, plot_top_k, time_ticks
from playground.step_stream import FIELDS, shown, step_record
from playground.metrics import compute_metrics
from playground.run_view import _ms, chip_title, format_bytes, metrics_html
from playground.trace import Candidate, Phase, Step
from playground.ui.live.view import LIVE_DIR
from tests.helpers import require_browser

pytestmark = [pytest.mark.browser]

F = {name: i for i, name in enumerate(FIELDS)}

# tokens as a model or a server may send them: whitespace, controls, emoji sequences, CJK, markup,
# characters split across tokens (U+FFFD, an empty text), invisible and bidi characters
TOKENS = [" ", "  the", "\n", "\n\n", "\t", "a\tb", "\r\n", "👍", "👨‍👩‍👧", "🇫🇷", "日本語", "の", "<script>alert(1)</script>",
          "<b>bold</b>", "<br>", "&amp;", "a & b", 'say "hi"', "it's", "", "\ufffd", "\ufffd\ufffd", "\x00", "\x1b[31m",
          "\x7f", "\x85", "\u00ad", "\u200b", "\u202e", "\u2066", "\ufeff", "\u0301", "e\u0301", "é", "∅", "·", "<0xF0>"]


@pytest.fixture(scope="module")
def js():
    """js(name, calls): the results of pgLive.format[name](*args) for each args in `calls`, run in Chromium."""
    from playground.chromium import CHROMIUM_ARGS, chromium_path
    sync_api = require_browser()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_content("<!doctype html><html><head></head><body></body></html>")
        page.add_script_tag(content=(LIVE_DIR / "format.js").read_text(encoding="utf-8"))

        def run(name: str, calls: list) -> list:
            return page.evaluate("([name, calls]) => calls.map((args) => window.pgLive.format[name](...args))",
                                 [name, calls])
        yield run
        browser.close()


def assert_same(name: str, values: list, got: list, want: list) -> None:
    """Name the first value whose JS text differs from the Python one."""
    assert len(got) == len(want) == len(values)
    for value, js_text, py_text in zip(values, got, want):
        assert js_text == py_text, f"{name}({value!r}): JS {js_text!r}, Python {py_text!r}"


def test_bytes(js):
    values = [0, 1, 512, 1023, 1024, 1025, 1126, 1280, 1536, 245_760, 1_048_575, 1_048_576, 1_572_864, 1_610_612_736,
              2**30 - 1, 2**30, 5 * 2**30 + 2**29, 2**40, 10**13]
    assert_same("bytes", values, js("bytes", [[v] for v in values]), [format_bytes(v) for v in values])


def test_token_counts(js):
    """The live status said "1 tokens so far" (a plural fixed in stream.js)."""
    from playground.units import tokens
    values = [0, 1, 2, 999, 1000, 1024, 123_456]
    assert_same("tokens", values, js("tokens", [[v] for v in values]), [tokens(v) for v in values])


def test_prefill_words(js):
    """The live status while the prompt is read: in one pass, or in the engine loop's chunks between other requests'
    steps (a long prompt read 128 tokens an iteration was said to be read "in one pass")."""
    from playground.ui.live.view import prefill_words
    values = [(9, None), (7267, None), (845, 128), (128, 128), (129, 128), (37, 128), (12_345, 2048)]
    assert_same("prefill", values, js("prefill", [list(v) for v in values]), [prefill_words(*v) for v in values])


def test_milliseconds(js):
    seconds = [None, 0.0, 4e-7, 1e-6, 0.0005, 0.0015, 0.0025, 0.00402, 0.0125, 0.0424, 0.2505, 0.9999, 0.999_9, 1.0,
               2.381, 12.3456, 1234.5678, 86_400.0]
    assert_same("ms", seconds, js("ms", [[s] for s in seconds]), [_ms(s) for s in seconds])


def test_probabilities(js):
    probs = [0.0, 1e-7, 0.0004, 0.0005, 0.004, 0.0625, 0.1875, 0.3125, 0.33333, 0.5, 0.6875, 0.9995, 0.99995, 1.0]
    assert_same("prob", probs, js("prob", [[p] for p in probs]), [f"{p:.3f}" for p in probs])
    cases = [[x, d] for x in (0.5, 1.5, 2.5, -2.5, 0.125, 0.25, 0.0125 * 1e3, 1.0 / 3, 1e-9, 123456.5) for d in (0, 1, 2, 3, 6)]
    assert_same("fixed", cases, js("fixed", cases), [f"{x:.{d}f}" for x, d in cases])


def test_visible_tokens(js):
    """A token as the page labels it (the stream's `shown`, escaped for Plotly) is charts/run.py's label."""
    assert_same("label", TOKENS, js("label", [[shown(t)] for t in TOKENS]), [_label(t) for t in TOKENS])


def test_top_k_labels(js):
    """The top-k chart's labels, candidates with and without an id, as charts/run.py plot_top_k names them."""
    top = tuple(Candidate(None if i % 3 == 2 else 100 + i, t, 0.5 / (i + 1)) for i, t in enumerate(TOKENS))
    step = Step(index=0, token_id=100, text=" ", special=False, phase=Phase.PREFILL, time=0.1, latency=0.1,
                prob=0.5, sample_prob=None, top=top, seq_len=None, kv_bytes=None)
    figure = plot_top_k(SimpleNamespace(steps=[step], backend="x", settings=SimpleNamespace(greedy=True)))
    cands = step_record(step)[F["top"]][::-1]   # best at the top, as both charts draw them
    assert_same("candidate", cands, js("candidate", [[c[1], c[0]] for c in cands]), list(figure.data[0].y))
    assert_same("prob", cands, js("prob", [[c[2]] for c in cands]), list(figure.data[0].text))


def step(index, time, latency, **fields) -> Step:
    values = dict(token_id=7, text="x", special=False, prob=None, sample_prob=None, top=None, seq_len=None,
                  kv_bytes=None)
    return Step(index=index, phase=Phase.PREFILL if index == 0 else Phase.DECODE, time=time, latency=latency,
                **{**values, **fields})


def test_chip_titles(js):
    """Figures at the stream's precision (times to the µs, probabilities to 5 decimals), as the page gets them."""
    steps = [step(0, 0.5, 0.5),
             step(1, 0.52, 0.00025, token_id=None, prob=0.0625, sample_prob=1.0, kv_bytes=1280),
             step(2, 0.6, 0.0424, prob=1e-5, sample_prob=0.3125, kv_bytes=245_760, tokens=3),
             step(3, 0.7, 0.00015, prob=0.99995, draft="accepted", forward_pass=2, kv_bytes=2**30),
             step(4, 0.8, 1.23456, prob=0.5, draft="replaced", forward_pass=3, text="<b>"),
             step(5, 0.9, 0.0, prob=0.0, sample_prob=0.0, kv_bytes=0)]
    records = [step_record(s) for s in steps]
    assert_same("chipTitle", records, js("chipTitle", [[F, r] for r in records]), [chip_title(s) for s in steps])


def test_log_ms_ticks(js):
    ranges = [[14, 230], [4.02, 22.8], [0.0004, 3], [0.00004, 0.001], [0.5, 999.9], [999.9, 1500], [1, 120_000],
              [0, 5, 50], [7, 7], [0], [], [-1, 3]]
    assert_same("logMsTicks", ranges, js("logMsTicks", [[r] for r in ranges]), [log_ms_ticks(r) for r in ranges])


def test_time_ticks(js):
    spans = [20_000, 230, 1_400, 999.9, 1_000, 3.3, 47.3, 0.004, 123_456.7, 0]
    assert_same("timeTicks", spans, js("timeTicks", [[s] for s in spans]), [time_ticks(s) for s in spans])


CARD = re.compile(r'<div class="label">(.*?)</div><div class="value">(.*?)</div>')


def cards_of(steps, prompt_tokens, price_in, price_out) -> list[list[str]]:
    trace = SimpleNamespace(steps=steps, prompt_ids=[0] * prompt_tokens, server={}, backend="x")
    trace.metrics = lambda: compute_metrics(trace)
    return [[html.unescape(k), html.unescape(v)] for k, v in CARD.findall(metrics_html(trace, price_in, price_out))]


def test_metric_cards(js):
    runs = [([step(0, 0.0125, 0.0125)], 9, 0.15, 0.6),
            ([step(0, 0.5, 0.5), step(1, 0.6, 0.1), step(2, 0.8, 0.2, kv_bytes=1536)], 10, 0.0, 0.0),
            ([step(0, 0.0125, 0.0125, tokens=2), step(1, 0.125, 0.1125, tokens=3), step(2, 0.1375, 0.0125, tokens=1)],
             12_345, 2.5, 10.0),
            ([step(0, 1.5, 1.5)] + [step(i, round(1.5 + 0.0025 * i, 6), 0.0025) for i in range(1, 1200)], 4, 0.15, 0.6),
            ([step(0, 0.25, 0.25), step(1, 0.25, 0.0, kv_bytes=2**20)], 1, 1e-3, 0.0)]
    calls = [[F, [step_record(s) for s in steps], p, pin, pout] for steps, p, pin, pout in runs]
    want = [cards_of(*run) for run in runs]
    assert all(len(cards) == 8 for cards in want)   # the pattern read every card of metrics_html
    assert_same("metricCards", [f"run {i}" for i in range(len(runs))], js("metricCards", calls), want)
