"""Save assets/screenshot.png: the app with the real default model, after one run, in Debian's Chromium.

    python scripts/screenshot.py [--out assets/screenshot.png]
    python scripts/screenshot.py --tab serve --out assets/serve.png   # the Serve tab after its default workload
    python scripts/screenshot.py --tab lesson --present --out assets/lesson-present.png   # step 1 at 1024x768
    python scripts/screenshot.py --tab clients --out assets/serve-clients.png   # --openai-api: the Watch view
    python scripts/screenshot.py --tab serve --preset "memory pressure" --out assets/serve-preemption.png

The helpers that launch the demo in-process and drive a page through a run are tests/browser.py's (the
browser tests use them too). Left out: any browser but Debian's Chromium or the one PLAYGROUND_CHROMIUM names (no playwright download).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # run as a script: the repository's packages (playground, tests) importable

from playground.ports import free_port  # noqa: E402
from tests.browser import generate, launch, open_page  # noqa: E402


def serve(page, timeout_s: float = 900) -> None:
    """Open the Serve tab, run its default workload (one at a time, then batching) and wait for both."""
    page.get_by_role("tab", name="Serve").click()
    page.locator("#serve-run").click()
    page.wait_for_function("(document.querySelector('#serve-status').innerText.match(/: done/g) || []).length >= 2",
                           timeout=timeout_s * 1000)
    page.wait_for_timeout(2000)   # the last redraw of the charts


# the chart each KV-memory preset is about: the screenshot runs from the tab's status down to it
PRESET_CHART = {"shared system prompt": "#serve-gantt-b", "many questions about one document": "#serve-gantt-b",
                "memory pressure": "#serve-kv-map-b", "a long document among chatters": "#serve-itl-b"}


def serve_preset(page, name: str, out: Path, timeout_s: float = 1800) -> None:
    """Pick a KV-memory preset in the Serve tab, run it (A and B), and save the tab from its status line down to
    the chart the preset is about (its finding, both Gantt charts, …)."""
    page.get_by_role("tab", name="Serve").click()
    page.locator("#serve-kv-memory").get_by_text("KV memory: presets").click()
    page.locator("#serve-preset input").click()
    page.get_by_role("option", name=name, exact=True).click()
    page.wait_for_function("document.querySelector('#serve-preset-about').innerText.length > 20", timeout=30_000)
    page.locator("#serve-run").click()
    page.wait_for_function("(document.querySelector('#serve-status').innerText.match(/: done/g) || []).length >= 2",
                           timeout=timeout_s * 1000)
    page.wait_for_function(f"document.querySelector('#serve-lesson').innerText.includes({name!r})", timeout=60_000)
    page.wait_for_timeout(3000)   # the last redraw of the charts
    top = page.locator("#serve-status").bounding_box()
    bottom = page.locator(PRESET_CHART[name]).bounding_box()
    scroll = page.evaluate("scrollY")
    y = top["y"] + scroll - 8
    page.screenshot(path=str(out), full_page=True,
                    clip={"x": 0, "y": y, "width": page.viewport_size["width"],
                          "height": bottom["y"] + scroll + bottom["height"] + 8 - y})


def lesson(page, timeout_s: float = 600) -> None:
    """Open the Lesson tab, press Next (step 1 on a fresh page) and wait for its takeaway and its view drawn."""
    page.get_by_role("tab", name="Lesson").click()
    page.locator("#lesson-next").click()
    page.wait_for_function("document.querySelector('#lesson-title').innerText.includes('Step 1 of ') && "
                           "document.querySelector('#lesson-takeaway').innerText.length > 40", timeout=timeout_s * 1000)
    page.wait_for_timeout(2500)   # the step's last redraw; presenter.js enlarges chart fonts once a second


def clients(page, url: str, timeout_s: float = 600) -> None:
    """With the endpoint on: watch the clients, send a few OpenAI SDK requests (streams, whole answers, one
    over the limits), wait until they have ended, and leave the view on the clients' panel."""
    import threading

    import openai
    page.get_by_role("tab", name="Serve").click()
    page.locator("#serve-watch").click()
    page.wait_for_function("document.querySelector('#serve-clients-status').innerText.includes('since you started')",
                           timeout=timeout_s * 1000)
    sdk = openai.OpenAI(base_url=url.rstrip("/") + "/v1", api_key="none", max_retries=0, timeout=timeout_s)
    question = [{"role": "user", "content": "Explain in a few sentences why the sky is blue."}]

    def ask(i: int) -> None:
        try:
            sdk.chat.completions.create(model="m", messages=question, max_tokens=100_000 if i == 5 else 48,
                                        stream=i % 2 == 0)
        except openai.APIStatusError:
            pass   # refused: the view lists it
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    page.wait_for_function("document.querySelector('#serve-clients-status').innerText.includes(' 0 running')",
                           timeout=timeout_s * 1000)
    page.wait_for_timeout(2000)   # the next redraw
    page.locator("#serve-clients-limits").scroll_into_view_if_needed()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshot.png")
    parser.add_argument("--tab", choices=("generate", "serve", "lesson", "clients"), default="generate")
    parser.add_argument("--present", action="store_true",
                        help="presenter mode (?present=1) at 1024x768, the viewport only (what a projector shows)")
    parser.add_argument("--preset", choices=list(PRESET_CHART),
                        help="with --tab serve: run this KV-memory preset and save the tab down to its chart")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    import app   # the real entry point: the default model, loaded on first use
    demo = app.demo
    if args.tab == "clients":   # as `app.py --openai-api` sets it up
        port = free_port()
        traffic, config = app.serve_the_endpoint(app.registry, port)
        demo, room = app.make_app(app.registry, traffic, config)
        demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                    **app.launch_kwargs(app.registry, traffic, config, room))
        url = f"http://127.0.0.1:{port}/"
    else:
        url = launch(demo)
    try:
        with sync_playwright() as p:
            size = (1024, 768) if args.present else (1400, 1000)
            browser, page = open_page(p, url + ("?present=1" if args.present else ""), *size, load_timeout_s=600)
            if args.preset:
                if args.tab != "serve":
                    parser.error("--preset goes with --tab serve")
                serve_preset(page, args.preset, args.out)
            else:
                {"generate": lambda: generate(page, timeout_s=600), "serve": lambda: serve(page),
                 "lesson": lambda: lesson(page), "clients": lambda: clients(page, url)}[args.tab]()
            if args.preset:
                pass   # saved from the status line down to the preset's chart
            elif args.tab == "clients":   # the clients' panel, not the whole tab
                page.locator("#serve-clients").screenshot(path=str(args.out))
            else:
                page.screenshot(path=str(args.out), full_page=not args.present)
            browser.close()
    finally:
        demo.close()
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
