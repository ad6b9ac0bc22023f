"""Save assets/screenshot.png: the app with the real default model, after one run, in Debian's Chromium.

    python scripts/screenshot.py [--out assets/screenshot.png]
    python scripts/screenshot.py --tab serve --out assets/serve.png   # the Serve tab after its default workload

The helpers here (launch the demo in-process, drive a page through a run) are shared with
tests/test_browser.py. Left out: any browser but Debian's Chromium or the one PLAYGROUND_CHROMIUM names (no playwright download).
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
from pathlib import Path

CHROMIUM = os.environ.get("PLAYGROUND_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parent.parent


def launch(demo) -> str:
    """Serve `demo` (with the live channel's route) on a free 127.0.0.1 port without blocking; returns its URL."""
    from playground.ui import app_kwargs
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1",
                                    quiet=True, app_kwargs=app_kwargs())
    return url


def open_page(playwright, url: str, width: int = 1400, height: int = 1000, load_timeout_s: float = 120):
    """A Chromium page on the app, once the model has loaded (the info line names it)."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": width, "height": height})
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


def serve(page, timeout_s: float = 900) -> None:
    """Open the Serve tab, run its default workload (one at a time, then batching) and wait for both."""
    page.get_by_role("tab", name="Serve").click()
    page.locator("#serve-run").click()
    page.wait_for_function("(document.querySelector('#serve-status').innerText.match(/: done/g) || []).length >= 2",
                           timeout=timeout_s * 1000)
    page.wait_for_timeout(2000)   # the last redraw of the charts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshot.png")
    parser.add_argument("--tab", choices=("generate", "serve"), default="generate")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT))
    import app   # the real entry point: the default model, loaded on first use
    url = launch(app.demo)
    try:
        with sync_playwright() as p:
            browser, page = open_page(p, url, load_timeout_s=600)
            generate(page, timeout_s=600) if args.tab == "generate" else serve(page)
            page.screenshot(path=str(args.out), full_page=True)
            browser.close()
    finally:
        app.demo.close()
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
