"""A real Chromium drives the app (tiny model): presets, Generate, chips, every chart, Stop."""
from __future__ import annotations

import os
import time

import pytest

from playground.ui import build_demo
from scripts.screenshot import CHROMIUM, generate, launch, open_page, set_max_new_tokens

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]


@pytest.fixture(scope="module")
def page(tiny_engine):
    sync_api = pytest.importorskip("playwright.sync_api")
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


def test_compare_tab_draws_both_runs_and_their_agreement(page):
    page.get_by_role("tab", name="Compare").click()
    page.locator("#compare-run").click()
    page.wait_for_function("document.querySelector('#compare-agreement').innerText.includes('Token agreement')",
                           timeout=60_000)
    assert "100%" in page.locator("#compare-agreement").inner_text()   # one greedy engine twice
    page.wait_for_selector("#compare-plot .js-plotly-plot", timeout=30_000)
    assert "TTFT (ms)" in page.locator("#compare-table").inner_text()
    page.get_by_role("tab", name="Generate").click()


def test_experiments_tab_runs_a_prefill_sweep_and_draws_it(page):
    page.get_by_role("tab", name="Experiments").click()
    page.locator("#experiment-run").click()
    page.wait_for_function("document.querySelector('#experiment-status').innerText.includes('finished')",
                           timeout=120_000)
    page.wait_for_selector("#experiment-plot .js-plotly-plot", timeout=30_000)
    summary = page.locator("#experiment-summary").inner_text()
    assert "Prefill scaling sweep" in summary and "torch" in summary
    page.get_by_role("tab", name="Generate").click()
