"""The app's endpoints driven through gradio_client against the demo launched in-process (tiny model)."""
from __future__ import annotations

import csv
import json

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from playground.step_stream import read_stream
from playground.ui import build_demo
from playground.ui.live.view import RUNNING_STATUS
from tests.helpers import (FRANCE, SWERVE_AT, compare_args, experiment_args, generate_args, generated, named, tiny_registry,
                           trace_from, wait_for)


# --- streaming

@pytest.mark.slow
def test_the_stream_grows_by_the_new_steps_and_ends_with_an_exportable_trace(app_url):
    client = Client(app_url, verbose=False)
    job = client.submit(*generate_args(max_new_tokens=12, backend="slow"), api_name="/generate")
    final = job.result(timeout=120)
    streams = [generated(o)["stream"] for o in job.outputs() if generated(o)["stream"]]
    counts = [len(read_stream(s)[1]) for s in streams]   # read_stream raises on a missing sequence number
    assert counts[0] == 0 and counts[-1] == 12
    assert counts == sorted(counts) and len(set(counts)) >= 4   # streamed: several updates, each adds steps
    assert all(b.startswith(a) for a, b in zip(streams, streams[1:]))   # append-only: Gradio sends the new lines
    running = [generated(o)["status"] for o in job.outputs()[:-1] if generated(o)["stream"]]
    assert running and "reading the prompt (prefill): " in running[0]   # until the first token, then constant:
    assert all(s == RUNNING_STATUS for s in running[1:] if "reading the prompt" not in s) and "generating" in running[-1]
    head, steps, end = read_stream(generated(final)["stream"])
    assert end["end"] == "length" and end["steps"] == 12 and set(end["figures"]) == {"timeline", "latency", "kv", "topk"}
    trace = trace_from(generated(final)["files"])
    assert [s["token_id"] for s in steps] == [s["token_id"] for s in trace["steps"]]
    assert [s["wall_ns"] for s in steps] == [s["wall_ns"] for s in trace["steps"]]
    assert len(trace["steps"]) == 12 and trace["stop_reason"] == "length" and trace["prompt"] == FRANCE
    assert "finished" in generated(final)["status"] and "TTFT" in generated(final)["metrics"]
    assert generated(final)["text"] == trace["text"]
    csv_path = next(f for f in generated(final)["files"] if str(f).endswith(".csv"))
    with open(csv_path, encoding="utf-8", newline="") as fh:
        assert len(list(csv.reader(fh))) == 13   # header + one row per token
    perfetto = next(f for f in generated(final)["files"] if str(f).endswith("trace-perfetto.json"))
    with open(perfetto, encoding="utf-8") as fh:   # Chrome Trace Events: one decode slice per step after the first
        assert sum(e["name"] == "decode" for e in json.load(fh)["traceEvents"]) == 11


@pytest.mark.slow
def test_top_k_and_metrics_endpoints_read_the_session_trace(app_url):
    client = Client(app_url, verbose=False)
    client.predict(*generate_args(max_new_tokens=5), api_name="/generate")
    figure = client.predict(step=2, api_name="/top_k")
    assert "Top-k at step 2" in json.dumps(figure)
    assert "cost (estimate)" in client.predict(price_in=100.0, price_out=100.0, api_name="/metrics")


@pytest.mark.slow
def test_stop_keeps_the_partial_trace(app_url):
    client = Client(app_url, verbose=False)
    job = client.submit(*generate_args(max_new_tokens=450), api_name="/generate")
    wait_for(lambda: len(job.outputs()) >= 5)
    stopped = client.predict(price_in=0.15, price_out=0.6, api_name="/stop")
    trace = trace_from(generated(stopped)["files"])
    assert trace["stop_reason"] == "cancelled"
    assert 5 <= len(trace["steps"]) < 450
    assert "stopped by you" in generated(stopped)["status"]
    job.result(timeout=60)   # the generate stream ends too, within a step
    assert job.done()


# --- bad input

@pytest.mark.slow
@pytest.mark.parametrize("prompt, changes, message", [
    ("   ", {}, "prompt is empty"),
    (FRANCE, {"seed": "-1"}, "seed must be between"),
    (FRANCE, {"seed": "abc"}, "seed must be a whole number"),
    (FRANCE, {"top_k": 2.5}, "top_k must be a whole number"),
    ("x" * 5000, {}, "context window"),
])
def test_bad_input_shows_a_message_and_the_app_keeps_serving(app_url, prompt, changes, message):
    client = Client(app_url, verbose=False)
    result = client.predict(*generate_args(prompt, **changes), api_name="/generate")
    assert message in generated(result)["status"]
    ok = client.predict(*generate_args(max_new_tokens=3), api_name="/generate")
    assert len(trace_from(generated(ok)["files"])["steps"]) == 3


@pytest.mark.slow
def test_values_outside_a_slider_are_refused_readably(app_url):
    client = Client(app_url, verbose=False)   # gradio checks slider bounds before the handler runs
    with pytest.raises(AppError, match="greater than maximum"):
        client.predict(*generate_args(temperature=9.0), api_name="/generate")
    ok = client.predict(*generate_args(max_new_tokens=2), api_name="/generate")
    assert len(trace_from(generated(ok)["files"])["steps"]) == 2


@pytest.mark.slow
def test_two_sessions_at_once_never_mix(app_url):
    a, b = Client(app_url, verbose=False), Client(app_url, verbose=False)
    job_a = a.submit(*generate_args("Prefill reads the whole prompt once.", max_new_tokens=20), api_name="/generate")
    job_b = b.submit(*generate_args(FRANCE, max_new_tokens=7), api_name="/generate")
    trace_a, trace_b = (trace_from(generated(j.result(timeout=120))["files"]) for j in (job_a, job_b))
    assert trace_a["prompt"].startswith("Prefill") and len(trace_a["steps"]) == 20
    assert trace_b["prompt"] == FRANCE and len(trace_b["steps"]) == 7


@pytest.mark.slow
def test_tokens_and_model_info_endpoints(app_url):
    client = Client(app_url, verbose=False)
    summary, chips, _ = client.predict(text=FRANCE + " <b>", chat_on=True, name="torch", api_name="/tokens")
    assert "cl100k_base" in summary and "match" in summary
    assert "&lt;" in chips and "<b>" not in chips
    assert "tiny-random-llama" in client.predict(backend="torch", api_name="/model_info")


def test_a_refused_paste_clears_the_previous_prompts_tokens_and_chart(tiny_backend, tiny_engine):
    """Regression: a 142k-character paste gave its error over the previous prompt's chart (the handler kept it),
    as if the chart were the paste's. The /tokens handler as the page calls it, on a prompt then the paste."""
    demo = build_demo(tiny_registry(tiny_backend, tiny_engine))
    show = next(f.fn for f in demo.fns.values() if f.api_name == "tokens")
    summary, chips, figure = show(FRANCE, True, "torch")
    assert "cl100k_base" in summary and chips and figure is not None
    summary, chips, figure = show("word " * 28_400, True, "torch")   # 142,000 characters, over the context window
    assert "error" in summary and "context" in summary, summary
    assert (chips, figure) == ("", None)


@pytest.mark.slow
def test_a_seed_makes_a_sampled_run_repeatable(app_url):
    client = Client(app_url, verbose=False)
    runs = [trace_from(generated(client.predict(*generate_args(temperature=1.0, seed="7", max_new_tokens=8),
                                      api_name="/generate"))["files"]) for _ in range(2)]
    ids = [[s["token_id"] for s in run["steps"]] for run in runs]
    assert ids[0] == ids[1] and runs[0]["settings"]["seed"] == 7


# --- backends: loading, failure

@pytest.mark.slow
def test_a_backend_that_fails_to_load_is_named_and_the_others_still_work(app_url):
    client = Client(app_url, verbose=False)
    failed = client.predict(*generate_args(backend="onnx"), api_name="/generate")
    status = generated(failed)["status"]
    assert "backend onnx failed to load" in status and "ONNX export impossible" in status
    assert "Pick another backend: torch" in status
    assert "backend onnx failed to load" in client.predict(backend="onnx", api_name="/model_info")
    ok = client.predict(*generate_args(max_new_tokens=3), api_name="/generate")
    assert len(trace_from(generated(ok)["files"])["steps"]) == 3
    again = client.predict(*generate_args(backend="onnx"), api_name="/generate")   # remembered, not retried
    assert "backend onnx failed to load" in generated(again)["status"]


@pytest.mark.slow
def test_the_first_use_of_a_backend_streams_its_loading_progress(app_url):
    client = Client(app_url, verbose=False)
    job = client.submit(*generate_args(backend="late", max_new_tokens=4), api_name="/generate")
    final = job.result(timeout=120)
    statuses = [generated(o)["status"] for o in job.outputs() if isinstance(generated(o)["status"], str)]
    assert any("loading backend late: exporting part" in s for s in statuses)
    assert len(trace_from(generated(final)["files"])["steps"]) == 4


# --- compare

@pytest.mark.slow   # the whole path end to end: seconds on the tiny model
def test_compare_finds_where_two_sources_part_ways(app_url):
    """Two sources that agree on the first SWERVE_AT tokens of 8, then differ: the agreement and the first
    divergence are measured from the two runs, not assumed."""
    from playground.ui.compare_tab import OUTPUTS
    client = Client(app_url, verbose=False)
    out = named(client.predict(*compare_args("torch", "copy"), api_name="/compare"), OUTPUTS)
    figure, table, agreement, status = out["figure"], out["table"], out["agreement"], out["status"]
    assert f"first divergence at output token {SWERVE_AT}" in agreement
    share = int(agreement.split("Token agreement ")[1].split("%")[0])
    assert share < 100 and share >= round(100 * SWERVE_AT / 8)
    assert f"token agreement {share}%" in json.dumps(figure)
    assert [row[0] for row in table["data"]] == ["torch", "torch"] and [row[3] for row in table["data"]] == [8, 8]
    assert "finished" in status
    answers = out["answers"]   # both answers' text, marked from the first differing token on, in each column
    assert answers.count('<mark class="cmp-first">') == 2 and f"(output token {SWERVE_AT})" in answers


@pytest.mark.slow
def test_compare_names_a_failed_backend(app_url):
    client = Client(app_url, verbose=False)
    *_, status = client.predict(*compare_args("torch", "onnx", max_new_tokens=4), api_name="/compare")
    assert "backend onnx failed to load" in status
    *_, status = client.predict(*compare_args("torch", "copy", "   ", max_new_tokens=4), api_name="/compare")
    assert "prompt is empty" in status


# --- experiments

@pytest.mark.slow
def test_experiment_prefill_sweep_gives_a_chart_summary_and_json(app_url):
    from playground.ui.experiments_tab import OUTPUTS
    client = Client(app_url, verbose=False)
    out = named(client.predict(*experiment_args("prefill"), api_name="/experiment"), OUTPUTS)
    figure, summary, path, status = out["figure"], out["summary"], out["download"], out["status"]
    assert "Prefill scaling sweep" in summary and "torch" in summary and "fit" in summary
    assert "Prefill" in json.dumps(figure) and status == "finished"
    with open(path, encoding="utf-8") as fh:
        result = json.load(fh)
    assert result["experiment"] == "prefill" and [p["length"] for p in result["points"]] == [16, 32, 64]


@pytest.mark.slow
def test_experiment_cache_comparison_reports_identical_tokens(app_url):
    from playground.ui.experiments_tab import OUTPUTS
    client = Client(app_url, verbose=False)
    out = named(client.predict(*experiment_args("cache"), api_name="/experiment"), OUTPUTS)
    assert "Cache vs no cache" in out["summary"] and "the same" in out["summary"] and "as long" in out["summary"]
    assert out["figure"] and out["status"] == "finished"


@pytest.mark.slow
def test_experiment_bad_ranges_are_refused_readably(app_url):
    client = Client(app_url, verbose=False)
    *_, status = client.predict(*experiment_args("cache", prompt_tokens=2000, new_tokens=100), api_name="/experiment")
    assert "context window" in status
    *_, status = client.predict(*experiment_args("cache", backend="onnx"), api_name="/experiment")
    assert "backend onnx failed to load" in status


@pytest.mark.slow
def test_cancel_ends_an_experiment_with_its_partial_result(app_url):
    client = Client(app_url, verbose=False)
    # 400 decode steps of 20 ms each: about 8 s unless cancelled
    job = client.submit(*experiment_args("depth", backend="slow", prompt_tokens=16, new_tokens=400),
                        api_name="/experiment")
    from playground.ui.experiments_tab import OUTPUTS
    wait_for(lambda: any("decode at depth" in str(named(o, OUTPUTS)["status"]) for o in job.outputs()))
    out = named(client.predict(api_name="/cancel_experiment"), OUTPUTS)
    summary, path, status = out["summary"], out["download"], out["status"]
    assert "cancelled" in status and "partial result" in summary
    with open(path, encoding="utf-8") as fh:
        result = json.load(fh)
    assert result["cancelled"] and 0 < len(result["latency"]) < 400
    job.result(timeout=30)
    assert job.done()


@pytest.mark.slow
def test_compare_offers_two_different_backends_by_default(tiny_backend, tiny_engine):
    demo = build_demo(tiny_registry(tiny_backend, tiny_engine))
    values = {b.elem_id: b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) in ("compare-a", "compare-b")}
    assert values["compare-a"] == "torch" and values["compare-b"] not in (None, "torch")


@pytest.mark.slow
def test_every_named_endpoint_keeps_the_names_inputs_and_outputs_clients_have_used(tiny_engine):
    """tests/data/gradio_api.json: the named endpoints as gradio_client saw them on Gradio 5.50 (with the endpoint's
    Serve panel), parameters as (name, component, has a default) and the returned components; Gradio 6 serves them
    the same (its private events, the page's own, are no endpoints)."""
    from pathlib import Path

    from playground.api import ClientTraffic
    from playground.serve.room import Room
    from tests.browser import launch
    demo = build_demo(tiny_engine, Room(traffic=ClientTraffic()))
    try:
        info = Client(launch(demo), verbose=False).view_api(return_format="dict", print_info=False)
    finally:
        demo.close()
    seen = {name: {"parameters": [[p["parameter_name"], p["component"], p["parameter_has_default"]]
                                  for p in endpoint["parameters"]],
                   "returns": [r["component"] for r in endpoint["returns"]]}
            for name, endpoint in info["named_endpoints"].items()}
    assert seen == json.loads((Path(__file__).parents[1] / "data" / "gradio_api.json").read_text())
    assert info["unnamed_endpoints"] == {}


def test_a_gradio_deprecation_fails_the_test_that_meets_it():
    """pyproject.toml's warning filters: the suite's log holds no Gradio deprecation, since meeting one is an error
    (here Gradio's three kinds: its own module's, one reported at the caller's line, gr.Blocks's moved parameters)."""
    import gradio as gr
    from gradio_client import file

    with pytest.raises(UserWarning, match=r"file\(\) is deprecated"):
        file(__file__)
    with pytest.raises(DeprecationWarning, match="will be removed in Gradio 6"):
        gr.Dataframe(col_count=2)
    with pytest.raises(UserWarning, match="moved from the Blocks constructor to the launch"):
        gr.Blocks(css="p { margin: 0 }")


def test_the_running_status_carries_no_count_for_gradio_to_send_back():
    """The page counted "8 tokens so far", then Gradio sent the status again with its fixed "0" inside: the count
    went back to 0. The page alone writes the count (live/stream.js), with the plural units.tokens writes."""
    import re
    from playground.ui.live.view import LIVE_DIR
    assert not re.search(r"\d", RUNNING_STATUS) and 'id="pg-count"' in RUNNING_STATUS
    script = (LIVE_DIR / "stream.js").read_text(encoding="utf-8")
    assert '" tokens so far"' not in script and "tokenCount(n)} so far" in script


@pytest.mark.slow
def test_a_preset_that_ticks_speculative_decoding_says_so_before_the_click(tiny_backend, tiny_engine):
    """"a short open question (nothing to copy)" ticked speculative decoding, which takes the run out of the room's
    engine loop, and its button did not say so: each preset that ticks it now says so on its button."""
    from playground.ui.generate_layout import SPECULATES
    demo = build_demo(tiny_registry(tiny_backend, tiny_engine))
    speculate = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "speculate")
    ticking, presets = [], [b for b in demo.blocks.values() if str(getattr(b, "value", "")).startswith("Preset: ")]
    for fn in demo.fns.values():
        if speculate in fn.outputs and not fn.inputs and fn.fn is not None:
            set_to = fn.fn()[fn.outputs.index(speculate)]
            ticking += [demo.blocks[target] for target, _ in fn.targets if set_to is True]
    assert len(ticking) == 2 and all(b.value.endswith(SPECULATES) for b in ticking), [b.value for b in ticking]
    assert all(b in ticking for b in presets if SPECULATES in b.value)   # none says it and leaves the path as it is
