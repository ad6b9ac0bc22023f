"""The room row's page as a browser reads it: N Chromium pages on the app, each a person pressing Generate at one
moment, timed inside the page (attendees.py's `browser` path).

    with BrowserRoom(app_url, people=24) as room:    # N pages loaded, each warmed by one Generate run (its session)
        seen = room.press(prompts, tokens=48)        # a PageSeen per page: click to first chip, to the end drawn

A page's TTFT is what its person sees: from the click on Generate (caught before Gradio's own handler sends the
request) to the first chip drawn, from the Steps its live channel brings (or Gradio's update, when that comes first:
live/stream.js's `firstShownAt`); its end, the click to the run's final update drawn (redraw.js's `finalShown`, looked
at every POLL_MS in the page). Every page clicks at one wall-clock moment: one Playwright thread cannot click N pages
at once, so each page sets a timer for the same Date.now(), LEAD_MS ahead (the pages and this process share the
machine's clock). The pages keep the page's own settings but the prompt and the new-token budget (as a person types
them): its sampling, so a run may end at EOS, counted as drawn.

The pages run in one headless Chromium (timers not throttled in the background) on the machine the app runs on: their
drawing takes the cores the server's passes need, which a room's browsers, on the attendees' own machines, do not.
So the room row opens only a few pages (attendees.BROWSER_PAGES) among people pressing through Gradio's HTTP API, and
only while its browser path runs: an idle page still takes ~3 % of a core.
Left out: the page's /generate as Gradio's client reads it (attendees.py's `page` path).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..chromium import CHROMIUM_ARGS, chromium_path

LEAD_MS = 1500   # how far ahead of now the pages' common click is set: every page has its timer before it fires
POLL_MS = 50     # how often a page looks whether its run's final update is drawn
FLAGS = [*CHROMIUM_ARGS, "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
         "--disable-backgrounding-occluded-windows"]
ARM = """(at) => {   // click Generate at Date.now() == at; note when this run's final update is drawn
  window.pgRoom = {at, doneAt: null};
  setTimeout(() => {
    document.querySelector('#generate').click();
    const look = setInterval(() => {
      const r = window.pgLive.state();
      if (r && r.clickedAt != null && r.clickedAt >= at - 5 && r.finalShown) {
        window.pgRoom.doneAt = Date.now();
        clearInterval(look);
      }
    }, %d);
  }, Math.max(0, at - Date.now()));
}""" % POLL_MS
SEEN = """() => { const r = window.pgLive.state(), mine = r && r.clickedAt != null && r.clickedAt >= window.pgRoom.at - 5;
  return {clicked: mine ? r.clickedAt : null, first: mine ? r.firstShownAt : null, done: window.pgRoom.doneAt,
          tokens: mine ? r.steps.length : 0}; }"""


@dataclass(frozen=True)
class PageSeen:
    """One page's run as its person saw it: milliseconds (Date.now) of the click, the first chip and the end drawn
    (None: not seen), and the chips drawn."""
    clicked: float | None
    first: float | None
    done: float | None
    tokens: int


class BrowserRoom:
    """N pages of one headless Chromium on the app at `url`, each a Gradio session of its own."""

    def __init__(self, url: str, people: int, timeout_s: float = 600.0):
        self.url, self.people, self.timeout_ms = url, people, timeout_s * 1000
        self._playwright = self._browser = None
        self.pages: list = []

    def __enter__(self) -> "BrowserRoom":
        from playwright.sync_api import sync_playwright
        self._playwright = sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch(executable_path=chromium_path(), args=FLAGS)
            for _ in range(self.people):
                page = self._browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(self.url)
                page.wait_for_selector("#generate", timeout=self.timeout_ms)
                page.wait_for_function("window.pgLive && !document.querySelector('#model-info').innerText"
                                       ".includes('Loading')", timeout=self.timeout_ms)
                self.pages.append(page)
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._browser is not None:
            self._browser.close()
        if self._playwright is not None:
            self._playwright.stop()

    def press(self, prompts: list[str], tokens: int) -> list[PageSeen]:
        """Each page (as many as `prompts`, at most N) asks its prompt for `tokens` new tokens at most, all clicking
        at one moment; what each saw once every run's end was drawn (or the timeout passed)."""
        self.arm(prompts, tokens)
        return self.seen(len(prompts))

    def arm(self, prompts: list[str], tokens: int) -> float:
        """Each page (as many as `prompts`) set to ask its prompt for `tokens` new tokens at most, its click timed for
        one moment LEAD_MS ahead; that moment (Date.now(), ms: time.time() * 1000 on this machine's clock)."""
        pages = self.pages[:len(prompts)]
        for page, prompt in zip(pages, prompts):
            page.locator("#prompt textarea").fill(prompt)
            box = page.locator("#max-new-tokens input[type=number]")
            box.fill(str(tokens))
            box.press("Enter")
        at = pages[0].evaluate("Date.now()") + LEAD_MS
        for page in pages:
            page.evaluate(ARM, at)
        return at

    def seen(self, count: int) -> list[PageSeen]:
        """What the first `count` pages saw of their armed runs, once every run's end was drawn (or the timeout
        passed)."""
        seen = []
        for page in self.pages[:count]:
            try:
                page.wait_for_function("window.pgRoom.doneAt != null", timeout=self.timeout_ms)
            except Exception:   # noqa: BLE001 - playwright's TimeoutError: the page's figures say what it saw
                pass
            seen.append(PageSeen(**page.evaluate(SEEN)))
        return seen
