"""A presenter walks the Lesson tab in Chromium (tiny model): eight steps forward and back, each with its
measured takeaway (Next on a fresh page shows step 1); the arrow keys, a deep link (?lesson=N), presenter
mode and the slow replay in place of step 2's answer."""
from __future__ import annotations

import pytest


pytestmark = [pytest.mark.browser]
TITLES = ["It works in tokens", "One token at a time", "Prefill, then decode", "The KV cache",
          "Cost and latency scale with tokens", "No two requests are the same", "Reuse the cache, make room",
          "A conversation reuses its past, until something rewrites it"]


def wait_for_step(page, n: int, timeout_s: float = 120) -> str:
    page.wait_for_selector("#lesson-title", state="attached", timeout=timeout_s * 1000)
    page.wait_for_function(f"document.querySelector('#lesson-title').innerText.includes('Step {n} of {len(TITLES)}')",
                           timeout=timeout_s * 1000)
    page.wait_for_function("document.querySelector('#lesson-takeaway').innerText.length > 40", timeout=timeout_s * 1000)
    return page.locator("#lesson-takeaway").inner_text()


def test_every_tab_has_one_button(browser_app):
    """Regression: a gr.State left between two tabs made Gradio draw the next tab's button twice."""
    page, _ = browser_app
    ids = page.eval_on_selector_all("[role=tablist] [role=tab]", "els => els.map(e => e.dataset.tabId)")
    assert ids == ["generate", "tokens", "compare", "experiments", "lesson", "serve"]


def test_walk_all_eight_steps_forward_and_back(browser_app):
    page, _ = browser_app
    page.locator("[role=tablist] [data-tab-id=lesson]").click()
    takeaways = {}
    for n in range(1, len(TITLES) + 1):   # from a fresh page Next shows step 1; it runs each step the first time
        page.locator("#lesson-next").click()
        takeaways[n] = wait_for_step(page, n)
        assert TITLES[n - 1] in page.locator("#lesson-title").inner_text()
    assert "8 words →" in takeaways[1] and "prediction steps" in takeaways[2] and "TTFT" in takeaways[3]
    assert "per token" in takeaways[4] and "extrapolated" in takeaways[5] and "queued behind" in takeaways[6]
    assert "pick onnx-gguf4" in takeaways[7] and "pick onnx-gguf4" in takeaways[8]   # the torch source: no prefix
    # cache of ours to drive
    for n in range(len(TITLES) - 1, 0, -1):   # back: each step shows the result it kept, without running again
        page.locator("#lesson-prev").click()
        assert wait_for_step(page, n) == takeaways[n]
        page.wait_for_function("document.querySelector('#lesson-status').innerText.includes('kept from earlier')",
                               timeout=10_000)
    page.keyboard.press("ArrowRight")   # the arrow keys move too (focus is on no text box)
    assert wait_for_step(page, 2) == takeaways[2]
    # step 2's answer plays token by token where the answer goes (no chips of it elsewhere), and again on demand
    page.wait_for_function("document.querySelectorAll('#lesson-replay .tok').length >= 3", timeout=10_000)
    assert page.locator("#lesson-body .tok").count() == 0
    page.get_by_role("button", name="Replay slowly (the recorded tokens, one at a time)").click()
    page.wait_for_function("document.querySelectorAll('#lesson-replay .tok').length <= 2", timeout=5_000)
    page.wait_for_function("document.querySelectorAll('#lesson-replay .tok').length >= 3", timeout=10_000)
    page.locator("#present input").check()
    page.wait_for_function("document.body.classList.contains('present')", timeout=10_000)
    page.locator("#present input").uncheck()
    page.wait_for_function("!document.body.classList.contains('present')", timeout=10_000)


def test_a_deep_link_opens_a_step(browser_app):
    page, url = browser_app
    tab = page.context.browser.new_page()
    tab.goto(f"{url}?lesson=3")
    assert "TTFT" in wait_for_step(tab, 3)
    assert tab.locator("[role=tablist] [data-tab-id=lesson]").get_attribute("aria-selected") == "true"
    tab.close()
