"""A room with an attendee who presses the Serve tab's Run (Chromium, the tiny model on ONNX Runtime, app.py's set-up
with `--host 0.0.0.0 --openai-api`, a key per API client and a presenter key; reached through 127.0.0.1 only): six
pages press Generate and twelve API clients stream while a seventh page presses Run.

- Without the presenter key, a run that would take the machine alone is refused at once, saying why.
- A workload on "this app's endpoint" needs no key: it joins the engine loop as one more client, the machine is never
  held alone, and every page and API client of the room is served beside it.
- With the key, the run holds the machine alone, and no request waits for it without being told: a stream already in
  the loop gets the documented wait event (`: waiting: …`) while it is held, a new request a 429 with Retry-After at
  once, and every page's status names the machine (a run mid-answer too). Stopped, everything goes on to its end.
Speed verdicts are the `room` bench row's (an attendee's round beside rounds without)."""
from __future__ import annotations

import contextlib
import json
import threading
import time

import httpx
import pytest

from playground.ports import free_port
from playground.serve import batcher as batcher_module
from tests.browser import open_page, set_max_new_tokens
from tests.helpers import require_browser

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PAGES, CLIENTS = 6, 12
KEYS = [f"room-client-{i + 1}" for i in range(CLIENTS)]
LATE_KEY = "room-late-client"   # a client who asks while the machine is held
PRESENTER_KEY = "the-presenters-own-key"
HELD = "the machine"   # what a page's status and a stream's wait event name while the machine is held alone
# timing: a hang detector: the server tells a waiting stream every half second (routes.POLL_S; its own test holds
# it to that); a stream silent this long while the machine was held was not told
SILENT_S = 2.5
# timing: each engine iteration this much longer (the tiny model's are a few ms): a stream of 400 tokens then lasts
# seconds, longer than a Run's click takes to hold the machine
STEP_S = 0.01


@contextlib.contextmanager
def served_room(monkeypatch):
    """The app as `app.py --model tiny --backend onnx --host 0.0.0.0 --openai-api` sets it up, with KEYS and
    PRESENTER_KEY; yields (its URL through 127.0.0.1, its Room)."""
    import app
    monkeypatch.setenv("PLAYGROUND_API_KEYS", ",".join([*KEYS, LATE_KEY]))
    monkeypatch.setenv("PLAYGROUND_PRESENTER_KEY", PRESENTER_KEY)
    port = free_port()
    registry = app.make_registry("tiny", "onnx")
    traffic, config = app.serve_the_endpoint(registry, port, "0.0.0.0")
    demo, room = app.make_app(registry, traffic, config, host="0.0.0.0")
    demo.launch(prevent_thread_lock=True, server_name="0.0.0.0", server_port=port, quiet=True,
                **app.launch_kwargs(registry, traffic, config, room))
    try:
        yield f"http://127.0.0.1:{port}/", room
    finally:
        demo.close()
        registry.close()


class Holds:
    """The spans (time.time) in which the room's machine was held alone, watched every 20 ms in a thread."""

    def __init__(self, gate):
        self.gate, self.spans, self._stop = gate, [], threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        start = None
        while not self._stop.wait(0.02):
            if self.gate.alone and start is None:
                start = time.time() - (self.gate.held_alone_for() or 0.0)
            elif not self.gate.alone and start is not None:
                self.spans.append((start, time.time()))
                start = None

    def close(self):
        self._stop.set()
        self._thread.join(5)


class Stream:
    """One API client's streamed chat completion: each SSE line's arrival (time.time) and kind: "role", "token",
    "wait" (a `: waiting:` comment), "done"; or the refusal's status, headers and body."""

    def __init__(self, url: str, key: str, tokens: int):
        self.url, self.key, self.tokens = url, key, tokens
        self.events: list[tuple[float, str]] = []
        self.status, self.headers, self.body = None, {}, ""
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self):
        body = {"model": "m", "messages": [{"role": "user", "content": f"Tell a long story, {self.key}."}],
                "max_tokens": self.tokens, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", f"{self.url}v1/chat/completions", json=body, timeout=300,
                          headers={"Authorization": f"Bearer {self.key}"}) as r:
            self.status, self.headers = r.status_code, dict(r.headers)
            if r.status_code != 200:
                self.body = r.read().decode()
                return
            for line in r.iter_lines():
                now = time.time()
                if line.startswith(": waiting:"):
                    self.events.append((now, "wait"))
                elif line == "data: [DONE]":
                    self.events.append((now, "done"))
                elif line.startswith("data: {"):
                    delta = (json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}
                    self.events.append((now, "token" if delta.get("content") else "role"))

    def kinds(self) -> list[str]:
        return [kind for _, kind in self.events]


def streams(url: str, tokens: int) -> list[Stream]:
    out = [Stream(url, key, tokens) for key in KEYS]
    for s in out:
        s.thread.start()
    return out


def page_status(page) -> str:
    return page.locator("#status").inner_text()


def wait_status(page, words: tuple[str, ...], timeout_s: float = 60) -> str:
    """The page's status once it holds one of `words`; on a timeout, an AssertionError saying what it holds."""
    try:
        page.wait_for_function("(words) => words.some((w) => document.querySelector('#status').innerText"
                               ".includes(w))", arg=list(words), timeout=timeout_s * 1000)
    except Exception:   # noqa: BLE001 - playwright's TimeoutError: the assert below says what the status held
        pass
    status = page_status(page)
    assert any(w in status for w in words), f"the page's status names none of {words}: {status!r}"
    return status


def pick(page, dropdown: str, option: str) -> None:
    page.locator(f"{dropdown} input").click()
    page.get_by_role("option", name=option, exact=True).click()


def serve_status(page) -> str:
    return page.locator("#serve-status").inner_text()


def untold_silences(stream: Stream, span: tuple[float, float]) -> list[float]:
    """The silences of `stream` longer than SILENT_S while the machine was held (`span`), from the hold's start (or
    the stream's last event before it) to each next event, until the stream's end or the hold's."""
    start, end = span
    before = [t for t, _ in stream.events if t <= start]
    last, out = (before[-1] if before else start), []
    for t, _ in stream.events:
        if t <= start:
            continue
        if min(t, end) - max(last, start) > SILENT_S:
            out.append(round(min(t, end) - max(last, start), 2))
        last = t
        if t >= end:
            break
    return out


def test_an_attendee_pressing_run_leaves_no_request_waiting_untold(monkeypatch):
    sync_api = require_browser()
    step = batcher_module.Batcher.step

    def slowed(self, *args, **kwargs):
        time.sleep(STEP_S)   # timing: a paced engine, so the room's streams outlast the Run's click on any machine
        return step(self, *args, **kwargs)
    monkeypatch.setattr(batcher_module.Batcher, "step", slowed)
    with served_room(monkeypatch) as (url, room), sync_api.sync_playwright() as p:
        holds = Holds(room.gate)
        browser, attendee = open_page(p, url, width=1400, height=1000)
        try:
            pages = [browser.new_page(viewport={"width": 1024, "height": 768}) for _ in range(PAGES)]
            for page in pages:
                page.goto(url)
                page.wait_for_selector("#generate", timeout=60_000)
                page.wait_for_function("!document.querySelector('#model-info').innerText.includes('Loading')",
                                       timeout=120_000)
            attendee.get_by_role("tab", name="Serve").click()

            # 1. Run as the form stands (our schedulers on the app's engine: the machine alone), no key: refused at once
            attendee.locator("#serve-requests input[type=number]").fill("4")
            attendee.locator("#serve-run").click()
            attendee.wait_for_function("document.querySelector('#serve-status').innerText.includes('presenter')",
                                       timeout=60_000)
            refusal = serve_status(attendee)
            assert "only the presenter may start one" in refusal and "PLAYGROUND_PRESENTER_KEY" in refusal, refusal
            assert not holds.spans and not room.gate.alone

            # 2. A workload on this app's endpoint, no key, during the room's run: one more client of the loop
            for page in pages:
                set_max_new_tokens(page, 24)
            clients = streams(url, 48)
            for page in pages:
                page.locator("#generate").click()
            pick(attendee, "#serve-scheduler-a", "concurrent")
            pick(attendee, "#serve-source-a", "this app's endpoint")
            pick(attendee, "#serve-scheduler-b", "(none)")
            attendee.locator("#serve-arrival").get_by_text("all-at-once").click()
            attendee.locator("#serve-run").click()
            attendee.wait_for_function("/: done/.test(document.querySelector('#serve-status').innerText)",
                                       timeout=300_000)
            said = serve_status(attendee)   # its share of the room, and its requests yield to the people's
            assert "at most 4 in flight at once" in said and "yielding to other requests (priority 1)" in said, said
            for page in pages:
                page.wait_for_function("document.querySelector('#status').innerText.includes('finished')",
                                       timeout=300_000)
            for s in clients:
                s.thread.join(300)
            assert [s.status for s in clients] == [200] * CLIENTS, [(s.status, s.body) for s in clients]
            assert all(s.kinds()[0] == "role" and s.kinds()[-1] == "done" and "token" in s.kinds()
                       for s in clients), [s.kinds() for s in clients]
            assert not holds.spans and not any("wait" in s.kinds() for s in clients)   # never held alone
            origins = [r.origin for r in room.traffic.snapshot().records]   # the workload's 4 among the API's
            assert (origins.count("page"), origins.count("API")) == (PAGES, CLIENTS + 4), origins

            # 3. The presenter's key: the run holds the machine alone while the room's requests run (the form filled
            # first, so Run follows the streams' first tokens at once)
            pick(attendee, "#serve-scheduler-a", "one-at-a-time")
            pick(attendee, "#serve-source-a", "onnx")
            attendee.locator("#serve-arrival").get_by_text("poisson").click()
            attendee.locator("#serve-requests input[type=number]").fill("12")
            rate = attendee.locator("#serve-rate input")
            rate.fill("0.3")   # arrivals for about 40 s, unless Stop ends the hold first
            rate.press("Enter")
            attendee.locator("#serve-presenter-key input").fill(PRESENTER_KEY)
            for page in pages:
                set_max_new_tokens(page, 300)
            clients = streams(url, 400)
            for page in pages:
                page.locator("#generate").click()
            deadline = time.monotonic() + 120
            while not all("token" in s.kinds() for s in clients) and time.monotonic() < deadline:
                time.sleep(0.02)   # every stream is mid-answer
            attendee.locator("#serve-run").click()
            while not room.gate.alone and time.monotonic() < deadline:
                time.sleep(0.02)
            assert room.gate.alone, serve_status(attendee)

            late = Stream(url, LATE_KEY, 4)   # a request sent while the machine is held: told at once
            late.thread.start()
            late.thread.join(60)
            assert late.status == 429 and late.headers.get("retry-after") == "5", (late.status, late.body)
            assert json.loads(late.body)["error"]["code"] == "machine_held_alone"

            for page in pages:   # a run mid-answer or still queued names the machine; an ended one presses again
                if "finished" in wait_status(page, (HELD, "finished")):
                    set_max_new_tokens(page, 8)
                    page.locator("#generate").click()
                assert room.gate.alone, f"the Serve run let the machine go: {serve_status(attendee)!r}"
                assert "Waiting for the machine: a Serve workload has the machine alone" in wait_status(page, (HELD,))
            while room.gate.held_alone_for() is not None and room.gate.held_alone_for() < 3 and \
                    time.monotonic() < deadline:
                time.sleep(0.05)   # held for a few of the streams' wait events
            assert room.gate.alone, "the Serve run let the machine go before it was stopped"
            stop = attendee.locator("#serve-stop")   # the tab redraws each second: pressed from the keyboard
            stop.focus()
            stop.press("Enter")

            for page in pages:
                page.wait_for_function("document.querySelector('#status').innerText.includes('finished')",
                                       timeout=300_000)
            for s in clients:
                s.thread.join(300)
        finally:
            holds.close()
            browser.close()
        assert len(holds.spans) == 1, holds.spans
        span = holds.spans[0]
        assert [s.status for s in clients] == [200] * CLIENTS, [(s.status, s.body) for s in clients]
        held = [s for s in clients if s.events[-1][0] > span[0]]   # mid-answer when the machine was taken
        # timing: an order of events: the streams outlast the Run's click (STEP_S)
        assert held, ([s.events[-1][0] for s in clients], span)
        for s in held:
            assert "wait" in s.kinds() and s.kinds()[-1] == "done", s.kinds()
            assert untold_silences(s, span) == [], (s.key, untold_silences(s, span))
            waits = [t for t, kind in s.events if kind == "wait"]
            assert all(span[0] <= t <= span[1] + 1.0 for t in waits), (waits, span)   # timing: told only while held
