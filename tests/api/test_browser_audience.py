"""The audience flow in Chromium: the app with `--openai-api` (the tiny model on ONNX Runtime, app.py's own
set-up, each client at most 2 requests in flight), the Serve tab's Watch view on, several OpenAI SDK clients
at once -- streams, a whole answer, one that hangs up mid-stream, one asking too much (400), and bursts
until one is refused for too many in flight (429). The view shows each admitted request on a time base that
starts when watching starts, each refused one with its status and reason, the endpoint's limits and context.
With every request ended the title says none runs; Stop watching leaves it finished, not "(running…)". No page
or console error, no other host."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.browser import open_page
from tests.helpers import require_browser
from tests.ui.test_browser_options import Watched, app_with

pytestmark = [pytest.mark.browser, pytest.mark.slow]

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# The Gantt's figure as Plotly holds it: every trace's name, its bars' starts, the title and the rows
GANTT = """() => { const gd = document.querySelector('#serve-clients-gantt .js-plotly-plot');
  return gd && {title: gd.layout.title.text, rows: gd.layout.yaxis.categoryarray,
    traces: gd.data.map((t) => ({name: t.name, base: t.base || null, x: t.x}))}; }"""


def status(page) -> str:
    return page.locator("#serve-clients-status").inner_text()


def test_an_audiences_requests_are_watched_live_and_refusals_named(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_API_LIMITS", "in_flight_per_client=2")
    sync_api = require_browser()
    with app_with("--openai-api") as url, sync_api.sync_playwright() as p:
        watched = []
        browser, page = open_page(p, url, on_page=lambda page: watched.append(Watched(page, url)))
        try:
            page.get_by_role("tab", name="Serve").click()
            limits = page.locator("#serve-clients-limits").inner_text()
            assert "each client at most 2 requests in flight" in limits
            watching_since = time.monotonic()   # before the click: the watch's own clock starts after it
            page.locator("#serve-watch").click()
            page.wait_for_function("document.querySelector('#serve-clients-status').innerText"
                                   ".includes('since you started watching')", timeout=30_000)
            assert "context 512 tokens a request" in page.locator("#serve-clients-limits").inner_text()

            sdk = openai.OpenAI(base_url=url + "v1", api_key="none", max_retries=0, timeout=60)
            outcomes, lock = [], threading.Lock()

            def ask(kind: str):
                try:
                    if kind == "stream":
                        list(sdk.chat.completions.create(model="m", messages=QUESTION, max_tokens=48, stream=True))
                    elif kind == "hang-up":
                        stream = sdk.chat.completions.create(model="m", messages=QUESTION, max_tokens=400,
                                                             stream=True)
                        for i, _ in enumerate(stream):
                            if i == 2:
                                break
                        stream.close()
                    elif kind == "too-much":
                        sdk.chat.completions.create(model="m", messages=QUESTION, max_tokens=100_000)
                    else:
                        sdk.chat.completions.create(model="m", messages=QUESTION, max_tokens=24)
                    result = ("ok", kind)
                except openai.APIStatusError as exc:
                    result = (exc.status_code, kind)
                with lock:
                    outcomes.append(result)

            with ThreadPoolExecutor(4) as pool:
                list(pool.map(ask, ["stream", "hang-up", "whole", "too-much"]))
                for _ in range(20):   # bursts from one client until one finds 2 in flight already
                    list(pool.map(ask, ["stream", "stream", "whole", "whole"]))
                    if any(code == 429 for code, _ in outcomes):
                        break
            admitted = sum(code == "ok" for code, _ in outcomes)   # the one that hung up too, if it was let in
            assert (400, "too-much") in outcomes and any(code == 429 for code, _ in outcomes), outcomes

            page.wait_for_function(f"document.querySelector('#serve-clients-status').innerText"
                                   f".includes('{admitted} admitted (') && document.querySelector("
                                   "'#serve-clients-status').innerText.includes(' · 0 running · ')", timeout=30_000)
            text = status(page)
            assert "400 ×1 (max_tokens is 100000; the limit here is 512)" in text
            assert "in flight from this client; the limit is 2 at a time" in text
            refused = page.locator("#serve-clients-refused").inner_text()
            assert "429" in refused and "400" in refused
            drawn = (f"(() => {{ const g = ({GANTT})(); return Boolean(g) && g.rows.filter((r) => !r.startsWith("
                     f"'refused')).length === {admitted}; }})()")
            page.wait_for_function(drawn, timeout=30_000)   # the charts are redrawn every few seconds, the line each
            gantt = page.evaluate(GANTT)
            bars = [b for t in gantt["traces"] if t["base"] for b in t["base"]]
            watched_for = time.monotonic() - watching_since
            # timing: an order of events: every bar began after the watch started, and before now
            assert bars and 0 <= min(bars) and max(bars) < watched_for, (bars, watched_for)
            assert len([r for r in gantt["rows"] if not r.startswith("refused")]) == admitted
            refused_rows = [r for r in gantt["rows"] if r.startswith("refused")]   # a row per refused request
            assert any(r.endswith("· 400") for r in refused_rows) and any(r.endswith("· 429") for r in refused_rows), \
                refused_rows
            # every request ended ("0 running"): the title says none runs, not "(running…)"
            page.wait_for_function(f"({GANTT})().title.includes('(none running now)')", timeout=10_000)

            page.locator("#serve-unwatch").click()
            page.wait_for_function("document.querySelector('#serve-clients-status').innerText"
                                   ".startsWith('Stopped watching')", timeout=30_000)
            page.wait_for_function(f"!({GANTT})().title.includes('running')", timeout=10_000)
            # timing: a negative check needs a window: the watch redraws once a second (serve_tab.watch_clients),
            # so a frame the cancel missed lands within 1.5 s; a slower machine can only make this pass, not fail
            time.sleep(1.5)
            assert status(page).startswith("Stopped watching")
            assert watched[0].errors == [] and watched[0].foreign == [], (watched[0].errors, watched[0].foreign)
        finally:
            browser.close()
