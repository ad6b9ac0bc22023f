"""The serve row of `make bench`: the pinned workload one at a time and with our continuous batching, on one backend.

    python -m playground.bench serve              # one JSON row (all in this process: the same session)
    python -m playground.bench serve --model tiny --requests 4   # what the test suite runs

1. The default CPU backend (onnx-gguf4 for the bundled GGUF; onnx for another model), both schedulers on
   it: one at a time, and ours (serve/batching.py: 8 KV slots, 128-token prefill chunks).
2. One at a time's capacity: one short and one long request of the lesson, alone, after a warm-up,
   median of 3 rounds; the mix's service time 0.8·short + 0.2·long gives requests/s.
3. The pinned workload: 16 requests, 80% short / 20% long, seeded Poisson arrivals at 0.8x that capacity,
   greedy, EOS honoured, 48 new tokens at most; one at a time, then ours (after a 2-request warm-up).
4. Saturated: the same requests all at once, both schedulers: what each can serve at most.
5. A real serving engine on the same file (when `make llama` installed it): llama.cpp's `llama-server
   --parallel 4` on the bundled GGUF, the same workload one request at a time and then every request
   sent as it arrives (its own continuous batching), at the same rate and saturated; ratios within the
   server (its answers are not the local backends', see server_rows).

Figures: output tokens/s, p50/p95 TTFT of the short class, and the ratios the targets are set on (issue
21): `short_p95_ttft_ratio` (ours / one at a time) <= 0.25 and `throughput_ratio` >= 1; `targets_met`
says for each whether it is met. At 0.8x one at a time's capacity both keep up with the arrivals, so
their throughput is bounded by the offered load: `throughput_ratio_ceiling` (an upper bound, not a
measurement) is the most any scheduler could reach over one at a time on this workload, since none
finishes before the last request arrives.

Bounds beside the saturated run (`saturated.bounds`; derived from figures measured in the same process,
labelled bounds, never measurements): its prefill work -- the workload's prompt tokens over the faster of
two measured prefill rates on the prefill graph (`prefill_chunk`: a 1024-token prompt, and one 128-token
chunk, the scheduler's chunk; the row names which) -- caps output tok/s at output tokens / that time; its
decode work -- every token after a request's first, at most 8 rows (the slots) per step of the decode
graph measured at 8 rows (context 64) -- caps it at those tokens / their steps' time; and a loop that runs
the two in turn on the same cores (ours) at output tokens / (both times).

Left out: transformers' manager on torch (`batching-torch`: a GPU's scheduler); GPU figures.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..serve import SCHEDULERS, Workload, default_classes
from ..serve.batching import BatchConfig
from ..metrics import percentile
from ..serve.summary import served, throughput
from .batch import CONTEXT, decode_step_ms, prefill_tps
from .rows import Row, parser, say_timed
from .stats import ratio, rounded, targets_met, targets_text


@dataclass(frozen=True, kw_only=True)
class ServeRow(Row):
    """The pinned workload one at a time and with our continuous batching (serve.serve_row). A `figures`
    dict (serve.figures): output_tps, output_tokens, requests_per_s, short_ttft_p50_s, short_ttft_p95_s,
    completed, wall_s."""

    OPTIONAL = ("saturated",)

    bench: str = field(default="serve", init=False)
    backend: str
    requests: int
    mix: dict[str, float]                 # class -> share of the requests
    max_new_tokens: int
    seed: int                             # of the Poisson arrivals
    batch_config: dict                    # slots, prefill_chunk (tokens)
    single_stream: dict                   # short_s, long_s, capacity_rps, tok_s: each class alone
    rate_rps: float                       # the arrival rate, requests/s
    rate_meaning: str = field(default="0.8 x one at a time's capacity on this backend (requests/s)", init=False)
    one_at_a_time: dict                   # figures
    batching: dict                        # figures
    throughput_ratio: float | None        # output tok/s, batching / one at a time
    short_p95_ttft_ratio: float | None    # the short class's p95 TTFT, batching / one at a time
    throughput_ratio_ceiling: float | None   # a bound from the arrivals, not a measurement
    targets: dict[str, str]
    targets_met: dict[str, bool | None]
    saturated: dict | None = None         # every request at once: both schedulers' figures, the ratio, the bounds
    llama_server: dict                    # llama-server on the same workload, or why not (`error`, `skipped`)


MIX = {"short": 0.8, "long": 0.2}
BATCH = BatchConfig(slots=8, prefill_chunk=128)
TARGETS = {"short_p95_ttft_ratio": ("<=", 0.25), "throughput_ratio": (">=", 1.0)}
PREFILL_PROMPT = 1024   # tokens of the long prompt timed on the prefill graph (fewer where the window is smaller)


def load(name: str, model: str | None):
    from ..backends import create_backend
    from ..engine import Engine
    engine = Engine(create_backend(name, model, device="cpu"))
    engine.warm_up()
    return engine


def single_stream(engine, max_new_tokens: int, rounds: int = 3) -> dict:
    """One at a time's service time per class, each request alone: median over `rounds`, and its capacity."""
    times = {"short": [], "long": [], "tokens": []}
    for _ in range(rounds):
        w = Workload.build(default_classes(engine, max_new_tokens, {"short": 1, "long": 1}), 2)
        for r in SCHEDULERS["one-at-a-time"].create(engine).run(w).records:
            times[r.request.cls].append(r.e2e)
            times["tokens"].append(r.output_tokens)
    short, long = statistics.median(times["short"]), statistics.median(times["long"])
    service = MIX["short"] * short + MIX["long"] * long
    return {"short_s": round(short, 3), "long_s": round(long, 3), "capacity_rps": round(1 / service, 3),
            "tok_s": round(sum(times["tokens"]) / (sum(times["short"]) + sum(times["long"])), 1)}


def figures(result) -> dict:
    shorts = [r.ttft for r in served(result) if r.request.cls == "short"]
    tp = throughput(result)
    return {"output_tps": rounded(tp["output_tps"]), "output_tokens": tp["output_tokens"], "requests_per_s": rounded(tp["requests_per_s"]),
            "short_ttft_p50_s": rounded(percentile(shorts, 50)), "short_ttft_p95_s": rounded(percentile(shorts, 95)),
            "completed": tp["completed"], "wall_s": rounded(tp["wall_s"])}


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


def work_bounds(prompt_tokens: int, output_tokens: int, requests: int, prefill_rate: float, step_s: float,
                rows: int) -> dict:
    """Upper bounds on a workload's output tok/s from its work: its prefill alone at `prefill_rate` prompt
    tokens/s; its decode alone (every token after each request's first) at `rows` tokens per `step_s` step;
    and both, run in turn.

    >>> work_bounds(prompt_tokens=1000, output_tokens=200, requests=10, prefill_rate=500.0, step_s=0.1, rows=8)
    {'prefill_bound_s': 2.0, 'output_tps_max_prefill': 100.0, 'decode_bound_s': 2.375, 'output_tps_max_decode': 84.21, \
'output_tps_max_in_turn': 45.71}
    """
    prefill_s, decode_s = prompt_tokens / prefill_rate, (output_tokens - requests) / rows * step_s
    return {"prefill_bound_s": round(prefill_s, 3), "output_tps_max_prefill": rounded(output_tokens / prefill_s, 2),
            "decode_bound_s": round(decode_s, 3),
            "output_tps_max_decode": rounded(output_tokens / decode_s, 2) if decode_s > 0 else None,
            "output_tps_max_in_turn": rounded(output_tokens / (prefill_s + decode_s), 2)}


def saturated_bounds(engine, result, rows: int = BATCH.slots, chunk: int = BATCH.prefill_chunk) -> dict:
    """The bounds the saturated run's work sets (see the module doc), from rates measured here on `engine`."""
    backend = engine.backend
    prompt = min(PREFILL_PROMPT, int(backend.context_window) - 1)
    rates = {f"a {prompt}-token prompt": prefill_tps(backend, prompt),
             f"one {chunk}-token chunk (the scheduler's)": prefill_tps(backend, chunk)}
    fastest = max(rates, key=rates.get)
    step_ms = decode_step_ms(backend, rows)
    recs = served(result)
    prompt_tokens, output_tokens = sum(r.prompt_tokens or 0 for r in recs), sum(r.output_tokens for r in recs)
    return {"kind": "bounds (upper, on output tok/s), not measurements",
            "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
            "prefill_rates_tps": {k: round(v, 1) for k, v in rates.items()}, "prefill_rate_from": fastest,
            f"decode_step_ms_{rows}_rows": round(step_ms, 3), "decode_step_context": CONTEXT,
            **work_bounds(prompt_tokens, output_tokens, len(recs), rates[fastest], step_ms / 1e3, rows)}


def serve_row(model: str | None = None, requests: int = 16, max_new_tokens: int = 48, seed: int = 0,
              saturate: bool = True, backend: str | None = None) -> ServeRow:
    from ..backends import default_backend_name
    name = backend or default_backend_name("cpu", model)
    engine = load(name, model)
    capacity = single_stream(engine, max_new_tokens)
    rate = round(0.8 * capacity["capacity_rps"], 3)
    one, batching = SCHEDULERS["one-at-a-time"].create(engine), SCHEDULERS["batching"].create(engine, batch=BATCH)
    classes = default_classes(engine, max_new_tokens, MIX)
    workload = Workload.build(classes, requests, "poisson", rate, seed)
    batching.run(Workload.build(classes, 2))   # warm-up: the pool's first calls of both graphs
    alone, batched = figures(one.run(workload)), figures(batching.run(workload))
    ratios = {"throughput_ratio": ratio(batched["output_tps"], alone["output_tps"]),
              "short_p95_ttft_ratio": ratio(batched["short_ttft_p95_s"], alone["short_ttft_p95_s"])}
    sat = None
    if saturate:   # every request at once: what each can serve at most, and the bounds its work sets
        at_once = Workload.build(classes, requests, "all-at-once", None, seed)
        sat = {"one_at_a_time": figures(one.run(at_once))}
        result = batching.run(at_once)
        sat["batching"] = figures(result)
        sat["throughput_ratio"] = ratio(sat["batching"]["output_tps"], sat["one_at_a_time"]["output_tps"])
        sat["bounds"] = saturated_bounds(engine, result)
    llama_server = (server_rows(workload, Workload.build(classes, requests, "all-at-once", None, seed)
                                if saturate else None) if model is None
                    else {"skipped": "llama-server runs the bundled GGUF only"})
    return ServeRow(backend=engine.backend.name, requests=requests, mix=MIX, max_new_tokens=max_new_tokens,
                    seed=seed, batch_config={"slots": BATCH.slots, "prefill_chunk": BATCH.prefill_chunk},
                    single_stream=capacity, rate_rps=rate, one_at_a_time=alone, batching=batched, **ratios,
                    throughput_ratio_ceiling=throughput_ratio_ceiling(workload, alone),
                    targets=targets_text(TARGETS), targets_met=targets_met(ratios, TARGETS), saturated=sat,
                    llama_server=llama_server)


SERVER_PARALLEL = 4   # llama-server slots: requests it decodes together


def server_rows(workload, at_once, parallel: int = SERVER_PARALLEL) -> dict:
    """The workload on llama.cpp's own server: one at a time, then concurrent (the server batches them).

    Ratios within the server only: its greedy answers are not the local backends' (llama.cpp quantizes
    activations to 8 bits; on the short question it departs at the first token and runs to the budget),
    so its output tokens differ from theirs (`output_tokens`)."""
    from ..llamacpp import LlamaCppMissing
    from ..remote import RemoteSource
    from ..llamacpp import LlamaServer
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
    out["throughput_ratio"] = ratio(out["concurrent"]["output_tps"], out["one_at_a_time"]["output_tps"])
    out["short_p95_ttft_ratio"] = ratio(out["concurrent"]["short_ttft_p95_s"], out["one_at_a_time"]["short_ttft_p95_s"])
    out["throughput_ratio_ceiling"] = throughput_ratio_ceiling(workload, out["one_at_a_time"])
    if at_once is not None:
        out["saturated_throughput_ratio"] = ratio(out["saturated_concurrent"]["output_tps"],
                                                   out["saturated_one_at_a_time"]["output_tps"])
    return out


def main(argv: list[str]) -> None:
    p = parser("serve", __doc__)
    p.add_argument("--backend", default=None, help="an ONNX backend (default: onnx-gguf4 for a GGUF, else onnx)")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--no-saturate", action="store_true")
    args = p.parse_args(argv)
    say_timed(lambda: serve_row(args.model, args.requests, args.max_new_tokens, saturate=not args.no_saturate,
                                backend=args.backend))
