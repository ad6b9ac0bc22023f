"""Hostile input through the app's endpoints: a readable message or a clean run, and the app keeps serving."""
from __future__ import annotations

from functools import partial
import math

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from tests.helpers import generate_args, generate_values, generated, tab_by_name, tiny_registry, trace_from

RUNS_CLEANLY = [
    "<script>alert('x')</script><img src=x onerror=alert(1)>", "\x00\x01\x07 NUL and bell \x1b[31m red",
    "👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷 family, flags", "مرحبا بالعالم — שלום עולם", "\u202eevil reversed\u202c text",
    "&amp; &lt;b&gt; \"quotes\" 'single'", "a\u0301\u0302\u0303 combining",
]


@pytest.mark.slow
@pytest.mark.parametrize("prompt", RUNS_CLEANLY)
def test_hostile_text_runs_and_is_shown_escaped(app_url, prompt):
    client = Client(app_url, verbose=False)
    out = client.predict(*generate_args(prompt, max_new_tokens=4), api_name="/generate")
    assert "finished" in generated(out)["status"]
    assert trace_from(generated(out)["files"])["prompt"] == prompt
    _, chips, _ = client.predict(text=prompt, chat_on=True, name="torch", api_name="/tokens")
    assert "<script" not in chips and "<img" not in chips and "\x00" not in chips and "\ufffd" not in chips


@pytest.mark.slow
@pytest.mark.parametrize("prompt, message", [
    ("word " * 200_000, "characters; the limit is"),        # 1 MB of text
    ("", "prompt is empty"), ("\n\t  \n", "prompt is empty"),
])
def test_refused_prompts_get_a_message_and_the_next_request_works(app_url, prompt, message):
    client = Client(app_url, verbose=False)
    out = client.predict(*generate_args(prompt), api_name="/generate")
    assert message in generated(out)["status"]
    assert "finished" in generated(client.predict(*generate_args(max_new_tokens=2), api_name="/generate"))["status"]


@pytest.mark.slow
@pytest.mark.parametrize("changes, answer", [   # answer: gradio's own bound check, the handler's message, or a run
    ({"temperature": -1}, "less than minimum"), ({"temperature": math.inf}, "not JSON compliant"),
    ({"top_p": 0}, "less than minimum"), ({"top_p": 7}, "greater than maximum"), ({"top_k": -3}, "less than minimum"),
    ({"max_new_tokens": 0}, "less than minimum"), ({"max_new_tokens": 10**9}, "greater than maximum"),
    ({"seed": "1e400"}, "seed must be a whole number"), ({"seed": "NaN"}, "seed must be a whole number"),
    ({"price_in": -5}, "finished"),
])
def test_settings_beyond_their_bounds_never_take_the_app_down(app_url, changes, answer):
    client = Client(app_url, verbose=False)
    args = generate_args(**{"max_new_tokens": 3, **changes})
    if answer.endswith(("minimum", "maximum", "compliant")):   # refused by gradio (or by JSON, for inf)
        with pytest.raises(ValueError if answer.endswith("compliant") else AppError, match=answer):
            client.predict(*args, api_name="/generate")
    else:
        assert answer in generated(client.predict(*args, api_name="/generate"))["status"]
    assert "finished" in generated(client.predict(*generate_args(max_new_tokens=2), api_name="/generate"))["status"]


def test_a_lone_surrogate_reaching_the_handler_gets_a_message(tiny_backend, tiny_engine):
    """A browser can send a lone surrogate as a JSON escape; no HTTP client here can, so the handler is
    called as Gradio would call it."""
    from playground.ui.session import Session
    from playground.ui.generate_handlers import generate as on_generate

    generate = partial(on_generate, tab_by_name(tiny_registry(tiny_backend, tiny_engine)))
    session = Session()
    outputs = list(generate(generate_values(session, "broken \ud800 utf-8")))
    assert "surrogate" in outputs[-1]["status"] and session.run is None
    outputs = list(generate(generate_values(session, max_new_tokens=2)))
    assert "finished" in outputs[-1]["status"]


@pytest.mark.parametrize("prompt", ["", "  \n\t "])
def test_a_refused_prompt_after_a_run_leaves_none_of_that_runs_view_under_its_warning(tiny_backend, tiny_engine,
                                                                                      prompt):
    """An empty or whitespace prompt left the last run's chips and figures under "prompt is empty"."""
    from playground.run_view import metrics_html
    from playground.ui.generate_handlers import generate as on_generate
    from playground.ui.session import Session

    generate = partial(on_generate, tab_by_name(tiny_registry(tiny_backend, tiny_engine)))
    session = Session()
    ran = list(generate(generate_values(session, max_new_tokens=2)))[-1]
    assert "finished" in ran["status"] and ran["stream"] and ran["text"] and ran["files"]
    refused = list(generate(generate_values(session, prompt)))
    assert len(refused) == 1 and "prompt is empty" in refused[0]["status"]
    # an empty stream empties the page's chips and charts (live/stream.js); the answer, figures and files go too
    assert {k: refused[0][k] for k in ("stream", "text", "metrics", "files")} == {
        "stream": "", "text": "", "metrics": metrics_html(None), "files": None}
