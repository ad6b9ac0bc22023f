"""The "ui" benchmark rows: what the app costs the model it measures, and whether that cost grows with a run.

    python -m playground.bench ui                      # onnx, "Explain the KV cache in one paragraph.", 128 tokens
    python -m playground.bench ui --browser            # + one run watched by Chromium on this machine
    python -m playground.bench ui --browser --pin      # the model on CPU 0, Chromium on CPU 1 (a browser elsewhere)
    python -m playground.bench ui --model tiny --backend torch --tokens 16 --repeats 1   # what the tests run

Row "ui": app.py in a subprocess (app_process.AppProcess), driven by gradio_client, against a headless
run (Engine.generate) in this process on the same backend, prompt, greedy settings and token budget,
alternating (headless, app, headless, app, …). Both decode tok/s are the ones each run's own trace
reports (the app's: its exported trace.json); medians. Also: the bytes the app sent back for a run (the
SSE stream as received, through a counting proxy), the server's CPU seconds per generated token, and
the part of it outside the model: server CPU during the run minus the model's CPU for the same tokens,
taken from the headless run (Step.cpu summed: the step loop's process CPU, nothing else running); it
includes the request's own work (template, tokenizing, the final figures and exports). During decode
alone: the server's CPU seconds per second (sampled every 50 ms) beside the headless run's.
("wire_bytes" counts the SSE stream only; "all_bytes_with_downloads" adds the exported files the
client fetched and every other response.)
With --browser, one more app run is watched by Chromium (on the same cores as the model): when each
chip entered the DOM against its step's wall-clock stamp (p50/p95), how often the charts were redrawn,
and that run's decode tok/s. With --pin the app and the headless runs are on CPU 0, Chromium on CPU 1:
a browser on another machine, emulated on 2 cores (both sides of the ratio then have one core); while
the app serves a request, this process's threads (gradio_client, the counting proxy, Playwright) move
to CPU 1 too, as a client elsewhere would be (the headless run has no client to pay for). Row "ui-flat": the app over a PacedEngine (paced.py: steps at a fixed
pace, no model, so the server's CPU is all the UI's) for 2048 steps: server CPU and bytes per update in
the first and the last quarter of the run.

Figures, not tests: they depend on the machine and its load.
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
from dataclasses import dataclass, field

from ..chromium import chromium_path
from ..metrics import percentile
from ..step_stream import read_stream
from .app_process import AppProcess
from .recorder import RECORDER
from .rows import Row, parser, say
from .stats import median, rounded


@dataclass(frozen=True, kw_only=True)
class UiRow(Row):
    """The app against a headless run on the same backend (ui.ui_row): medians over the runs; with --browser,
    one run watched by Chromium, under a key that says where Chromium ran."""

    OPTIONAL = ("with_chromium_on_its_own_cpu", "with_chromium_on_the_same_machine")

    row: str = field(default="ui", init=False)
    backend: str
    model: str
    prompt: str
    new_tokens: int                       # the fewest of any run
    same_tokens: bool                     # every run generated as many
    repeats: int
    headless_decode_tps: float | None
    ui_decode_tps: float | None
    wire_bytes: float | None              # the SSE stream of a run, bytes
    sse_events: float | None
    all_bytes_with_downloads: float | None
    server_cpu_s_per_token: float | None  # the app's process, CPU seconds
    model_cpu_s_per_token: float | None   # the headless run's steps
    server_cpu_outside_model_s_per_token: float
    decode_cpu_s_per_s_server_vs_headless: list[float | None]   # CPU seconds a second of decode: [server, headless]
    client_cpu_s_per_run: float | None    # this process, CPU seconds
    decode_ratio_ui_vs_headless: float
    with_chromium_on_its_own_cpu: dict | None = None        # --pin: chip delays (ms), chart redraws, decode tok/s
    with_chromium_on_the_same_machine: dict | None = None


@dataclass(frozen=True, kw_only=True)
class UiFlatRow(Row):
    """The app over a PacedEngine: its work per update in the first and the last quarter of a long run
    (ui.flat_row)."""

    row: str = field(default="ui-flat", init=False)
    steps: int
    steps_per_s: float
    sse_events: int
    wire_bytes: int
    server_cpu_ms_per_update_first_quarter: float | None
    server_cpu_ms_per_update_last_quarter: float | None
    bytes_per_update_first_quarter: float | None
    bytes_per_update_last_quarter: float | None


PROMPT = "Explain the KV cache in one paragraph."
MAX_NEW_TOKENS = 128
FLAT_STEPS, FLAT_STEPS_PER_S = 2048, 100.0
PRICES = (0.15, 0.6)
def _decode_tps(steps: list[dict]) -> float | None:   # metrics.py's definition, from stream records
    after, span = sum(s["tokens"] for s in steps[1:]), steps[-1]["time"] - steps[0]["time"] if steps else 0
    return after / span if after and span > 0 else None


def app_run(app: AppProcess, client, backend: str, tokens: int) -> dict:
    """One /generate through the app: its trace, the bytes and events it sent back, the server's CPU (for
    the whole request, and from its first decode step to its last, sampled every 50 ms)."""
    from ..ui.generate_handlers import OUTPUTS   # the page's output order (gradio loads with it: only the UI rows need it)
    samples, done = [app.sample()], threading.Event()

    def sample():
        while not done.wait(0.05):
            samples.append(app.sample())
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    before, all0 = _own_cpu(), app.proxy.received
    result = client.submit(PROMPT, 0.0, 0, 1.0, "", tokens, True, *PRICES, backend, api_name="/generate").result(600)
    done.set()
    sampler.join()
    samples.append(app.sample())
    out = dict(zip(OUTPUTS, result))
    with open(next(f for f in out["files"] if str(f).endswith(".json")), encoding="utf-8") as fh:
        trace = json.load(fh)
    (t0, cpu0, bytes0, events0), (t1, cpu1, bytes1, events1) = samples[0], samples[-1]
    steps = trace["steps"]
    decode = [s for s in samples if steps[1]["wall_ns"] / 1e9 <= s[0] <= steps[-1]["wall_ns"] / 1e9] \
        if len(steps) > 2 else []
    return {"trace": trace, "seconds": t1 - t0, "server_cpu": cpu1 - cpu0, "bytes": bytes1 - bytes0,
            "all_bytes": app.proxy.received - all0, "events": events1 - events0, "client_cpu": _own_cpu() - before,
            "stream": out["stream"],   # server CPU per second of decode, between the samples inside it
            "decode_cpu_per_s": (decode[-1][1] - decode[0][1]) / (decode[-1][0] - decode[0][0])
            if len(decode) > 2 and decode[-1][0] > decode[0][0] else None}


def ui_row(backend: str = "onnx", model: str | None = None, tokens: int = MAX_NEW_TOKENS, repeats: int = 5,
           browser: bool = False) -> UiRow:
    from gradio_client import Client

    from ..backends import create_backend
    from ..config import GenerationSettings
    from ..engine import Engine

    engine = Engine(create_backend(backend, model))
    settings = GenerationSettings(max_new_tokens=tokens, temperature=0.0, chat=True)
    with AppProcess(["app.py", "--backend", backend] + (["--model", model] if model else [])) as app:
        client = Client(app.url, verbose=False)
        engine.generate(PROMPT, settings.with_(max_new_tokens=4))   # warm-up, both sides (the app loads its model)
        with client_side():
            app_run(app, client, backend, 4)
        headless, ui = [], []
        for _ in range(repeats):   # alternating, so a burst of load on the shared cores hits both sides alike
            headless.append(engine.generate(PROMPT, settings))
            with client_side():
                ui.append(app_run(app, client, backend, tokens))
        with client_side():
            watched = browser_run(app, tokens) if browser else None
    n = [len(h.steps) for h in headless] + [len(u["trace"]["steps"]) for u in ui]
    model_cpu = median((sum(s.cpu or 0.0 for s in h.steps) / len(h.steps) for h in headless), 5)
    server_cpu = median((u["server_cpu"] / len(u["trace"]["steps"]) for u in ui), 5)
    # during decode: the server's CPU per second against the headless model's CPU per second of decode
    model_decode = median((sum(s.cpu or 0.0 for s in h.steps[1:]) / (h.steps[-1].time - h.steps[0].time)
                           for h in headless if len(h.steps) > 2), 5)
    server_decode = median((u["decode_cpu_per_s"] for u in ui), 5)
    headless_tps = median((h.metrics().decode_tps for h in headless), 5)
    ui_tps = median((u["trace"]["metrics"]["decode_tps"] for u in ui), 5)
    if watched:
        watched["decode_ratio_vs_headless"] = round(watched["decode_tps"] / headless_tps, 3)
    return UiRow(backend=backend, model=engine.info.model, prompt=PROMPT, new_tokens=min(n),
                 same_tokens=len(set(n)) == 1, repeats=repeats, headless_decode_tps=headless_tps,
                 ui_decode_tps=ui_tps, wire_bytes=median((u["bytes"] for u in ui), 5),
                 sse_events=median((u["events"] for u in ui), 5),
                 all_bytes_with_downloads=median((u["all_bytes"] for u in ui), 5),
                 server_cpu_s_per_token=server_cpu, model_cpu_s_per_token=model_cpu,
                 server_cpu_outside_model_s_per_token=round(server_cpu - model_cpu, 5),
                 decode_cpu_s_per_s_server_vs_headless=[server_decode, model_decode],
                 client_cpu_s_per_run=median((u["client_cpu"] for u in ui), 5),
                 decode_ratio_ui_vs_headless=round(ui_tps / headless_tps, 3),
                 # the watched run, under a key that says where Chromium ran
                 with_chromium_on_its_own_cpu=watched if watched and PINNED_CPUS else None,
                 with_chromium_on_the_same_machine=watched if watched and not PINNED_CPUS else None)


def can_pin() -> bool:
    """2 CPUs this process may use, and taskset to put Chromium on the other."""
    import shutil
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2 and bool(shutil.which("taskset"))


def pin_cpus() -> None:
    """This process (and the app it starts) on CPU 0; Chromium, through a taskset wrapper, on CPU 1."""
    import tempfile
    from pathlib import Path
    if not can_pin():
        raise SystemExit("--pin needs 2 CPUs and taskset (util-linux)")
    chromium = chromium_path()
    cpus = sorted(os.sched_getaffinity(0))
    wrapper = Path(tempfile.mkdtemp(prefix="pg-chromium-")) / "chromium"
    wrapper.write_text(f'#!/bin/sh\nexec taskset -c {cpus[1]} "{chromium}" "$@"\n')
    wrapper.chmod(0o755)
    os.environ["PLAYGROUND_CHROMIUM"] = str(wrapper)
    PINNED_CPUS[:] = cpus[:2]
    _move_threads({cpus[0]})


PINNED_CPUS: list[int] = []   # [the model's CPU, the client's] once pin_cpus has run


def _move_threads(cpus: set[int]) -> None:
    """Every thread of this process onto `cpus` (a thread started later inherits its creator's CPUs)."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):   # a thread that has just ended
            os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def client_side():
    """With --pin: this process's threads on the client's CPU while the app serves a request, then back."""
    if not PINNED_CPUS:
        yield
        return
    _move_threads({PINNED_CPUS[1]})
    try:
        yield
    finally:
        _move_threads({PINNED_CPUS[0]})


def browser_flags() -> list[str]:
    """What `make bench` adds: a run watched by Chromium, pinned to its own CPU where the machine allows."""
    import importlib.util
    if not os.path.exists(chromium_path()) or importlib.util.find_spec("playwright") is None:
        return []
    return ["--browser", "--pin"] if can_pin() else ["--browser"]


def browser_run(app: AppProcess, tokens: int) -> dict:
    """One run in a Chromium page on the app: chip-in-DOM delays against each step's stamp, chart redraws."""
    from playwright.sync_api import sync_playwright
    chromium = chromium_path()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(app.url)
        page.wait_for_selector("#generate", timeout=120_000)
        page.wait_for_function("window.pgLive && !document.querySelector('#model-info').innerText.includes('Loading')",
                               timeout=300_000)
        page.locator("#prompt textarea").fill(PROMPT)
        page.locator("#max-new-tokens input[type=number]").fill(str(tokens))
        page.locator("#max-new-tokens input[type=number]").press("Enter")
        page.evaluate(RECORDER)
        (t0, cpu0, bytes0, _) = app.sample()
        page.locator("#generate").click()
        page.wait_for_function("window.pgLive.state() && window.pgLive.state().finalShown", timeout=600_000)
        (t1, cpu1, bytes1, _) = app.sample()
        record, stats = page.evaluate("window.pgRecord"), page.evaluate("window.pgLive.stats")
        draws = stats["drawTimes"]
        _, steps, _ = read_stream(page.evaluate("document.querySelector('#stream textarea').value"))
        browser.close()
    delays = sorted(record["chips"][str(s["seq"])] - s["wall_ns"] / 1e6 for s in steps)
    first, last = steps[0]["wall_ns"] / 1e6, steps[-1]["wall_ns"] / 1e6
    during = [t for t in draws if first <= t <= last]
    return {"tokens": len(steps), "decode_tps": round(_decode_tps(steps), 2),
            "chip_in_dom_p50_ms": round(statistics.median(delays)), "chip_in_dom_p95_ms": round(percentile(delays, 95)),
            "chart_refreshes_per_s": round(len(during) / ((last - first) / 1e3), 2) if last > first else None,
            "chart_cycle_main_thread_ms_p50": round(statistics.median(stats["drawMs"])) if stats["drawMs"] else None,
            "chart_cycle_wall_ms_p50": round(statistics.median(stats["cycleWallMs"])) if stats["cycleWallMs"] else None,
            "chart_ms_p50": {name: round(statistics.median(ms), 1) for name, ms in stats["chartMs"].items() if ms},
            "steps_by_live_channel": stats["channelSteps"],
            "server_cpu_s_per_token": round((cpu1 - cpu0) / len(steps), 5), "wire_bytes": bytes1 - bytes0}


def flat_row(steps: int = FLAT_STEPS, steps_per_s: float = FLAT_STEPS_PER_S) -> UiFlatRow:
    """The UI's server CPU and bytes per update early and late in a long run (flat = no growth with length)."""
    from gradio_client import Client
    with AppProcess.paced(steps_per_s) as app:
        client = Client(app.url, verbose=False)
        app_run(app, client, "torch", 8)   # warm-up
        samples, done = [], threading.Event()

        def sample():
            while not done.wait(0.25):
                samples.append(app.sample())
        threading.Thread(target=sample, daemon=True).start()
        run = app_run(app, client, "torch", steps)
        done.set()
    steps_ = run["trace"]["steps"]   # quarters of the steps' own span: the final update (figures, exports) is after it
    start, end = steps_[0]["wall_ns"] / 1e9, steps_[-1]["wall_ns"] / 1e9
    first = [s for s in samples if start <= s[0] <= start + (end - start) / 4]
    last = [s for s in samples if end - (end - start) / 4 <= s[0] <= end]

    def per_update(part, i):
        events = part[-1][3] - part[0][3]
        return (part[-1][i] - part[0][i]) / events if events else None
    return UiFlatRow(steps=len(run["trace"]["steps"]), steps_per_s=steps_per_s, sse_events=run["events"],
                     wire_bytes=run["bytes"],
                     server_cpu_ms_per_update_first_quarter=rounded(per_update(first, 1), scale=1e3),
                     server_cpu_ms_per_update_last_quarter=rounded(per_update(last, 1), scale=1e3),
                     bytes_per_update_first_quarter=rounded(per_update(first, 2)),
                     bytes_per_update_last_quarter=rounded(per_update(last, 2)))


def _own_cpu() -> float:
    import psutil
    cpu = psutil.Process().cpu_times()
    return cpu.user + cpu.system


def main(argv: list[str]) -> None:
    p = parser("ui", __doc__)
    p.add_argument("--backend", default="onnx")
    p.add_argument("--tokens", type=int, default=MAX_NEW_TOKENS)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--browser", action="store_true", help="one more run watched by Chromium on this machine")
    p.add_argument("--flat-steps", type=int, default=FLAT_STEPS, help="the ui-flat row's run length (0: skip it)")
    p.add_argument("--pin", action="store_true", help="the model on one CPU, Chromium on another (with --browser)")
    args = p.parse_args(argv)
    if args.pin:
        pin_cpus()
    say(ui_row(args.backend, args.model, args.tokens, args.repeats, args.browser))
    if args.flat_steps:
        say(flat_row(args.flat_steps))
