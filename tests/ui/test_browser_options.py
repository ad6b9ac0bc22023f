"""The page with each option the app takes (Chromium, the tiny model on ONNX Runtime, app.py's own set-up):
`--openai-api`, `--endpoint URL` (tests/fake_openai_server.py), `--llama-server`, and presenter mode
(`?present=1`, here with the endpoint on). Each loads the page, visits every tab, runs Generate, and finds
no page error, no console error, no request to any host but the app's own, and no link the page does not
mean (a link made from text, or one the browser cannot parse: Gradio's start-up code throws on one and
leaves the page dead, "Loading the model…" for ever)."""
from __future__ import annotations

import contextlib
from urllib.parse import urlsplit

import pytest

from playground.ports import free_port
from tests.browser import generate, open_page, set_max_new_tokens
from tests.helpers import require_browser, require_llama

pytestmark = [pytest.mark.browser]

TABS = ["Tokens", "Compare", "Experiments", "Lesson", "Serve", "Generate"]

# Every <a href> on the page: its href as written, its text, whether the browser can parse it
LINKS = """() => [...document.querySelectorAll('a[href]')].map((a) => {
  const href = a.getAttribute('href');
  let parsed = true;
  try { new URL(href, location.href); } catch (e) { parsed = false; }
  return {href, text: a.textContent.trim(), parsed};
})"""


def unmeant(links: list[dict]) -> list[dict]:
    """Links the page did not mean: one the browser cannot parse, or one made from its own text (markdown
    turns a bare URL or e-mail address into a link whose text is the address).

    >>> unmeant([{"href": "https://gradio.app", "text": "Built with Gradio", "parsed": True},
    ...          {"href": "http://HOST:PORT/v1", "text": "http://HOST:PORT/v1", "parsed": False},
    ...          {"href": "http://www.x.org", "text": "www.x.org", "parsed": True}])   # doctest: +ELLIPSIS
    [{'href': 'http://HOST:PORT/v1', ...}, {'href': 'http://www.x.org', ...}]
    """
    def bare(s: str) -> str:
        s = s.lower().rstrip("/")
        for head in ("mailto:", "https://", "http://"):
            s = s.removeprefix(head)
        return s
    return [link for link in links if not link["parsed"] or bare(link["text"]) == bare(link["href"])]


class Watched:
    """A page's console errors, page errors and requests to other hosts, from the moment it opens."""

    def __init__(self, page, url: str):
        self.errors, self.foreign = [], []
        own = urlsplit(url).netloc
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        page.on("request", lambda r: None if urlsplit(r.url).scheme in ("data", "blob")
                or urlsplit(r.url).netloc == own else self.foreign.append(r.url))


@contextlib.contextmanager
def app_with(option: str, endpoint: str | None = None, model: str = "tiny"):
    """The app as `app.py --model <model> --backend onnx <option>` sets it up, on a free 127.0.0.1 port."""
    import app
    port = free_port()
    registry = app.make_registry(model, "onnx", endpoints=[endpoint] if endpoint else None,
                                 llama_server=option == "--llama-server")
    traffic, config = app.serve_the_endpoint(registry, port) if option == "--openai-api" else (None, None)
    demo, room = app.make_app(registry, traffic, config)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                **app.launch_kwargs(registry, traffic, config, room))
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()
        registry.close()


def check_page(url: str, query: str = "") -> None:
    sync_api = require_browser()
    with sync_api.sync_playwright() as p:
        watched = []
        browser, page = open_page(p, url + query, on_page=lambda page: watched.append(Watched(page, url)))
        try:
            for tab in TABS:
                page.get_by_role("tab", name=tab).click()
            set_max_new_tokens(page, 8)
            generate(page)
            links = page.evaluate(LINKS)
            assert unmeant(links) == [], links
            assert watched[0].errors == [] and watched[0].foreign == [], (watched[0].errors, watched[0].foreign)
        finally:
            browser.close()


def test_the_page_works_with_the_openai_endpoint_on():
    with app_with("--openai-api") as url:
        check_page(url)


def test_the_page_works_in_presenter_mode_with_the_endpoint_on():
    with app_with("--openai-api") as url:
        check_page(url, "?present=1")


def test_the_page_works_with_an_endpoint_to_watch(fake_server):
    with app_with("--endpoint", fake_server.url("ok")) as url:
        check_page(url)


@pytest.mark.server
def test_the_page_works_with_llama_server_offered():
    require_llama()
    with app_with("--llama-server") as url:
        check_page(url)


@pytest.mark.subprocess
def test_host_0_0_0_0_listens_on_every_interface_and_the_page_answers_over_loopback():
    """`app.py --host 0.0.0.0 --openai-api`: the listening socket is bound to every interface (read from the process's own
    sockets), the start-up log says what the room opens, and the page works; traffic stays on 127.0.0.1."""
    import psutil

    from playground.bench.app_process import AppProcess

    # with the endpoint on, the Serve tab's help names the room's addresses: check_page finds no bare link there
    with AppProcess(["app.py", "--model", "tiny", "--backend", "onnx", "--host", "0.0.0.0", "--openai-api"]) as app:
        listening = {(c.laddr.ip, c.laddr.port) for c in psutil.Process(app.process.pid).net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN}
        assert ("0.0.0.0", app.port) in listening, listening
        check_page(f"http://127.0.0.1:{app.port}/")
        app.log.seek(0)
        log = app.log.read().decode(errors="replace")
    assert f"listening on 0.0.0.0:{app.port}; attendees open " in log, log[-800:]


def test_the_host_comes_from_the_flag_else_gradios_variable_else_loopback(monkeypatch):
    from playground.ports import serve_host

    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    assert serve_host(None) == "127.0.0.1" and serve_host("0.0.0.0") == "0.0.0.0"
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    assert serve_host(None) == "0.0.0.0" and serve_host("127.0.0.2") == "127.0.0.2"
    monkeypatch.delenv("GRADIO_SERVER_NAME")
    monkeypatch.setenv("SPACE_ID", "someone/playground")
    assert serve_host(None) == "0.0.0.0"
