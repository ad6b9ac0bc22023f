"""A KV-memory preset in the Serve tab, in Chromium (tiny model on ONNX Runtime): picked from the accordion, it
sets our batching on both sides and its request count, runs A and B, and ends with its finding, the Gantt's
cached-prefix copies and the inter-token latency chart drawn."""
from __future__ import annotations

import pytest

from playground.lesson import STEPS
from playground.engine import Engine
from playground.registry import SourceRegistry

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def onnx_page(tiny_engine, tiny_onnx_engine):
    from playground.ui import build_demo
    from tests.browser import launch, open_page
    from tests.helpers import require_browser
    sync_api = require_browser()
    sources: dict[str, Engine] = {"onnx": tiny_onnx_engine, "torch": tiny_engine}
    demo = build_demo(SourceRegistry(lambda name, progress: sources[name], list(sources), default="onnx"))
    url = launch(demo)
    with sync_api.sync_playwright() as p:
        browser, page = open_page(p, url)
        yield page
        browser.close()
    demo.close()


def test_a_preset_runs_in_the_serve_tab_and_says_what_it_found(onnx_page):
    page = onnx_page
    page.get_by_role("tab", name="Serve").click()
    page.get_by_text("KV memory: presets, prefix caching, a KV budget (our batching)").click()
    page.locator("#serve-preset input").click()
    page.get_by_role("option", name="shared system prompt").click()
    page.wait_for_function("document.querySelector('#serve-preset-about').innerText.includes('prefix cache')",
                           timeout=30_000)
    assert page.locator("#serve-requests input[type=number]").input_value() == "16"
    page.locator("#serve-requests input[type=number]").fill("3")
    page.locator("#serve-run").click()
    page.wait_for_function("(document.querySelector('#serve-status').innerText.match(/: done/g) || []).length >= 2",
                           timeout=300_000)
    page.wait_for_function("document.querySelector('#serve-lesson').innerText.includes('With the prefix cache')",
                           timeout=30_000)
    page.wait_for_function("document.querySelector('#serve-itl-b .js-plotly-plot') !== null", timeout=30_000)
    legend = page.locator("#serve-gantt-b").inner_text()
    assert "cached prefix copied in" in legend
    assert "prefix cache" in page.locator("#serve-status").inner_text().split("\n")[-1]
    # the KV map's colour key sits under the x axis's title, not over it
    page.wait_for_function("document.querySelector('#serve-kv-map-b .legend') !== null", timeout=30_000)
    overlap = page.evaluate("""() => {
        const box = s => document.querySelector('#serve-kv-map-b ' + s).getBoundingClientRect();
        const key = box('.legend'), title = box('.g-xtitle');
        return Math.max(0, Math.min(key.bottom, title.bottom) - Math.max(key.top, title.top));
    }""")
    assert overlap == 0, f"the KV map's key covers its x-axis title by {overlap} px"


def test_lesson_step_seven_fits_1024x768_in_presenter_mode_with_its_numbers(onnx_page, tmp_path):
    """Step 7 on our batching (the tiny model on ONNX Runtime), opened by a deep link on a projector: heading,
    takeaway (the prefix cache's TTFT, the preemptions) and first chart on one screen, text >= 20 px, chart text
    >= 18 px."""
    from tests.ui.test_browser_room import ON_ONE_SCREEN, WHERE, enlarged
    page = onnx_page.context.browser.new_page(viewport={"width": 1024, "height": 768})
    try:
        page.goto(onnx_page.url.split("?")[0] + "?present=1&lesson=7")
        page.wait_for_function("document.querySelector('#lesson-title') && document.querySelector('#lesson-title')"
                               f".innerText.includes('Step 7 of {len(STEPS)}')", timeout=120_000)
        page.wait_for_function("document.querySelector('#lesson-takeaway').innerText.includes('preemption')",
                               timeout=120_000)
        takeaway = page.locator("#lesson-takeaway").inner_text()
        assert "Caching a shared " in takeaway and "KV positions needed" in takeaway
        try:
            page.wait_for_function(ON_ONE_SCREEN, timeout=10_000)   # presenter.js fits the chart within a second
        except Exception:   # noqa: BLE001 - playwright's TimeoutError: the assert below says where things are
            pass
        page.screenshot(path=str(tmp_path / "lesson-step7-presenter-1024x768.png"))
        assert page.evaluate(ON_ONE_SCREEN), f"step 7 is not on one screen: {page.evaluate(WHERE)} ({tmp_path})"
        fonts = enlarged(page)
        assert fonts["small"] == [] and fonts["body"] >= 20 and fonts["tiny"] == [] and fonts["chart"] >= 18, fonts
        assert "cached prefix copied in" in page.locator("#lesson-figure0").inner_text()   # the cached run's Gantt
    finally:
        page.close()


def test_the_agents_preset_says_what_it_does_then_runs_both_sides_onto_the_session_timeline(onnx_page):
    """The preset "two agents with tool gaps: retention on vs off": its line says what A and B do before Run; after
    both sides ran, the session timeline has each side's agents with every turn's TTFT and cached share, each gap's
    blocks as measured, and the lesson ends with the sentence on the turn after a gap."""
    from playground.serve.session_preset import NAME
    page = onnx_page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(onnx_page.url)
        page.wait_for_selector("#generate", timeout=60_000)
        page.get_by_role("tab", name="Serve").click()
        page.get_by_text("KV memory: presets, prefix caching, a KV budget (our batching)").click()
        page.locator("#serve-preset input").click()
        page.get_by_role("option", name=NAME).click()
        page.wait_for_function("document.querySelector('#serve-preset-about').innerText.includes('B does not')",
                               timeout=30_000)
        assert "A holds each agent's blocks across its gaps" in page.locator("#serve-preset-about").inner_text()
        page.locator("#serve-run").click()
        page.wait_for_function("(document.querySelector('#serve-status').innerText.match(/: done/g) || [])"
                               ".length >= 2", timeout=300_000)
        page.wait_for_function("document.querySelector('#serve-lesson').innerText.includes('After a tool gap')",
                               timeout=30_000)
        lesson = page.locator("#serve-lesson").inner_text()
        assert "with retention: TTFT p50" in lesson and "without (B)" in lesson
        page.wait_for_function("document.querySelector('#serve-session-timeline .js-plotly-plot') !== null",
                               timeout=30_000)
        drawn = page.evaluate("""() => {
            const plot = document.querySelector('#serve-session-timeline .js-plotly-plot');
            const turns = plot.data.find(t => t.name === 'turn');
            return {rows: [...new Set(turns.y)].sort(), texts: turns.text,
                    parts: plot.data.filter(t => t.name !== 'turn').map(t => t.y[0] + ' / ' + t.name),
                    shown: plot.textContent};
        }""")
        assert drawn["rows"] == ["A · agent 1", "A · agent 2", "B · agent 1", "B · agent 2"]
        assert len(drawn["texts"]) == 12 and all("TTFT" in t and "cached" in t for t in drawn["texts"])
        assert "A · agent 1 / held (measured)" in drawn["parts"]
        assert any(p.startswith("B · agent") and "evicted · least recently used (measured)" in p
                   for p in drawn["parts"])
        assert "B · agent 2" in drawn["shown"] and "held (measured)" in drawn["shown"]   # axis and legend on the page
    finally:
        page.close()
