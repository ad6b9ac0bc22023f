"""Workloads that show what a server does with KV memory, each run on A and B that differ by one setting.

    preset = PRESETS["shared system prompt"]
    workload = preset.build(engine, requests=16, rate=2.0, seed=0)     # its own prompts and arrivals
    a, b = preset.configs(workload, count, BatchConfig())             # A and B's batching settings
    measured = preset.measure(engine, result_a, result_b) if preset.measure else {}   # after the runs, if any
    preset.finding(result_a, result_b, **measured)                     # one sentence of the run's own numbers

| preset                             | A                    | B                                  | shows                         |
| shared system prompt               | no prefix cache      | prefix cache                       | TTFT, hit rate                |
| many questions about one document  | no prefix cache      | prefix cache                       | TTFT, hit rate                |
| memory pressure                    | every slot's memory  | a KV budget of a third of demand   | preemptions, recompute,       |
|                                    |                      |                                    | teacher-forced agreement      |
| a long document among chatters     | prefill chunk 512    | prefill chunk 32                   | the chatters' ITL, doc TTFT   |
| two agents with tool gaps:         | sessions held 30 s   | sessions not held (the same small  | TTFT and cached share of the  |
|   retention on vs off              | across their gaps    | prefix cache and share)            | turn after a gap, the blocks  |

Both sides run our continuous batching (scheduler `batching`) on the same source, so the one setting is the
only difference. Every request is greedy, so A and B can be compared token for token; after the memory-pressure
runs, the requests whose tokens parted are replayed teacher-forced through the recompute's pass and the
one-at-a-time pass (agreement.py), and the finding gives that agreement beside the count of changed outputs.

>>> list(PRESETS)
['shared system prompt', 'many questions about one document', 'memory pressure', 'a long document among chatters', 'two agents with tool gaps: retention on vs off']

The agents' preset (session_preset.py) replays a built-in session trace in real time (its `trace`), so the Serve tab
draws its sessions' timeline on both sides.

Left out: drawing (charts/serve.py) and the tab's controls (ui/serve_layout.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..charts.serve import decode_itl
from ..metrics import percentile
from ..prompts import SUMMARIZE_INSTRUCTION, fit_to_window, long_document
from .agreement import Agreement, agreement_clause, recompute_agreement
from .session_preset import ABOUT, NAME as AGENTS, retention_configs, retention_finding, two_agents, \
    two_agents_trace
from .batching import BatchConfig
from .summary import NO_DIRECTION, Expectation, more_or_fewer, plural, rows_clause, served, throughput, verdict
from .workload import Request, Workload, arrival_times, check_count

CACHE_POSITIONS = 8192   # the presets' prefix cache: 512 blocks of 16 positions
INTERFERENCE = "a long document among chatters"   # the preset the prefill-chunk sweep runs (serve/sweeps.py)

SYSTEM = ("You are the guide of a small lighthouse museum. Answer each visitor's question in one or two "
          "sentences, kindly, using only the notes below; when the notes do not say, say so.\n\nNotes:\n")
QUESTIONS = ["Where did the most famous ancient light stand?", "Who built the first lighthouse on a rock?",
             "Why are lighthouses painted in stripes?", "What fuel did early lamps burn?",
             "What is a Fresnel lens?", "How far can a light be seen?", "Who were the keepers?",
             "Why did lighthouses become automatic?", "What replaced the fires on hills?",
             "How does a lighthouse tell sailors which one it is?", "Why were towers built so tall?",
             "What happened in storms?", "Are lighthouses still needed today?", "What is a lightship?",
             "How did keepers pass the long nights?", "What sound signals did lighthouses use?"]
CHATS = ["Tell me a story about a cat who learns to sail.", "Describe a busy market on a summer morning.",
         "Write a letter to a friend about a long train journey.", "Explain how bread is made, step by step.",
         "Describe a walk through a forest after rain.", "Tell me about a day in the life of a baker.",
         "Write a short story about a robot who loves gardening.", "Describe a city at night from a rooftop.",
         "Explain how a bicycle works to a child.", "Tell me about a journey across a desert.",
         "Describe a harbour at dawn, with boats leaving.", "Write a story about two friends building a boat."]


def _arrivals(n: int, rate: float | None, seed: int) -> list[float]:
    return arrival_times(n, "poisson" if rate else "all-at-once", rate, np.random.default_rng(seed))


def _document(source, new_tokens: int, head: str = "") -> str:
    """`head` and the shipped document, cut by tokens so a question (and the chat template) still fit the window."""
    return fit_to_window(source, head + long_document(), new_tokens, allowance=128)[0]


def shared_system_prompt(source, requests: int = 16, rate: float | None = 2.0, seed: int = 0) -> Workload:
    """A long shared instruction (a system prompt of ~800 tokens) and a different short question each."""
    check_count(requests)
    system = _document(source, 16, SYSTEM)
    times = _arrivals(requests, rate, seed)
    return Workload(tuple(Request(i, "question", f"{system}\n\nVisitor: {QUESTIONS[i % len(QUESTIONS)]}", 16, t)
                          for i, t in enumerate(times)), "poisson" if rate else "all-at-once", rate, seed)


def questions_about_a_document(source, requests: int = 12, rate: float | None = 1.0, seed: int = 0) -> Workload:
    """One document, pasted once per question: every request reads it again unless its KV is cached."""
    document = _document(source, 32, "Read this document.\n\n")
    times = _arrivals(requests, rate, seed)
    check_count(requests)
    return Workload(tuple(Request(i, "question", f"{document}\n\nQuestion: "
                                  f"{QUESTIONS[i % len(QUESTIONS)]}", 32, t) for i, t in enumerate(times)),
                    "poisson" if rate else "all-at-once", rate, seed)


def memory_pressure(source, requests: int = 12, rate: float | None = None, seed: int = 0) -> Workload:
    """Chats that each write 128 tokens (EOS ignored: the demand is known), all at once."""
    check_count(requests)
    times = _arrivals(requests, rate, seed)
    return Workload(tuple(Request(i, "chat", CHATS[i % len(CHATS)], 128, t, ignore_eos=True)
                          for i, t in enumerate(times)), "poisson" if rate else "all-at-once", rate, seed)


def long_document_among_chatters(source, requests: int = 8, rate: float | None = 4.0, seed: int = 0) -> Workload:
    """Chatters decoding 96 tokens each, and one document to summarize arriving among them (the last request,
    at 1.5 s): its prefill chunks share iterations with their decode steps."""
    check_count(requests)
    chatters = max(1, requests - 1)
    times = _arrivals(chatters, rate, seed)
    reqs = [Request(i, "chat", CHATS[i % len(CHATS)], 96, t, ignore_eos=True) for i, t in enumerate(times)]
    reqs.append(Request(chatters, "document", _document(source, 16, SUMMARIZE_INSTRUCTION), 16, 1.5))
    return Workload(tuple(reqs), "poisson" if rate else "all-at-once", rate, seed)


def _cache_configs(workload, count, base: BatchConfig):
    return replace(base, prefix_cache=0), replace(base, prefix_cache=CACHE_POSITIONS)


def _pressure_configs(workload, count, base: BatchConfig):
    """B's budget: a third of what the workload would hold at once, and at least what its largest request needs."""
    needs = [count(r.prompt) + r.max_new_tokens for r in workload.requests]
    budget = max(max(needs), sum(needs) // 3)
    budget = math.ceil(budget / 16) * 16
    return replace(base, kv_budget=0, prefix_cache=CACHE_POSITIONS), \
        replace(base, kv_budget=budget, prefix_cache=CACHE_POSITIONS)


def _chunk_configs(workload, count, base: BatchConfig):
    return replace(base, prefill_chunk=512), replace(base, prefill_chunk=32)


def _ttft_p50(result, cls=None):
    return percentile([r.ttft for r in served(result) if cls is None or r.request.cls == cls], 50)


CACHE_TTFT = "a prefix cache shortens TTFT: cached prompt tokens are copied, not computed"
PRESSURE = Expectation("fewer", "a KV budget makes B slower: fewer requests fit at once, and a preempted one is "
                                "computed again")
CHUNK_ITL = "a smaller chunk holds a decode step for less time"
CHUNK_TTFT = "a smaller chunk reads the document in more iterations"


def figure_verdict(phrase: str, b: float, a: float, words: tuple[str, str], expected: str, why: str,
                   fmt=lambda x: f"{x:.2f} s") -> str:
    """One figure of B against A: `phrase` with its computed word, both figures, and whether the run agreed with
    `expected`.

    >>> figure_verdict("a {word} TTFT p50 on B", 0.5, 1.0, ("longer", "shorter"), "shorter", "a cache shortens TTFT")
    'a shorter TTFT p50 on B: 0.50 s against 1.00 s (0.50×; as expected (a cache shortens TTFT))'
    """
    word = more_or_fewer(b, a, *words)
    ratio = f"{b / a:.2f}×; " if a else ""
    return f"{phrase.format(word=word)}: {fmt(b)} against {fmt(a)} ({ratio}{verdict(word, expected, why)})"


def cache_finding(a, b) -> str:
    ta, tb = _ttft_p50(a), _ttft_p50(b)
    if ta is None or tb is None:
        return "Too little was measured to compare the two runs."
    pool = b.pool or {}
    rate = pool.get("cached", 0) / pool["looked_up"] if pool.get("looked_up") else 0.0
    ttft = figure_verdict("the TTFT p50 was {word} on B", tb, ta, ("longer", "shorter"), "shorter", CACHE_TTFT)
    return (f"With the prefix cache, {ttft}: {pool.get('cached', 0):,} of {pool.get('looked_up', 0):,} prompt "
            f"tokens ({rate:.0%}) were copied from cached blocks instead of computed.")


def pressure_finding(a, b, agreement: Agreement | None = None) -> str:
    pool, recs = b.pool or {}, b.records
    preempted = [r for r in recs if r.preemptions]
    done = sum(r.stop_reason in ("eos", "length") for r in recs)
    ta, tb = throughput(a)["output_tps"], throughput(b)["output_tps"]
    copied = sum(p.cached for r in recs for p in r.preemptions)
    again = sum(n for r in recs for p in r.preemptions for *_, n in p.chunks)
    times = plural(sum(len(r.preemptions) for r in recs), "time")
    speed = ("; " + figure_verdict("B gave {word} output tokens/s", tb, ta, ("more", "fewer"), PRESSURE.throughput,
                                   PRESSURE.why, lambda x: f"{x:.1f}") if ta and tb else "")
    return (f"Under a KV budget of {pool.get('kv_budget', 0):,} positions, B preempted {times} "
            f"({plural(len(preempted), 'request')}), recomputed {again:,} positions and copied {copied:,} back from "
            f"the prefix cache; {done} of {len(recs)} completed{speed}{rows_clause(a, b, 'A', 'B')}. "
            f"{changed_outputs(a, b, agreement=agreement)}")


def measure_pressure(source, a, b, cancel=None) -> dict:
    """The memory-pressure finding's measured extra: the recompute's teacher-forced agreement (agreement.py)."""
    return {"agreement": recompute_agreement(source.backend, a, b, cancel)}


def changed_outputs(a, b, who: str = "A", agreement: Agreement | None = None) -> str:
    """How many requests kept `who`'s (run a's) greedy tokens, and why the others parted where any did, with the
    recompute's teacher-forced `agreement` where it was measured."""
    changed = [y for x, y in traced_pairs(a, b) if x.trace.output_ids != y.trace.output_ids]
    head = f"{identical_requests(a, b)} of {len(b.records)} requests gave the very tokens {who} gave them"
    if not changed:
        return head + "."
    hit = sum(bool(y.preemptions) for y in changed)
    return (f"{head}; {len(changed)} parted ({hit} of them preempted): a recompute reads the dropped positions back "
            "as one multi-row prefill pass, whose kernels round differently from the one-row decode steps that "
            "first wrote them, and batches of other sizes round differently too; where the top two tokens were "
            "nearly tied, greedy decoding tips to the other and the answer goes its own way from there. "
            f"{agreement_clause(agreement, who)}")


def identical_requests(a, b) -> int:
    """How many requests gave the same tokens in both runs (greedy: on the default graph a recompute or another
    batch may part them, see docs/serving.md#correctness)."""
    return sum(x.trace.output_ids == y.trace.output_ids for x, y in traced_pairs(a, b))


def traced_pairs(a, b) -> list:
    """Each request's record in A beside its record in B, where both ran (both have a trace)."""
    return [(x, y) for x, y in zip(a.records, b.records) if x.trace is not None and y.trace is not None]


def _chunk_figures(r) -> tuple[float | None, float | None, float | None]:
    """The chatters' ITL p95 in iterations with a prefill chunk and without, and the document's TTFT p50."""
    points = [p for p in decode_itl(r) if p[3] != "document"]
    return (percentile([p[1] for p in points if p[2]], 95), percentile([p[1] for p in points if not p[2]], 95),
            _ttft_p50(r, "document"))


def chunk_finding(a, b) -> str:
    parts, figures = [], []
    for name, r in (("A", a), ("B", b)):
        with_chunk, without, ttft = _chunk_figures(r)
        if with_chunk is None or without is None or ttft is None:
            parts.append(f"{name} (chunk {(r.pool or {}).get('prefill_chunk')}): too little was measured")
            continue
        figures.append((with_chunk, ttft))
        parts.append(f"{name} (chunk {r.pool['prefill_chunk']}): the chatters' ITL p95 was {with_chunk * 1e3:.0f} ms "
                     f"in iterations that carried a prefill chunk against {without * 1e3:.0f} ms without; the "
                     f"document's TTFT {ttft:.2f} s")
    text = "; ".join(parts) + "."
    if len(figures) == 2:
        (itl_a, ttft_a), (itl_b, ttft_b) = figures
        ms = lambda x: f"{x * 1e3:.0f} ms"   # noqa: E731
        text += (f" The chatters' ITL p95 with a chunk was "
                 f"{figure_verdict('{word} on B', itl_b, itl_a, ('higher', 'lower'), 'lower', CHUNK_ITL, ms)}; "
                 f"the document's TTFT was "
                 f"{figure_verdict('{word} on B', ttft_b, ttft_a, ('longer', 'shorter'), 'longer', CHUNK_TTFT)}.")
    return text


@dataclass(frozen=True)
class Preset:
    name: str
    about: str                                   # one line for the tab
    build: Callable[..., Workload]               # (source, requests, rate, seed) -> Workload
    configs: Callable[..., tuple]                # (workload, count(prompt) -> tokens, base) -> (A's, B's BatchConfig)
    finding: Callable[..., str]                  # (result A, result B, **measured) -> one sentence
    requests: int
    rate: float | None                           # None: all at once
    expect: Expectation = NO_DIRECTION           # B's output tokens/s against A's, and why
    measure: Callable[..., dict] | None = None   # (source, result A, result B, cancel) -> the finding's keywords,
    #                                              measured after both runs (the machine still held)
    trace: Callable[[], object] | None = None    # () -> the agent_trace.SessionTrace its workload replays (None: none)


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("shared system prompt", "a long system prompt and many short questions: A without the prefix cache, "
           "B with it", shared_system_prompt, _cache_configs, cache_finding, 16, 2.0),
    Preset("many questions about one document", "one document, many questions: A without the prefix cache, B with it",
           questions_about_a_document, _cache_configs, cache_finding, 12, 1.0),
    Preset("memory pressure", "more KV demand than B's budget: B preempts and recomputes, A has every slot's memory",
           memory_pressure, _pressure_configs, pressure_finding, 12, None, PRESSURE, measure_pressure),
    Preset("a long document among chatters", "a document's prefill chunks among decoding chatters: A reads 512 "
           "prompt tokens per iteration, B 32", long_document_among_chatters, _chunk_configs, chunk_finding, 8, 4.0),
    Preset(AGENTS, ABOUT, two_agents, retention_configs, retention_finding, len(two_agents_trace().rows), None,
           trace=two_agents_trace),
)}
