"""Speculative decoding in the Generate tab: the report, its plain baseline, the step stream, the page's chips."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from playground.config import GenerationSettings
from playground.step_stream import StepStream, read_stream
from playground.run_view import chip_html, speculation_html
from playground.ui.session import Session
from playground.speculative import Speculation, SpeculativeEngine, plain_baseline, speculation_report
from playground.ui.common import SourceUnavailable
from playground.ui.generate_handlers import speculative

REPEATS = "the cat sat on the mat and the cat sat on the mat and the dog sat on the mat and the cat"
GREEDY = GenerationSettings(max_new_tokens=40, temperature=0.0)


@pytest.fixture(scope="module")
def runs(tiny_engine):
    """(plain trace, speculative trace) of the same prompt on the same backend, greedy."""
    plain = tiny_engine.generate(REPEATS, GREEDY)
    spec = SpeculativeEngine(tiny_engine.backend, Speculation(k=4, ngram=2, row_cost=0)).generate(REPEATS, GREEDY)
    assert spec.speculation["accepted"] > 0   # the prompt repeats itself: some proposals must be right
    return plain, spec


def test_report_counts_passes_acceptance_and_the_measured_speedup(runs):
    plain, spec = runs
    report = speculation_report(spec, plain)
    counts = spec.speculation
    assert report.passes == counts["passes"] < len(spec.steps)
    assert report.tokens_per_pass == pytest.approx(len(spec.steps) / counts["passes"]) and report.tokens_per_pass > 1
    assert report.acceptance == pytest.approx(counts["accepted"] / counts["proposed"])
    assert report.replaced == sum(s.draft == "replaced" for s in spec.steps)
    assert report.speedup == pytest.approx(spec.metrics().decode_tps / plain.metrics().decode_tps)
    assert report.same_tokens is True
    assert speculation_report(plain) is None


def test_the_baseline_is_a_plain_run_of_the_same_prompt_backend_and_settings(tiny_engine, runs):
    plain, spec = runs
    other_prompt = tiny_engine.generate("Something else entirely", GREEDY)
    other_budget = tiny_engine.generate(REPEATS, GenerationSettings(max_new_tokens=8, temperature=0.0))
    assert plain_baseline(spec, [plain, other_prompt, other_budget]) == (spec, plain, "plain")
    assert plain_baseline(spec, [other_prompt, other_budget]) == (spec, None, None)
    assert plain_baseline(plain, [spec]) == (spec, plain, "speculative")   # a plain run after a speculative one
    assert plain_baseline(plain, [other_prompt]) == (None, None, None)


def test_speculation_html_labels_the_speedup_or_says_it_is_missing(runs):
    plain, spec = runs
    alone = speculation_html(spec, [])
    assert "tokens per forward pass" in alone and "missing: run the same prompt" in alone and "×" not in alone
    measured = speculation_html(spec, [plain])
    speedup = speculation_report(spec, plain).speedup
    assert f"{speedup:.2f}× against the plain run before it" in measured
    assert "the speculative run before, against this plain run" in speculation_html(plain, [spec])
    assert speculation_html(plain, []) == ""


def test_the_report_says_its_whole_speedup_and_what_its_counts_mean(runs):
    """The speedup's sentence is a paragraph, not a card's one-line value (which cut it: "missing: run the
    san…"), and the counts are said in words that add up: proposed = accepted + replaced + dropped."""
    from html.parser import HTMLParser

    plain, spec = runs
    report = speculation_report(spec)

    class Values(HTMLParser):   # the text of each card's value, and of the words under the cards
        def __init__(self):
            super().__init__()
            self.where, self.values, self.words = None, [], ""

        def handle_starttag(self, tag, attrs):
            cls = dict(attrs).get("class", "")
            self.where = "value" if cls == "value" else "words" if cls == "speculation-words" else self.where

        def handle_endtag(self, tag):
            self.where = None if tag in ("div", "p") else self.where

        def handle_data(self, data):
            if self.where == "value":
                self.values.append(data)
            elif self.where == "words":
                self.words += data
    page = Values()
    page.feed(speculation_html(spec, []))
    assert all(len(v) <= 24 for v in page.values), page.values   # each card's value fits its card
    words = page.words
    assert "Speedup missing: run the same prompt with speculative decoding off (same backend and settings) to " \
           "measure it." in words
    proposed = int(re.search(r"Of (\d+) draft tokens? proposed", words).group(1))
    kept = int(re.search(r"proposed, (\d+) matched the model's own choice", words).group(1))
    replaced = re.search(r"(\d+) times? a draft did not match", words)
    dropped = re.search(r"the (\d+) draft tokens? after it in the same pass", words)
    replaced, dropped = (int(m.group(1)) if m else 0 for m in (replaced, dropped))
    assert (proposed, kept, replaced) == (report.proposed, report.accepted, report.replaced)
    assert proposed == kept + replaced + dropped, words


def test_the_step_stream_carries_each_tokens_draft_and_forward_pass(runs):
    _, spec = runs
    head, steps, _ = read_stream(StepStream(spec).finish())
    assert head["speculation"] == {"k": 4, "ngram": 2}
    assert [s["draft"] for s in steps] == [s.draft for s in spec.steps]
    assert [s["forward_pass"] for s in steps] == [s.forward_pass for s in spec.steps]
    plain_head, _, _ = read_stream(StepStream(runs[0]).finish())
    assert plain_head["speculation"] is None


def test_a_speculative_run_names_its_settings_before_its_first_step(tiny_engine):
    run = SpeculativeEngine(tiny_engine.backend, Speculation(k=3, ngram=2)).run(REPEATS, GREEDY)
    assert read_stream(StepStream(run.trace).text)[0]["speculation"] == {"k": 3, "ngram": 2}
    run.cancel()
    run.wait()


def test_chips_of_a_finished_trace_are_classed_by_draft(runs):
    _, spec = runs
    accepted = next(s for s in spec.steps if s.draft == "accepted")
    assert "tok-accepted" in chip_html(accepted) and f"forward pass {accepted.forward_pass}" in chip_html(accepted)
    assert "tok-accepted" not in chip_html(spec.steps[0])


def test_the_session_keeps_earlier_runs_to_compare_with(tiny_engine):
    session = Session()
    first = tiny_engine.run(REPEATS, GenerationSettings(max_new_tokens=3))
    session.start(first)
    first.wait()
    session.start(tiny_engine.run(REPEATS, GenerationSettings(max_new_tokens=3)))
    assert list(session.earlier) == [first.trace]
    session.close()


def test_a_source_without_a_verify_pass_gets_a_message_not_a_crash(tiny_engine):
    remote = SimpleNamespace(info=SimpleNamespace(name="llama.cpp @ host"))
    with pytest.raises(SourceUnavailable, match="needs a local backend with a verify pass"):
        speculative(remote, 4, 3)
    with pytest.raises(SourceUnavailable, match="between 1 and 8"):
        speculative(tiny_engine, 9, 3)
    assert isinstance(speculative(tiny_engine, 4.0, 3.0), SpeculativeEngine)


@pytest.mark.browser
def test_a_speculative_run_colours_its_chips_then_a_plain_run_measures_the_speedup(browser_app):
    from tests.browser import set_max_new_tokens
    page = browser_app[0]
    page.locator("#preset-question").click()   # ticks speculative decoding on
    page.wait_for_function("document.querySelector('#speculate input').checked")
    set_max_new_tokens(page, 48)
    page.locator("#generate").click()
    page.wait_for_selector("#pg-speculation", timeout=120_000)
    classes = page.eval_on_selector_all("#chips .tok", "els => els.map((e) => e.className)")
    kinds = [re.search(r"tok-(accepted|replaced|ordinary)", c) for c in classes]
    assert len(classes) == 48 and all(kinds)
    report = page.locator("#pg-speculation").inner_text()
    accepted, proposed = map(int, re.search(r"\((\d+) / (\d+)\)", report).groups())
    assert sum(k.group(1) == "accepted" for k in kinds) == accepted <= proposed
    assert "tokens per forward pass" in report and "missing" in report
    page.locator("#speculate input").uncheck()
    page.locator("#generate").click()   # the same prompt, plain: the speedup is measured against it
    page.wait_for_function("/\\d\\.\\d\\d× the speculative run before/.test("
                           "(document.querySelector('#pg-speculation') || {}).innerText || '')", timeout=120_000)
    assert page.locator("#chips .tok-ordinary").count() == 0   # a plain run's chips keep the position palette
