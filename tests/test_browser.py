"""A real Chromium drives the app (tiny model): presets, Generate, chips, every chart, Stop, Compare, Experiments."""
from __future__ import annotations

import os
import time

import pytest

from playground.ui import build_demo
from scripts.screenshot import CHROMIUM, generate, launch, open_page, set_max_new_tokens

pytestmark = [pytest.mark.browser]


def require_browser():
    """Fail (never skip) with one line saying what to install: `make test` installs both itself."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (or apt-get install chromium, or set "
                    "PLAYGROUND_CHROMIUM)", pytrace=False)
    try:
        from playwright import sync_api
    except ImportError:
        pytest.fail("playwright is missing: run `make install-dev`", pytrace=False)
    return sync_api


@pytest.fixture(scope="module")
def page(tiny_engine):
    sync_api = require_browser()
    demo = build_demo(tiny_engine)
    url = launch(demo)
    with sync_api.sync_playwright() as p:
        browser, page = open_page(p, url)
        yield page
        browser.close()
    demo.close()


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


def test_stop_ends_a_long_run_and_keeps_its_tokens(page):
    set_max_new_tokens(page, 450)
    page.locator("#generate").click()
    page.wait_for_function("(/generating… (\\d+)/.exec(document.querySelector('#status').innerText) || [0, 0])[1] >= 5",
                           timeout=60_000)   # this run's status, not the last run's chips
    page.locator("#stop").click()
    page.wait_for_function("document.querySelector('#status').innerText.includes('stopped by you')",
                           timeout=30_000)
    kept = chip_count(page)
    time.sleep(1.0)
    assert 5 <= kept < 450 and chip_count(page) == kept   # nothing arrives after Stop
    assert page.locator("a[download], .file-preview").count() >= 1   # the partial trace is downloadable


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
    from tests.test_cancellation import CountingBackend, RecordingEngine, calls_settle
    from tests.test_ui import wait_for

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
        wait_for(lambda: engine.runs and engine.runs[-1].trace.finished, timeout=30)
        assert engine.runs[-1].trace.stop_reason == "cancelled"
        assert len(engine.runs[-1].trace.steps) < 2000 and calls_settle(slow) == 0
    finally:
        demo.close()
