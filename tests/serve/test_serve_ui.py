"""The Serve tab driven through gradio_client (tiny model): two schedulers side by side with exports, clear
messages for bad input, Stop, one workload per session, other CPU work waiting while a workload runs, and the
batch-size sweep drawn on the roofline and pricing a token."""
from __future__ import annotations

import html
import json
import threading

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from playground.engine import Engine
from playground.registry import SourceRegistry
from playground.ui import build_demo
from playground.ui.forms import api_args
from playground.ui.machine_gate import MachineGate
from playground.ui.serve_layout import SHARED_DRAW_EVERY, ServeForm, SweepForm
from playground.ui.serve_views import OUTPUTS
from tests.fakes import SlowBackend
from tests.helpers import free_port, generate_args, generated, trace_from, wait_for

OUT = {name: i for i, name in enumerate(OUTPUTS)}


def run_files(files) -> list:
    """The downloads that are a run's own JSON (serve-<scheduler>.json), not another format's."""
    return [f for f in files if str(f).endswith(".json") and not str(f).endswith("serve-perfetto.json")]
LONG = "Summarize the following document. " + "The cat sat on the mat. " * 40


def serve_args(n=4, arrival="all-at-once", rate=1.0, a="one-at-a-time", src_a="onnx", b="batching", src_b="onnx",
               **changes):
    """/serve's inputs, named as ServeForm's fields, in the order a client passes them."""
    fields = dict(n=n, arrival=arrival, rate=rate, seed=0, short_prompt="What is the capital of France?",
                  short_tokens=6, short_share=0.5, long_prompt=LONG, long_tokens=6, long_share=0.5, scheduler_a=a,
                  source_a=src_a, scheduler_b=b, source_b=src_b, slots=8, chunk=128, max_batch_tokens=256, blocks=0,
                  manager="fifo")
    return api_args(ServeForm(**{**fields, **changes}))


@pytest.fixture(scope="module")
def app_url(tiny_backend, tiny_engine, tiny_onnx_engine):
    slow = Engine(SlowBackend(tiny_backend, pause=0.03))
    sources = {"onnx": tiny_onnx_engine, "torch": tiny_engine, "slow": slow}
    registry = SourceRegistry(lambda name, progress: sources[name], list(sources), default="onnx")
    demo = build_demo(registry)
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1",
                                    quiet=True, show_error=True)   # a handler's exception reaches the test's message
    yield url
    demo.close()


@pytest.mark.slow
def test_the_same_workload_on_two_schedulers_side_by_side_with_exports(app_url):
    client = Client(app_url, verbose=False)
    job = client.submit(*serve_args(), api_name="/serve")
    final = job.result(timeout=300)
    assert final[OUT["status"]].count("done") == 2
    lesson = final[OUT["lesson"]]
    assert "- A: " in lesson and "- B: " in lesson and "B served the same 4 requests with " in lesson
    assert "first come, first served" not in lesson and "ONNX Runtime)" not in lesson   # named once, above
    status = final[OUT["status"]]
    assert "**A** = one at a time" in status and "**B** = continuous batching" in status
    assert "KV slots" in final[OUT["pool"]]
    assert "Goodput" in final[OUT["goodput"]] and "requests met it" in final[OUT["goodput"]]
    files = final[OUT["download"]]
    runs = [json.load(open(f, encoding="utf-8")) for f in run_files(files)]
    assert sorted(r["scheduler"] for r in runs) == ["batching", "one-at-a-time"]
    assert runs[0]["workload"] == runs[1]["workload"]   # replayed, not redrawn
    assert all(req["stop_reason"] in ("eos", "length") for r in runs for req in r["requests"])
    assert any(str(f).endswith(".html") for f in files)
    [perfetto] = [json.load(open(f, encoding="utf-8")) for f in files if str(f).endswith("serve-perfetto.json")]
    assert {e["pid"] for e in perfetto["traceEvents"]} == {1, 2}   # A and B, a process each
    [mooncake] = [f for f in files if str(f).endswith("serve-mooncake.jsonl")]
    with open(mooncake, encoding="utf-8") as fh:   # the workload as a Mooncake trace: one request a line
        assert [json.loads(line)["output_length"] for line in fh] == [len(r["trace"]["steps"]) for r in runs[0]["requests"]]
    # the SLO moved after the run: goodput recomputed from the stored records, nothing runs again
    assert client.predict(ttft=1e-6, tpot=0, api_name="/serve_goodput").count("0 of 4 requests met it") == 2
    assert client.predict(ttft=1000, tpot=0, api_name="/serve_goodput").count("4 of 4 requests met it") == 2
    assert "no limit set" in client.predict(ttft=0, tpot=0, api_name="/serve_goodput")


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (serve_args(arrival="poisson", rate=0), "rate must be"),
    (serve_args(b="concurrent"), "needs a remote server"),
    (serve_args(short_share=0.0, long_share=0.0), "add up to 0"),
    (serve_args(short_prompt="  "), "prompt is empty"),
])
def test_bad_input_gets_a_clear_message(app_url, args, message):
    final = Client(app_url, verbose=False).predict(*args, api_name="/serve")
    assert message in final[OUT["status"]]


@pytest.mark.slow
def test_stop_cancels_every_request_and_one_workload_runs_per_session(app_url):
    client = Client(app_url, verbose=False)
    job = client.submit(*serve_args(n=6, src_a="slow", b="(none)", short_tokens=200, long_tokens=200),
                        api_name="/serve")
    wait_for(lambda: any("running" in str(o[OUT["status"]]) for o in job.outputs() if o), timeout=180,
             message="the workload to start")   # the machine gate may first wait for the previous test's workload
    second = client.predict(*serve_args(), api_name="/serve")
    assert "already running in this session" in second[OUT["status"]]
    stopped = client.predict(api_name="/serve_stop")
    run = json.load(open(next(f for f in stopped[OUT["download"]] if str(f).endswith(".json")), encoding="utf-8"))
    ends = [r["stop_reason"] for r in run["requests"]]
    assert run["cancelled"] and "cancelled" in ends and all(ends)
    assert all(r["output_tokens"] < 200 for r in run["requests"])


@pytest.mark.slow
def test_other_cpu_work_waits_until_the_workload_ends(app_url):
    serve_client, gen_client = Client(app_url, verbose=False), Client(app_url, verbose=False)
    serve = serve_client.submit(*serve_args(n=3, src_a="slow", b="(none)", short_tokens=40, long_tokens=40),
                                api_name="/serve")
    wait_for(lambda: any("running" in str(o[OUT["status"]]) for o in serve.outputs() if o), timeout=180,
             message="the workload to start")
    reply = gen_client.predict(*generate_args(max_new_tokens=4, backend="torch"), api_name="/generate")
    run = json.load(open(next(f for f in serve.result(timeout=300)[OUT["download"]] if str(f).endswith(".json")),
                         encoding="utf-8"))
    workload_end = max(s["wall_ns"] for r in run["requests"] for s in r["trace"]["steps"])
    first_generated = trace_from(generated(reply)["files"])["steps"][0]["wall_ns"]
    assert first_generated > workload_end   # Generate's first token came after the workload's last


def test_the_gate_lets_a_workload_run_alone():
    gate = MachineGate()
    gate.enter_shared()
    assert not gate.acquire_alone(timeout=0)     # a run in progress: the workload waits
    gate.leave_shared()
    assert gate.acquire_alone(timeout=0)
    assert not gate.enter_shared(timeout=0)      # other work waits while the workload runs
    entered = threading.Event()
    threading.Thread(target=lambda: (gate.enter_shared(), entered.set()), daemon=True).start()
    gate.release_alone()
    assert entered.wait(60)                      # and takes its slot once the workload is done


REPEATS = "the cat sat on the mat and the cat sat on the mat and the dog sat on the mat and the cat"


@pytest.mark.slow   # the whole path end to end: seconds on the tiny model
def test_a_batch_sweep_draws_the_roofline_and_prices_a_token(app_url):
    client = Client(app_url, verbose=False)
    before = client.predict(usd_per_hour=0.10, api_name="/token_cost")
    assert before.count("missing: not measured in this session") == 3 and "$0.60" in before
    sweep = SweepForm(kind="batch", scheduler="batching", source="onnx", sizes="1,8", new_tokens=8, rates="1",
                      requests=2, ttft=2.0, tpot=0.2)
    final = client.submit(*api_args(sweep), api_name="/serve_sweep").result(timeout=300)
    assert "sweep done" in final[OUT["status"]]
    shown = final[OUT["sweep_roofline"]]   # an update: made visible, with the figure
    assert shown["visible"] is True
    roofline = json.loads(shown["value"]["plot"])
    measured = next(t for t in roofline["data"] if t["name"].startswith("decode (measured"))
    assert len(measured["x"]) == 2 and measured["x"][1] > measured["x"][0]   # 8 rows: further right than 1
    after = client.predict(usd_per_hour=0.10, api_name="/token_cost")
    assert "batch-size sweep, 8 at once" in after and "batch-size sweep, 1 at once" in after
    assert after.count("missing: not measured in this session") == 1   # speculative decoding: not yet
    out = generated(client.predict(*generate_args(REPEATS, max_new_tokens=24, backend="torch", speculate=True,
                                                  spec_ngram=2), api_name="/generate"))
    assert "finished" in out["status"] and "tokens per forward pass" in out["metrics"]
    priced = client.predict(usd_per_hour=0.10, api_name="/token_cost")
    assert "Generate run, speculative" in priced and "missing" not in priced
    with pytest.raises(AppError, match="less than minimum value 0"):   # the field refuses it, in words
        client.predict(usd_per_hour=-1, api_name="/token_cost")


@pytest.mark.slow
def test_a_prefill_chunk_sweep_draws_the_long_prompts_ttft_and_the_chatters_itl_per_chunk(app_url):
    client = Client(app_url, verbose=False)
    sweep = SweepForm(kind="chunk", scheduler="one-at-a-time", source="onnx", sizes="1", new_tokens=8, rates="1",
                      requests=2, ttft=2.0, tpot=0.2, chunks="256,32")   # our batching, whichever scheduler is picked
    final = client.submit(*api_args(sweep), api_name="/serve_sweep").result(timeout=300)
    status = html.unescape(final[OUT["status"]])
    assert "sweep done" in status and "Prefill chunk 32: the long prompt's TTFT " in status and "256: " in status
    figure = json.loads(final[OUT["sweep_plot"]]["plot"])
    ttft, itl = figure["data"][0], figure["data"][1]
    assert ttft["x"] == itl["x"] == [32, 256] and all(y > 0 for y in ttft["y"] + itl["y"])
    assert f"TTFT {ttft['y'][0]:.2f} s" in status and f"256: {ttft['y'][1]:.2f} s, {itl['y'][1]:.0f} ms" in status
    report = [f for f in final[OUT["download"]] if str(f).endswith("sweep-chunk.json")]
    points = json.load(open(report[0], encoding="utf-8"))["points"]
    assert [p["prefill_chunk"] for p in points] == [32, 256] and points[0]["document_passes"] > points[1]["document_passes"]
    bad = client.predict(*api_args(SweepForm(**{**vars(sweep), "chunks": "8,64"})), api_name="/serve_sweep")
    assert "prefill chunks must be whole numbers between 16 and 4096" in bad[OUT["status"]]


@pytest.mark.slow
def test_a_kv_memory_preset_runs_our_batching_twice_differing_by_one_setting(app_url):
    client = Client(app_url, verbose=False)
    final = client.predict(*serve_args(n=3, arrival="poisson", rate=4.0, a="one-at-a-time", b="(none)",
                                       preset="shared system prompt"), api_name="/serve")
    status, lesson = final[OUT["status"]], final[OUT["lesson"]]
    assert status.count("done") == 2 and "prefix cache" in status.split("<br>")[1]
    assert "prefix cache" not in status.split("<br>")[0]
    assert "**shared system prompt**: With the prefix cache" in lesson
    runs = [json.load(open(f, encoding="utf-8")) for f in run_files(final[OUT["download"]])]
    assert sorted(r["pool"]["prefix_cache_blocks"] > 0 for r in runs) == [False, True]
    assert final[OUT["itl_b"]] is not None


def test_the_sweeps_slo_is_the_tabs(tiny_engine):
    """One source of SLO defaults: the rate sweep's boxes start where the tab's goodput boxes do (they read
    TPOT 0.2 s against 0.5 s)."""
    from playground.ui import build_demo
    from playground.ui.serve_job import DEFAULT_SLO
    demo = build_demo(tiny_engine)
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    tab = tuple(by_id[f"serve-slo-{k}"].value for k in ("ttft", "tpot"))
    sweep = tuple(by_id[f"serve-sweep-slo-{k}"].value for k in ("ttft", "tpot"))
    assert sweep == tab == DEFAULT_SLO


def test_each_per_class_column_is_as_wide_as_its_header():
    """Sized to their data, the per-class tables' columns cut their headers ("cla…") at 1400 px."""
    from playground.ui.serve_layout import CLASS_WIDTHS
    from playground.ui.serve_views import CLASS_HEADERS
    assert len(CLASS_WIDTHS) == len(CLASS_HEADERS)
    # presenter mode's 20 px text: about 12 px a character, and the cell's padding
    assert all(width >= 12 * len(header) + 18 for width, header in zip(CLASS_WIDTHS, CLASS_HEADERS))


def test_in_a_served_room_only_the_runs_caption_promises_a_clients_share(tiny_engine):
    """An attendee's Run on this app's endpoint is held to a client's share (Room.joined_share); a sweep is not (its
    batch sizes are its lesson): the caption over Run says the share, the one over Run sweep does not."""
    from playground.api import ClientTraffic
    from playground.serve.room import Room
    room = Room(traffic=ClientTraffic())
    room.served = "the OpenAI-compatible endpoint is on"
    demo = build_demo(SourceRegistry(lambda name, progress: tiny_engine, ["torch"], default="torch"), room)
    said = [b.value for b in demo.blocks.values() if isinstance(getattr(b, "value", None), str)
            and b.value.startswith("This room is served")]
    run, sweep = said   # the Run form's caption, then the sweeps'
    assert f"at most {room.client_share} of its requests in flight at once" in run and "priority 1" in run
    assert f"charts redraw every {SHARED_DRAW_EVERY} s" in run
    assert "in flight" not in sweep and sweep.endswith("(its figures are shared ones).")


@pytest.mark.slow
def test_in_a_served_room_only_the_presenters_key_starts_a_serve_run(tiny_onnx_engine):
    """One attendee's Serve Run took the machine alone and stalled the whole room. While the room is served, a run
    (or a sweep) without the presenter's key, or with a wrong one, is refused before anything loads or waits; the
    presenter's key starts it."""
    from playground.api import ClientTraffic
    from playground.serve.room import Room
    from playground.ui.serve_layout import NONE

    room = Room(traffic=ClientTraffic())
    room.served, gate_taken = "the OpenAI-compatible endpoint is on", []
    room.set_presenter_key("presenter-7f3a")
    acquire = room.gate.acquire_alone
    room.gate.acquire_alone = lambda *a, **k: gate_taken.append(1) or acquire(*a, **k)
    demo = build_demo(SourceRegistry(lambda name, progress: tiny_onnx_engine, ["onnx"], default="onnx"), room)
    _, url, _ = demo.queue().launch(prevent_thread_lock=True, server_port=free_port(), server_name="127.0.0.1",
                                    quiet=True, show_error=True)
    try:
        client = Client(url, verbose=False)
        for key in ("", "a guess"):
            status = client.predict(*serve_args(n=2, b=NONE, presenter_key=key), api_name="/serve")[OUT["status"]]
            assert "only the presenter may start one" in status and "PLAYGROUND_PRESENTER_KEY" in status, status
            assert ("The key typed is not it." in status) == bool(key)
        swept = client.predict(*api_args(SweepForm("batch", "batching", "onnx", "1,2", 4, "1", 2, 2.0, 0.5)),
                               api_name="/serve_sweep")
        assert "only the presenter may start one" in swept[OUT["status"]]
        assert gate_taken == []   # refused before the machine was asked for
        done = client.predict(*serve_args(n=2, b=NONE, presenter_key="presenter-7f3a"), api_name="/serve")
        assert "done" in done[OUT["status"]] and gate_taken   # the presenter: it took the machine alone
    finally:
        demo.close()
