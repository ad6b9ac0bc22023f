"""The Serve tab's agent preset: two agents whose turns are parted by tool gaps, replayed in real time under a prefix
cache too small to keep them, A holding each session's blocks across its gaps and B not.

    trace = two_agents_trace()                       # a SessionTrace (agent_trace.py), built in: no file
    workload = two_agents(engine)                    # its turns as a workload on the engine's tokenizer
    a, b = retention_configs(workload, count, BatchConfig())   # A: sessions held for TTL_S; B: not held
    retention_finding(result_a, result_b)            # whether the turn after a gap was faster with retention

The trace: agent 1 starts at 0 s and agent 2 at AGENT_STARTS_S[1], each for TURNS turns, a later turn `delay` after
its predecessor ends (GAPS_S: a tool call's few seconds). A turn's prompt is its agent's chain of blocks
(PREFIX_BLOCKS, then GROW_BLOCKS more a turn: the earlier turns and the tool's answer), so a turn after a gap finds
its whole history cached if the cache kept it. Meanwhile requests of no session (FILLER_BLOCKS blocks of their own,
every FILLER_EVERY_S) fill a prefix cache of CACHE_BLOCKS: within one gap they need more than all of it. Both sides
run the same trace on the same engine, with the same budget and the same share SHARE that sessions may hold; they
differ by one setting, the TTL a session is held for (`BatchConfig.session_ttl`: the operator's default, the TTL a
turn's retention hint would ask, since the trace's sessions ask none): A holds each session's blocks for TTL_S,
above every gap; B holds nothing, so the fillers evict what the agents' next turns need.

>>> trace = two_agents_trace()
>>> [(r.session_id, r.delay, len(r.hash_ids)) for r in trace.rows if r.session_id][:3]
[('agent 1', None, 6), ('agent 1', 2500.0, 8), ('agent 1', 3000.0, 10)]
>>> len(trace.rows), sum(r.session_id is None for r in trace.rows)
(18, 12)

Left out: the agents' real tool calls (a gap is waiting; the trace's prompts are token blocks, as Mooncake's) and a
client's own TTL per turn (the endpoint's hints: api/session_hint.py).
"""
from __future__ import annotations

from dataclasses import replace

from ..metrics import percentile
from ..units import precise_duration
from .agent_trace import SessionRow, SessionTrace, to_workload
from .batcher import BatchConfig
from .prefix_cache import BLOCK_SIZE
from .summary import more_or_fewer
from .workload import Workload

NAME = "two agents with tool gaps: retention on vs off"
TURNS = 3
AGENT_STARTS_S = (0.0, 0.5)
GAPS_S = ((2.5, 3.0), (3.0, 2.5))   # each agent's tool gaps, seconds, before its turns 2 and 3
PREFIX_BLOCKS = 6                   # an agent's first turn's blocks (BLOCK_SIZE tokens each)
GROW_BLOCKS = 2                     # blocks a later turn adds
OUTPUT_TOKENS = 8
FILLER_BLOCKS = 10                  # a request of no session: blocks of its own
FILLER_EVERY_S = 0.5
FILLER_IDS = 1_000_000              # fillers' block ids start here; agent a's at a * 1000
CACHE_BLOCKS = 40                   # the prefix cache: twice the two agents' longest chains
SHARE = 0.5                         # the share of it sessions may hold, on both sides
TTL_S = 30.0                        # A's hold, above every gap; B's: 0 (nothing held)
ABOUT = (f"two agents, {TURNS} turns each, parted by tool gaps of {min(map(min, GAPS_S)):g}–{max(map(max, GAPS_S)):g} "
         f"s replayed in real time, while requests of no session fill a prefix cache of {CACHE_BLOCKS * BLOCK_SIZE} "
         f"positions: A holds each agent's blocks across its gaps (a TTL of {TTL_S:g} s, as a retention hint asks), B "
         "does not; the session timeline shows each turn's TTFT and cached share, and each gap's blocks as measured "
         "when the next turn came (the request count and arrivals are the trace's)")


def chain(agent: int, turn: int) -> list[int]:
    """Agent `agent`'s blocks at its turn `turn` (1 = its first): its earlier turns' blocks and GROW_BLOCKS more.

    >>> chain(2, 1) == list(range(2000, 2000 + PREFIX_BLOCKS)), len(chain(2, 3)) - len(chain(2, 2))
    (True, 2)
    """
    return [agent * 1000 + j for j in range(PREFIX_BLOCKS + (turn - 1) * GROW_BLOCKS)]


def two_agents_trace() -> SessionTrace:
    """The preset's trace: the agents' turns (module doc) and the fillers over the span their gaps cover."""
    rows = []
    for a, (start, gaps) in enumerate(zip(AGENT_STARTS_S, GAPS_S), start=1):
        for t in range(1, TURNS + 1):
            ids = tuple(chain(a, t))
            first = t == 1
            rows.append(SessionRow(len(ids) * BLOCK_SIZE, OUTPUT_TOKENS, ids, start * 1000 if first else None,
                                   f"agent {a}", None if first else gaps[t - 2] * 1000, tool_gap=not first))
    span = max(s + sum(g) for s, g in zip(AGENT_STARTS_S, GAPS_S))
    for k in range(int(span / FILLER_EVERY_S)):
        ids = tuple(FILLER_IDS + k * FILLER_BLOCKS + j for j in range(FILLER_BLOCKS))
        rows.append(SessionRow(len(ids) * BLOCK_SIZE, OUTPUT_TOKENS, ids, (k + 1) * FILLER_EVERY_S * 1000))
    return SessionTrace(rows, BLOCK_SIZE, "the two-agent preset")


def two_agents(source, requests: int | None = None, rate: float | None = None, seed: int = 0) -> Workload:
    """The trace's turns as a workload on `source`'s tokenizer (a Preset's build: the count, rate and seed are the
    trace's own, so they are not read); ValueError for a source without a local tokenizer."""
    tokenizer = getattr(source, "tokenizer", None)
    if tokenizer is None:
        raise ValueError("the two-agent preset replays token blocks: pick a local backend (its tokenizer)")
    trace = two_agents_trace()
    return to_workload(trace, tokenizer, limit=len(trace.rows))[0]


def retention_configs(workload, count, base: BatchConfig) -> tuple[BatchConfig, BatchConfig]:
    """A: the small prefix cache, sessions held for TTL_S; B: the same cache and share, nothing held.

    >>> a, b = retention_configs(None, len, BatchConfig())
    >>> (a.prefix_cache, a.session_share, a.session_ttl), (b.prefix_cache, b.session_share, b.session_ttl)
    ((640, 0.5, 30.0), (640, 0.5, 0.0))
    """
    cache = replace(base, prefix_cache=CACHE_BLOCKS * BLOCK_SIZE, kv_budget=0, session_share=SHARE)
    return replace(cache, session_ttl=TTL_S), replace(cache, session_ttl=0.0)


def after_gap_turns(records) -> list:
    """The session turns after a gap (each session's turns 2, 3, …) that made a token, in request order."""
    seen, out = set(), []
    for r in sorted(records, key=lambda x: x.request.id):
        session = r.request.session
        if session is None:
            continue
        if session in seen and r.steps:
            out.append(r)
        seen.add(session)
    return out


def after_gap_figures(result) -> tuple[float | None, float | None, int]:
    """(the TTFT p50 of the turns after a gap, the share of their prompt tokens found cached, how many) of a run."""
    turns = after_gap_turns(result.records)
    prompt = sum(r.prompt_tokens or 0 for r in turns)
    share = sum(r.cached_tokens for r in turns) / prompt if prompt else None
    return percentile([r.ttft for r in turns], 50), share, len(turns)


def retention_finding(a, b) -> str:
    """Whether the turns after a tool gap started faster with retention (A) than without (B), from both runs'
    figures: their TTFT p50 and the share of their prompts found cached.

    >>> from types import SimpleNamespace as S
    >>> turn = lambda i, s, ttft, cached: S(request=S(id=i, session=s), ttft=ttft, cached_tokens=cached,
    ...                                     prompt_tokens=128, steps=[1])
    >>> run = lambda ttft, cached: S(records=[turn(0, "a", 0.5, 0), turn(1, "a", ttft, cached), turn(2, None, 1.0, 0)])
    >>> print(retention_finding(run(0.1, 96), run(0.4, 0)))  # doctest: +NORMALIZE_WHITESPACE
    After a tool gap, the next turn was faster with retention: TTFT p50 100 ms with it (A) against 400 ms without
    (B), 0.25×; 75% of those turns' prompt tokens were found cached with it against 0% without (1 turn each).
    >>> print(retention_finding(run(0.6, 0), run(0.4, 0)))  # doctest: +NORMALIZE_WHITESPACE
    After a tool gap, the next turn was not faster with retention: TTFT p50 600 ms with it (A) against 400 ms
    without (B), 1.50×; 0% of those turns' prompt tokens were found cached with it against 0% without (1 turn each).
    """
    ta, ca, na = after_gap_figures(a)
    tb, cb, nb = after_gap_figures(b)
    if ta is None or tb is None:
        return "Too little was measured to compare the turns after a gap: a side served none of them."
    word = more_or_fewer(tb, ta, "faster", "not faster", "no faster")
    ratio = f", {ta / tb:.2f}×" if tb else ""
    pct = lambda x: "missing" if x is None else f"{x:.0%}"   # noqa: E731
    each = f"{na} turn{'s' * (na != 1)} each" if na == nb else f"{na} turns on A, {nb} on B"
    return (f"After a tool gap, the next turn was {word} with retention: TTFT p50 {precise_duration(ta)} with it (A) "
            f"against {precise_duration(tb)} without (B){ratio}; {pct(ca)} of those turns' prompt tokens were found cached with it "
            f"against {pct(cb)} without ({each}).")
