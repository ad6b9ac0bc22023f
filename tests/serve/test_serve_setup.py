"""The Serve setup is built once (serve/setup.py): the Serve tab's form and the CLI's flags, given equal inputs,
make the same schedulers (names, configs, sources) and the same workload (every request's arrival, prompt, prompt
ids and max tokens)."""
from __future__ import annotations

import pytest

from playground.config import GenerationSettings
from playground.prompts import SHORT_QUESTION, SUMMARIZE_INSTRUCTION, long_document
from playground.registry import SourceRegistry
from playground.serve import cli
from playground.serve.presets import CACHE_POSITIONS
from playground.serve.setup import Pick, WorkloadForm, make_scheduler, parse_chunks, parse_sizes
from playground.ui.serve_layout import NONE, ServeForm
from playground.ui.serve_tab import serve_setup


@pytest.fixture(scope="module")
def sources(tiny_engine, tiny_onnx_engine):
    return {"onnx": tiny_onnx_engine, "torch": tiny_engine}


def registry_of(sources) -> SourceRegistry:
    return SourceRegistry(lambda name, progress: sources[name], list(sources), default="onnx")


def serve_form(a, b, *, n=10, rate=2.0, seed=3, tokens=12, prefix_cache=False, preset=NONE) -> ServeForm:
    return ServeForm(n=n, arrival="poisson", rate=rate, seed=seed, short_prompt=SHORT_QUESTION, short_tokens=tokens,
                     short_share=0.7, long_prompt=SUMMARIZE_INSTRUCTION + long_document(), long_tokens=tokens,
                     long_share=0.3, scheduler_a=a, source_a="onnx", scheduler_b=b, source_b="onnx", slots=6,
                     chunk=64, max_batch_tokens=128, blocks=40, manager="prefill_first", preset=preset,
                     prefix_cache_a=prefix_cache, prefix_cache_b=prefix_cache)


def cli_flags(a, b, *, n=10, rate=2.0, seed=3, tokens=12, prefix_cache=False, preset=None) -> list[str]:
    flags = ["--out", "unused", "--requests", str(n), "--rate", str(rate), "--seed", str(seed), "--max-new-tokens",
             str(tokens), "--mix", "short:0.7,long:0.3", "--scheduler", a, "--backend", "onnx", "--slots", "6",
             "--prefill-chunk", "64", "--max-batch-tokens", "128", "--num-blocks", "40", "--manager-scheduler",
             "prefill_first", "--prefix-cache", str(CACHE_POSITIONS if prefix_cache else 0)]
    return flags + (["--compare", b] if b != NONE else []) + (["--preset", preset] if preset else [])


def requests(schedulers, workload) -> list[tuple]:
    source = schedulers[0].source
    return [(r.id, r.cls, r.arrival, r.max_new_tokens, r.prompt, tuple(source.prompt_ids(r.prompt, GenerationSettings())[1]))
            for r in workload.requests]


def described(schedulers) -> list[tuple]:
    return [(s.name, s.label, getattr(s, "config", None), getattr(s, "pool", None), id(s.source)) for s in schedulers]


@pytest.mark.parametrize("a, b, changes", [
    ("one-at-a-time", "batching", {}),
    ("batching", "batching-torch", {"prefix_cache": True, "rate": 4.0, "seed": 7}),
    ("batching", NONE, {"n": 5}),
    ("batching", "batching", {"preset": "shared system prompt", "n": 6}),
])
def test_the_tab_and_the_cli_build_the_same_schedulers_and_workload(sources, a, b, changes):
    tab = serve_setup(registry_of(sources), serve_form(a, b, **{**changes, "preset": changes.get("preset", NONE)}))
    headless = cli.setup(cli.parse_args(cli_flags(a, b, **changes)), dict(sources))
    assert [s.name for s in tab[0]] == [s.name for s in headless[0]] and len(tab[0]) == (1 if b == NONE else 2)
    assert described(tab[0]) == described(headless[0])
    assert requests(*tab) == requests(*headless)
    assert tab[1].to_dict() == headless[1].to_dict()
    assert len({r[2] for r in requests(*tab)}) == len(tab[1].requests)   # Poisson: a distinct arrival each


def test_a_preset_sets_a_and_b_apart_by_one_setting(sources):
    schedulers, _ = serve_setup(registry_of(sources), serve_form("batching", "batching", preset="shared system prompt"))
    a, b = (s.config for s in schedulers)
    assert (a.prefix_cache, b.prefix_cache > 0) == (0, True) and a.slots == b.slots == 6


@pytest.mark.parametrize("pick, message", [
    (Pick("nope", "onnx"), "scheduler must be one of"),
    (Pick("concurrent", "onnx"), "needs a remote server"),
])
def test_a_scheduler_that_cannot_be_made_says_why(sources, pick, message):
    with pytest.raises(ValueError, match=message):
        make_scheduler(pick, sources.__getitem__)


def test_transformers_manager_is_refused_where_the_app_has_no_torch(sources):
    with pytest.raises(ValueError, match="does not offer"):
        make_scheduler(Pick("batching-torch", "onnx"), sources.__getitem__, offered=["onnx"])


@pytest.mark.parametrize("parse, text", [(parse_sizes, "0,2"), (parse_sizes, "a"), (parse_chunks, "8"),
                                         (parse_chunks, "")])
def test_sweep_sizes_out_of_range_are_refused_in_words(parse, text):
    with pytest.raises(ValueError, match="whole numbers between"):
        parse(text)


def test_the_workload_form_counts_no_rate_when_all_arrive_at_once():
    form = WorkloadForm(4, "all-at-once", 3.0, 0, "q", 4, 1, "d", 4, 0)
    assert form.arrival_rate() is None


@pytest.mark.parametrize("flags, message", [
    (["--mix", "medium:1"], "--mix names medium: the classes are short and long"),
    (["--scheduler", "concurrent"], "needs --url"),
])
def test_the_cli_refuses_a_setup_it_cannot_build_in_words(sources, flags, message):
    args = cli.parse_args(["--out", "unused", "--backend", "onnx", *flags])
    with pytest.raises(SystemExit, match=message):
        cli.setup(args, dict(sources))


def test_the_tab_and_the_cli_replay_a_session_trace_file_alike(sources):
    """The Serve tab's "Replay the file" and the CLI's --workload read a trace through run.replay_file: the same
    requests, each session's later turns waiting for their predecessors."""
    from dataclasses import asdict
    from pathlib import Path

    from playground.ui.serve_layout import ReplayForm
    trace = Path(__file__).resolve().parents[1] / "data" / "agent_traces" / "aiperf_weka_one_subagent.json"
    form = ReplayForm(**asdict(serve_form("batching", NONE)), trace_file=str(trace))
    schedulers, workload = serve_setup(registry_of(sources), form)
    args = cli.parse_args(cli_flags("batching", NONE) + ["--workload", str(trace)])
    _, cli_workload = cli.setup(args, dict(sources))
    assert workload == cli_workload
    assert [(r.session, r.after, r.delay) for r in workload.requests] == [
        ("trace_sa", None, 0.0), ("trace_sa", 0, 0.5), ("trace_sa::agent_001", None, 0.0)]
    with pytest.raises(ValueError, match="pick no preset to replay a file"):
        serve_setup(registry_of(sources), ReplayForm(**asdict(serve_form("batching", "batching", preset="shared system prompt")),
                                                     trace_file=str(trace)))
