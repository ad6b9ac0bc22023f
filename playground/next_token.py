"""One way to make a token: the Step that records it, and the rule that says whether and why its sequence stops.

    step = sampled_step(trace.steps, pick, detok, time=t - t0, latency=t - t_prev, wall_ns=time.time_ns(),
                        seq_len=cached, kv_bytes=kv)          # appended to trace.steps and returned
    trace.stop_reason = stop_reason(pick.token, made=len(trace.steps), length=prompt + made,
                                    eos=eos_ids, max_new_tokens=settings.max_new_tokens, window=window)

Every source of Steps goes through these two: the Engine's loop, speculative decoding's verify passes,
our continuous batching (serve/batching.py), transformers' manager (serve/batching_torch.py and its
adapter), and the endpoint (api/, on our batching). `new_step` is the one place a Step is constructed
(a server's streamed events and the bench's paced fake use it directly: their tokens were not sampled
here); its index and phase follow from the Steps before it, so no source numbers them its own way.

The stop rule, in order: an end-of-sequence token; the token budget (max_new_tokens); the context window
(or a smaller KV slot); a cancel. A stop string is not a token rule: the endpoint cuts the answer's text
where one begins and cancels the request (api/response_body.py).

    >>> steps = []
    >>> new_step(steps, token_id=7, text="Hi", special=False, time=0.5, latency=0.5).phase, len(steps)
    (<Phase.PREFILL: 'prefill'>, 1)
    >>> new_step(steps, token_id=8, text="!", special=False, time=0.6, latency=0.1).index
    1
    >>> stop_reason(2, made=3, length=10, eos=frozenset({2}), max_new_tokens=3, window=10)   # EOS comes first
    <StopReason.EOS: 'eos'>
    >>> stop_reason(5, made=3, length=10, eos=frozenset({2}), max_new_tokens=3, window=10)
    <StopReason.LENGTH: 'length'>
    >>> stop_reason(5, made=1, length=10, eos=frozenset(), max_new_tokens=3, window=10)
    <StopReason.CONTEXT: 'context'>
    >>> stop_reason(5, made=1, length=9, eos=frozenset(), max_new_tokens=3, window=10, cancelled=True)
    <StopReason.CANCELLED: 'cancelled'>
    >>> stop_reason(5, made=1, length=9, eos=frozenset(), max_new_tokens=3, window=None) is None
    True
"""
from __future__ import annotations

from .sampling import Detokenizer, Pick
from .trace import Candidate, Phase, Step, StopReason

__all__ = ["new_step", "sampled_step", "stop_reason"]


def new_step(steps: list[Step], *, token_id: int | None, text: str, special: bool, time: float, latency: float,
             wall_ns: int = 0, prob: float | None = None, sample_prob: float | None = None,
             top: tuple[Candidate, ...] | None = None, seq_len: int | None = None, kv_bytes: int | None = None,
             tokens: int = 1, cpu: float | None = None, rows: int | None = None, graph: str | None = None,
             draft: str | None = None, forward_pass: int | None = None, thinking: bool = False) -> Step:
    """The next Step of `steps` (its index: how many came before; PREFILL for the first, DECODE after), appended
    to `steps` and returned. Fields a source cannot give stay None (see trace.Step)."""
    index = len(steps)
    step = Step(index=index, token_id=token_id, text=text, special=special,
                phase=Phase.PREFILL if index == 0 else Phase.DECODE, time=time, latency=latency, prob=prob,
                sample_prob=sample_prob, top=top, seq_len=seq_len, kv_bytes=kv_bytes, wall_ns=wall_ns, tokens=tokens,
                cpu=cpu, rows=rows, graph=graph, draft=draft, forward_pass=forward_pass, thinking=thinking)
    steps.append(step)
    return step


def sampled_step(steps: list[Step], pick: Pick | int, detok: Detokenizer, **fields) -> Step:
    """The Step of a token sampled here: its text from the request's detokenizer, its probabilities and top-k from
    the sampler's `pick` (a bare token id where the sampler is not ours: no probabilities), appended to `steps`.
    `fields`: new_step's timing, cache and pass fields."""
    if isinstance(pick, Pick):
        token, probs = pick.token, {"prob": pick.prob, "sample_prob": pick.sample_prob,
                                    "top": tuple(Candidate(i, detok.token_text(i), p, q) for i, p, q in pick.top)}
    else:
        token, probs = int(pick), {}
    return new_step(steps, token_id=token, text=detok.add(token), special=token in detok.special_ids,
                    **probs, **fields)


def stop_reason(token: int, *, made: int, length: int, eos: frozenset, max_new_tokens: int, window: int | None,
                cancelled: bool = False) -> StopReason | None:
    """Why a sequence stops after its `made`-th output token `token`, its context now `length` tokens (prompt and
    output), or None to go on. `eos`: the stop ids (empty: run past them); `window`: the most tokens its context
    may hold (the model's window, or a smaller KV slot; None: no limit); `cancelled`: a cancel was asked for."""
    if token in eos:
        return StopReason.EOS
    if made >= max_new_tokens:
        return StopReason.LENGTH
    if window is not None and length >= window:
        return StopReason.CONTEXT
    return StopReason.CANCELLED if cancelled else None
