"""The conversation on the Generate tab in Chromium (the tiny model on ONNX Runtime, app.py's own set-up): two turns
typed and sent, the second's prompt drawn as a ribbon and its cached tokens said; then the thinking switch, and the
template rewrite named."""
from __future__ import annotations

import re

import pytest

from tests.browser import open_page, set_max_new_tokens
from tests.helpers import require_browser
from tests.ui.test_browser_options import app_with

pytestmark = [pytest.mark.browser]

TURNS_DONE = """(n) => { const turns = document.querySelectorAll('#chat-view .pg-turn');
  return turns.length === n && !turns[n - 1].querySelector('.pg-turn-head').innerText.includes('running'); }"""
RIBBON = """() => { const plot = document.querySelector('#chat-ribbon .js-plotly-plot');
  const heat = plot && plot.data.find((t) => t.type === 'heatmap'); return heat ? heat.y.length : 0; }"""


def open_chat(page) -> None:
    set_max_new_tokens(page, 8)
    page.locator("#chat-section").get_by_text("Conversation: chat turn after turn").click()
    page.locator("#chat-system textarea").wait_for(state="visible", timeout=10_000)


def send(page, message: str, turns: int) -> str:
    """Type `message`, send it as a turn, wait for the conversation to show `turns` turns, the last ended; its
    heading."""
    page.locator("#prompt textarea").fill(message)
    page.locator("#chat-send").click()
    page.wait_for_function(TURNS_DONE, arg=turns, timeout=120_000)
    return page.locator("#chat-view .pg-turn .pg-turn-head").nth(turns - 1).inner_text()


def test_two_turns_show_the_ribbon_and_the_cached_tokens_then_the_thinking_switch_names_the_rewrite():
    sync_api = require_browser()
    with app_with("") as url, sync_api.sync_playwright() as p:
        browser, page = open_page(p, url)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            open_chat(page)
            first = send(page, "Which train goes to Paris?", 1)
            assert "Turn 1" in first and "0 cached" in first, first
            second = send(page, "How long does it take?", 2)
            n, cached, computed = map(int, re.search(r"(\d+) prompt tokens = (\d+) cached \+ (\d+) computed",
                                                     second.replace(",", "")).groups())
            assert cached >= 16 and cached + computed == n, second
            page.wait_for_function(f"({RIBBON})() === 2", timeout=30_000)
            assert f"{cached} cached" in page.locator("#status").inner_text().replace(",", "")
            assert page.locator("#chips .tok").count() >= 1   # the turn streamed into Generate's chips

            page.locator("#chat-new").click()
            page.wait_for_function("document.querySelector('#chat-view').innerText.includes('No turns yet')",
                                   timeout=30_000)
            page.locator("#chat-template").get_by_text("thinking", exact=False).click()
            send(page, "Which train goes to Paris?", 1)
            send(page, "How long does it take?", 2)
            why = page.locator("#chat-view .pg-turn").nth(1).locator(".pg-miss").inner_text()
            assert "template rewrite" in why and "First difference: token" in why, why
            assert "generation prompt" in why, why
            assert errors == [], errors
        finally:
            browser.close()


@pytest.mark.parametrize(("switch", "cause", "where"), [
    ("clock", "volatile system prompt", "(system, template)"),
    ("tools", "tools reordered or changed", "(system, tools"),
])
def test_the_clock_and_tools_switches_name_their_miss_at_the_system_block(switch, cause, where):
    """The two other classic misses, one switch each: a system prompt that carries the time (a second later, the
    history is unchanged but the system block is not), and the tool list sent in another order (on the tiny model
    with 2048 positions: the tools block alone is more than the plain one's 512)."""
    from playground.tokens.chat import clock_text
    from tests.helpers import long_tiny_folder, wait_for

    sync_api = require_browser()
    model = str(long_tiny_folder()) if switch == "tools" else "tiny"
    with app_with("", model=model) as url, sync_api.sync_playwright() as p:
        browser, page = open_page(p, url)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            open_chat(page)
            page.locator("#chat-template").get_by_text(switch, exact=False).click()
            send(page, "Which train goes to Paris?", 1)
            sent = clock_text()
            wait_for(lambda: clock_text() != sent, message="the clock to show another second")
            send(page, "How long does it take?", 2)
            why = page.locator("#chat-view .pg-turn").nth(1).locator(".pg-miss").inner_text()
            assert cause in why and "First difference: token" in why, why
            assert where in why, why
            assert errors == [], errors
        finally:
            browser.close()
