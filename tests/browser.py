"""Drive the app in Chromium: the browser tests' helpers, which scripts/screenshot.py uses too.

    url = launch(demo)                          # the demo on a free 127.0.0.1 port, not blocking
    browser, page = open_page(playwright, url)  # Chromium (playground.chromium) once the model has loaded
    set_max_new_tokens(page, 8); generate(page) # a preset, Generate, and the run finished with its charts

Left out: starting and closing apps for a test module (tests/conftest.py's fixtures do that).
"""
from __future__ import annotations

from playground.chromium import CHROMIUM_ARGS, chromium_path
from playground.ports import free_port


def launch(demo) -> str:
    """Serve `demo` (with the live channel's route) on a free 127.0.0.1 port without blocking; returns its URL."""
    from playground.ui import launch_kwargs
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1",
                                    quiet=True, **launch_kwargs())
    return url


def open_page(playwright, url: str, width: int = 1400, height: int = 1000, load_timeout_s: float = 120,
              on_page=None):
    """A Chromium page on the app (`url` may carry a query, e.g. ?present=1), once the model has loaded;
    `on_page(page)` runs before the page loads (to listen to its console and requests)."""
    browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": width, "height": height})
    if on_page:
        on_page(page)
    page.goto(url)
    page.wait_for_selector("#generate", timeout=60_000)
    page.wait_for_function("!document.querySelector('#model-info').innerText.includes('Loading')",
                           timeout=load_timeout_s * 1000)
    return browser, page


def set_max_new_tokens(page, n: int) -> None:
    box = page.locator("#max-new-tokens input[type=number]")
    box.fill(str(n))
    box.press("Enter")


def generate(page, preset: str = "Preset: What is the capital", timeout_s: float = 120) -> None:
    """Click a preset, then Generate, and wait until the run has finished and the charts are drawn."""
    page.get_by_role("button", name=preset).click()
    page.locator("#generate").click()
    page.wait_for_selector("#chips .tok", timeout=timeout_s * 1000)
    page.wait_for_function("document.querySelector('#status').innerText.includes('finished')",
                           timeout=timeout_s * 1000)
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 4", timeout=30_000)
