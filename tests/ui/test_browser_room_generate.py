"""A room presses Generate at once (Chromium, the tiny model on ONNX Runtime, app.py's own set-up with the
endpoint on): six pages and an API client at the same moment, all served by the one engine loop; each page
shows its chips and says where its first token's time went."""
from __future__ import annotations

import threading

import httpx
import pytest

from tests.browser import open_page, set_max_new_tokens
from tests.helpers import require_browser
from tests.ui.test_browser_options import app_with

pytestmark = [pytest.mark.browser]

PAGES = 6


def test_six_pages_and_an_api_client_at_once_are_served_by_one_loop():
    sync_api = require_browser()
    with app_with("--openai-api") as url, sync_api.sync_playwright() as p:
        browser, first = open_page(p, url, width=1024, height=768)
        try:
            pages = [first] + [browser.new_page(viewport={"width": 1024, "height": 768}) for _ in range(PAGES - 1)]
            for page in pages[1:]:
                page.goto(url)
                page.wait_for_selector("#generate", timeout=60_000)
                page.wait_for_function("!document.querySelector('#model-info').innerText.includes('Loading')",
                                       timeout=120_000)
            for page in pages:
                set_max_new_tokens(page, 8)
            answers = []
            api = threading.Thread(target=lambda: answers.append(httpx.post(
                f"{url}v1/chat/completions", timeout=120,
                json={"model": "x", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8})))
            for page in pages:
                page.locator("#generate").click()
            api.start()
            for page in pages:
                page.wait_for_function("document.querySelector('#status').innerText.includes('finished')",
                                       timeout=180_000)
                assert page.locator("#chips .tok").count() >= 1
                page.wait_for_selector("#pg-client-ttft", timeout=10_000)
                words = page.locator("#pg-wait").inner_text()
                assert words.startswith("Your first token:") and "on the server: " in words, words
                assert "computing its" in words and "submit and delivery (derived" in words, words
                server = float(page.locator("#pg-wait").get_attribute("data-ttft"))
                client = page.evaluate("() => { const r = window.pgLive.state(); "
                                       "return (r.firstShownAt - r.clickedAt) / 1e3; }")
                assert client >= server - 0.002, (client, server)   # the click comes before the server sees it
                assert "In this browser: your first token showed" in words, words
            api.join(120)
            assert answers and answers[0].status_code == 200, answers
        finally:
            browser.close()
