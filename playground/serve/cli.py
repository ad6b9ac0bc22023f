"""`python -m playground.serve …` (also `python -m playground.experiments serve …`): a workload (or a sweep) headless, to JSON and an HTML report.

    python -m playground.serve --requests 16 --mix short:0.8,long:0.2 --rate 2 \\
        --scheduler batching --compare one-at-a-time --backend onnx --out results/serve
    python -m playground.serve --sweep batch --scheduler batching --out results/sweep
    python -m playground.serve --sweep rate --rates 0.25,0.5,1 --ttft-slo 2 --tpot-slo 0.2 --out …
    python -m playground.serve --sweep chunk --chunks 32,128,512 --out …   # a long document among chatters
    python -m playground.serve --workload results/serve/workload.json --scheduler … --out …  # replay
    python -m playground.serve --workload trace.jsonl --time-scale 0.5 --requests 32 --out …  # a Mooncake trace
    python -m playground.serve --workload agent.json --time-scale 0.01 --out …   # sessions: Weka, ATIF (agent_trace.py)
    python -m playground.serve --preset "shared system prompt" --out results/prefix   # A and B differ by one setting
    python -m playground.serve --url http://127.0.0.1:8080/v1 --scheduler concurrent \
        --compare one-at-a-time --out …      # a server: concurrent against one at a time, on the server

Writes DIR/workload.json (replayable), DIR/<scheduler>/requests/<id>.json (one per request: its
timeline and Steps), DIR/<scheduler>.json (summary, batches, KV samples), DIR/perfetto.json (A and B as
Chrome Trace Events, for ui.perfetto.dev), DIR/mooncake.jsonl (the workload as a Mooncake trace: one request a
line), DIR/sessions.jsonl (A's run as session lines: agent_trace.py), DIR/serve.html (standalone report); sweeps write DIR/sweep-<kind>.json and DIR/serve.html. A preset (presets.py) runs its own workload on
our batching twice, A and B (DIR/batching-a, DIR/batching-b), and prints its finding in one sentence. Progress goes to stderr about once
a second. Ctrl-C cancels every request (within one step) and still writes what was measured.

The flags are read into the Serve tab's WorkloadForm and Picks; run.py builds and runs the workload, the preset
or the sweep for both, so equal inputs give equal runs (tests/serve/test_serve_setup.py); this file keeps the
files, the JSON lines and the progress on stderr.

Left out: starting a server (the concurrent scheduler takes --url of a running one).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from ..prompts import SHORT_QUESTION, SUMMARIZE_INSTRUCTION, long_document
from .registry import SCHEDULERS, Needs
from .batching import BatchConfig
from .presets import PRESETS
from .run import SWEEP_KINDS, measure_preset, plan_sweep, replay_file, run_sweep, run_workload, workload_setup
from .setup import Pick, WorkloadForm, interference_workload, pool_config
from .sweeps import BATCH_SIZES, CHUNK_SIZES, RATES
from .agent_trace import sessions_jsonl
from .mooncake import BLOCK_TOKENS, results_jsonl
from .workload import ARRIVALS, MAX_REQUESTS, MAX_WORKLOAD_TOKENS, Workload, parse_mix


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m playground.serve", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--requests", type=int, default=None,
                   help=f"1-{MAX_REQUESTS} (default 16; a preset's own; a trace's first {MAX_REQUESTS})")
    p.add_argument("--mix", default="short:0.8,long:0.2", help="class:share pairs (classes: short, long)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--rate", type=float, default=None, help="requests/s (default: all at once)")
    p.add_argument("--arrival", choices=ARRIVALS, default=None, help="default: poisson with --rate, else all-at-once")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workload", type=Path, default=None,
                   help="replay a workload.json, or a trace: Mooncake lines with or without AIPerf's session fields "
                        "(.jsonl), a Weka trace or an ATIF trajectory (.json), instead of drawing one")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="a trace: its arrival gaps and session delays times this (0.5: twice as fast)")
    p.add_argument("--block-size", type=int, default=BLOCK_TOKENS,
                   help="a Mooncake trace: prompt tokens per hash id (written traces use 512)")
    p.add_argument("--scheduler", choices=list(SCHEDULERS), default="batching")
    p.add_argument("--compare", choices=list(SCHEDULERS), default=None, help="the same workload on a second scheduler")
    p.add_argument("--backend", default=None, help="the source of one-at-a-time (default: the --url server if "
                                                   "given, else as the app picks)")
    p.add_argument("--url", default=None, help="an OpenAI-compatible server, for the concurrent scheduler")
    p.add_argument("--model", default=None, help="model spec (default: the bundled SmolLM2; 'tiny' for tests)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--slots", type=int, default=BatchConfig.slots, help="batching: KV slots (requests held at once)")
    p.add_argument("--prefill-chunk", type=int, default=BatchConfig.prefill_chunk,
                   help="batching: prompt tokens read per iteration")
    p.add_argument("--prefix-cache", type=int, default=BatchConfig.prefix_cache,
                   help="batching: positions of KV the prefix cache keeps (0: off)")
    p.add_argument("--kv-budget", type=int, default=BatchConfig.kv_budget,
                   help="batching: positions the running requests may hold in all (0: no limit); preempts beyond")
    p.add_argument("--session-share", type=float, default=BatchConfig.session_share,
                   help="batching: the share of the prefix cache a replayed trace's sessions may hold across their "
                        "gaps (0: none)")
    p.add_argument("--session-ttl", type=float, default=BatchConfig.session_ttl,
                   help="batching: seconds a session's blocks are held after each turn (with --session-share)")
    p.add_argument("--preset", choices=list(PRESETS), default=None,
                   help="a KV-memory workload on our batching, A and B differing by one setting")
    p.add_argument("--max-batch-tokens", type=int, default=256, help="batching-torch: tokens per forward pass")
    p.add_argument("--num-blocks", type=int, default=None,
                   help="batching-torch: KV blocks (default: the workload at once)")
    p.add_argument("--manager-scheduler", choices=("fifo", "prefill_first"), default="fifo")
    p.add_argument("--max-total-tokens", type=int, default=MAX_WORKLOAD_TOKENS)
    p.add_argument("--sweep", choices=SWEEP_KINDS, default=None)
    p.add_argument("--sizes", default=",".join(map(str, BATCH_SIZES)), help="batch sweep: concurrent requests")
    p.add_argument("--new-tokens", type=int, default=64, help="batch sweep: tokens each request decodes")
    p.add_argument("--rates", default=",".join(map(str, RATES)), help="rate sweep: requests/s")
    p.add_argument("--chunks", default=",".join(map(str, CHUNK_SIZES)),
                   help="chunk sweep: prefill chunks (our batching on the preset \"a long document among chatters\")")
    p.add_argument("--ttft-slo", type=float, default=None, help="seconds")
    p.add_argument("--tpot-slo", type=float, default=None, help="seconds")
    return p.parse_args(argv)


def workload_form(args) -> WorkloadForm:
    """The flags as the Serve tab's workload form: the lesson's question and document, --mix's shares (a preset's
    own count and rate unless given)."""
    preset = PRESETS.get(args.preset)
    rate = args.rate if args.rate is not None or preset is None else preset.rate
    mix = parse_mix(args.mix)
    unknown = set(mix) - {"short", "long"}
    if unknown:
        raise SystemExit(f"--mix names {', '.join(sorted(unknown))}: the classes are short and long")
    return WorkloadForm(n=args.requests or (preset.requests if preset else 16),
                        arrival=args.arrival or ("poisson" if rate else "all-at-once"), rate=rate, seed=args.seed,
                        short_prompt=SHORT_QUESTION, short_tokens=args.max_new_tokens, short_share=mix.get("short", 0.0),
                        long_prompt=SUMMARIZE_INSTRUCTION + long_document(), long_tokens=args.max_new_tokens,
                        long_share=mix.get("long", 0.0))


def picks(args) -> list[Pick]:
    """--scheduler and --compare (unless the same), each on its source: --url's server for the concurrent one
    (and for one at a time when --url comes without --backend), else --backend."""
    names = [args.scheduler] + ([args.compare] if args.compare and args.compare != args.scheduler else [])
    if args.preset:
        names = ["batching"]   # the preset sets A and B itself
    batch = BatchConfig(args.slots, args.prefill_chunk, args.prefix_cache, args.kv_budget, args.session_share,
                        args.session_ttl)
    pool = pool_config(args.num_blocks, args.max_batch_tokens, args.manager_scheduler)
    return [Pick(name, source_name(name, args), batch, pool) for name in names]


def source_name(scheduler: str, args) -> str:
    needs = SCHEDULERS[scheduler].needs
    if needs == Needs.REMOTE or (needs == Needs.ANY and args.url and not args.backend):   # one at a time on the server too
        if not args.url:
            raise SystemExit("the concurrent scheduler needs --url of an OpenAI-compatible server")
        return args.url
    return args.backend


def source_getter(args, sources: dict):
    """`get_source` for serve/setup.py: --url's server, or a local engine of --model on a backend, made once
    each and kept in `sources` (by name)."""
    def get(name):
        if name not in sources:
            if args.url and name == args.url:
                from ..remote import RemoteSource   # issue 16
                sources[name] = RemoteSource(args.url)
            else:
                from ..backends import create_backend
                from ..engine import Engine
                sources[name] = Engine(create_backend(name, args.model))
        return sources[name]
    return get


def setup(args, sources: dict) -> tuple[list, Workload]:
    """The schedulers and the workload the flags ask for (run.py builds them, as for the Serve tab): a preset's A and
    B, a replayed workload, or one drawn from the form; SystemExit in words."""
    try:
        replay = (lambda source: replayed(args, source)) if args.workload else None
        return workload_setup(picks(args), source_getter(args, sources), workload_form(args), PRESETS.get(args.preset),
                              limit=args.max_total_tokens, replay=replay)
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc


def replayed(args, source) -> Workload:
    """--workload: a workload.json as it was written, or a trace (Mooncake lines with or without AIPerf's session
    fields, a Weka trace, an ATIF trajectory) read with `source`'s tokenizer (run.replay_file)."""
    workload, notes = replay_file(args.workload, source, args.time_scale, args.block_size,
                                  args.requests or MAX_REQUESTS)
    for note in notes:
        print(f"{args.workload.name}: {note}", file=sys.stderr)
    return workload


def in_background(work, cancel: threading.Event):
    """Run `work()` in a thread; Ctrl-C sets `cancel` and waits for it to stop. Returns (value, interrupted); an
    exception in `work` is raised here.

    It waits on an Event, not on Thread.join: a join interrupted by KeyboardInterrupt can report the thread
    as ended while it still runs (CPython 3.11)."""
    box, done, interrupted = {}, threading.Event(), False

    def body():
        try:
            box["value"] = work()
        except BaseException as exc:   # noqa: BLE001 - raised again in the calling thread
            box["error"] = exc
        finally:
            done.set()
    threading.Thread(target=body, daemon=True, name="serve-cli").start()
    while not done.is_set():
        try:
            done.wait(0.2)
        except KeyboardInterrupt:
            print("cancelling every request…", file=sys.stderr, flush=True)
            cancel.set()
            interrupted = True
    if "error" in box:
        raise box["error"]
    return box.get("value"), interrupted


def say(prefix: str):
    last = [0.0]

    def progress(fraction, message):
        if time.monotonic() - last[0] >= 1.0 or fraction >= 1.0:
            last[0] = time.monotonic()
            print(f"[{prefix}] {fraction:4.0%} {message}", file=sys.stderr, flush=True)
    return progress


def main(argv=None) -> int:
    args = parse_args(argv)
    from ..config import AppConfig
    args.model = AppConfig.from_args(args).model   # PLAYGROUND_MODEL when --model is not given
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    cancel = threading.Event()
    args.out.mkdir(parents=True, exist_ok=True)
    schedulers, workload = setup(args, {})
    if args.preset:
        run_preset(args, schedulers, workload, cancel)
    elif args.sweep:
        run_sweeps(args, schedulers, workload, cancel)
    else:
        from .report import html_report
        (args.out / "workload.json").write_text(json.dumps(workload.to_dict(), indent=1, ensure_ascii=False))
        results, _ = run_and_write(args, [s.name for s in schedulers], schedulers, workload, cancel)
        write_exports(args.out, results)
        (args.out / "serve.html").write_text(html_report(results), encoding="utf-8")
        print(f"-> {args.out}/serve.html", file=sys.stderr)
    return 130 if cancel.is_set() else 0


def sweep_plans(args, schedulers, workload) -> list:
    """--sweep planned on each scheduler (run.py): the rate sweep replays `workload` at each rate, the chunk sweep
    reads the preset "a long document among chatters" (--requests, --rate, --seed); SystemExit in words."""
    plans = []
    for s in schedulers:
        if args.sweep == "chunk" and s.name != "batching":
            raise SystemExit("--sweep chunk runs our batching: --scheduler batching (an ONNX --backend)")
        try:
            base = (interference_workload(s.source, args.requests, args.rate, args.seed, args.max_total_tokens)
                    if args.sweep == "chunk" else workload)
            plans.append(plan_sweep(args.sweep, s, sizes=args.sizes, new_tokens=args.new_tokens, rates=args.rates,
                                    slo=(args.ttft_slo, args.tpot_slo), chunks=args.chunks, workload=base))
        except ValueError as exc:
            raise SystemExit(str(exc)) from exc
    return plans


def run_sweeps(args, schedulers, workload, cancel) -> None:
    """--sweep on each scheduler, DIR/sweep-<kind>-<name>.json each and DIR/serve.html."""
    from .report import html_report
    from .sweeps import chunk_sentence
    sweeps = []
    for plan in sweep_plans(args, schedulers, workload):
        name = plan.scheduler.name
        sweep, stopped = in_background(lambda plan=plan: run_sweep(plan, say(name), cancel), cancel)
        sweeps.append(sweep)
        (args.out / f"sweep-{args.sweep}-{name}.json").write_text(json.dumps(sweep.to_dict(), indent=1))
        print(json.dumps({"sweep": args.sweep, "scheduler": name, "points": sweep.to_dict()["points"]}))
        if args.sweep == "chunk":
            print(chunk_sentence(sweep.points))
        if stopped:
            break
    (args.out / "serve.html").write_text(html_report([], sweeps, f"{args.sweep} sweep"), encoding="utf-8")


def run_and_write(args, names: list[str], schedulers, workload, cancel, preset=None) -> tuple[list, dict]:
    """Run `workload` on each scheduler in turn (run.py) in a thread Ctrl-C cancels, writing DIR/<name>/requests/*.json
    and DIR/<name>.json after each, then what `preset` measures. Returns the results of the runs that ran and what
    the preset measured."""
    def write(i, result):
        name = names[i]
        folder = args.out / name / "requests"
        folder.mkdir(parents=True, exist_ok=True)
        for record in result.records:
            (folder / f"{record.request.id:03d}.json").write_text(json.dumps(record.to_dict(), ensure_ascii=False))
        (args.out / f"{name}.json").write_text(json.dumps(result.to_dict(with_traces=False), indent=1,
                                                          ensure_ascii=False))
        print(json.dumps({"scheduler": name, **result.to_dict(with_traces=False)["summary"]}, ensure_ascii=False))

    def work():
        results = run_workload(schedulers, workload, lambda i: say(names[i]), cancel, ran=write)
        return results, measure_preset(preset, schedulers[0].source, results, say(names[-1]), cancel)
    (results, measured), _ = in_background(work, cancel)
    return [r for r in results if r.started is not None], measured


def write_exports(out: Path, results) -> None:
    """DIR/perfetto.json: A and B as Chrome Trace Events (open at ui.perfetto.dev); DIR/mooncake.jsonl: the
    workload as a Mooncake trace; DIR/sessions.jsonl: A's run as session lines (agent_trace.py: each session's
    turns with the gap before each, measured from the previous turn's end)."""
    from .perfetto import workload_json
    if results:
        (out / "perfetto.json").write_text(workload_json(results), encoding="utf-8")
        (out / "mooncake.jsonl").write_text(results_jsonl(results), encoding="utf-8")
        (out / "sessions.jsonl").write_text(sessions_jsonl(results), encoding="utf-8")


def run_preset(args, schedulers, workload, cancel) -> None:
    """The preset's workload on our batching, A and B with the preset's settings; its finding on stdout."""
    from .report import html_report
    preset = PRESETS[args.preset]
    (args.out / "workload.json").write_text(json.dumps(workload.to_dict(), indent=1, ensure_ascii=False))
    names = [f"batching-{side}" for side, _ in zip("ab", schedulers)]
    results, measured = run_and_write(args, names, schedulers, workload, cancel, preset)
    write_exports(args.out, results)
    if len(results) == 2 and not cancel.is_set():
        print(json.dumps({"preset": preset.name, "finding": preset.finding(*results, **measured)}, ensure_ascii=False))
    (args.out / "serve.html").write_text(html_report(results, expect=preset.expect), encoding="utf-8")
