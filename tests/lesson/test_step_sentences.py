"""Every comparative word a lesson step writes agrees with the figures it names, on runs made to come out each way.

Steps 1, 2, 3 and 5 write no comparative word (counts, times and ratios: "0.9× the question's"); steps 4, 6, 7 and
8 do: each is fed runs where the thing compared wins and runs where it loses, so a word fixed in the text fails one
of the two. Step 4 runs on the tiny model with its two comparisons replaced by recorded ones; steps 6 and 7's
sentences are fed hand-made workload records, step 8's hand-made shares and misses.
"""
from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from playground.lesson import Lesson
from playground.lesson import steps_scale
from playground.lesson.steps_scale import batching_cost, memory_sentence
from playground.run_view import format_seconds
from playground.serve.presets import changed_outputs
from tests.serve.test_sentences import chats, measured
from tests.serve.test_serve_status import two_runs

DURATION = r"(\d+(?:\.\d+)?) (ms|s)"


def seconds(value: str, unit: str) -> float:
    return float(value) / (1000 if unit == "ms" else 1)


def shown(duration: float) -> float:
    """A duration as the page writes it (format_seconds), read back."""
    return seconds(*re.fullmatch(DURATION, format_seconds(duration)).groups())


@pytest.fixture(scope="module")
def recorded_cache(tiny_engine):
    """The tiny model's cache comparison, measured once: the runs below rescale its latencies."""
    return steps_scale.EXPERIMENTS["cache"].run(tiny_engine, {"prompt_tokens": 48, "new_tokens": 6})


# --- step 4: "cut TTFT" or "saved nothing"; the chart's "slower" or "faster without it"

@pytest.mark.parametrize("cold, warm, uncached_scale", [(0.013, 0.004, 3.0), (0.004, 0.013, 0.25)])
def test_step_four_words_follow_its_two_comparisons(tiny_engine, recorded_cache, monkeypatch, cold, warm,
                                                    uncached_scale):
    """The prefix reuse and the run without the cache, each made to come out both ways."""
    base = sum(recorded_cache.cached_latency) / len(recorded_cache.cached_latency)
    cmp = replace(recorded_cache, cached_latency=[base] * len(recorded_cache.cached_latency),
                  uncached_latency=[base * uncached_scale] * len(recorded_cache.cached_latency))
    monkeypatch.setattr(steps_scale, "EXPERIMENTS", {"cache": SimpleNamespace(run=lambda *a, **k: cmp)})
    monkeypatch.setattr(steps_scale, "_prefix_reuse", lambda source: {
        "shared_tokens": 284, "ttft_cold_s": cold, "ttft_cached_s": warm, "same_answer": True})
    four = Lesson(tiny_engine).run(4)
    said = re.search(r"Reusing a 284-token shared prompt (cut TTFT from |saved nothing \()" + DURATION
                     + r"(?: to| whole,) " + DURATION, four.html)   # under the chart: no panel draws it
    assert said, four.html
    whole, cached = seconds(*said.group(2, 3)), seconds(*said.group(4, 5))
    assert (whole, cached) == (shown(cold), shown(warm))
    assert said.group(1).startswith("cut") == (cached < whole), four.html
    label = next(a.text.replace("<br>", " ") for a in four.figures["kv"].layout.annotations
                 if a.text.startswith("Step latency"))   # a label on two lines where its panel is narrow
    word, ratio = re.search(r"(\d+(?:\.\d+)?)× (slower|faster) without it", label).group(2, 1)
    assert f"ran {ratio}× {word} without it" in four.takeaway, (four.takeaway, label)   # the panel's own figure
    assert word == ("slower" if uncached_scale > 1 else "faster"), label
    assert float(ratio) == round(uncached_scale if uncached_scale > 1 else 1 / uncached_scale, 1), label
    title = steps_scale.plot_cache_comparison(cmp).layout.title.text
    assert f"× {word} without cache" in title, title


# --- step 6: what batching cost the questions, and its throughput

@pytest.mark.parametrize("batched_tpot, batched_tokens", [(0.3, 8), (0.05, 3), (2.0, 3)])
def test_step_six_cost_words_follow_the_tpot_and_the_throughput(batched_tpot, batched_tokens):
    alone, batched = two_runs(batched_tpot, batched_tokens)
    numbers = {}
    text = batching_cost(alone, batched, numbers)
    (tpot_alone, tpot_batched), (tps_alone, tps_batched) = numbers["short_tpot_p50_s"], numbers["output_tps"]
    shown = re.search(r"came every " + DURATION + r" \(TPOT p50\) against " + DURATION + r" alone \((\d+(?:\.\d+)?)× "
                      r"(slower|faster)\)", text)
    assert shown, text
    b, a = seconds(*shown.group(1, 2)), seconds(*shown.group(3, 4))
    assert shown.group(6) == ("slower" if b > a else "faster"), text
    assert shown.group(6) == ("slower" if tpot_batched > tpot_alone else "faster")
    assert text.startswith("The cost: " if tpot_batched > tpot_alone else "No cost per token here: "), text
    assert float(shown.group(5)) == round(max(tpot_alone, tpot_batched) / min(tpot_alone, tpot_batched), 1)
    lower = "Throughput came out lower batched on this run" in text
    assert lower == (tps_batched < tps_alone), text
    assert f"{tps_batched:.1f} against {tps_alone:.1f} tokens/s" in text


# --- step 7: the prefix cache's TTFT, the preemptions, and the outputs a recompute changed

@pytest.mark.parametrize("cold, warm", [(1.93, 0.31), (0.02, 0.03)])
@pytest.mark.parametrize("preemptions, completed", [(0, 4), (1, 4), (6, 3)])
def test_step_seven_words_follow_its_figures(cold, warm, preemptions, completed):
    n = {"shared_tokens": 812, "ttft_p50_s": [cold, warm], "kv_budget": 112, "demand_positions": 320,
         "preemptions": preemptions, "completed": completed, "requests": 4}
    text = memory_sentence(n)
    if warm < cold:
        assert f"cut TTFT p50 from {format_seconds(cold)} to {format_seconds(warm)}." in text
    else:
        assert f"saved no TTFT here ({format_seconds(warm)} against {format_seconds(cold)})." in text
    said = {0: "no preemption;", 1: "1 preemption;"}.get(preemptions, f"{preemptions} preemptions;")
    assert said in text, text
    assert ("all 4 requests still finished" in text) == (completed == 4)
    assert (f"{completed} of 4 requests finished" in text) == (completed < 4)


def test_step_seven_explains_the_outputs_a_recompute_changed():
    """Shown where step 7 says how many requests kept their tokens: why the others parted, and the agreement
    figure the suite gates; nothing to explain when every request kept them."""
    full = chats(0.1, 4)
    parted = changed_outputs(full, chats(0.3, 2, ids={0: [5, 6, 7, 8, 9, 9, 9, 9]}, preempted={0}),
                             "the run with all the memory")
    assert parted.startswith("3 of 4 requests gave the very tokens the run with all the memory gave them; 1 parted")
    assert "multi-row prefill pass" in parted and "nearly tied" in parted and "≥ 95% of positions" in parted
    same = changed_outputs(full, chats(0.3, 2, preempted={0}), "the run with all the memory")
    assert same == "4 of 4 requests gave the very tokens the run with all the memory gave them."
    told = changed_outputs(full, chats(0.3, 2, ids={0: [5, 6, 7, 8, 9, 9, 9, 9]}, preempted={0}),
                           "the run with all the memory", agreement=measured((0.01,), (0.01,)))
    assert ("Teacher-forced on the tokens the run with all the memory gave, for 1 preempted request that parted, the "
            "recompute's top-1 agreed with the one-at-a-time pass at 99.8% of 480 positions") in told


# --- step 6 with the room as its workload: the takeaway's counts, span, passes and wait from the record

@pytest.mark.parametrize("origins, rows, admitted", [
    (["page"] * 4, [1, 1, 1, 1], [0.0, 0.5, 1.0, 1.5]),            # one a pass, all from the page
    (["page", "API", "API", "page"], [2, 4, 3, 2], [0.0, 0.1, 0.3, 0.9]),   # passes of several, both origins
])
def test_step_six_from_the_room_computes_every_figure_it_names(origins, rows, admitted):
    from playground.serve.traffic import ClientTraffic
    from playground.lesson.you_are_the_workload import room_step

    traffic = ClientTraffic()
    arrivals = [0.0, 0.1, 0.2, 0.6]
    for i, (origin, arrived, start, n) in enumerate(zip(origins, arrivals, admitted, rows)):
        rec = chats(0.1, n, n=1).records[0]   # each of its Steps' passes carried n requests
        rec = replace(rec, request=replace(rec.request, id=i, arrival=arrived), admitted=start, finished=start + 1.2,
                      origin=origin)
        traffic.result.records.append(rec)
    step = room_step(traffic)
    text = step.takeaway
    page, api = origins.count("page"), origins.count("API")
    assert (f"({page} from the page, {api} through the API)" if page and api else "(all from the page)") in text, text
    span = re.search(r"\) in " + DURATION + ",", text)
    assert seconds(*span.groups()) == shown(max(arrivals) - min(arrivals)), text
    if max(rows) == 1:
        assert "served one a pass" in text and "passes of up to" not in text
    else:
        assert f"served in passes of up to {max(rows)} requests" in text and "one a pass" not in text
    wait = re.search(r"the longest wait for a KV slot was " + DURATION, text)
    assert seconds(*wait.groups()) == shown(max(s - a for s, a in zip(admitted, arrivals))), text
    assert " so far" not in text and len(text.split()) <= 35


# --- step 5: each ratio its takeaway writes, rounded as its chart's title rounds it

def test_step_five_writes_each_ratio_as_its_chart_does(tiny_engine, monkeypatch):
    """The takeaway said "23×" where the chart's title said "22.8×": one figure, two roundings."""
    from playground.experiments import EXPERIMENTS
    real = EXPERIMENTS["short-long"].run(tiny_engine, {"max_new_tokens": 2})
    cmp = replace(real, long=replace(real.long, input_tokens=round(real.short.input_tokens * 22.8)))
    monkeypatch.setattr(steps_scale, "EXPERIMENTS", {"short-long": SimpleNamespace(run=lambda *a, **k: cmp)})
    source = SimpleNamespace(info=tiny_engine.info, capabilities=SimpleNamespace(exact_ids=False))   # no calibration
    five = steps_scale.step_scale(SimpleNamespace(source=source), _Report())
    title = five.figures["short_long"].layout.title.text
    said = re.findall(r"(\d+(?:\.\d+)?×)", five.takeaway)
    assert said and said[0] == f"{cmp.summary()['ratios']['input_tokens']:.0f}×", five.takeaway
    assert all(ratio in title for ratio in said), (five.takeaway, title)


class _Report:
    """A step's progress reporter that is never cancelled."""
    cancelled, event = False, None

    def __call__(self, fraction, message):
        pass


# --- step 8: the cached share with each template, its comparative word, and the miss named

@pytest.mark.parametrize("own, rewritten", [(0.77, 0.41), (0.5, 0.5), (0.4, 0.62), (0.503, 0.497)])
@pytest.mark.parametrize("miss, rewrite", [
    (None, {"turn": 2, "cause": "template rewrite", "position": 67}),
    ({"turn": 3, "cause": "answer re-tokenized differently", "position": 120}, None),
    ({"turn": 4, "cause": "evicted", "position": None}, {"turn": 2, "cause": "template rewrite", "position": 1203}),
])
def test_step_eight_words_follow_its_figures(own, rewritten, miss, rewrite):
    from playground.lesson.steps_chat import chat_sentence
    text = chat_sentence({"turns": 4, "cached_share": own, "miss": miss, "rewritten_cached_share": rewritten,
                          "rewritten_miss": rewrite})
    assert len(text.split()) <= 35, text
    assert text.startswith(f"Turns 2–4 found {own:.0%} of their prompt tokens in the cache"), text
    shown = [int(p) for p in re.findall(r"(\d+)%", text)]   # as written: the word compares what the room reads
    assert shown == [round(own * 100), round(rewritten * 100)], text
    word = re.search(r"A reasoning template.* (cut that to|kept|found) (\d+)%", text).group(1)
    assert word == ("cut that to" if shown[1] < shown[0] else "kept" if shown[1] == shown[0] else "found"), text
    assert ("each history to its last full block" in text) == (miss is None), text
    for named in (miss, rewrite):
        if named is not None and named["position"] is not None:
            assert f"“{named['cause']}” at turn {named['turn']}'s token {named['position']}" in text, text
        elif named is not None:
            assert f"turn {named['turn']}: “{named['cause']}”" in text, text
    assert text.endswith("missing nothing.") == (rewrite is None), text
