"""The page's markdown has no bare address: markdown turns one into a link, and an address with a
placeholder (http://HOST:PORT/v1) is a link the browser cannot parse, on which Gradio's start-up code
throws and leaves the whole page dead. An address the page means to show sits in `code`; one it means to
link is written [text](url)."""
from __future__ import annotations

import re

import gradio as gr
import pytest

from playground.api import ClientTraffic
from playground.serve.room import Room
from playground.ui import build_demo

CODE = re.compile(r"`[^`]*`")
LINKED = re.compile(r"\[[^\]]*\]\([^)]*\)|<https?://[^>]*>")
BARE = re.compile(r"(?:https?://|www\.)\S+|[\w.+-]+@[\w-]+\.[\w.-]+")


def bare_addresses(markdown: str) -> list[str]:
    """The addresses markdown would turn into links by themselves.

    >>> bare_addresses("OpenAI SDK with base_url http://HOST:PORT/v1. Or `curl http://HOST:PORT/v1`.")
    ['http://HOST:PORT/v1.']
    >>> bare_addresses("[the docs](https://example.org/a) and `http://127.0.0.1:8080/v1`, me@example.org")
    ['me@example.org']
    """
    return BARE.findall(LINKED.sub("", CODE.sub("", markdown)))


@pytest.mark.slow
def test_no_markdown_on_the_page_holds_a_bare_address(tiny_engine):
    demo = build_demo(tiny_engine, Room(traffic=ClientTraffic()))   # with the endpoint's panel on the Serve tab
    texts = [block.value for block in demo.blocks.values() if isinstance(block, gr.Markdown) and block.value]
    assert any("HOST:PORT" in text for text in texts)   # the endpoint's help, with its placeholder
    assert {text[:60]: bare_addresses(text) for text in texts if bare_addresses(text)} == {}


@pytest.mark.slow
def test_the_endpoints_help_names_the_address_the_room_opens(tiny_engine):
    """Started with --host 0.0.0.0 (app.serve_the_endpoint sets `reach`): the help shows the real base URL, in
    code, where it said HOST:PORT."""
    traffic = ClientTraffic()
    traffic.reach = ["http://192.168.1.20:7860", "http://10.0.0.5:7860"]
    demo = build_demo(tiny_engine, Room(traffic=traffic))
    texts = [block.value for block in demo.blocks.values() if isinstance(block, gr.Markdown) and block.value]
    help_text = next(text for text in texts if "OpenAI-compatible requests" in text)
    assert 'base_url="http://192.168.1.20:7860/v1"' in help_text and "`http://10.0.0.5:7860`" in help_text
    assert "HOST:PORT" not in help_text and bare_addresses(help_text) == []
    traffic.reach = ["http://127.0.0.1:7860"]   # the default host: the help says the room cannot reach it
    demo = build_demo(tiny_engine, Room(traffic=traffic))
    texts = [block.value for block in demo.blocks.values() if isinstance(block, gr.Markdown) and block.value]
    help_text = next(text for text in texts if "OpenAI-compatible requests" in text)
    assert "only this machine can reach it" in help_text and bare_addresses(help_text) == []


# --- the page's head: the browser asks no host but the app's own (Gradio 6's template: scripts and styles by path on
# the app, no font host; the theme uses the machine's fonts)

@pytest.mark.slow
def test_gradios_own_page_names_no_other_host(tiny_engine):
    import httpx

    from tests.browser import launch
    demo = build_demo(tiny_engine)
    try:
        url = launch(demo)
        page = httpx.get(url).text
    finally:
        demo.close()
    assert "gradio_config" in page   # Gradio's index.html
    addresses = re.findall(r'(?:src|href)="([^"]*)"', page)   # Gradio 6.31 names them by path ("./assets/...")
    assert addresses and [a for a in addresses if re.match(r"(?:[a-z]+:)?//", a) and not a.startswith(url)] == []
