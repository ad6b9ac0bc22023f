"""HTML for a run: chips escape token text and carry what the Step measured; metrics label estimates."""
from __future__ import annotations

import pytest

from playground.config import GenerationSettings
from playground.run_view import chip_html, chips_html, format_bytes, metrics_html, status_line
from playground.trace import Step


def step(text=" <b>", index=1, special=False) -> Step:
    return Step(index=index, token_id=42, text=text, special=special, phase="decode", time=0.1, latency=0.02, prob=0.5, sample_prob=0.25, top=(), seq_len=10, kv_bytes=1024)


def test_chip_escapes_text_shows_whitespace_and_carries_the_measurements():
    assert chip_html(step()) == ('<span class="tok tok-c1" title="id 42 · model p=0.500 · sampled p=0.250 · '
                                 '20.0 ms · KV 1.0 KiB">·&lt;b&gt;</span>')


def test_a_chip_names_what_its_source_did_not_give():
    from dataclasses import replace
    title = chip_html(replace(step(), token_id=None, prob=None, sample_prob=None, kv_bytes=None, tokens=3))
    assert "id ?" in title and "model p missing" in title and "KV not measured" in title
    assert "3 tokens in this event" in title and "KV 0" not in title and "p=0.000" not in title


@pytest.mark.parametrize("text, shown", [('"\'>&', "&quot;&#x27;&gt;&amp;"), ("a\nb\t", "a↵b→"), ("", "∅")])
def test_chip_text_is_visible_and_inert(text, shown):
    assert f">{shown}</span>" in chip_html(step(text))


def test_special_tokens_are_marked_and_the_cursor_shows_while_running():
    assert "tok-special" in chip_html(step("<|im_end|>", special=True))
    assert "cursor" in chips_html([chip_html(step())], running=True)
    assert "cursor" not in chips_html([chip_html(step())])


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (3 * 2**20, "3.0 MiB"),
                                     (5 * 2**30, "5.0 GiB")])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_metrics_label_the_cost_an_estimate_and_status_says_how_it_ended(tiny_engine):
    trace = tiny_engine.generate("What is the capital of France?", GenerationSettings(max_new_tokens=4))
    html = metrics_html(trace, 1e6, 1e6)   # $1 per token: cost = prompt + output tokens
    assert "cost (estimate)" in html and f"${len(trace.prompt_ids) + 4:.6f}" in html
    assert "KV cache now (measured)" in html
    assert status_line(trace).startswith("**finished (max new tokens reached)** after 4 tokens")


def test_a_session_reuses_one_export_folder_and_close_removes_it(tiny_engine):
    from pathlib import Path

    from playground.config import GenerationSettings
    from playground.ui.session import Session

    session = Session()
    folders = set()
    for _ in range(3):
        session.start(tiny_engine.run("export me", GenerationSettings(max_new_tokens=2)))
        list(session.steps)
        paths = session.export()
        folders.add(Path(paths[0]).parent)
        assert sorted(Path(p).name for p in paths) == ["trace-perfetto.json", "trace.csv", "trace.json"]
    assert len(folders) == 1                      # one folder per session, not one per run
    session.start(tiny_engine.run("still running", GenerationSettings(max_new_tokens=50)))
    next(session.steps)
    session.close()
    assert not folders.pop().exists()
    assert session.trace.stop_reason == "cancelled"


@pytest.mark.slow
def test_exports_from_two_threads_at_once_do_not_collide(tiny_engine):
    """Regression: Stop and the ending generate handler export the same session at the same moment."""
    from concurrent.futures import ThreadPoolExecutor

    from playground.config import GenerationSettings
    from playground.ui.session import Session

    session = Session()
    session.start(tiny_engine.run("race", GenerationSettings(max_new_tokens=3)))
    list(session.steps)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: session.export(), range(200)))
    assert all(r == results[0] for r in results)
    session.close()
