"""A workload: N requests drawn from classes (prompt, token budget, share of the mix) with arrival times.

    classes = default_classes(source)                      # the lesson's two requests
    workload = Workload.build(classes, 16, arrival="poisson", rate=2.0, seed=0)
    [r.cls for r in workload.requests][:3], workload.requests[1].arrival   # seeded: the same every time
    Workload.from_dict(workload.to_dict()) == workload     # replay it on another scheduler or source
    check_tokens(workload, count_prompt)                   # the cap on prompt + new tokens

Class counts follow the shares exactly (largest remainder), in a seeded random order; arrivals are all
at once, at a fixed rate, or a seeded Poisson process (exponential gaps, the first request at 0 s), as
vLLM's `bench serve --request-rate` draws them.

>>> w = Workload.build([RequestClass("a", "x", 4, 0.75), RequestClass("b", "y", 8, 0.25)], 4, "fixed", 2.0)
>>> [r.cls for r in w.requests].count("a"), [r.arrival for r in w.requests]
(3, [0.0, 0.5, 1.0, 1.5])
>>> parse_mix("short:0.8,long:0.2")
{'short': 0.8, 'long': 0.2}

Left out: sampling (every request is greedy, so two schedulers can be compared token for token), and the
prompts themselves (playground/prompts.py).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from ..prompts import SHORT_QUESTION, long_prompt

MAX_WORKLOAD_TOKENS = 60_000  # prompt + new tokens over the whole workload (64 long documents is ~57k)
MAX_REQUESTS = 64             # a shared Space runs one workload at a time; 64 requests is minutes on 2 cores
ARRIVALS = ("all-at-once", "fixed", "poisson")
TRACE = "trace"               # a Workload's arrival pattern when it replays a trace's timestamps (mooncake.py)


@dataclass(frozen=True)
class RequestClass:
    name: str             # "short" | "long" | any name the user gives
    prompt: str           # what the user sends (the chat template is applied by the source)
    max_new_tokens: int   # token budget; a request also stops at EOS (unless ignore_eos)
    share: float          # weight in the mix; shares are normalized over the classes


@dataclass(frozen=True)
class Request:
    id: int
    cls: str
    prompt: str
    max_new_tokens: int
    arrival: float            # seconds after the workload starts
    ignore_eos: bool = False  # run to the token budget (the sweeps: equal decode lengths)
    prompt_ids: tuple[int, ...] | None = None   # the exact ids the model reads (a replayed trace: no chat
    #                                             template applied; `prompt` is their text); None: `prompt` templated
    session: str | None = None   # the agent session it is a turn of (a replayed session trace); None: none
    after: int | None = None     # the id of its session's previous turn, released `delay` s after that one ends
    delay: float = 0.0           # (sessions.Releases); `after` None: released at `arrival`


@dataclass(frozen=True)
class Workload:
    requests: tuple[Request, ...]
    arrival: str = "all-at-once"   # one of ARRIVALS
    rate: float | None = None      # requests per second (fixed, poisson)
    seed: int = 0

    @classmethod
    def build(cls, classes, n: int, arrival: str = "all-at-once", rate: float | None = None, seed: int = 0,
              ignore_eos: bool = False) -> "Workload":
        """ValueError (naming the field) on a bad count, class, arrival pattern or rate."""
        classes = list(classes)
        check_count(n)
        if not classes:
            raise ValueError("a workload needs at least one request class")
        for c in classes:
            if not c.prompt or not c.prompt.strip():
                raise ValueError(f"class {c.name!r}: the prompt is empty")
            if not 1 <= int(c.max_new_tokens) <= 2048:
                raise ValueError(f"class {c.name!r}: max new tokens must be between 1 and 2048, got {c.max_new_tokens}")
            if not (math.isfinite(c.share) and c.share >= 0):
                raise ValueError(f"class {c.name!r}: the share must be a number >= 0, got {c.share}")
        rng = np.random.default_rng(seed)
        order = [classes[i] for i in rng.permutation(np.repeat(np.arange(len(classes)), class_counts(classes, n)))]
        times = arrival_times(n, arrival, rate, rng)
        return cls(tuple(Request(i, c.name, c.prompt, int(c.max_new_tokens), t, ignore_eos)
                         for i, (c, t) in enumerate(zip(order, times))), arrival, rate, seed)

    def to_dict(self) -> dict:
        return {"arrival": self.arrival, "rate": self.rate, "seed": self.seed,
                "requests": [asdict(r) for r in self.requests]}

    @classmethod
    def from_dict(cls, d: dict) -> "Workload":
        requests = (Request(**{**r, "prompt_ids": None if r.get("prompt_ids") is None else tuple(r["prompt_ids"])})
                    for r in d["requests"])
        return cls(tuple(requests), d["arrival"], d["rate"], d["seed"])

    def classes(self) -> list[str]:
        """Class names in order of first appearance."""
        return list(dict.fromkeys(r.cls for r in self.requests))

    def scaled(self, rate: float) -> "Workload":
        """The same requests with arrivals redrawn at another rate (same seed): a rate sweep's points."""
        times = arrival_times(len(self.requests), self.arrival if self.arrival != "all-at-once" else "poisson",
                              rate, np.random.default_rng(self.seed + 1))
        return replace(self, requests=tuple(replace(r, arrival=t) for r, t in zip(self.requests, times)), rate=rate)


def check_count(n) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, float)) or int(n) != n or not 1 <= n <= MAX_REQUESTS:
        raise ValueError(f"requests must be a whole number between 1 and {MAX_REQUESTS}, got {n!r}")


def class_counts(classes, n: int) -> list[int]:
    """How many requests each class gets: proportional to the shares, largest remainder.

    >>> class_counts([RequestClass("s", "q", 1, 0.8), RequestClass("l", "d", 1, 0.2)], 16)
    [13, 3]
    """
    total = sum(c.share for c in classes)
    if total <= 0:
        raise ValueError("the shares of the mix add up to 0: give at least one class a share above 0")
    exact = [c.share / total * n for c in classes]
    counts = [math.floor(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])[:n - sum(counts)]:
        counts[i] += 1
    return counts


def arrival_times(n: int, arrival: str, rate: float | None, rng: np.random.Generator) -> list[float]:
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {', '.join(ARRIVALS)}; got {arrival!r}")
    if arrival == "all-at-once":
        return [0.0] * n
    if rate is None or not math.isfinite(rate) or not 0.01 <= rate <= 1000:
        raise ValueError(f"rate must be between 0.01 and 1000 requests per second, got {rate!r}")
    if arrival == "fixed":
        return [i / rate for i in range(n)]
    gaps = rng.exponential(1.0 / rate, n - 1)
    return [0.0] + [round(float(t), 6) for t in np.cumsum(gaps)]


def parse_mix(text: str) -> dict[str, float]:
    """'short:0.8,long:0.2' -> {'short': 0.8, 'long': 0.2}; ValueError naming the bad part."""
    mix = {}
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        name, sep, share = part.partition(":")
        try:
            mix[name.strip()] = float(share)
        except ValueError:
            raise ValueError(f"mix: expected name:share (e.g. short:0.8), got {part!r}") from None
        if not sep or not name.strip() or not math.isfinite(mix[name.strip()]) or mix[name.strip()] < 0:
            raise ValueError(f"mix: expected name:share with a share >= 0, got {part!r}")
    if not mix:
        raise ValueError("mix is empty: give it as name:share pairs, e.g. short:0.8,long:0.2")
    return mix


def default_classes(source=None, max_new_tokens: int = 48, mix: dict[str, float] | None = None) -> list[RequestClass]:
    """The lesson's two requests (the short-vs-long experiment's): a one-line question and a document to
    summarize, cut to the source's context window when it has a tokenizer and says its window."""
    tokenizer = getattr(source, "tokenizer", None)
    window = source.info.context_window if source is not None else None
    document, _ = long_prompt(tokenizer, window, max_new_tokens)
    classes = [RequestClass("short", SHORT_QUESTION, max_new_tokens, 0.8),
               RequestClass("long", document, max_new_tokens, 0.2)]
    if mix:
        unknown = set(mix) - {c.name for c in classes}
        if unknown:
            raise ValueError(f"mix names {', '.join(sorted(unknown))}: the classes are short and long")
        classes = [replace(c, share=mix.get(c.name, 0.0)) for c in classes]
    return classes


def total_tokens(workload: Workload, count_prompt) -> int:
    """Prompt + new tokens over the workload; `count_prompt(prompt) -> int` (the source's tokenizer; a request's
    exact ids, where it has them, count as they are)."""
    counts = {p: count_prompt(p) for p in {r.prompt for r in workload.requests if r.prompt_ids is None}}
    return sum((counts[r.prompt] if r.prompt_ids is None else len(r.prompt_ids)) + r.max_new_tokens
               for r in workload.requests)


def check_tokens(workload: Workload, count_prompt, limit: int = MAX_WORKLOAD_TOKENS) -> int:
    total = total_tokens(workload, count_prompt)
    if total > limit:
        raise ValueError(f"the workload is {total:,} tokens (prompts + new tokens); the limit is {limit:,}: "
                         "fewer requests, a smaller share of long ones, or fewer new tokens")
    return total
