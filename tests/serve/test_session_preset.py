"""The Serve tab's agent preset (serve/session_preset.py): two agents with tool gaps replayed in real time under a
small prefix cache, A holding each session's blocks across its gaps and B not; each gap's blocks measured by our
batching as it releases the next turn, and a sentence from both sides' figures on the turn after a gap."""
from __future__ import annotations

from dataclasses import fields, replace
from types import SimpleNamespace as S

import pytest

from playground.registry import SourceRegistry
from playground.serve import SCHEDULERS
from playground.serve.batching import BatchConfig
from playground.serve.prefix_cache import BLOCK_SIZE
from playground.serve.presets import PRESETS
from playground.serve.room import Room
from playground.serve.session_gaps import first_eviction, replay_gaps
from playground.serve.session_preset import (CACHE_BLOCKS, NAME, TTL_S, after_gap_turns, chain, retention_finding,
                                             two_agents_trace)
from playground.ui.machine_gate import MachineGate
from playground.ui.serve_job import ServeJob
from playground.ui.serve_layout import ServeForm, SweepForm
from playground.ui.serve_tab import ServeHandlers, apply_preset, session_trace, trace_gaps
from playground.ui.serve_views import OUTPUTS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")   # gr.Warning outside an event warns

PRESET = PRESETS[NAME]


def handlers_for(engine, room: Room | None = None) -> ServeHandlers:
    registry = SourceRegistry(lambda name, progress: engine, ["onnx"], default="onnx")
    names = lambda cls: S(**{f.name: f.name for f in fields(cls)})   # noqa: E731
    forms = S(serve=names(ServeForm), sweep=names(SweepForm), job="job")
    return ServeHandlers(registry, forms, S(**{n: n for n in OUTPUTS}), MachineGate(), room)


def preset_form(**changes) -> ServeForm:
    return ServeForm(**{**dict(n=PRESET.requests, arrival="all-at-once", rate=1.0, seed=0, short_prompt="Hi",
                               short_tokens=4, short_share=0.5, long_prompt="Hello", long_tokens=4, long_share=0.5,
                               scheduler_a="batching", source_a="onnx", scheduler_b="batching", source_b="onnx",
                               slots=4, chunk=64, max_batch_tokens=128, blocks=0, manager="fifo", preset=NAME),
                        **changes})


# --- the setup, before anything runs

def test_the_preset_says_before_the_click_what_it_runs_on_each_side():
    shown = apply_preset(NAME)
    about = shown["about"]
    assert about.startswith(f"**{NAME}**") and "real time" in about
    assert "A holds each agent's blocks across its gaps" in about and "B does not" in about
    assert f"{CACHE_BLOCKS * BLOCK_SIZE} positions" in about
    assert shown["n"] == len(two_agents_trace().rows) and shown["scheduler_b"] == "batching"


def test_a_and_b_differ_by_the_ttl_alone_under_a_small_prefix_cache_and_their_labels_say_so(tiny_onnx_engine):
    a, b = PRESET.configs(None, len, BatchConfig(slots=4))
    assert a.session_ttl == TTL_S and b.session_ttl == 0.0
    assert replace(a, session_ttl=0.0) == b and a.prefix_cache == CACHE_BLOCKS * BLOCK_SIZE and a.session_share > 0
    label_a, label_b = (SCHEDULERS["batching"].create(tiny_onnx_engine, batch=c).label for c in (a, b))
    assert "sessions held 30 s" in label_a and "sessions held only for a TTL they ask" in label_b


def test_the_trace_is_two_agents_whose_later_turns_wait_seconds_after_their_predecessor(tiny_onnx_engine):
    workload = PRESET.build(tiny_onnx_engine, 1, None, 0)   # the count is the trace's own
    turns = [r for r in workload.requests if r.session is not None]
    assert len(workload.requests) == PRESET.requests and {r.session for r in turns} == {"agent 1", "agent 2"}
    later = [r for r in turns if r.after is not None]
    assert len(later) == 4 and all(2.0 <= r.delay <= 5.0 for r in later)
    by_id = {r.id: r for r in workload.requests}
    for r in later:   # a later turn carries its predecessor's prompt: its history
        assert r.prompt_ids[:len(by_id[r.after].prompt_ids)] == by_id[r.after].prompt_ids


def test_the_budget_forces_evictions_without_retention_and_none_with_it():
    """The cache alone on the trace's clock (replay_gaps): B's sessions lose their blocks in every gap, A's keep
    them; a smaller budget loses them no later."""
    trace = two_agents_trace()
    a, b = PRESET.configs(None, len, BatchConfig())
    held, lost = trace_gaps(trace, a), trace_gaps(trace, b)
    assert len(held) == len(lost) == 4
    assert all(g.state["held"] == len(chain(1, g.turn)) and not g.state["evicted"] for g in held)
    assert all(g.state["held"] == 0 and g.state["evicted"] for g in lost)
    assert first_eviction(lost) == 0 and first_eviction(held) is None
    smaller, _ = replay_gaps(trace.rows, CACHE_BLOCKS // 2, a.session_share, a.session_ttl)
    assert first_eviction(smaller) is not None


def test_the_tab_draws_the_presets_own_trace_and_no_trace_for_a_preset_without_one():
    assert session_trace(preset_form(), PRESET).source == "the two-agent preset"
    assert session_trace(preset_form(), PRESETS["memory pressure"]) is None


# --- the sentence, both ways, from made-up figures

def _run(after_ttft, after_cached, turns=2):
    recs = [S(request=S(id=0, session="a"), ttft=0.5, cached_tokens=0, prompt_tokens=96, steps=[1]),
            S(request=S(id=1, session=None), ttft=0.9, cached_tokens=0, prompt_tokens=160, steps=[1])]
    recs += [S(request=S(id=2 + k, session="a"), ttft=after_ttft, cached_tokens=after_cached, prompt_tokens=128,
               steps=[1]) for k in range(turns)]
    return S(records=recs)


def test_the_sentence_says_retention_was_faster_when_its_turns_after_a_gap_were():
    text = retention_finding(_run(0.05, 96), _run(0.2, 0))
    assert "the next turn was faster with retention" in text
    assert "50 ms with it (A) against 200 ms without (B), 0.25×" in text and "75% of" in text and "0% without" in text


def test_the_sentence_says_retention_was_not_faster_when_its_turns_after_a_gap_were_slower():
    text = retention_finding(_run(0.3, 96), _run(0.2, 0))
    assert "the next turn was not faster with retention" in text and "1.50×" in text


def test_the_sentence_says_too_little_was_measured_when_a_side_served_no_turn_after_a_gap():
    text = retention_finding(_run(0.1, 96), _run(0.2, 0, turns=0))
    assert text.startswith("Too little was measured")
    assert [r.request.id for r in after_gap_turns(_run(0.1, 96).records)] == [2, 3]


def test_a_served_room_refuses_the_preset_without_the_presenters_key(tiny_onnx_engine):
    room = Room()
    room.served = "the page listens on 0.0.0.0"
    room.set_presenter_key("presenter-58")
    job = ServeJob()
    frames = list(handlers_for(tiny_onnx_engine, room).start_workload(preset_form(presenter_key="guess"), job))
    assert "This room is served" in frames[-1]["status"] and job.thread is None and job.results == []


# --- on the tiny model, in real time

@pytest.mark.slow
def test_the_preset_runs_both_sides_measures_each_gap_and_says_whether_retention_was_faster(tiny_onnx_engine):
    """Through the tab's handlers: A's sessions find their blocks held after every gap and B's evicted (least
    recently used), both measured in the engine's cache; the timeline draws both sides' turns; the lesson ends
    with the sentence."""
    job = ServeJob()
    frames = list(handlers_for(tiny_onnx_engine).serve({**vars(preset_form()), "job": job}))
    assert frames[-1]["status"].count("done") == 2, frames[-1]["status"]
    a, b = job.results
    for r in after_gap_turns(a.records):
        assert r.gap_blocks["held"] > 0 and r.gap_blocks["evicted"] == {}, r.gap_blocks
    for r in after_gap_turns(b.records):
        assert r.gap_blocks["held"] == 0 and r.gap_blocks["evicted"].get("least recently used", 0) > 0, r.gap_blocks
    share = lambda result: sum(r.cached_tokens for r in after_gap_turns(result.records))   # noqa: E731
    assert share(a) > 0 == share(b)
    fig = frames[-1]["session_timeline"]
    turns, = [t for t in fig.data if t.name == "turn"]
    assert sorted(set(turns.y)) == ["A · agent 1", "A · agent 2", "B · agent 1", "B · agent 2"]
    assert len(turns.y) == 12 and all("TTFT" in text and "cached" in text for text in turns.text)
    parts = {(t.y[0][0], t.name) for t in fig.data if t.name != "turn"}
    assert ("A", "held (measured)") in parts and ("B", "evicted · least recently used (measured)") in parts
    assert not any(name.endswith("(predicted)") for _, name in parts)
    lesson = frames[-1]["lesson"]
    assert f"**{NAME}**: After a tool gap, the next turn was " in lesson and "with retention" in lesson
    job.close()


@pytest.mark.slow
def test_a_ttl_shorter_than_the_gaps_leaves_nothing_held_and_the_fillers_evict_it_as_expired(tiny_onnx_engine):
    """The same trace with a TTL of 1 s against gaps of 2.5-3 s: when each next turn comes its hold has run out, and
    the requests of no session have evicted the blocks, each eviction's reason "TTL expired"."""
    workload = PRESET.build(tiny_onnx_engine, PRESET.requests, None, 0)
    a, _ = PRESET.configs(workload, len, BatchConfig())
    result = SCHEDULERS["batching"].create(tiny_onnx_engine, batch=replace(a, session_ttl=1.0)).run(workload)
    states = [r.gap_blocks for r in after_gap_turns(result.records)]
    assert len(states) == 4 and all(s["held"] == 0 for s in states), states
    assert any(s["evicted"].get("TTL expired", 0) > 0 for s in states), states
