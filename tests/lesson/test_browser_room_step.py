"""Lesson step 6 drawn from the room in Chromium, presenter mode at 1024x768 (tiny model). A module of its own: it
starts its own app and playwright, which cannot run while another module's sync playwright (`browser_app`) is open."""
from __future__ import annotations

import pytest

from tests.lesson.test_browser_lesson import wait_for_step

pytestmark = [pytest.mark.browser]


def test_you_are_the_workload_draws_step_six_from_the_room_on_one_screen(tiny_engine, tmp_path):
    """With the endpoint's record of the room, presenter mode at 1024x768: the button draws step 6 from the room's
    requests, its heading, takeaway and Gantt on one screen; Run again measures the step's own workload."""
    from dataclasses import replace

    from playground.serve.room import Room
    from playground.serve.traffic import ClientTraffic
    from playground.ui import build_demo
    from tests.browser import launch, open_page
    from tests.helpers import require_browser
    from tests.serve.test_sentences import chats
    from tests.ui.test_browser_room import ON_ONE_SCREEN

    traffic = ClientTraffic()   # twelve requests of a rush, as the engine loop would have recorded them
    for i, rec in enumerate(chats(0.1, 4, n=12).records):
        traffic.result.records.append(replace(rec, request=replace(rec.request, arrival=0.1 * i), admitted=0.1 * i,
                                              finished=0.1 * i + 1.2, origin="page" if i % 3 else "API"))
    sync_api = require_browser()
    demo = build_demo(tiny_engine, Room(traffic=traffic))
    url = launch(demo)
    try:
        with sync_api.sync_playwright() as p:
            browser, page = open_page(p, f"{url}?present=1", width=1024, height=768)
            page.wait_for_function("document.body.classList.contains('present')", timeout=10_000)
            page.get_by_role("tab", name="Lesson").click()
            page.locator("#lesson-room").click()
            takeaway = wait_for_step(page, 6)
            assert takeaway.startswith("You are the workload: 12 requests (8 from the page, 4 through the API)")
            page.screenshot(path=str(tmp_path / "lesson-room-presenter-1024x768.png"))
            page.wait_for_function(ON_ONE_SCREEN, timeout=10_000)   # presenter.js fits the chart within a second
            assert "drawn from the room's requests" in page.locator("#lesson-status").inner_text()
            # twelve rows: each group labelled once, with its count (a label a row would overlap); the legend beside
            # the rows, no taller than their plot, which gives each row at least 12 px once fitted to the window
            ticks = page.eval_on_selector_all("#lesson-figure0 .ytick text", "els => els.map((e) => e.textContent)")
            assert ticks == ["from the page (8)", "through the API (4)"], ticks
            sizes = page.evaluate("""() => { const gd = document.querySelector('#lesson-figure0 .js-plotly-plot');
              const plot = gd.querySelector('.nsewdrag');   // the plot area's drag box
              return {plot: plot.getBoundingClientRect().height,
                      legend: gd.querySelector('.legend .bg').getBoundingClientRect().height}; }""")
            assert sizes["legend"] <= sizes["plot"] and sizes["plot"] / 12 >= 12, sizes
            page.locator("#lesson-run").click()
            page.wait_for_function("document.querySelector('#lesson-takeaway').innerText.includes('queued behind')",
                                   timeout=120_000)
            browser.close()
    finally:
        demo.close()
