"""A real Chromium drives the app (tiny model): presets, Generate, chips, every chart, Stop, Compare, Experiments.

The Generate page draws in the browser from the step stream (ui/live/*.js): chips and all four charts grow
while the run streams, each chip is timed against its step's wall-clock stamp, and token text that tries
to be markup stays text.
"""
from __future__ import annotations

import contextlib
import json
import statistics
import time

import pytest

from playground.bench.recorder import RECORDER
from playground.engine import Engine
from playground.step_stream import FIELDS, read_stream, shown
from playground.trace import Candidate, Step
from playground.ui import build_demo
from tests.browser import generate, launch, set_max_new_tokens
from tests.fakes import CountingBackend, RecordingEngine, SlowBackend
from tests.helpers import compute_stopped, wait_for

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def page(browser_app):
    return browser_app[0]


def chip_count(page) -> int:
    return page.locator("#chips .tok").count()


def test_generate_shows_chips_metrics_and_every_chart(page, tmp_path):
    assert "tiny-random-llama" in page.locator("#model-info").inner_text()
    generate(page)
    assert chip_count(page) == 64   # the default max new tokens
    assert "TTFT" in page.locator("#metrics").inner_text()
    assert page.locator(".js-plotly-plot").count() >= 4
    assert page.locator("#chips .tok").first.get_attribute("title").startswith("id ")
    page.screenshot(path=str(tmp_path / "screenshot.png"), full_page=True)


def test_a_whitespace_prompt_after_a_run_empties_the_chips_and_charts(page):
    """"prompt is empty" stood over the last run's chips and figures, as if they were this click's."""
    generate(page)
    page.locator("#prompt textarea").fill("   \n ")
    page.locator("#generate").click()
    page.wait_for_function("document.querySelector('#status').innerText.includes('prompt is empty')", timeout=30_000)
    page.wait_for_function("document.querySelectorAll('#chips .tok').length === 0 && "
                           "document.querySelectorAll('#pg-timeline.pg-chart-empty, #pg-latency.pg-chart-empty, "
                           "#pg-kv.pg-chart-empty, #pg-topk.pg-chart-empty').length === 4", timeout=10_000)
    assert page.locator("#answer textarea").input_value() == "" and "TTFT" not in page.locator("#metrics").inner_text()
    generate(page)   # the next run draws as ever
    assert chip_count(page) > 0


def test_stop_ends_a_long_run_and_keeps_its_tokens(page, tiny_backend):
    """Stop mid-run: the run ends "stopped by you", keeps its tokens and its trace, and compute stops.

    The backend is paced (30 ms a step): the tiny model alone fills its 512-token window in about two
    seconds, which let the run end by itself before Stop landed (a CI failure, "context window full")."""
    slow = CountingBackend(tiny_backend)
    engine = RecordingEngine(slow)
    with app_page(page, engine) as tab:
        set_max_new_tokens(tab, 2000)   # 30 ms a step: the window's ~490 tokens take ~15 s
        tab.locator("#generate").click()
        tab.wait_for_function("(/generating… (\\d+)/.exec(document.querySelector('#status').innerText)"
                              " || [0, 0])[1] >= 5", timeout=60_000)   # this run's status, not the last run's
        tab.locator("#stop").click()
        try:
            tab.wait_for_function("document.querySelector('#status').innerText.includes('stopped by you')",
                                  timeout=30_000)
        except Exception:
            print("STATUS:", tab.locator("#status").inner_text(), "STATE:",
                  tab.evaluate("JSON.stringify({next: window.pgLive.state().next, end: !!window.pgLive.state().end})"))
            raise
        wait_for(lambda: compute_stopped(slow, engine.runs[-1:]), timeout=30, message="the run's compute to stop")
        trace = engine.runs[-1].trace
        assert trace.stop_reason == "cancelled"
        tab.wait_for_function("!!window.pgLive.state().end", timeout=30_000)   # the stream's last line is read
        ended_with = tab.evaluate("window.pgLive.state().end.steps")
        kept = chip_count(tab)   # the stream has ended: nothing more can arrive
        assert 5 <= kept < 480 and kept == ended_with == len(trace.steps)   # every step made, none after Stop
        assert tab.locator("a[download], .file-preview").count() >= 1   # the partial trace is downloadable


def test_no_caption_is_clipped(page):
    """Each chart's caption shows its first line whole (a negative margin on the text inside the caption's
    block moved it up, and the block clipped it)."""
    clipped = page.evaluate("""[...document.querySelectorAll('.block.caption')].filter((block) => {
        const text = block.querySelector('.prose');
        return !text || text.getBoundingClientRect().top < block.getBoundingClientRect().top - 0.5; }).length""")
    assert page.locator(".block.caption").count() >= 4 and clipped == 0


def test_tokens_tab_shows_the_prompt_in_both_tokenizers(page):
    page.get_by_role("tab", name="Tokens").click()
    page.wait_for_selector(".tok-title", timeout=30_000)
    titles = page.locator(".tok-title").all_inner_texts()
    assert any("cl100k_base" in t for t in titles) and any("tiny-random-llama" in t for t in titles)
    assert any(t.startswith("As the model reads it") for t in titles)
    page.get_by_role("tab", name="Generate").click()



def run_in_tab(page, tab: str, button: str, done: str, text: str, plot: str, timeout_s: float = 120) -> None:
    """Open a tab, click its Run button, wait until `done` shows `text` and `plot` holds a drawn chart."""
    page.get_by_role("tab", name=tab).click()
    page.locator(button).click()
    page.wait_for_function(f"document.querySelector('{done}').innerText.includes('{text}')",
                           timeout=timeout_s * 1000)
    page.wait_for_selector(f"{plot} .js-plotly-plot", timeout=30_000)


def test_compare_tab_draws_both_runs_and_their_agreement(page):
    run_in_tab(page, "Compare", "#compare-run", "#compare-agreement", "Token agreement", "#compare-plot")
    assert "100%" in page.locator("#compare-agreement").inner_text()   # one greedy engine twice
    assert "TTFT (ms)" in page.locator("#compare-table").inner_text()
    page.get_by_role("tab", name="Generate").click()


def test_experiments_tab_runs_a_prefill_sweep_and_draws_it(page):
    run_in_tab(page, "Experiments", "#experiment-run", "#experiment-status", "finished", "#experiment-plot")
    summary = page.locator("#experiment-summary").inner_text()
    assert "Prefill scaling sweep" in summary and "torch" in summary
    page.get_by_role("tab", name="Generate").click()


def test_closing_the_tab_mid_stream_stops_the_run(page, tiny_backend):
    """A person closes the browser tab while tokens stream: the run ends "cancelled" within moments and
    no more forward passes happen (the worker is free for the next person)."""
    slow = CountingBackend(tiny_backend)
    engine = RecordingEngine(slow)
    demo = build_demo(engine)
    url = launch(demo)
    try:
        tab = page.context.browser.new_page()   # a second person, in their own tab
        tab.goto(url)
        tab.wait_for_selector("#generate", timeout=60_000)
        tab.wait_for_function("!document.querySelector('#model-info').innerText.includes('Loading')",
                              timeout=60_000)
        set_max_new_tokens(tab, 2000)
        tab.locator("#generate").click()
        tab.wait_for_selector("#chips .tok", timeout=60_000)
        tab.close()
        wait_for(lambda: engine.runs and compute_stopped(slow, engine.runs[-1:]), timeout=30,
                 message="the closed tab's run to end and its compute to stop")
        assert engine.runs[-1].trace.stop_reason == "cancelled"
        assert len(engine.runs[-1].trace.steps) < 2000
    finally:
        demo.close()


# --- drawn in the browser, while the run streams

STREAM = "document.querySelector('#stream textarea').value"


@contextlib.contextmanager
def app_page(page, engine):
    """A second tab on a second app serving `engine`, closed (and the app too) at the end."""
    demo = build_demo(engine)
    url = launch(demo)
    tab = page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        tab.goto(url)
        tab.wait_for_selector("#generate", timeout=60_000)
        tab.wait_for_function("!document.querySelector('#model-info').innerText.includes('Loading')", timeout=60_000)
        yield tab
    finally:
        tab.close()
        demo.close()


def run_to_the_end(tab, max_new_tokens: int, timeout_s: float = 120):
    set_max_new_tokens(tab, max_new_tokens)
    tab.locator("#generate").click()
    tab.wait_for_function("document.querySelector('#status').innerText.includes('finished')", timeout=timeout_s * 1000)
    tab.wait_for_function("window.pgLive.state() && window.pgLive.state().finalShown", timeout=30_000)
    return read_stream(tab.evaluate(STREAM))


def test_chips_and_all_four_charts_grow_while_the_run_streams(page, tiny_backend):
    with app_page(page, Engine(SlowBackend(tiny_backend, pause=0.03))) as tab:
        tab.evaluate(RECORDER)
        _, steps, end = run_to_the_end(tab, 60)
        record, stats = tab.evaluate("window.pgRecord"), tab.evaluate("window.pgLive.stats")
        interactive = tab.evaluate("['timeline', 'latency', 'kv', 'topk'].filter((n) => "
                                   "document.querySelector(`#pg-${n} .nsewdrag`)).length")
    assert interactive == 4   # pictures while streaming; hover, zoom and the modebar once the run is over
    n = len(steps)
    assert n == end["steps"] and n >= 20 and sorted(map(int, record["chips"])) == list(range(n))
    assert stats["channelSteps"] >= n / 2   # most steps came by the live channel, ahead of Gradio's updates
    running = [s for s in record["samples"] if s["running"]]
    for key, final in (("chips", n), ("timeline", n - 1), ("latency", n - 1), ("kv", n)):
        during = {s[key] for s in running if 0 < s[key] < final}
        assert len(during) >= 3, f"{key} did not grow during the run: {sorted(during)}"
    assert len({s["topk"] for s in running if s["topk"]}) >= 3   # the top-k chart follows the last step
    delays = [record["chips"][str(s["seq"])] - s["wall_ns"] / 1e6 for s in steps]   # ms after the step's stamp
    last_step_ms = steps[-1]["wall_ns"] / 1e6
    assert sum(record["chips"][str(s["seq"])] < last_step_ms for s in steps) >= n / 2   # on screen during the run
    print(f"chip in DOM after its step: median {statistics.median(delays):.0f} ms, "
          f"p95 {sorted(delays)[int(0.95 * (n - 1))]:.0f} ms")


def test_a_page_whose_live_channel_is_blocked_still_gets_every_step(page, tiny_backend):
    """A proxy that refuses the live channel: Gradio's own updates carry every step, in order."""
    with app_page(page, Engine(SlowBackend(tiny_backend, pause=0.02))) as tab:
        tab.route("**/playground/live/**", lambda route: route.abort())
        _, steps, end = run_to_the_end(tab, 30)
        stats = tab.evaluate("window.pgLive.stats")
        chips = tab.locator("#pg-chips .tok")
        assert stats["channelSteps"] == 0 and stats["gaps"] == 0 and len(steps) == end["steps"]
        assert chips.count() == len(steps) and chips.all_text_contents() == [s["shown"] for s in steps]


HOSTILE = ["<script>window.pwned=1</script>", "\"'><img src=x onerror=\"window.pwned=1\">", "<svg onload=window.pwned=1>",
           "\u202eevil reversed\u202c", "👨‍👩‍👧 emoji", "</textarea><b>bold</b>", "<a href='javascript:window.pwned=1'>x</a>",
           "&amp; &lt;", "a\nb\t\x00"]


class HostileEngine(Engine):
    """The tiny engine's prompt, then a step loop of hostile token text (markup, attribute breakers, bidi
    overrides, emoji, controls) in chips and top-k labels; no KV bytes, and no model probability on odd steps."""

    def _steps(self, run, prefix=None):
        trace, prev = run.trace, run.t0
        for i in range(trace.settings.max_new_tokens):
            time.sleep(0.02)   # timing: the fake engine's pace, so the page draws a stream
            now = time.perf_counter()
            top = tuple(Candidate(100 + j, HOSTILE[(i + j) % len(HOSTILE)], 0.5 / (j + 1)) for j in range(3))
            step = Step(index=i, token_id=100 + i, text=HOSTILE[i % len(HOSTILE)], special=False, phase="prefill" if i == 0 else "decode",
                        time=now - run.t0, latency=now - prev, prob=None if i % 2 else 0.5, sample_prob=None, top=top, seq_len=len(trace.prompt_ids) + i + 1,
                        kv_bytes=None, wall_ns=time.time_ns())
            prev = now
            trace.steps.append(step)
            yield step
        trace.stop_reason = "length"


LABELS_INSIDE = """(() => { const box = document.querySelector('#pg-topk').getBoundingClientRect();
  const labels = [...document.querySelectorAll('#pg-topk .ytick text')];
  return labels.filter((t) => t.getBoundingClientRect().left >= box.left - 1).length; })()"""


def test_hostile_token_text_stays_text_in_chips_charts_and_answer(page, tiny_backend):
    with app_page(page, HostileEngine(tiny_backend)) as tab:
        _, steps, _ = run_to_the_end(tab, len(HOSTILE))
        assert tab.evaluate("window.pwned") is None
        assert tab.evaluate("document.querySelectorAll('[onerror], [onload], a[href^=\"javascript\"], #pg-chips b').length") == 0
        chips = tab.locator("#pg-chips .tok")
        assert chips.all_text_contents() == [shown(t) for t in HOSTILE]
        assert "model p missing" in chips.nth(1).get_attribute("title")
        assert "KV not measured" in chips.nth(0).get_attribute("title")
        kv_chart = tab.locator("#pg-kv").inner_text()
        assert "missing: torch does not give measured KV-cache bytes" in kv_chart
        for index in (0, 1, 5):   # the page's own top-k drawing of a chosen step
            tab.locator("#pg-step").fill(str(index))
            title = tab.locator("#pg-topk .gtitle").text_content()
            assert title.startswith(f"Top-k at step {index}: chose") and shown(HOSTILE[index]) in title
            assert tab.evaluate(LABELS_INSIDE) == 3   # a fixed margin, measured for the labels: none cut off
            assert tab.locator("#pg-topk .nsewdrag").count() == 1   # the run is over: interactive
        assert tab.locator("#answer textarea").input_value() == "".join(HOSTILE)


def test_a_missing_step_is_named_on_the_page(page):
    head = json.dumps({"run": "gap-test", "prompt_tokens": 3, "backend": "x", "greedy": True, "kv": None,
                       "fields": list(FIELDS)})
    step = '[%d, 5, "a", "a", false, "decode", 0.1, 0.01, 1, null, null, null, null, 1, null]'
    page.evaluate("(text) => window.pgLive.apply(text)", "\n".join([head, step % 0, step % 2, ""]))
    assert "missing from the stream" in page.locator("#pg-notice").inner_text()
    assert page.evaluate("window.pgLive.stats.gaps") >= 1 and chip_count(page) == 2


def test_a_long_prefill_says_so_and_the_run_comes_into_view(page, tiny_backend):
    """A prompt read for seconds (a long document's prefill) says on the page that the prompt is being read,
    how many tokens and for how long, then counts the tokens; at 1400x1000 the status, chips and metrics
    are on screen after Generate, whatever the prompt box's height."""
    from tests.fakes import SlowPrefillBackend
    with app_page(page, Engine(SlowPrefillBackend(tiny_backend, pause=4.0))) as tab:
        set_max_new_tokens(tab, 8)
        tab.locator("#prompt textarea").fill("a long document\n" * 40)   # the box at its tallest
        tab.locator("#generate").click()
        tab.wait_for_function("/reading the prompt \\(prefill\\): [\\d,]+ tokens in one pass… [1-9]\\d* s so far/"
                              ".test(document.querySelector('#status').innerText)", timeout=30_000)
        tab.wait_for_function("/generating… \\d+ tokens so far|finished/.test(document.querySelector('#status')"
                              ".innerText)", timeout=30_000)
        tab.wait_for_function("document.querySelector('#status').innerText.includes('finished')", timeout=60_000)
        shown = tab.evaluate("""['#status', '#chips', '#metrics'].map((sel) => {
            const r = document.querySelector(sel).getBoundingClientRect();
            return [sel, Math.round(r.top), Math.round(r.bottom), r.top >= 0 && r.bottom <= innerHeight]; })""")
        assert all(ok for *_, ok in shown), shown
