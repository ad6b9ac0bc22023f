"""The serve row of `make bench`: one at a time on the fastest single-stream backend vs continuous batching.

    python -m playground.bench_serve              # one JSON row (all in this process: the same session)
    python -m playground.bench_serve --model tiny --requests 4   # what the test suite runs

1. Single stream, every available backend (playground.backends.BACKENDS): one short and one long
   request of the lesson, alone, after a warm-up (median of 3 rounds, backends round-robin); the mix's service time 0.8·short + 0.2·long gives
   each backend's one-at-a-time capacity (requests/s). The fastest is the one with the highest.
2. The pinned workload: 16 requests, 80% short / 20% long, seeded Poisson arrivals at 0.8x that
   capacity, greedy, EOS honoured, 48 new tokens at most.
3. The workload one at a time on the fastest backend, then with continuous batching (torch, after one
   warm-up workload of 2 requests), then both again with every request arriving at once (saturation:
   what each can serve at most), and one at a time on torch too: batching's gain on its own runtime.
4. A real serving engine on the same file (when `make llama` installed it): llama.cpp's `llama-server
   --parallel 4` on the bundled GGUF, the same workload one request at a time and then every request
   sent as it arrives (its own continuous batching), at the same rate and saturated; ratios within the
   server (its answers are not the local backends', see server_rows).
Figures: output tokens/s, p50/p95 TTFT of the short class, and the two ratios the targets are set on
(batching >= 2x the throughput; short p95 TTFT <= 1/2). At 0.8x of one-at-a-time's capacity both keep
up with the arrivals, so their throughput is bounded by the offered load: `throughput_ratio_ceiling`
(an upper bound, not a measurement) is the most any scheduler could reach over one at a time on this
workload, since none finishes before the last request arrives. The saturated run shows how much each
could serve.

Left out: GPU figures (the same code measures torch on CUDA).
"""
from __future__ import annotations

import json
import statistics
import sys
import time

from .serve import SCHEDULERS, Workload, default_classes
from .serve.summary import percentile, served, throughput

MIX = {"short": 0.8, "long": 0.2}


def load(name: str, model: str | None):
    from .backends import create_backend
    from .engine import Engine
    engine = Engine(create_backend(name, model))
    engine.warm_up()
    return engine


def single_stream(engines: dict, max_new_tokens: int, rounds: int = 3) -> dict:
    """Each backend's service time per class alone: median over `rounds`, backends taken round-robin so a burst
    of load on the shared cores hits them alike."""
    times = {name: {"short": [], "long": [], "tokens": []} for name in engines}
    for _ in range(rounds):
        for name, engine in engines.items():
            w = Workload.build(default_classes(engine, max_new_tokens, {"short": 1, "long": 1}), 2)
            for r in SCHEDULERS["one-at-a-time"].create(engine).run(w).records:
                times[name][r.request.cls].append(r.e2e)
                times[name]["tokens"].append(r.output_tokens)
    out = {}
    for name, t in times.items():
        short, long = statistics.median(t["short"]), statistics.median(t["long"])
        service = MIX["short"] * short + MIX["long"] * long
        out[name] = {"short_s": round(short, 3), "long_s": round(long, 3), "capacity_rps": round(1 / service, 3),
                     "tok_s": round(sum(t["tokens"]) / (sum(t["short"]) + sum(t["long"])), 1)}
    return out


def figures(result) -> dict:
    shorts = [r.ttft for r in served(result) if r.request.cls == "short"]
    tp = throughput(result)
    return {"output_tps": _round(tp["output_tps"]), "output_tokens": tp["output_tokens"], "requests_per_s": _round(tp["requests_per_s"]),
            "short_ttft_p50_s": _round(percentile(shorts, 50)), "short_ttft_p95_s": _round(percentile(shorts, 95)),
            "completed": tp["completed"], "wall_s": _round(tp["wall_s"])}


def throughput_ratio_ceiling(workload, baseline: dict) -> float | None:
    """Upper bound on any scheduler's throughput over `baseline` (a `figures` dict) on `workload`, for the same
    output tokens: nothing can finish before the last arrival, so no wall is shorter than it. None when
    every request arrives at once (no bound from arrivals).

    >>> from playground.serve.workload import Request, Workload
    >>> w = Workload(tuple(Request(i, "short", "q", 8, t) for i, t in enumerate([0.0, 3.0, 10.0])), "fixed", 0.3)
    >>> throughput_ratio_ceiling(w, {"wall_s": 11.0})   # one at a time ended 1 s after the last arrival
    1.1
    """
    last = max((r.arrival for r in workload.requests), default=0.0)
    return round(baseline["wall_s"] / last, 2) if last > 0 and baseline.get("wall_s") else None


def _round(v, digits=3):
    return None if v is None else round(v, digits)


def _ratio(a, b):
    return round(a / b, 2) if a and b else None


def serve_row(model: str | None = None, requests: int = 16, max_new_tokens: int = 48, seed: int = 0,
              saturate: bool = True) -> dict:
    from .backends import available_backends
    candidates, engines = {}, {}
    for name in available_backends():
        try:
            engines[name] = load(name, model)
        except Exception as exc:  # noqa: BLE001 - a backend that cannot load is named, the others still run
            candidates[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    candidates.update(single_stream(engines, max_new_tokens))
    fastest = max((n for n in candidates if "capacity_rps" in candidates[n]), key=lambda n: candidates[n]["capacity_rps"])
    rate = round(0.8 * candidates[fastest]["capacity_rps"], 3)
    torch_engine = engines.get("torch") or load("torch", model)
    one, batching = SCHEDULERS["one-at-a-time"].create(engines[fastest]), SCHEDULERS["batching"].create(torch_engine)
    classes = default_classes(engines[fastest], max_new_tokens, MIX)
    workload = Workload.build(classes, requests, "poisson", rate, seed)
    row = {"bench": "serve", "requests": requests, "mix": MIX, "max_new_tokens": max_new_tokens, "seed": seed,
           "single_stream": candidates, "fastest_single_stream": fastest, "rate_rps": rate,
           "rate_meaning": "0.8 x the fastest backend's one-at-a-time capacity (requests/s)"}
    batching.run(Workload.build(classes, 2))   # warm-up: the paged model copy and the manager's first passes
    for key, scheduler in (("one_at_a_time", one), ("batching", batching)):
        row[key] = figures(scheduler.run(workload))
    row["throughput_ratio"] = _ratio(row["batching"]["output_tps"], row["one_at_a_time"]["output_tps"])
    row["short_p95_ttft_ratio"] = _ratio(row["batching"]["short_ttft_p95_s"], row["one_at_a_time"]["short_ttft_p95_s"])
    row["throughput_ratio_ceiling"] = throughput_ratio_ceiling(workload, row["one_at_a_time"])
    row["targets_met"] = {"throughput_2x": (row["throughput_ratio"] or 0) >= 2,
                          "short_p95_ttft_half": (row["short_p95_ttft_ratio"] or 9) <= 0.5}
    if saturate:   # every request at once; plus one at a time on torch: the scheduler's gain on the same runtime
        at_once = Workload.build(classes, requests, "all-at-once", None, seed)
        same_runtime = SCHEDULERS["one-at-a-time"].create(torch_engine)
        sat = row["saturated"] = {key: figures(s.run(at_once)) for key, s in (
            ("one_at_a_time", one), ("batching", batching), ("one_at_a_time_torch", same_runtime))}
        sat["throughput_ratio"] = _ratio(sat["batching"]["output_tps"], sat["one_at_a_time"]["output_tps"])
        sat["throughput_ratio_same_runtime"] = _ratio(sat["batching"]["output_tps"],
                                                      sat["one_at_a_time_torch"]["output_tps"])
    row["llama_server"] = (server_rows(workload, Workload.build(classes, requests, "all-at-once", None, seed)
                                       if saturate else None) if model is None
                           else {"skipped": "llama-server runs the bundled GGUF only"})
    return row


SERVER_PARALLEL = 4   # llama-server slots: requests it decodes together


def server_rows(workload, at_once, parallel: int = SERVER_PARALLEL) -> dict:
    """The workload on llama.cpp's own server: one at a time, then concurrent (the server batches them).

    Ratios within the server only: its greedy answers are not the local backends' (llama.cpp quantizes
    activations to 8 bits; on the short question it departs at the first token and runs to the budget),
    so its output tokens differ from theirs (`output_tokens`)."""
    from .llamacpp import LlamaCppMissing
    from .remote import RemoteSource
    from .remote.llama_server import LlamaServer
    try:
        with LlamaServer(threads=2, parallel=parallel, ctx=parallel * 2048) as server:
            source = RemoteSource(server.url, figure_interval=0)
            SCHEDULERS["one-at-a-time"].create(source).run(Workload.build(default_classes(None, 8), 2))   # warm-up
            out = {"parallel": parallel, "slot_context": 2048}
            runs = [("one_at_a_time", "one-at-a-time", workload), ("concurrent", "concurrent", workload)]
            if at_once is not None:
                runs += [("saturated_one_at_a_time", "one-at-a-time", at_once),
                         ("saturated_concurrent", "concurrent", at_once)]
            for key, scheduler, w in runs:
                out[key] = figures(SCHEDULERS[scheduler].create(source).run(w))
    except (LlamaCppMissing, FileNotFoundError, RuntimeError, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    out["throughput_ratio"] = _ratio(out["concurrent"]["output_tps"], out["one_at_a_time"]["output_tps"])
    out["short_p95_ttft_ratio"] = _ratio(out["concurrent"]["short_ttft_p95_s"], out["one_at_a_time"]["short_ttft_p95_s"])
    out["throughput_ratio_ceiling"] = throughput_ratio_ceiling(workload, out["one_at_a_time"])
    if at_once is not None:
        out["saturated_throughput_ratio"] = _ratio(out["saturated_concurrent"]["output_tps"],
                                                   out["saturated_one_at_a_time"]["output_tps"])
    return out


def main(argv: list[str]) -> None:
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench_serve")
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)   # bench.py's row_in_subprocess passes a name
    p.add_argument("--model", default=None)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--no-saturate", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    args = p.parse_args(argv)
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    row = serve_row(args.model, args.requests, args.max_new_tokens, saturate=not args.no_saturate)
    row["bench_s"] = round(time.perf_counter() - start, 1)
    row["torch_threads"] = torch.get_num_threads()
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
