"""The recompute's teacher-forced agreement (serve/agreement.py): each request that parted and was preempted is
replayed through the one-at-a-time pass and through the recompute's multi-row pass, and compared position by
position from its first recompute on. The tiny model's fp32 graph agrees everywhere; a recompute pass made to
read differently is counted exactly where it does; the default graph is gated as the suite gates it elsewhere."""
from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

import playground.serve.agreement as agreement
from playground.config import GenerationSettings
from playground.serve import SCHEDULERS
from playground.serve.agreement import Agreement, recompute_agreement, replay_request
from playground.serve.presets import PRESETS, changed_outputs
from playground.serve.batcher import BatchConfig

PROMPT = "Tell me a story about a cat who learns to sail."


def prompt_ids(engine) -> list[int]:
    return engine.prompt_ids(PROMPT, GenerationSettings())[1]


def test_the_replay_compares_each_output_position_from_the_first_recompute(tiny_onnx_engine):
    b = tiny_onnx_engine.backend
    prompt, output = prompt_ids(tiny_onnx_engine), [5, 17, 9, 3, 22, 41, 7, 7, 12, 30, 2, 8]
    plan = [(4, 16, [len(prompt) + 4 - 16]), (9, 32, [3, len(prompt) + 9 - 35])]   # two preemptions, the 2nd in 2 chunks
    best, margin, recompute = replay_request(b, prompt, output, plan)
    assert len(best) == len(margin) == len(recompute) == len(output)
    assert (recompute[:4] == -1).all() and (recompute[4:] >= 0).all()
    assert np.array_equal(recompute[4:], best[4:])   # fp32: the prefill and decode graphs are one graph here
    assert (margin >= 0).all()


def test_a_recompute_that_reads_differently_is_counted_at_its_positions(tiny_onnx_engine, monkeypatch):
    """A recompute's pass (a chunk read after positions already in the slot) made to pick the runner-up: the replay
    finds a disagreement at each recompute's first token and nowhere else (the KV it wrote is unchanged)."""
    read = agreement.prefill_chunk

    def runner_up(backend, kv, slot, ids, length):
        logits = read(backend, kv, slot, ids, length).copy()
        if length:
            second = np.argsort(logits)[-2]
            logits[second] = logits.max() + 1.0
        return logits

    monkeypatch.setattr(agreement, "prefill_chunk", runner_up)
    prompt, output = prompt_ids(tiny_onnx_engine), [5, 17, 9, 3, 22, 41, 7, 7, 12, 30, 2, 8]
    best, margin, recompute = replay_request(tiny_onnx_engine.backend, prompt, output,
                                             [(4, 16, []), (9, 16, [])])
    assert [j for j in range(4, len(output)) if recompute[j] != best[j]] == [4, 9]


@pytest.fixture(scope="module")
def pressure_runs(tiny_onnx_engine):
    """The memory-pressure preset on the tiny model (A with every slot's memory, B under a budget): B preempts."""
    e, preset = tiny_onnx_engine, PRESETS["memory pressure"]
    workload = preset.build(e, 6, None, 0)
    count = lambda p: len(e.prompt_ids(p, GenerationSettings())[1])   # noqa: E731
    a, b = (SCHEDULERS["batching"].create(e, batch=c).run(workload)
            for c in preset.configs(workload, count, BatchConfig(slots=4)))
    assert any(r.preemptions for r in b.records) and not any(r.preemptions for r in a.records)
    return a, b


def parted_at_last_token(b):
    """B's records with each preempted request's last token changed: as if it had parted there."""
    records = []
    for r in b.records:
        if r.preemptions:
            trace = replace(r.trace, steps=[*r.trace.steps[:-1], replace(r.trace.steps[-1],
                                                                          token_id=r.trace.steps[-1].token_id + 1)])
            r = replace(r, trace=trace)
        records.append(r)
    return replace(b, records=records)


@pytest.mark.slow
def test_the_tiny_models_recompute_agrees_everywhere_and_its_changes_began_past_a_tie(tiny_onnx_engine,
                                                                                    pressure_runs):
    a, b = pressure_runs
    assert recompute_agreement(tiny_onnx_engine.backend, a, b) == Agreement(0, 0, (), None, ())   # none parted
    parted = parted_at_last_token(b)
    g = recompute_agreement(tiny_onnx_engine.backend, a, parted)
    preempted = [(x, y) for x, y in zip(a.records, b.records) if y.preemptions]
    assert g.positions == sum(len(x.trace.output_ids) - y.preemptions[0].after_tokens for x, y in preempted)
    assert g.agreed == g.positions and g.margins == ()
    assert [p.position for p in g.partings] == [len(x.trace.output_ids) - 1 for x, _ in preempted]
    text = PRESETS["memory pressure"].finding(a, parted, agreement=g)
    assert f"agreed with the one-at-a-time pass at all {g.positions:,} positions" in text
    tied = sum(p.margin < agreement.NEAR_TIE for p in g.partings)
    if tied < len(g.partings):   # the tiny model's margins are what they are: the words follow them either way
        assert "every change began at a near-tie" not in text
    else:
        assert "every change began at a near-tie" in text


def test_a_stopped_job_stops_the_replay(tiny_onnx_engine, pressure_runs):
    a, b = pressure_runs
    stop = threading.Event()
    stop.set()
    g = recompute_agreement(tiny_onnx_engine.backend, a, parted_at_last_token(b), stop)
    assert g.cancelled and g.positions == 0
    assert "not measured in this run" in changed_outputs(a, parted_at_last_token(b), agreement=g)


@pytest.mark.integration
def test_the_default_after_a_replayed_recompute_follows_the_one_at_a_time_pass():
    """The default graph (int8 decode, fp32-activation prefill): on the bench text, a request preempted twice and
    replayed agrees with the one-at-a-time pass at >= 95% of positions, the suite's gate for a recompute
    (tests/serve/test_serve_kvmem.py); positions misaligned by one would agree far less."""
    from playground.backends import create_backend
    from playground.bench.fidelity import text_ids

    b = create_backend("onnx-gguf4")
    ids = text_ids(b.tokenizer, 300)
    prompt, output = ids[:40], ids[40:300]
    plan = [(60, 96, [4]), (150, 176, [14])]   # copied back: whole blocks of 16; recomputed: the rest
    best, margin, recompute = replay_request(b, prompt, output, plan)
    same = best[60:] == recompute[60:]
    assert same.mean() >= 0.95, same.mean()
    assert np.median(margin[60:]) > agreement.NEAR_TIE   # a near-tie is the exception, not the rule


def test_the_serve_tab_measures_a_preset_after_both_runs_and_writes_it_once_the_job_ends(tiny_onnx_engine,
                                                                                       pressure_runs):
    from types import SimpleNamespace

    from playground.serve.run import measure_preset
    from playground.ui.serve_views import lesson_text

    a, b = pressure_runs
    said, ended = [], []
    job = SimpleNamespace(results=[a, parted_at_last_token(b)], cancel=threading.Event(), measured={},
                          report=lambda fraction, message: said.append(message), preset=PRESETS["memory pressure"],
                          running=lambda: not ended)
    job.measured = measure_preset(PRESETS["shared system prompt"], tiny_onnx_engine, job.results, job.report,
                                  job.cancel)   # nothing to measure after it
    assert job.measured == {} and said == []
    job.measured = measure_preset(job.preset, tiny_onnx_engine, job.results, job.report, job.cancel)
    assert said and job.measured["agreement"].positions > 0
    assert "**memory pressure**" not in lesson_text(job)   # the replay's figure is not in yet while the job runs
    ended.append(True)
    assert f"one-at-a-time pass at all {job.measured['agreement'].positions:,} positions" in lesson_text(job)
