"""The conversation on the Generate tab in Chromium (the tiny model on ONNX Runtime, app.py's own set-up): two turns
typed and sent, the second's prompt drawn as a ribbon and its cached tokens said; the thinking, clock and tools
switches, each miss named where it lies; six turns with the model's own template, each finding the history the one
before left, read from the page's export."""
from __future__ import annotations

import json
import re
from contextlib import contextmanager

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


@contextmanager
def chat_page(model: str = "tiny"):
    """A page on the app (`app.py --model <model>`) with the conversation open; on leaving, no error on the page."""
    sync_api = require_browser()
    with app_with("", model=model) as url, sync_api.sync_playwright() as p:
        browser, page = open_page(p, url)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            open_chat(page)
            yield page
            assert errors == [], errors
        finally:
            browser.close()


def send(page, message: str, turns: int) -> str:
    """Type `message`, send it as a turn, wait for the conversation to show `turns` turns, the last ended; its
    heading."""
    page.locator("#prompt textarea").fill(message)
    page.locator("#chat-send").click()
    page.wait_for_function(TURNS_DONE, arg=turns, timeout=120_000)
    return page.locator("#chat-view .pg-turn .pg-turn-head").nth(turns - 1).inner_text()


def test_two_turns_show_the_ribbon_and_the_cached_tokens_then_the_thinking_switch_names_the_rewrite():
    """Two turns, the second's prompt as cached + computed and drawn as a ribbon; then the thinking switch: the page
    names the template rewrite at a token inside the previous turn's empty <think> block (its generation prompt, which
    the history drops), and the tokens computed again are the prompt less the common prefix's full blocks."""
    from playground.tiny import build_tiny_tokenizer
    from playground.tokens.chat import render_chat

    with chat_page() as page:
        first = send(page, "Which train goes to Paris?", 1)
        assert "Turn 1" in first and "0 cached" in first, first
        second = send(page, "How long does it take?", 2)
        n, cached, computed = said_prompt(second)
        assert cached >= 16 and cached + computed == n, second
        page.wait_for_function(f"({RIBBON})() === 2", timeout=30_000)
        assert f"{cached} cached" in page.locator("#status").inner_text().replace(",", "")
        assert page.locator("#chips .tok").count() >= 1   # the turn streamed into Generate's chips

        page.locator("#chat-new").click()
        page.wait_for_function("document.querySelector('#chat-view').innerText.includes('No turns yet')",
                               timeout=30_000)
        page.locator("#chat-template").get_by_text("thinking", exact=False).click()
        send(page, "Which train goes to Paris?", 1)
        n = said_prompt(send(page, "How long does it take?", 2))[0]
        card = page.locator("#chat-view .pg-turn").nth(1).locator(".pg-miss")
        why = card.inner_text().replace(",", "")
        assert "template rewrite" in why and "generation prompt" in why, why
        assert card.locator("code mark").nth(1).inner_text().startswith("<think>"), why   # the cached one's tokens
        first_difference = int(re.search(r"First difference: token (\d+)", why).group(1))
        think = render_chat(build_tiny_tokenizer(), [{"role": "user", "content": "Which train goes to Paris?"}],
                            template="thinking").spans[-1]   # turn 1's generation prompt, its <think> block last
        assert think.part == "generation prompt" and think.start <= first_difference < think.end, (think, why)
        common = int(re.search(r"shared with the previous turn (\d+) tokens", why).group(1))
        again = int(re.search(r"Computed again.*?: (\d+) tokens", why).group(1))
        assert again == n - 16 * (common // 16) and common == first_difference, why


def said_prompt(head: str) -> tuple[int, int, int]:
    """(prompt tokens, cached, computed) as a turn's heading says them."""
    found = re.search(r"(\d+) prompt tokens = (\d+) cached \+ (\d+) computed", head.replace(",", ""))
    return tuple(map(int, found.groups()))


@pytest.mark.parametrize(("switch", "system", "cause", "where"), [
    ("clock", "", "volatile system prompt", "in the template's own text (system, template)"),
    ("clock", "Be brief.", "volatile system prompt", "in message 0 (system, "),
    ("tools", "", "tools reordered or changed", "in the template's own text (system, tools: fares)"),
])
def test_the_clock_and_tools_switches_name_their_miss_at_the_system_block(switch, system, cause, where):
    """The two other classic misses, one switch each: a system prompt that carries the time (a second later, the
    history is unchanged but the system block is not: the template's own system block, or the system message typed),
    and the tool list sent in another order, named at the first tool moved (on the tiny model with 2048 positions:
    the tools block alone is more than the plain one's 512)."""
    from playground.tokens.chat import clock_text
    from tests.helpers import long_tiny_folder, wait_for

    with chat_page(str(long_tiny_folder()) if switch == "tools" else "tiny") as page:
        page.locator("#chat-system textarea").fill(system)
        page.locator("#chat-template").get_by_text(switch, exact=False).click()
        send(page, "Which train goes to Paris?", 1)
        sent = clock_text()
        wait_for(lambda: clock_text() != sent, message="the clock to show another second")
        send(page, "How long does it take?", 2)
        why = page.locator("#chat-view .pg-turn").nth(1).locator(".pg-miss").inner_text()
        assert cause in why and "First difference: token" in why, why
        assert where in why, why


SIX = ["Which train goes to Paris?", "How long does it take?", "Is there a dining car?", "Can I bring a bicycle?",
       "Where do I buy a ticket?", "Is it cheaper at night?"]
EXPORTED = """async () => { const link = document.querySelector('#chat-files a[href]');
  return link ? await (await fetch(link.href)).text() : null; }"""


def exported(page) -> dict:
    """The conversation as the page's Export (JSON) button hands it out."""
    page.locator("#chat-export").click()
    page.locator("#chat-files a[href]").first.wait_for(timeout=30_000)
    return json.loads(page.evaluate(EXPORTED))


def test_six_turns_with_the_models_template_each_find_the_history_up_to_its_last_full_block(monkeypatch):
    """From turn 2 on, each turn's cached tokens are at least 16·⌊(previous prompt + previous answer − 1)/16⌋: the
    page sends back the ids it generated, so the history is the previous turn's whole sequence again. The first three
    answers are scripted (the plain tiny model repeats one token): one ended by the model, one cut by max new tokens
    inside an emoji's bytes, one whose ids are not what its text tokenizes to; the last three are the model's own."""
    from playground.serve import batcher
    from playground.tiny import build_tiny_tokenizer
    from tests.fakes import ScriptedAnswers

    tokenizer = build_tiny_tokenizer()
    script = ScriptedAnswers(tokenizer)
    monkeypatch.setattr(batcher, "Sampler", script.sampler)
    uneven = tokenizer.convert_tokens_to_ids([*"Yes,", "Ġ", *"one."])
    assert uneven != tokenizer("Yes, one.", add_special_tokens=False)["input_ids"]   # its text reads as other ids
    script.add("Eurostar.")
    script.add("Two hours 🚄", cut=True)   # 13 tokens, the emoji's 4 bytes last: max new tokens cuts it at 11
    script.add_ids(uneven)
    with chat_page() as page:
        set_max_new_tokens(page, 11)
        heads = [send(page, question, k) for k, question in enumerate(SIX, 1)]
        turns = exported(page)["turns"]
        assert [t["turn"] for t in turns] == [1, 2, 3, 4, 5, 6] and [t["user"] for t in turns] == SIX
        assert [t["answer"] for t in turns[:3]] == ["Eurostar.", "Two hours ", "Yes, one."]
        assert turns[1]["output_tokens"] == 11 and turns[2]["answer_ids"] == uneven
        for head, turn in zip(heads, turns):
            assert said_prompt(head) == (turn["prompt_tokens"], turn["cached_tokens"],
                                         turn["prompt_tokens"] - turn["cached_tokens"]), (head, turn)
            assert turn["cache"]["cached"] == turn["cached_tokens"] and turn["output_tokens"] >= 1
        assert turns[0]["cache"]["cause"] == "new conversation"
        for before, turn in zip(turns, turns[1:]):
            bound = 16 * ((before["prompt_tokens"] + before["output_tokens"] - 1) // 16)
            assert turn["cached_tokens"] >= bound > 0, (before, turn)
            assert turn["cache"]["cause"] == "no miss", turn["cache"]
        assert "Bound: 6 of 64 turns kept" in page.locator("#chat-view").inner_text()
