"""`make bench`'s sessions row: agents whose turns are parted by tool gaps, under a prefix cache too small to keep
them, without and with session retention, runs interleaved.

    python -m playground.bench sessions                    # 3 agents x 4 turns, gaps of 2-10 s, 2 rounds
    python -m playground.bench sessions --model tiny --agents 2 --turns 2 --rounds 1 --gaps 0.2 0.4

The trace is built in (`script`: agent_trace.py's format, one JSON object a line): each agent's turn sends its
chain of blocks (PREFIX_BLOCKS, then GROW_BLOCKS more a turn: the earlier turns and the tool's answer), each
later turn `delay` after its predecessor ends (a tool gap drawn from GAPS_S by a seeded generator); meanwhile rows
of no session (FILLER_BLOCKS of blocks of their own, every FILLER_EVERY_S) fill the prefix cache. The cache's budget
(`capacity_blocks`) is twice what the agents' longest chains need, so held at SHARE they fit, and the fillers
push out whatever is not held within a gap or two.

Three paths replay it, every round each of them once, interleaved (the order reversed every other round):

    without         our batching (run.replay_file, BatchConfig's prefix cache of that budget, in this process)
                    with session_share 0: a session's blocks are evictable as soon as its turn ends
    with_retention  the same with session_share SHARE and session_ttl TTL_S, above every gap
    llama_server    llama.cpp's `llama-server` on the same GGUF and threads, the same trace's token ids (the concurrent
                    harness: the same releases, a later turn `delay` after its predecessor ends), as it ships:
                    `cache_prompt` on (its default; RemoteSource reuse_prefix), its RAM prompt cache on (`--cache-ram`
                    not given: its default), its slot reuse by prompt similarity (its default), LLAMA_SLOTS slots
                    of a context that holds the trace's longest request; a fresh server every round (as each of our
                    runs starts with an empty prefix cache). Its cache is not bounded by our budget.

A run is cut at `deadline_s` (DEADLINE_X times the trace's span), so a server that cannot keep up still ends the row
in bounded time: a turn unanswered then is counted not served.

Per path and per turn (1..T, over the agents): served, TTFT p50 / p95 (nearest rank; from the turn's release to its
first token: ours in this process, llama-server's at this client over HTTP on 127.0.0.1) and the cached share
(prompt tokens not computed / prompt tokens: ours the blocks copied from its prefix cache, llama-server's
`timings.cache_n`); the same over the turns after a gap (every agent's turns 2..T pooled: `after_gap_*`) and the
fillers' TTFT p50. Each figure the median of its rounds, each round's kept with its load window. The figures the
row reports:

    after_gap_ttft_ratio   with_retention's after-gap TTFT p50 / without's (below 1: retention helped), the median
                           of the ratios within each round; reported, not gated (both paths are ours)
    vs_llama               ours (each path) / llama-server's after-gap TTFT p50, the median of the rounds' ratios,
                           printed only from a quiet machine (quiet.validity over every window, as every ratio to
                           llama.cpp)
    verdict                a sentence computed from the figures: whether, with retention, the turn after a gap had a
                           lower TTFT than without, and llama-server's beside it

`predicted`: what the cache alone decides on the trace's own clock (serve/session_gaps.replay_gaps, no compute
time): per path, the gaps whose session found a block evicted.
"""
from __future__ import annotations

import json
import math
import random
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..metrics import NEAREST_RANK, percentile
from ..serve import SCHEDULERS
from ..serve.agent_trace import read_rows
from ..serve.batching import BatchConfig
from ..serve.prefix_cache import BLOCK_SIZE
from ..serve.run import replay_file
from ..serve.session_gaps import replay_gaps
from ..serve.workload import Request, Workload
from .attendees import busiest
from .conversations import CONTEXT_STEP, LLAMA_SLOTS, read_cached
from .quiet import LoadWindow, cpu_flags, gated, validity
from .rows import Row, parser, say_timed
from .stats import median, ratio, rounded

AGENTS = 3
TURNS = 4
GAPS_S = (2.0, 10.0)       # a tool gap's seconds, drawn uniformly
PREFIX_BLOCKS = 6          # an agent's first turn's blocks (BLOCK_SIZE tokens each)
GROW_BLOCKS = 2            # blocks a later turn adds (the answer before it and the tool's result)
FILLER_BLOCKS = 12         # a filler row's blocks, none shared
FILLER_EVERY_S = 1.0       # a filler every this many seconds: 192 prefill tokens a second, light enough for a shared machine
START_EVERY_S = 1.0        # the agents' first turns, this far apart
OUTPUT_TOKENS = 8
SHARE = 0.5
TTL_S = 15.0               # above every gap
ROUNDS = 2
SEED = 58
FILLER_IDS = 1_000_000     # fillers' block ids start here; agent a's at a * 1000
DEADLINE_X = 2.0           # a run is cut at this many times the trace's span (deadline_s)
PATHS = ("without", "with_retention", "llama_server")
FIGURES = ("ttft_p50_s", "ttft_p95_s", "cached_share")   # a turn's, and the after-gap turns' (after_gap_ + name)


@dataclass(frozen=True, kw_only=True)
class SessionsRow(Row):
    """Agents with tool gaps under a small prefix cache: ours without and with session retention, and llama-server
    on the same trace, rounds interleaved (sessions.sessions_row). `without`, `with_retention` and `llama_server`
    (its settings too, or `error` / `skipped` and why): turns ({"1": served, ttft_p50_s, ttft_p95_s, cached_share},
    ...), after_gap_served, after_gap_ttft_p50_s, after_gap_ttft_p95_s, after_gap_cached_share, fillers_ttft_p50_s,
    load, validity, and rounds when more than one."""

    bench: str = field(default="sessions", init=False)
    backend: str
    model: str
    agents: int
    turns: int
    gaps_s: list[float]
    trace_rows: int
    threads: int                          # llama-server's -t; ours: ONNX Runtime's threads (the same count)
    cache_positions: int                  # our prefix cache's budget in KV positions
    session_share: float
    session_ttl_s: float
    budget: str                           # the budget in words: what it holds, what retention may hold
    rounds: int
    order: str                            # how the paths' runs were interleaved
    deadline_s: float                     # a run is cut here: what is unanswered then is counted not served
    predicted: dict                       # path -> gaps whose session lost a block (replay_gaps, the cache alone)
    without: dict
    with_retention: dict
    llama_server: dict
    after_gap_ttft_ratio: float | None    # with / without, the median of the rounds' ratios
    round_ratios: list[float | None]
    vs_llama: dict[str, float | None]     # ours / llama-server's after-gap TTFT p50, gated on a quiet machine
    llama_validity: dict | None           # quiet.validity over every window of the three paths (None: not run)
    cpu_flags: dict[str, bool] | None
    verdict: str


def chain(agent: int, turn: int) -> list[int]:
    """Agent `agent`'s blocks at its turn `turn` (1 = its first): its earlier turns' blocks and GROW_BLOCKS more.

    >>> chain(1, 1) == list(range(1000, 1000 + PREFIX_BLOCKS)), len(chain(1, 3)) - len(chain(1, 2)) == GROW_BLOCKS
    (True, True)
    """
    return [agent * 1000 + j for j in range(PREFIX_BLOCKS + (turn - 1) * GROW_BLOCKS)]


def capacity_blocks(agents: int, turns: int) -> int:
    """The prefix cache's budget: twice the agents' longest chains, so a held share of 0.5 keeps them all.

    >>> capacity_blocks(3, 4)
    72
    """
    return 2 * agents * len(chain(0, turns))


def budget_text(agents: int, turns: int, share: float = SHARE) -> str:
    """Our budget in words.

    >>> text = budget_text(3, 4)
    >>> text.startswith("our prefix cache: 1152 positions (72 blocks of 16), twice the 576"), "(576 positions)" in text
    (True, True)
    """
    blocks = capacity_blocks(agents, turns)
    need = agents * len(chain(0, turns)) * BLOCK_SIZE
    return (f"our prefix cache: {blocks * BLOCK_SIZE} positions ({blocks} blocks of {BLOCK_SIZE}), twice the {need} "
            f"the agents' longest chains need; with retention sessions hold at most {share:g} of it "
            f"({int(blocks * BLOCK_SIZE * share)} positions); llama-server's cache is not bounded by it")


def script(agents: int = AGENTS, turns: int = TURNS, gaps=GAPS_S, seed: int = SEED) -> list[dict]:
    """The built-in trace's rows (agent_trace.py's fields): each agent's turns, its later ones `delay` ms after the
    previous one ends (tool gaps), and fillers of no session every FILLER_EVERY_S over the span the gaps cover.

    >>> rows = script(agents=2, turns=2, gaps=(1.0, 1.0))
    >>> [(r.get("session_id"), r.get("delay"), len(r["hash_ids"])) for r in rows][:3]
    [('agent 1', None, 6), ('agent 1', 1000.0, 8), ('agent 2', None, 6)]
    >>> sum("session_id" not in r for r in rows)   # over 3 s (agent 2's start, its gap, a gap's margin)
    3
    """
    if agents < 1 or turns < 1 or not 0 < gaps[0] <= gaps[1]:
        raise ValueError(f"the trace needs agents >= 1, turns >= 1 and gaps 0 < LOW <= HIGH; got {agents}, {turns} "
                         f"and {tuple(gaps)}")
    rng = random.Random(seed)
    rows, span = [], 0.0
    for a in range(1, agents + 1):
        start = (a - 1) * START_EVERY_S
        delays = [rng.uniform(*gaps) for _ in range(turns - 1)]
        for t in range(1, turns + 1):
            ids = chain(a, t)
            row = {"session_id": f"agent {a}", "input_length": len(ids) * BLOCK_SIZE,
                   "output_length": OUTPUT_TOKENS, "hash_ids": ids}
            if t == 1:
                row["timestamp"] = start * 1000
            else:
                row["delay"] = round(delays[t - 2] * 1000, 1)
                row["tool_gap"] = True
            rows.append(row)
        span = max(span, start + sum(delays) + max(gaps))
    for k in range(int(span / FILLER_EVERY_S)):
        ids = [FILLER_IDS + k * FILLER_BLOCKS + j for j in range(FILLER_BLOCKS)]
        rows.append({"timestamp": round((k + 1) * FILLER_EVERY_S * 1000, 1), "input_length": len(ids) * BLOCK_SIZE,
                     "output_length": OUTPUT_TOKENS, "hash_ids": ids})
    return rows


def slot_context(rows: list[dict]) -> int:
    """A llama-server slot's context: the trace's longest request and its output, rounded up to CONTEXT_STEP.

    >>> slot_context(script()), slot_context([{"input_length": 300, "output_length": 8}])
    (256, 512)
    """
    most = max(r["input_length"] + r["output_length"] for r in rows)
    return math.ceil(most / CONTEXT_STEP) * CONTEXT_STEP


def deadline(rows: list[dict]) -> float:
    """When a run is cut, in seconds from its start: DEADLINE_X times the trace's span (its last timestamp), so a
    server that cannot keep up ends the row in bounded time, its unanswered turns counted not served.

    >>> deadline(script()), deadline([{"timestamp": 1500.0}, {"delay": 900.0}])
    (60.0, 3.0)
    """
    return round(DEADLINE_X * max(r.get("timestamp") or 0.0 for r in rows) / 1000, 1)


def run_until(scheduler, workload: Workload, deadline_s: float):
    """`scheduler.run(workload)`, cancelled at `deadline_s` if it has not ended: its result."""
    cancel = threading.Event()
    timer = threading.Timer(deadline_s, cancel.set)
    timer.start()
    try:
        return scheduler.run(workload, cancel=cancel)
    finally:
        timer.cancel()


def predicted(rows: list[dict], capacity: int, share: float, ttl_s: float) -> int:
    """Gaps whose session found a block of its chain evicted, the cache alone deciding (session_gaps.replay_gaps).

    >>> rows = script(agents=2, turns=3, gaps=(2.0, 4.0))
    >>> predicted(rows, capacity_blocks(2, 3), 0.0, TTL_S) > 0, predicted(rows, capacity_blocks(2, 3), SHARE, TTL_S)
    (True, 0)
    """
    gaps, _ = replay_gaps(read_rows([json.dumps(r) for r in rows]), capacity, share, ttl_s)
    return sum(1 for g in gaps if g.state["evicted"])


def ours_cached(rec) -> int:
    """Prompt tokens our batching copied from its prefix cache for a record."""
    return rec.cached_tokens


def llama_cached(rec) -> int | None:
    """Prompt tokens llama-server reused from its cache for a record (`timings.cache_n`); None where it said none."""
    return read_cached(rec.trace.server or {}, "llama_server") if rec.trace is not None else None


def group_figures(recs, cached=ours_cached) -> dict:
    """Served, TTFT p50 / p95 (nearest rank) and the cached share of some records (`cached(rec)`: its cached
    prompt tokens; None makes the share missing, never a zero).

    >>> from types import SimpleNamespace as S
    >>> r = lambda ttft, cached: S(ttft=ttft, cached_tokens=cached, prompt_tokens=100, steps=[1])
    >>> group_figures([r(0.1, 50), r(0.3, 100), r(0.2, 0)])
    {'served': 3, 'ttft_p50_s': 0.2, 'ttft_p95_s': 0.3, 'cached_share': 0.5}
    >>> group_figures([r(0.1, 50)], cached=lambda rec: None)["cached_share"] is None
    True
    """
    ran = [x for x in recs if x.steps]
    times = [x.ttft for x in ran]
    counts = [cached(x) for x in ran]
    prompt = sum(x.prompt_tokens or 0 for x in ran)
    share = rounded(sum(counts) / prompt, 3) if prompt and None not in counts else None
    return {"served": len(ran), "ttft_p50_s": rounded(percentile(times, 50), 4),
            "ttft_p95_s": rounded(percentile(times, 95, NEAREST_RANK), 4), "cached_share": share}


def turn_figures(records, cached=ours_cached) -> dict:
    """One run's figures from its records (each with request.session, request.id, ttft, prompt_tokens, steps and
    what `cached` reads): per turn of the agents, after their gaps (turns 2..T pooled), and the fillers.

    >>> from types import SimpleNamespace as S
    >>> r = lambda i, s, ttft, cached: S(request=S(id=i, session=s), ttft=ttft, cached_tokens=cached,
    ...                                  prompt_tokens=100, steps=[1])
    >>> f = turn_figures([r(0, "a", 0.5, 0), r(1, "a", 0.1, 96), r(2, None, 0.3, 0), r(3, "b", 0.4, 0)])
    >>> f["turns"]["2"], f["after_gap_ttft_p50_s"], f["after_gap_cached_share"], f["fillers_ttft_p50_s"]
    ({'served': 1, 'ttft_p50_s': 0.1, 'ttft_p95_s': 0.1, 'cached_share': 0.96}, 0.1, 0.96, 0.3)
    """
    by_turn: dict[int, list] = {}
    seen: dict[str, int] = {}
    fillers = []
    for rec in sorted(records, key=lambda x: x.request.id):
        s = rec.request.session
        if s is None:
            fillers.append(rec)
            continue
        seen[s] = seen.get(s, 0) + 1
        by_turn.setdefault(seen[s], []).append(rec)
    later = group_figures([x for t, recs in by_turn.items() if t > 1 for x in recs], cached)
    return {"turns": {str(t): group_figures(recs, cached) for t, recs in sorted(by_turn.items())},
            **{f"after_gap_{k}": v for k, v in later.items()},
            "fillers_ttft_p50_s": group_figures(fillers, cached)["ttft_p50_s"]}


def pooled(runs: list[dict]) -> dict:
    """A path's figures over its rounds: each the median of the rounds' (a count served: the fewest), the busiest
    round's load and the validity over all; the rounds kept when more than one.

    >>> pooled([{"turns": {"1": {"served": 2, "ttft_p50_s": 0.2, "cached_share": 0.0}}, "after_gap_ttft_p50_s": 0.1,
    ...          "fillers_ttft_p50_s": None}])["turns"]["1"]
    {'served': 2, 'ttft_p50_s': 0.2, 'cached_share': 0.0}
    """
    def merged(name, values):
        values = list(values)
        return min(v or 0 for v in values) if name.endswith("served") else median(values, 4)

    out = {"turns": {t: {k: merged(k, (r["turns"].get(t, {}).get(k) for r in runs)) for k in v}
                     for t, v in runs[0]["turns"].items()},
           **{k: merged(k, (r.get(k) for r in runs)) for k in runs[0] if k not in ("turns", "load")}}
    loads = [r["load"] for r in runs if "load" in r]
    if loads:
        out["load"], out["validity"] = busiest(loads), validity(loads)
    if len(runs) > 1:
        out["rounds"] = runs
    return out


def round_ratios(ours: list[dict], theirs: list[dict]) -> list[float | None]:
    """Ours / theirs after-gap TTFT p50, within each round.

    >>> round_ratios([{"after_gap_ttft_p50_s": 0.1}, {"after_gap_ttft_p50_s": None}], [{"after_gap_ttft_p50_s": 0.4}] * 2)
    [0.25, None]
    """
    return [ratio(a["after_gap_ttft_p50_s"], b["after_gap_ttft_p50_s"], 3) for a, b in zip(ours, theirs)]


def _s(value) -> str:
    return "missing" if value is None else f"{value:.3f} s"


def _share(value) -> str:
    return "missing" if value is None else f"{value:.2f}"


def verdict(without: dict, with_retention: dict, retention_ratio: float | None, llama: dict | None) -> str:
    """The row's sentence, computed from its figures: whether, with retention, the turn after a gap had a lower TTFT
    p50 than without (the median of the rounds' ratios below 1), and llama-server's after-gap figures beside it.

    >>> w = {"after_gap_ttft_p50_s": 0.3, "after_gap_cached_share": 0.2}
    >>> h = {"after_gap_ttft_p50_s": 0.1, "after_gap_cached_share": 0.9}
    >>> verdict(w, h, 0.33, None)
    'With retention, the turn after a gap had a lower TTFT p50 than without: 0.100 s against 0.300 s (ratio 0.33), its cached share 0.90 against 0.20.'
    >>> verdict(h, w, 3.0, {"after_gap_ttft_p50_s": 0.05, "after_gap_cached_share": 0.95})
    'With retention, the turn after a gap did not have a lower TTFT p50 than without: 0.300 s against 0.100 s (ratio 3.00), its cached share 0.20 against 0.90. llama-server on the same trace: 0.050 s, cached share 0.95.'
    >>> verdict(w, h, 0.33, {"after_gap_ttft_p50_s": None}).endswith("answered no turn after a gap (its TTFT missing).")
    True
    >>> verdict(w, {"after_gap_ttft_p50_s": None}, None, {"error": "no llama-server"})
    'The after-gap TTFT p50 was not measured on both of our paths: no verdict. llama-server on the same trace: not run (no llama-server).'
    """
    if retention_ratio is None:
        head = "The after-gap TTFT p50 was not measured on both of our paths: no verdict."
    else:
        lower = "had" if retention_ratio < 1 else "did not have"
        head = (f"With retention, the turn after a gap {lower} a lower TTFT p50 than without: "
                f"{_s(with_retention['after_gap_ttft_p50_s'])} against {_s(without['after_gap_ttft_p50_s'])} "
                f"(ratio {retention_ratio:.2f}), its cached share {_share(with_retention.get('after_gap_cached_share'))} "
                f"against {_share(without.get('after_gap_cached_share'))}.")
    if llama is None:
        return head
    if "after_gap_ttft_p50_s" not in llama:
        return f"{head} llama-server on the same trace: not run ({llama.get('error') or llama.get('skipped')})."
    if llama["after_gap_ttft_p50_s"] is None:
        return f"{head} llama-server on the same trace answered no turn after a gap (its TTFT missing)."
    return (f"{head} llama-server on the same trace: {_s(llama['after_gap_ttft_p50_s'])}, cached share "
            f"{_share(llama.get('after_gap_cached_share'))}.")


def order_of(round_: int) -> tuple[str, ...]:
    """The paths' order in a round: PATHS, reversed every other round.

    >>> order_of(0), order_of(1)
    (('without', 'with_retention', 'llama_server'), ('llama_server', 'with_retention', 'without'))
    """
    return PATHS if round_ % 2 == 0 else PATHS[::-1]


def warm_up_workload(workload: Workload) -> Workload:
    """Two requests at once whose ids no request of `workload` begins with (its first one's, reversed): a run's first
    costs paid before the measured runs, nothing of the trace left in a cache."""
    ids = tuple(reversed(workload.requests[0].prompt_ids))
    return Workload(tuple(Request(i, "warm-up", "", 2, 0.0, prompt_ids=ids[i:]) for i in range(2)))


def llama_round(workload: Workload, threads: int, ctx_per_slot: int, deadline_s: float) -> dict:
    """The workload once on a fresh llama-server (as it ships, LLAMA_SLOTS slots), warmed up; its figures with
    its load window."""
    import psutil

    from ..llamacpp import LlamaServer
    from ..remote import RemoteSource
    with LlamaServer(threads=threads, parallel=LLAMA_SLOTS, ctx=LLAMA_SLOTS * ctx_per_slot) as server:
        source = RemoteSource(server.url, figure_interval=0, reuse_prefix=True)
        SCHEDULERS["concurrent"].create(source).run(warm_up_workload(workload))
        window = LoadWindow.start((psutil.Process(server.process.pid),))
        result = run_until(SCHEDULERS["concurrent"].create(source), workload, deadline_s)
        load = window.stop()
    return {**turn_figures(result.records, llama_cached), "load": load}


def ours_round(engine, workload: Workload, config: BatchConfig, deadline_s: float) -> dict:
    """The workload once on our batching with `config`; its figures with its load window."""
    window = LoadWindow.start()
    result = run_until(SCHEDULERS["batching"].create(engine, batch=config), workload, deadline_s)
    load = window.stop()
    return {**turn_figures(result.records), "load": load}


def sessions_row(model: str | None = None, agents: int = AGENTS, turns: int = TURNS, gaps=GAPS_S,
                 rounds: int = ROUNDS, backend: str | None = None, seed: int = SEED,
                 llama: bool = True) -> SessionsRow:
    """The row: the built-in trace replayed on our batching without and with retention, and on llama-server (on
    the bundled model, `llama` True), `rounds` times each, interleaved (module doc)."""
    from ..backends import default_backend_name
    from ..backends.onnx_backend import physical_cores
    from ..llamacpp import LlamaCppMissing, llama_choice
    from .serve import load
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    name = backend or default_backend_name("cpu", model)
    engine = load(name, model)
    threads = physical_cores()
    rows = script(agents, turns, gaps, seed)
    blocks = capacity_blocks(agents, turns)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sessions.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        workload, _ = replay_file(path, engine, block_size=BLOCK_SIZE, limit=len(rows))
    configs = {"without": BatchConfig(prefix_cache=blocks * BLOCK_SIZE, session_share=0.0, session_ttl=0.0),
               "with_retention": BatchConfig(prefix_cache=blocks * BLOCK_SIZE, session_share=SHARE,
                                             session_ttl=TTL_S)}
    SCHEDULERS["batching"].create(engine, batch=configs["without"]).run(warm_up_workload(workload))
    llama_out: dict = {} if llama and model is None else {
        "skipped": "llama-server runs the bundled GGUF only" if model is not None else "not asked (--no-llama)"}
    runs: dict[str, list[dict]] = {k: [] for k in PATHS}
    ctx, cut = slot_context(rows), deadline(rows)
    for r in range(rounds):
        for key in order_of(r):
            if key in configs:
                runs[key].append(ours_round(engine, workload, configs[key], cut))
            elif not llama_out:
                try:
                    runs[key].append(llama_round(workload, threads, ctx, cut))
                except (LlamaCppMissing, FileNotFoundError, RuntimeError, OSError) as exc:
                    llama_out = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                    runs[key] = []
    if runs["llama_server"] and not llama_out:
        llama_out = {"parallel": LLAMA_SLOTS, "ctx": LLAMA_SLOTS * ctx, "threads": threads,
                     "cache_prompt": "not sent: its default, on", "cache_ram": "--cache-ram not given: its default",
                     "slot_prompt_similarity": "not given: its default", "server": "a fresh one every round",
                     "configuration": llama_choice().summary(), **pooled(runs["llama_server"])}
    without, with_retention = pooled(runs["without"]), pooled(runs["with_retention"])
    each = round_ratios(runs["with_retention"], runs["without"])
    retention_ratio = median(each, 3)
    check = None
    vs_llama: dict[str, float | None] = {"without": None, "with_retention": None}
    if runs["llama_server"]:
        check = validity([x["load"] for k in PATHS for x in runs[k]])
        vs_llama = {k: gated(median(round_ratios(runs[k], runs["llama_server"]), 3), check)
                    for k in ("without", "with_retention")}
    return SessionsRow(
        backend=name, model=model or "bundled", agents=agents, turns=turns, gaps_s=list(gaps), trace_rows=len(rows),
        threads=threads, cache_positions=blocks * BLOCK_SIZE, session_share=SHARE, session_ttl_s=TTL_S,
        budget=budget_text(agents, turns), rounds=rounds,
        order="every round each path once, in the order " + " / ".join(PATHS) + ", reversed every other round",
        deadline_s=cut,
        predicted={"without": predicted(rows, blocks, 0.0, TTL_S),
                   "with_retention": predicted(rows, blocks, SHARE, TTL_S)},
        without=without, with_retention=with_retention, llama_server=llama_out,
        after_gap_ttft_ratio=retention_ratio, round_ratios=each, vs_llama=vs_llama, llama_validity=check,
        cpu_flags=cpu_flags(), verdict=verdict(without, with_retention, retention_ratio, llama_out))


def main(argv: list[str]) -> None:
    p = parser("sessions", __doc__)
    p.add_argument("--agents", type=int, default=AGENTS, help=f"agents (default {AGENTS})")
    p.add_argument("--turns", type=int, default=TURNS, help=f"turns each (default {TURNS})")
    p.add_argument("--gaps", type=float, nargs=2, default=GAPS_S, metavar=("LOW", "HIGH"),
                   help=f"a tool gap's seconds, drawn from this range (default {GAPS_S[0]} {GAPS_S[1]})")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of the paths, interleaved (default {ROUNDS})")
    p.add_argument("--backend", default=None, help="an ONNX backend (default: onnx-gguf4 for a GGUF, else onnx)")
    p.add_argument("--seed", type=int, default=SEED, help=f"the trace's seed (default {SEED})")
    p.add_argument("--no-llama", action="store_true", help="leave llama-server out (ours alone)")
    args = p.parse_args(argv)
    say_timed(lambda: sessions_row(args.model, args.agents, args.turns, tuple(args.gaps), args.rounds, args.backend,
                                   args.seed, llama=not args.no_llama))
