"""Save assets/screenshot.png: the app with the real default model, after one run, in Debian's Chromium.

    python scripts/screenshot.py [--out assets/screenshot.png]
    python scripts/screenshot.py --tab serve --out assets/serve.png   # the Serve tab after its default workload
    python scripts/screenshot.py --tab lesson --present --out assets/lesson-present.png   # step 1 at 1024x768

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
    """A Chromium page on the app (`url` may carry a query, e.g. ?present=1), once the model has loaded."""
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


def lesson(page, timeout_s: float = 600) -> None:
    """Open the Lesson tab, press Next (step 1 on a fresh page) and wait for its takeaway and its view drawn."""
    page.get_by_role("tab", name="Lesson").click()
    page.locator("#lesson-next").click()
    page.wait_for_function("document.querySelector('#lesson-title').innerText.includes('Step 1 of 6') && "
                           "document.querySelector('#lesson-takeaway').innerText.length > 40", timeout=timeout_s * 1000)
    page.wait_for_timeout(2500)   # the step's last redraw; presenter.js enlarges chart fonts once a second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshot.png")
    parser.add_argument("--tab", choices=("generate", "serve", "lesson"), default="generate")
    parser.add_argument("--present", action="store_true",
                        help="presenter mode (?present=1) at 1024x768, the viewport only (what a projector shows)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT))
    import app   # the real entry point: the default model, loaded on first use
    url = launch(app.demo)
    try:
        with sync_playwright() as p:
            size = (1024, 768) if args.present else (1400, 1000)
            browser, page = open_page(p, url + ("?present=1" if args.present else ""), *size, load_timeout_s=600)
            {"generate": lambda: generate(page, timeout_s=600), "serve": lambda: serve(page),
             "lesson": lambda: lesson(page)}[args.tab]()
            page.screenshot(path=str(args.out), full_page=not args.present)
            browser.close()
    finally:
        app.demo.close()
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
