"""Eight browser-like sessions at once, three requests each: every one gets exactly its own output."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from gradio_client import Client

from playground.config import GenerationSettings
from playground.ui import build_demo
from tests.helpers import free_port, generate_args, generated

CLIENTS, REQUESTS, TOKENS = 8, 3, 16


def prompt_and_seed(client: int, request: int) -> tuple[str, int]:
    return f"client {client} request {request}: tell me about tokens", client * 10 + request


@pytest.fixture(scope="module")
def app_url(tiny_engine):
    demo = build_demo(tiny_engine)
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(),
                                    server_name="127.0.0.1", quiet=True)
    yield url
    demo.close()


@pytest.mark.slow
def test_simultaneous_sessions_never_mix(app_url, tiny_engine):
    expected = {}
    for c in range(CLIENTS):
        for r in range(REQUESTS):
            prompt, seed = prompt_and_seed(c, r)
            s = GenerationSettings(max_new_tokens=TOKENS, temperature=1.0, seed=seed)
            expected[c, r] = tiny_engine.generate(prompt, s).text   # what it would be alone
    assert len(set(expected.values())) == CLIENTS * REQUESTS   # so a mix-up could not go unseen

    def session(c: int) -> list[str]:
        client = Client(app_url, verbose=False)
        texts = []
        for r in range(REQUESTS):
            prompt, seed = prompt_and_seed(c, r)
            out = client.predict(*generate_args(prompt, temperature=1.0, seed=str(seed), max_new_tokens=TOKENS),
                                 api_name="/generate")
            assert "finished" in generated(out)["status"], generated(out)["status"]
            texts.append(generated(out)["text"])
        return texts

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(session, range(CLIENTS)))
    for c, texts in enumerate(results):
        assert texts == [expected[c, r] for r in range(REQUESTS)], f"client {c} got another session's output"
