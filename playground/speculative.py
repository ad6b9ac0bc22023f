"""Speculative decoding with drafts from the text itself (prompt lookup / n-gram matching): no second model.

    engine = SpeculativeEngine(create_backend("onnx-gguf4"), Speculation(k=4, ngram=3))
    trace = engine.run("Summarize: ...", GenerationSettings(max_new_tokens=64)).wait()
    trace.speculation   # {"k": 4, "ngram": 3, "passes": .., "proposed": .., "accepted": ..}
    [s.draft for s in trace.steps]   # "accepted" | "replaced" | None, and s.forward_pass: which pass made it

Each step looks for the last n tokens (n = ngram, then shorter down to 1) earlier in the prompt and the
text so far, as vLLM's `ngram` speculator and transformers' `prompt_lookup_num_tokens` do, and proposes
up to k tokens that followed the most recent match. One forward pass over [last token + proposals]
(`Backend.verify`, on the live KV cache) scores every position at once. Walking the proposals, the
sampler picks the model's own token at each position (argmax, or a draw from the warped distribution);
while it equals the proposal, the proposal is accepted; the first that differs is replaced by the
model's pick and the rest are dropped, and the cache is rolled back past them (`Backend.rollback`).
When every proposal is accepted the pass's last row gives one more token for free.

Lossless: each output position is one pick from the model's distribution at that position, in order.
Greedy gives plain greedy's tokens (on the verify pass's arithmetic). Sampling draws once per output
token from the same seeded generator as plain decoding, and accepting a point-mass draft when the draw
equals it is the speculative-sampling rule (accept with probability q(draft), else draw from q without
the draft), so a seeded run gives the same tokens as plain seeded decoding.

How many to propose (`Lookahead`): a verify row is not free on a CPU (here each extra row costs about
half a decode step: the 2 cores compute as much as they read), so each pass carries the m <= k proposals
that maximise the expected gain  sum_{j<=m} a^j - c*m,  where a is the run's acceptance rate so far
(decaying counts, an optimistic prior) and c the cost of one verify row as a fraction of a decode step,
measured from the run's own passes (or fixed by `Speculation.row_cost`). m = 0 means a plain decode; each
such pass lets the counts fade back toward the prior, so a run whose first proposals failed (a model that
starts to copy only after a few tokens) tries again instead of never proposing.
And backing off: a pass whose proposals were all rejected gains nothing, so after one the engine stops
proposing for 1, 2, 4 ... steps (up to BACKOFF_MAX); an accepted proposal resets the pause. Without a
match there is nothing to propose and the step is an ordinary `decode`.

Left out: a draft model (EAGLE, Medusa); tree verification; batching speculative requests; a cache
without `verify` (remote sources): ValueError naming the backend.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Iterator

from .engine import Engine
from .next_token import sampled_step, stop_reason
from .trace import COMPLETED, Step

__all__ = ["BACKOFF_MAX", "Speculation", "SpeculationReport", "SpeculativeEngine", "plain_baseline", "propose",
           "speculation_report"]

BACKOFF_MAX = 16   # the longest pause (in steps) after failed proposals


@dataclass(frozen=True)
class Speculation:
    """The settings: k proposals at most per pass (1-8), the longest n-gram matched, on or off; `row_cost`: a
    verify row's cost as a fraction of a decode step, fixed (0: always propose k), or None: measured."""
    k: int = 4
    ngram: int = 3
    enabled: bool = True
    row_cost: float | None = None

    def validate(self) -> "Speculation":
        if not 1 <= int(self.k) <= 8:
            raise ValueError(f"k (proposals per pass) must be between 1 and 8, got {self.k}")
        if not 1 <= int(self.ngram) <= 8:
            raise ValueError(f"n-gram size must be between 1 and 8, got {self.ngram}")
        return self


class Lookahead:
    """How many proposals the next pass carries: the expected gain's best length, with a pause after failures.

    >>> policy = Lookahead(k=8, row_cost=0.5)
    >>> policy.length(available=8)             # prior acceptance 0.75: two proposals are worth their rows
    2
    >>> for _ in range(6): policy.record(proposed=2, accepted=2)
    >>> policy.length(available=8)             # everything accepted so far: propose more
    8
    >>> policy.record(proposed=8, accepted=0); policy.length(8), policy.length(8)   # a failure: one plain step,
    (0, 4)
    >>> round(policy.acceptance, 2)            # then fewer: the acceptance rate fell
    0.87
    >>> shy = Lookahead(k=4, row_cost=0.5)
    >>> for _ in range(2): shy.record(proposed=1, accepted=0)
    >>> shy.pause = 0; [shy.length(4) for _ in range(4)]   # acceptance 0.47: not worth a row, until it fades
    [0, 0, 1, 1]
    """
    PRIOR = (3.0, 1.0)   # (accepted, rejected) before any evidence: acceptance 0.75
    DECAY = 0.9          # weight of older passes' evidence
    FIRST_ROW_COST = 0.5   # until measured: about what onnx-gguf4 pays on 2 cores

    def __init__(self, k: int, row_cost: float | None = None):
        self.k, self.fixed = k, row_cost is not None
        self.row_cost = self.FIRST_ROW_COST if row_cost is None else float(row_cost)
        self.hits, self.misses = self.PRIOR
        self.pause = self.failures = 0
        self.decode_s: float | None = None   # a plain decode step's time, measured

    @property
    def acceptance(self) -> float:
        return self.hits / (self.hits + self.misses)

    def length(self, available: int) -> int:
        if self.pause:
            self.pause -= 1
            return 0
        a, best, best_gain, value = self.acceptance, 0, 0.0, 0.0
        for m in range(1, min(self.k, available) + 1):
            value += a ** m
            if value - self.row_cost * m > best_gain + 1e-12:
                best, best_gain = m, value - self.row_cost * m
        if not best:   # nothing learnt this pass: old evidence fades toward the prior
            self.hits = self.DECAY * self.hits + (1 - self.DECAY) * self.PRIOR[0]
            self.misses = self.DECAY * self.misses + (1 - self.DECAY) * self.PRIOR[1]
        return best

    def record(self, proposed: int, accepted: int) -> None:
        self.hits = self.DECAY * self.hits + accepted
        self.misses = self.DECAY * self.misses + (accepted < proposed)
        self.failures = self.failures + 1 if accepted == 0 else 0
        self.pause = min(BACKOFF_MAX, 2 ** (self.failures - 1)) if self.failures else 0

    def timed(self, rows: int, seconds: float) -> None:
        """A pass of `rows` rows took `seconds`: update the decode time (1 row) or the cost of a row."""
        if rows == 1:
            self.decode_s = seconds if self.decode_s is None else 0.8 * self.decode_s + 0.2 * seconds
        elif self.decode_s and not self.fixed:
            cost = max(0.0, (seconds / self.decode_s - 1) / (rows - 1))
            self.row_cost = 0.8 * self.row_cost + 0.2 * cost


def propose(ids: list[int], k: int, ngram: int) -> list[int]:
    """Up to k tokens that followed an earlier occurrence of the last n ids (n = ngram, then shorter, down to 1):
    of the occurrences of the longest n that has one, the one followed by the most tokens (k at most), the
    most recent among those.

    >>> propose([5, 6, 7, 8, 9, 1, 5, 6], k=3, ngram=2)   # [5, 6] seen before: 7, 8, 9 followed it
    [7, 8, 9]
    >>> propose([5, 6, 7, 1, 2, 6], k=3, ngram=2)         # no [2, 6] before; [6] alone: 7, 1, 2
    [7, 1, 2]
    >>> propose([1, 2, 1, 2, 1, 2], k=3, ngram=2)         # the earlier match runs on longer than the latest
    [1, 2, 1]
    >>> propose([1, 2, 3], k=3, ngram=2)                  # nothing repeats: no proposal
    []
    """
    for n in range(min(ngram, len(ids) - 1), 0, -1):
        tail, best = ids[-n:], []
        for start in range(len(ids) - n - 1, -1, -1):   # most recent first; never the tail itself
            if ids[start:start + n] == tail:
                follow = ids[start + n:start + n + k]
                if len(follow) > len(best):
                    best = follow
                if len(best) == k:
                    break
        if best:
            return list(best)
    return []


class SpeculativeEngine(Engine):
    """Engine whose step loop verifies prompt-lookup drafts; the same Step records, two more fields set."""

    def __init__(self, backend, speculation: Speculation | None = None, clock=time.perf_counter):
        super().__init__(backend, clock)
        self.speculation = (speculation or Speculation()).validate()
        if self.speculation.enabled and not backend.verifies:
            raise ValueError(f"{backend.name} cannot verify several tokens in one pass (no speculative decoding)")

    def _start(self, prompt, text, ids, settings, t0, ignore_eos=False, use_cache=True, prefix=None):
        run = super()._start(prompt, text, ids, settings, t0, ignore_eos, use_cache, prefix)
        if self.speculation.enabled and use_cache:   # known before the first step (a live page's head names it)
            run.trace.speculation = {**asdict(self.speculation), "passes": 0, "proposed": 0, "accepted": 0}
        return run

    def _steps(self, run, prefix=None) -> Iterator[Step]:
        if not self.speculation.enabled or not run.trace.use_cache:
            yield from super()._steps(run, prefix)
            return
        trace, b, clock, spec = run.trace, self.backend, self.clock, self.speculation
        s = trace.settings
        counts = trace.speculation = {**asdict(spec), "passes": 1, "proposed": 0, "accepted": 0}
        t_prev, cpu_prev = run.t0, time.process_time()
        sampler, detok, ids, eos, logits, state = self._read_prompt(run, prefix)
        rows, drafts, start = [logits], [], None   # the last pass: its logits rows, its proposals, cache length before
        policy = Lookahead(spec.k, spec.row_cost)
        while True:
            # pick along the pass's rows while the picks agree with the proposals (one pick per output token)
            picks = []
            for row, draft in zip(rows, drafts + [None]):
                pick = sampler.choose(ids, row, s.top_candidates)
                b.synchronize()
                how = None if draft is None else "accepted" if pick.token == draft else "replaced"
                picks.append((pick, how, clock(), time.time_ns(), time.process_time()))
                ids.append(pick.token)
                if how != "accepted" or pick.token in eos or len(trace.steps) + len(picks) == s.max_new_tokens:
                    break
            accepted = sum(how == "accepted" for _, how, *_ in picks)
            if start is not None and b.cache_length(state) > start + 1 + accepted:   # forget the rejected positions
                state = b.rollback(state, start + 1 + accepted)
            if drafts:
                counts["accepted"] += accepted
                policy.record(len(drafts), accepted)
            kv = b.kv_cache_bytes(state)
            for pick, how, t, wall_ns, cpu in picks:
                step = sampled_step(trace.steps, pick, detok, time=t - run.t0, latency=t - t_prev,
                                    seq_len=b.cache_length(state), kv_bytes=kv, wall_ns=wall_ns, cpu=cpu - cpu_prev,
                                    draft=how, forward_pass=counts["passes"] - 1)
                t_prev, cpu_prev = t, cpu
                yield step
                made = len(trace.steps)
                trace.stop_reason = stop_reason(pick.token, made=made, length=len(trace.prompt_ids) + made, eos=eos,
                                                max_new_tokens=s.max_new_tokens, window=b.context_window,
                                                cancelled=run.cancelled)
                if trace.stop_reason:
                    return
            # the next pass: [last token + proposals] verified at once, or a plain decode step
            room = min(spec.k, s.max_new_tokens - len(trace.steps) - 1, b.context_window - len(ids) - 1)
            length = policy.length(room) if room > 0 else 0   # called every step: a pause counts steps
            drafts = propose(ids, length, spec.ngram) if length else []
            counts["passes"] += 1
            start = b.cache_length(state)
            began = clock()
            if drafts:
                counts["proposed"] += len(drafts)
                logits, state = b.verify([ids[-1]] + drafts, state)
                rows = list(logits)
            else:
                logits, state = b.decode(ids[-1], state)
                rows = [logits]
            b.synchronize()
            policy.timed(len(rows), clock() - began)


class PassCounts:
    """Tokens per forward pass and acceptance, from `output_tokens`, `passes`, `proposed`, `accepted`."""
    output_tokens: int
    passes: int
    proposed: int
    accepted: int

    @property
    def tokens_per_pass(self) -> float | None:
        return self.output_tokens / self.passes if self.passes else None

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None


@dataclass(frozen=True)
class SpeculationReport(PassCounts):
    """A speculative run's figures, from its Steps and counts; the speedup only against a measured plain run."""
    k: int
    ngram: int
    output_tokens: int
    passes: int                      # forward passes that made tokens (the prefill included)
    proposed: int                    # draft tokens verified
    accepted: int                    # of those, the ones the model agreed with
    replaced: int                    # tokens the model chose where it rejected a proposal
    decode_tps: float | None         # this run's, measured from its Steps
    plain_decode_tps: float | None   # the plain run's (None: no comparable plain run measured)
    same_tokens: bool | None         # the two runs chose the same tokens (None: no plain run)

    @property
    def speedup(self) -> float | None:
        if self.decode_tps and self.plain_decode_tps:
            return self.decode_tps / self.plain_decode_tps
        return None


def speculation_report(trace, plain=None) -> SpeculationReport | None:
    """The figures of a speculative `trace` (None for a plain one), its speedup against `plain` (a plain run of
    the same prompt on the same backend: see plain_baseline) when given.

    >>> from types import SimpleNamespace as NS
    >>> steps = [NS(draft=None, tokens=1), NS(draft="accepted", tokens=1), NS(draft="replaced", tokens=1)]
    >>> spec = NS(speculation={"k": 4, "ngram": 3, "passes": 2, "proposed": 3, "accepted": 1}, steps=steps,
    ...           output_tokens=3, output_ids=[1, 2, 3], metrics=lambda: NS(decode_tps=30.0))
    >>> r = speculation_report(spec, NS(output_ids=[1, 2, 3], metrics=lambda: NS(decode_tps=20.0)))
    >>> r.tokens_per_pass, round(r.acceptance, 3), r.replaced, r.speedup, r.same_tokens
    (1.5, 0.333, 1, 1.5, True)
    >>> speculation_report(spec).speedup is None       # no plain run measured: no speedup
    True
    """
    counts = trace.speculation
    if not counts:
        return None
    plain_tps = plain.metrics().decode_tps if plain is not None else None
    return SpeculationReport(counts["k"], counts["ngram"], trace.output_tokens, counts["passes"], counts["proposed"],
                             counts["accepted"], sum(s.draft == "replaced" for s in trace.steps),
                             trace.metrics().decode_tps, plain_tps,
                             None if plain is None else list(plain.output_ids) == list(trace.output_ids))


def comparable(a, b) -> bool:
    """Two finished runs of the same prompt ids on the same backend with the same sampling and budget."""
    keys = ("temperature", "top_k", "top_p", "max_new_tokens", "seed")
    return (a.backend == b.backend and list(a.prompt_ids) == list(b.prompt_ids)
            and all(getattr(a.settings, k) == getattr(b.settings, k) for k in keys)
            and a.stop_reason in COMPLETED and b.stop_reason in COMPLETED)


def plain_baseline(trace, earlier) -> tuple:
    """(speculative trace, plain trace or None, which came first) to report, from the latest run `trace` and the
    session's `earlier` runs (oldest first): a speculative run with the latest comparable plain run before it; a
    plain run with the latest comparable speculative run before it; (None, None, None) when there is nothing to
    report. `which came first`: "plain" | "speculative"."""
    other = [t for t in reversed(list(earlier)) if comparable(t, trace) and bool(t.speculation) != bool(trace.speculation)]
    if trace.speculation:
        return trace, (other[0] if other else None), "plain" if other else None
    if other:
        return other[0], trace, "speculative"
    return None, None, None


def verify_row_cost(backend, ids: list[int], rows: int, repeats: int = 7) -> dict:
    """A verify row's cost as a fraction of a decode step, measured: after a prefill of `ids`, one-row decodes
    and `rows`-row verifies alternate `repeats` times (each rolled back), medians of each.

    {"decode_s": .., "verify_s": .., "rows": rows, "row_cost": (verify_s / decode_s - 1) / (rows - 1)}"""
    import statistics
    _, state = backend.prefill(ids[:-rows])
    length, fed = backend.cache_length(state), ids[-rows:]
    decode, verify = [], []
    for _ in range(repeats):
        for times, call in ((decode, lambda: backend.decode(fed[0], state)), (verify, lambda: backend.verify(fed, state))):
            began = time.perf_counter()
            _, after = call()
            backend.synchronize()
            times.append(time.perf_counter() - began)
            state = backend.rollback(after, length)
    decode_s, verify_s = statistics.median(decode), statistics.median(verify)
    return {"decode_s": decode_s, "verify_s": verify_s, "rows": rows,
            "row_cost": max(0.0, (verify_s / decode_s - 1) / (rows - 1))}


def speedup_bound(tokens_per_pass: float, proposed_per_pass: float, row_cost: float) -> float:
    """The decode speedup a run's passes allow when a pass costs 1 + row_cost x proposals decode steps (a bound:
    it leaves out sampling and the proposal search).

    >>> speedup_bound(tokens_per_pass=1.5, proposed_per_pass=2.0, row_cost=0.25)   # 1.5 tokens for 1.5 steps
    1.0
    >>> speedup_bound(2.0, 3.0, 0.0)     # verify rows free: the speedup is the tokens per pass
    2.0
    """
    return tokens_per_pass / (1 + row_cost * proposed_per_pass)


def verify_agreement(backend, ids: list[int], rows: int = 5, start: int = 2) -> tuple[int, int]:
    """(positions where the verify pass's argmax differs from decode's, positions compared), teacher-forced on
    `ids`: from the same prefill of ids[:start - 1], decode reads the rest one token a pass, verify `rows` a
    pass. Where the verify pass runs other kernels than decode, a near-tie can flip."""
    fed = ids[start - 1:-1]   # each fed token's row predicts the next id
    _, state = backend.prefill(ids[:start - 1])
    by_decode = []
    for token in fed:
        logits, state = backend.decode(token, state)
        by_decode.append(int(logits.argmax()))
    _, state = backend.prefill(ids[:start - 1])
    by_verify = []
    for at in range(0, len(fed), rows):
        out, state = backend.verify(fed[at:at + rows], state)
        by_verify.extend(out.argmax(-1).tolist())
    return sum(a != b for a, b in zip(by_decode, by_verify)), len(fed)
