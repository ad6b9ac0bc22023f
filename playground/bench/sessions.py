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

Our batching replays the trace (run.replay_file, BatchConfig's prefix cache of that budget) twice a round,
interleaved: `without` (session_share 0: a session's blocks are evictable as soon as its turn ends) and
`with_retention` (session_share SHARE, session_ttl TTL_S, above every gap). Per path and per turn: served, TTFT p50
and the cached share (prompt tokens copied from cached blocks / prompt tokens); the TTFT p50 of the turns after a
gap (every agent's turns 2..T) and of the fillers. The figure the row reports:

    after_gap_ttft_ratio   with_retention's after-gap TTFT p50 / without's (below 1: retention helped), the median
                           of the ratios within each round; reported, not gated

`predicted`: what the cache alone decides on the trace's own clock (serve/session_gaps.replay_gaps, no compute
time): per path, the gaps whose session found a block evicted. Left out: llama-server on the same trace
(`llama_server`: "not run"); llama.cpp keeps a slot's prompt, not a session's blocks across a gap.
"""
from __future__ import annotations

import json
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..metrics import percentile
from ..serve import SCHEDULERS
from ..serve.agent_trace import read_rows
from ..serve.batching import BatchConfig
from ..serve.prefix_cache import BLOCK_SIZE
from ..serve.run import replay_file
from ..serve.session_gaps import replay_gaps
from .rows import Row, parser, say_timed
from .stats import median, ratio, rounded

AGENTS = 3
TURNS = 4
GAPS_S = (2.0, 10.0)       # a tool gap's seconds, drawn uniformly
PREFIX_BLOCKS = 6          # an agent's first turn's blocks (BLOCK_SIZE tokens each)
GROW_BLOCKS = 2            # blocks a later turn adds (the answer before it and the tool's result)
FILLER_BLOCKS = 12         # a filler row's blocks, none shared
FILLER_EVERY_S = 0.5
START_EVERY_S = 1.0        # the agents' first turns, this far apart
OUTPUT_TOKENS = 8
SHARE = 0.5
TTL_S = 15.0               # above every gap
ROUNDS = 2
SEED = 58
FILLER_IDS = 1_000_000     # fillers' block ids start here; agent a's at a * 1000


@dataclass(frozen=True, kw_only=True)
class SessionsRow(Row):
    """Agents with tool gaps under a small prefix cache, without and with session retention
    (sessions.sessions_row). `without` and `with_retention`: turns ({"1": served, ttft_p50_s, cached_share}, ...),
    after_gap_ttft_p50_s, fillers_ttft_p50_s, and rounds when more than one."""

    bench: str = field(default="sessions", init=False)
    backend: str
    model: str
    agents: int
    turns: int
    gaps_s: list[float]
    trace_rows: int
    cache_positions: int
    session_share: float
    session_ttl_s: float
    rounds: int
    predicted: dict                       # path -> gaps whose session lost a block (replay_gaps, the cache alone)
    without: dict
    with_retention: dict
    after_gap_ttft_ratio: float | None    # with / without, the median of the rounds' ratios
    round_ratios: list[float | None]
    llama_server: str


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


def script(agents: int = AGENTS, turns: int = TURNS, gaps=GAPS_S, seed: int = SEED) -> list[dict]:
    """The built-in trace's rows (agent_trace.py's fields): each agent's turns, its later ones `delay` ms after the
    previous one ends (tool gaps), and fillers of no session every FILLER_EVERY_S over the span the gaps cover.

    >>> rows = script(agents=2, turns=2, gaps=(1.0, 1.0))
    >>> [(r.get("session_id"), r.get("delay"), len(r["hash_ids"])) for r in rows][:3]
    [('agent 1', None, 6), ('agent 1', 1000.0, 8), ('agent 2', None, 6)]
    >>> sum("session_id" not in r for r in rows)   # over 3 s (agent 2's start, its gap, a gap's margin)
    6
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


def predicted(rows: list[dict], capacity: int, share: float, ttl_s: float) -> int:
    """Gaps whose session found a block of its chain evicted, the cache alone deciding (session_gaps.replay_gaps).

    >>> rows = script(agents=2, turns=3, gaps=(2.0, 4.0))
    >>> predicted(rows, capacity_blocks(2, 3), 0.0, TTL_S) > 0, predicted(rows, capacity_blocks(2, 3), SHARE, TTL_S)
    (True, 0)
    """
    gaps, _ = replay_gaps(read_rows([json.dumps(r) for r in rows]), capacity, share, ttl_s)
    return sum(1 for g in gaps if g.state["evicted"])


def turn_figures(records) -> dict:
    """One run's figures from its records (each with request.session, request.id, ttft, cached_tokens,
    prompt_tokens, steps): per turn of the agents, after their gaps, and the fillers.

    >>> from types import SimpleNamespace as S
    >>> r = lambda i, s, ttft, cached: S(request=S(id=i, session=s), ttft=ttft, cached_tokens=cached,
    ...                                  prompt_tokens=100, steps=[1])
    >>> f = turn_figures([r(0, "a", 0.5, 0), r(1, "a", 0.1, 96), r(2, None, 0.3, 0), r(3, "b", 0.4, 0)])
    >>> f["turns"]["2"], f["after_gap_ttft_p50_s"], f["fillers_ttft_p50_s"]
    ({'served': 1, 'ttft_p50_s': 0.1, 'cached_share': 0.96}, 0.1, 0.3)
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

    def ttft(recs):
        return rounded(percentile([x.ttft for x in recs if x.steps], 50), 4)

    turns = {}
    for t, recs in sorted(by_turn.items()):
        ran = [x for x in recs if x.steps]
        prompt = sum(x.prompt_tokens or 0 for x in ran)
        turns[str(t)] = {"served": len(ran), "ttft_p50_s": ttft(recs),
                         "cached_share": rounded(sum(x.cached_tokens for x in ran) / prompt, 3) if prompt else None}
    later = [x for t, recs in by_turn.items() if t > 1 for x in recs]
    return {"turns": turns, "after_gap_ttft_p50_s": ttft(later), "fillers_ttft_p50_s": ttft(fillers)}


def pooled(runs: list[dict]) -> dict:
    """A path's figures over its rounds: each the median of the rounds', the rounds kept when more than one.

    >>> pooled([{"turns": {"1": {"served": 2, "ttft_p50_s": 0.2, "cached_share": 0.0}}, "after_gap_ttft_p50_s": 0.1,
    ...          "fillers_ttft_p50_s": None}])["turns"]["1"]
    {'served': 2, 'ttft_p50_s': 0.2, 'cached_share': 0.0}
    """
    out = {"turns": {t: {k: median([r["turns"].get(t, {}).get(k) for r in runs], 4) for k in v}
                     for t, v in runs[0]["turns"].items()},
           **{k: median([r[k] for r in runs], 4) for k in ("after_gap_ttft_p50_s", "fillers_ttft_p50_s")}}
    if len(runs) > 1:
        out["rounds"] = runs
    return out


def sessions_row(model: str | None = None, agents: int = AGENTS, turns: int = TURNS, gaps=GAPS_S,
                 rounds: int = ROUNDS, backend: str | None = None, seed: int = SEED) -> SessionsRow:
    """The row: the built-in trace replayed on our batching without and with retention, `rounds` times each,
    interleaved (module doc)."""
    from ..backends import default_backend_name
    from .serve import load
    name = backend or default_backend_name("cpu", model)
    engine = load(name, model)
    rows = script(agents, turns, gaps, seed)
    blocks = capacity_blocks(agents, turns)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sessions.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        workload, _ = replay_file(path, engine, block_size=BLOCK_SIZE, limit=len(rows))
    configs = {"without": BatchConfig(prefix_cache=blocks * BLOCK_SIZE, session_share=0.0, session_ttl=0.0),
               "with_retention": BatchConfig(prefix_cache=blocks * BLOCK_SIZE, session_share=SHARE,
                                             session_ttl=TTL_S)}
    runs: dict[str, list[dict]] = {k: [] for k in configs}
    for _ in range(rounds):
        for key, config in configs.items():
            result = SCHEDULERS["batching"].create(engine, batch=config).run(workload)
            runs[key].append(turn_figures(result.records))
    round_ratios = [ratio(w["after_gap_ttft_p50_s"], o["after_gap_ttft_p50_s"], 3)
                    for w, o in zip(runs["with_retention"], runs["without"])]
    return SessionsRow(
        backend=name, model=model or "bundled", agents=agents, turns=turns, gaps_s=list(gaps), trace_rows=len(rows),
        cache_positions=blocks * BLOCK_SIZE, session_share=SHARE, session_ttl_s=TTL_S, rounds=rounds,
        predicted={"without": predicted(rows, blocks, 0.0, TTL_S),
                   "with_retention": predicted(rows, blocks, SHARE, TTL_S)},
        without=pooled(runs["without"]), with_retention=pooled(runs["with_retention"]),
        after_gap_ttft_ratio=median(round_ratios, 3), round_ratios=round_ratios,
        llama_server="not run")


def main(argv: list[str]) -> None:
    p = parser("sessions", __doc__)
    p.add_argument("--agents", type=int, default=AGENTS, help=f"agents (default {AGENTS})")
    p.add_argument("--turns", type=int, default=TURNS, help=f"turns each (default {TURNS})")
    p.add_argument("--gaps", type=float, nargs=2, default=GAPS_S, metavar=("LOW", "HIGH"),
                   help=f"a tool gap's seconds, drawn from this range (default {GAPS_S[0]} {GAPS_S[1]})")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of both paths, interleaved (default {ROUNDS})")
    p.add_argument("--backend", default=None, help="an ONNX backend (default: onnx-gguf4 for a GGUF, else onnx)")
    p.add_argument("--seed", type=int, default=SEED, help=f"the trace's seed (default {SEED})")
    args = p.parse_args(argv)
    say_timed(lambda: sessions_row(args.model, args.agents, args.turns, tuple(args.gaps), args.rounds, args.backend,
                                   args.seed))
