"""The step stream the Generate page draws from: compact, numbered, append-only, O(new steps) per update."""
from __future__ import annotations

import json
import threading
from dataclasses import replace

import pytest

from playground.config import GenerationSettings
from playground.step_stream import FIELDS, StepStream, read_stream, step_record
from playground.jobs import BackgroundRun
from playground.ui.session import Session
from playground.trace import Candidate, Step

HOSTILE = ["<script>alert(1)</script>", "\"'><img src=x onerror=alert(1)>", "\u202eevil\u202c", "👨‍👩‍👧", "a\nb\t", ""]


@pytest.fixture(scope="module")
def trace(tiny_engine):
    return tiny_engine.generate("What is the capital of France?", GenerationSettings(max_new_tokens=6))


def test_a_record_carries_every_field_of_its_step_by_name(trace):
    step = trace.steps[2]
    record = dict(zip(FIELDS, step_record(step)))
    assert record["seq"] == 2 and record["token_id"] == step.token_id and record["text"] == step.text
    assert record["wall_ns"] == step.wall_ns and record["seq_len"] == step.seq_len
    assert record["kv_bytes"] == step.kv_bytes and record["phase"] == "decode" and record["tokens"] == 1
    assert record["time"] == pytest.approx(step.time, abs=1e-6) and record["prob"] == pytest.approx(step.prob, abs=1e-5)
    assert [c[0] for c in record["top"]] == [c.token_id for c in step.top]


@pytest.mark.parametrize("text", HOSTILE)
def test_token_text_travels_as_plain_visible_text(text):
    record = dict(zip(FIELDS, step_record(Step(index=0, token_id=1, text=text, special=False, phase="prefill", time=.1, latency=.1, prob=.5, sample_prob=1., top=(Candidate(1, text, .5),),
                                                seq_len=5, kv_bytes=100))))
    assert record["text"] == text and "\n" not in record["shown"] and record["shown"] != ""
    assert record["top"][0][1] == record["shown"]
    line = json.dumps(record, ensure_ascii=False)
    assert json.loads(line)["text"] == text   # JSON carries it intact; the page sets it with textContent


def test_missing_figures_travel_as_null_never_zero():
    step = Step(index=0, token_id=None, text="x", special=False, phase="prefill", time=.1, latency=.1, prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None)
    record = dict(zip(FIELDS, step_record(step)))
    assert [record[k] for k in ("token_id", "prob", "sample_prob", "top", "seq_len", "kv_bytes")] == [None] * 6


def test_each_update_appends_only_the_new_steps_and_the_end_carries_the_figures(trace):
    stream = StepStream(trace)
    texts = [stream.add([])] + [stream.add(trace.steps[:i]) for i in range(1, len(trace.steps) + 1)]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))   # Gradio's diff sends the new lines only
    added = [len(b) - len(a) for a, b in zip(texts, texts[1:])]
    assert max(added) < 2 * min(added)                              # one step's worth each: O(new), not O(run)
    assert stream.add(trace.steps) == texts[-1]                     # a step already sent is never sent twice
    end_text = stream.finish({})
    assert stream.finish({}) == end_text                            # Stop and the handler may both finish
    head, steps, end = read_stream(end_text)
    assert head["prompt_tokens"] == len(trace.prompt_ids) and head["kv"] and head["fields"] == list(FIELDS)
    assert [s["seq"] for s in steps] == list(range(len(trace.steps))) and end["steps"] == len(trace.steps)


def test_the_final_stream_carries_the_four_figures_of_the_session(tiny_engine):
    session = Session()
    session.start(tiny_engine.run("Hi", GenerationSettings(max_new_tokens=3)))
    for _ in session.steps:
        pass
    _, steps, end = read_stream(session.finish_stream())
    assert len(steps) == 3 and end["end"] == "length"
    assert "Top-k at step 2" in json.dumps(end["figures"]["topk"])
    assert [t["name"] for t in end["figures"]["timeline"]["data"]] == ["prefill (TTFT)", "decode"]
    session.close()


def test_a_missing_sequence_number_is_named():
    stream = StepStream(type("T", (), {"prompt_ids": [1], "backend": "x", "kv_shape": None,
                                       "settings": GenerationSettings()})())
    steps = [Step(index=i, token_id=i, text="t", special=False, phase="decode", time=.1, latency=.1, prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None) for i in range(3)]
    text = stream.add([steps[0], steps[2]])
    with pytest.raises(ValueError, match="step 1 is missing"):
        read_stream(text)


class HeldRun:
    """A Run of `n` Steps: step 0, then (once the consumer has it: `first_taken`) the others, then the end."""
    trace = None

    def __init__(self, n: int):
        self.n, self.first_taken = n, threading.Event()

    def __iter__(self):
        for i in range(self.n):
            if i == 1:
                assert self.first_taken.wait(30), "the consumer never took the first batch"
            yield Step(index=i, token_id=i, text="t", special=False, phase="decode", time=.1, latency=.1, prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None)

    def cancel(self):
        pass


def test_updates_are_coalesced_to_one_per_interval(monkeypatch):
    """Each batch after the first waits out the interval since the one before, taking the steps made
    meanwhile. The consumer's clock is a fake one (its sleeps only move it), so this holds on any machine."""
    from types import SimpleNamespace

    import playground.jobs as jobs

    clock = SimpleNamespace(now=0.0, sleeps=[])

    def pass_time(seconds):
        clock.sleeps.append(round(seconds, 9))
        clock.now += seconds

    monkeypatch.setattr(jobs, "time", SimpleNamespace(monotonic=lambda: clock.now))
    monkeypatch.setattr(BackgroundRun, "_coalesce", lambda self, seconds: pass_time(seconds))
    run = HeldRun(40)
    batches = iter(BackgroundRun(run, interval=0.05))
    first = next(batches)
    run.first_taken.set()
    batches = [first, *batches]
    assert sum(len(b) for b in batches) == 40 and [s.index for b in batches for s in b] == list(range(40))
    assert len(batches) >= 2 and first == batches[0] and [s.index for s in first] == [0]   # the run streams
    assert clock.sleeps == [0.05] * (len(batches) - 1)   # at most one batch per 50 ms of the consumer's clock


def test_the_end_of_a_run_is_not_held_back_by_a_long_interval():
    """A run paced to one update an hour (a page in a full room is paced to a few a second) still ends its
    iteration when the run ends: the last Steps come with the end, not an interval later."""
    run = HeldRun(3)
    batches = iter(BackgroundRun(run, interval=lambda: 3600.0))
    taken = [next(batches)]
    run.first_taken.set()
    reader = threading.Thread(target=lambda: taken.extend(batches), daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "the consumer waited out the interval after the run had ended"
    assert [[s.index for s in b] for b in taken] == [[0], [1, 2]]


def test_a_stream_is_safe_to_extend_from_two_threads(trace):
    stream = StepStream(trace)
    workers = [threading.Thread(target=stream.add, args=(trace.steps,)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert [s["seq"] for s in read_stream(stream.text)[1]] == list(range(len(trace.steps)))


def test_a_source_that_sends_events_of_several_tokens_keeps_its_count(trace):
    step = replace(trace.steps[0], tokens=3)
    assert dict(zip(FIELDS, step_record(step)))["tokens"] == 3


def test_a_wake_up_that_comes_as_the_wait_times_out_is_read():
    """`woken` (jobs.py), which the endpoint's stream and the live channel follow: news that arrives while the
    reader handles a timeout (a keep-alive, a disconnect check) is read next, never dropped until a later one."""
    import asyncio
    from contextlib import aclosing

    from playground.jobs import woken

    class Source:
        def listen(self, callback):
            self.callback = callback

        def unlisten(self, callback):
            self.callback = None

    async def read(source):
        said = []
        async with aclosing(woken(source, timeout=0.01)) as wakes:
            async for news in wakes:
                said.append(news)
                if said == [True, False]:   # the writer's news lands while the reader handles the timeout
                    writer = threading.Thread(target=source.callback)
                    writer.start()
                    writer.join()
                elif len(said) == 3:
                    return said

    source = Source()
    assert asyncio.run(read(source)) == [True, False, True]   # the news read at once
    assert source.callback is None   # closed: no longer listening
