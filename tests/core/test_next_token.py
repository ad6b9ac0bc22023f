"""One way to make a token (playground/next_token.py): the same greedy request through every path that makes
Steps -- the Engine, speculative decoding, our continuous batching alone and among other requests,
transformers' manager, the OpenAI-compatible endpoint -- gives the same records; and no other module of the
package builds a Step or decides a stop reason itself."""
from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

from playground.api import ApiConfig, ApiService
from playground.api.request_body import COMPLETION, read_body
from playground.serve.room import Room
from playground.config import GenerationSettings
from playground.serve import SCHEDULERS, Request, Workload
from playground.serve.batcher import BatchConfig, Batcher
from playground.speculative import Speculation, SpeculativeEngine

ROOT = Path(__file__).resolve().parents[2] / "playground"
PROMPT, OTHERS = "What is the capital of France?", ["Hi", "Write a short poem about the sea and the wind."]
N = 12
GREEDY = GenerationSettings(max_new_tokens=N, top_candidates=1)   # what a workload's request asks (settings_for)
SEEDED = GenerationSettings(max_new_tokens=N, temperature=0.3, seed=1, top_candidates=1)   # varied, some repeat
SHARED = ("index", "token_id", "text", "special", "phase", "tokens")   # every path gives these


def fields(trace, names) -> list[dict]:
    return [{name: getattr(s, name) for name in names} for s in trace.steps]


def same_records(trace, alone, names=SHARED + ("seq_len", "kv_bytes")) -> None:
    """`trace` has `alone`'s Steps field by field (the probabilities to float tolerance) and its stop reason."""
    assert trace.stop_reason == alone.stop_reason
    assert trace.output_ids == alone.output_ids and trace.text == alone.text
    assert fields(trace, names) == fields(alone, names)
    for ours, theirs in zip(trace.steps, alone.steps):
        if ours.prob is not None:
            assert ours.prob == pytest.approx(theirs.prob, rel=1e-4)
            assert ours.sample_prob == pytest.approx(theirs.sample_prob, rel=1e-4)
            assert [c.token_id for c in ours.top] == [c.token_id for c in theirs.top]


def workload(prompts: list[str]) -> Workload:
    return Workload(tuple(Request(i, "q", p, N, 0.0) for i, p in enumerate(prompts)))


@pytest.fixture(scope="module")
def alone(tiny_onnx_engine):
    """The plain Engine's record of each request, greedy and seeded."""
    traces = {s: tiny_onnx_engine.generate(PROMPT, s) for s in (GREEDY, SEEDED)}
    assert all(len(t.steps) > 1 for t in traces.values())   # a record to compare beyond its first token
    assert len(set(traces[SEEDED].output_ids)) > 1           # tokens that differ, so an order mix-up shows
    return traces


@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_speculative_decoding_gives_the_engines_records(tiny_onnx_engine, alone, settings):
    spec = SpeculativeEngine(tiny_onnx_engine.backend, Speculation(k=4, row_cost=0.0)).generate(PROMPT, settings)
    plain = alone[settings]
    assert spec.speculation["proposed"] > 0, "nothing was proposed: the verify path was not taken"
    same_records(spec, plain, SHARED)
    # a pass's tokens share its cache: each token's seq_len and KV bytes are the pass's, measured after it
    last_of_pass = [a.forward_pass != b.forward_pass for a, b in zip(spec.steps, spec.steps[1:])] + [True]
    for s, one, last in zip(spec.steps, plain.steps, last_of_pass):
        if last:
            assert (s.seq_len, s.kv_bytes) == (one.seq_len, one.kv_bytes)


@pytest.mark.parametrize("prompts", [[PROMPT], [PROMPT, *OTHERS]], ids=["alone", "with-others"])
def test_our_batching_gives_the_engines_records(tiny_onnx_engine, alone, prompts):
    result = SCHEDULERS["batching"].create(tiny_onnx_engine).run(workload(prompts))
    trace = result.records[0].trace
    same_records(trace, alone[GREEDY], SHARED + ("seq_len",))
    if len(prompts) > 1:
        assert max(s.rows for r in result.records for s in r.trace.steps) > 1   # it really shared passes
    # KV bytes: its slot's positions in use, the engine's cache tensors measured (the same positions)
    assert [s.kv_bytes for s in trace.steps] == [s.seq_len * result.pool["position_bytes"] for s in trace.steps]


def test_our_batcher_samples_each_request_as_the_engine_does(tiny_onnx_engine, alone):
    batcher = Batcher(tiny_onnx_engine, BatchConfig(slots=3, prefill_chunk=8), capacity=256)
    seqs = [batcher.add(tiny_onnx_engine.prompt_ids(p, SEEDED)[1], SEEDED, i) for i, p in enumerate([PROMPT, *OTHERS])]
    while batcher.busy():
        batcher.step()
    same_records(seqs[0].trace, alone[SEEDED], SHARED + ("seq_len",))


@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_the_endpoint_gives_the_engines_records(tiny_onnx_engine, alone, settings):
    ids = tiny_onnx_engine.prompt_ids(PROMPT, settings)[1]
    body = {"prompt": ids, "max_tokens": N, "temperature": settings.temperature, "seed": settings.seed}
    config = ApiConfig(slots=2, capacity=256)
    service = ApiService(Room(lambda: tiny_onnx_engine, tiny_onnx_engine.info.name, config.loop_size), config)
    service.room.loop_for(tiny_onnx_engine.info.name)
    try:
        job = service.open(read_body(body, COMPLETION), "test")
        ended = threading.Event()
        job.ticket.listen(lambda: job.ticket.done and ended.set())
        assert job.ticket.done or ended.wait(60)
        job.end()
        same_records(job.ticket.trace, alone[settings], SHARED + ("seq_len",))
    finally:
        service.room.close()


def test_transformers_manager_gives_the_torch_engines_records(varied_engine):
    plain = varied_engine.generate(PROMPT, GREEDY)
    assert len(set(plain.output_ids)) > 1
    for prompts in ([PROMPT], [PROMPT, *OTHERS]):
        trace = SCHEDULERS["batching-torch"].create(varied_engine).run(workload(prompts)).records[0].trace
        same_records(trace, plain, SHARED + ("seq_len",))   # the manager gives no probabilities nor KV bytes
        assert {s.prob for s in trace.steps} == {None} and {s.kv_bytes for s in trace.steps} == {None}


# --- one constructor, one stop rule

DECIDED = {"EOS", "LENGTH", "CONTEXT"}   # the reasons a sequence stops on its own


def decisions(tree: ast.AST) -> tuple[list[int], list[int]]:
    """(lines that construct a Step, lines that name EOS/LENGTH/CONTEXT outside a table): a table (a dict,
    tuple, list or set display) translates or groups reasons; anywhere else, naming one decides it."""
    tables = {id(n) for t in ast.walk(tree) if isinstance(t, (ast.Dict, ast.Tuple, ast.List, ast.Set))
              for n in ast.walk(t)}
    steps = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == "Step"]
    stops = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in DECIDED
             and isinstance(n.value, ast.Name) and n.value.id == "StopReason" and id(n) not in tables]
    return steps, stops


@pytest.mark.slow
def test_a_step_is_made_and_a_stop_decided_only_in_next_token():
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "next_token.py" and path.parent == ROOT:
            continue
        steps, stops = decisions(ast.parse(path.read_text(encoding="utf-8")))
        for kind, lines in (("constructs a Step", steps), ("decides a stop reason", stops)):
            if lines:
                found[f"{path.relative_to(ROOT.parent)} {kind}"] = lines
    assert found == {}


def test_the_check_sees_a_step_built_and_a_stop_decided_elsewhere():
    code = ("step = Step(index=0)\nif token in eos:\n    trace.stop_reason = StopReason.EOS\n"
            "NAMES = {StopReason.EOS: 'eos'}\nDONE = (StopReason.EOS, StopReason.LENGTH)\n")
    assert decisions(ast.parse(code)) == ([1], [3])
