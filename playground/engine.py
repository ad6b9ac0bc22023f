"""The local step source: tokenize, prefill, then decode one token at a time, yielding a `Step` per token.

    engine = Engine(create_backend("torch"))
    run = engine.run("What is the capital of France?", GenerationSettings(max_new_tokens=16))
    for step in run:                 # Step records, as they happen
        print(step.text, end="")
    run.trace.metrics().ttft         # the finished (or cancelled) Trace
    engine.run_ids(ids, settings, ignore_eos=True, use_cache=False)   # what experiments and the bench time

Sampling uses transformers' logits warpers (temperature, top-k, top-p) on the backend's logits; a
seed fixes the sampler's own generator. `run.cancel()` (any thread) or closing the iterator stops
compute within one step; the partial trace is kept with stop reason StopReason.CANCELLED.

Left out: batching several requests into one forward pass; speculative decoding is speculative.py
(SpeculativeEngine: the same Steps from a loop that verifies prompt-lookup drafts).
"""
from __future__ import annotations

import time
from functools import cached_property
from typing import Callable, Iterator, NamedTuple

from .backends.base import Backend
from .config import MAX_PROMPT_CHARS, GenerationSettings, check_text
from .replay import replay_info
from .sampling import Detokenizer, Sampler
from .source import Capabilities, Run, SourceInfo
from .next_token import sampled_step, stop_reason
from .trace import Step, Trace

__all__ = ["Engine", "Prefix", "Run", "check_prompt", "common_prefix"]


class Engine:
    """The local step source: a Backend driven one token at a time (see source.StepSource)."""

    capabilities = Capabilities()   # everything: measured KV bytes, top-k, local tokenizer, no-cache, exact ids

    def __init__(self, backend: Backend, clock: Callable[[], float] = time.perf_counter):
        self.backend, self.clock = backend, clock

    @property
    def tokenizer(self):
        return self.backend.tokenizer

    @cached_property
    def info(self) -> SourceInfo:
        b = self.backend
        return SourceInfo(b.name, b.model_name, b.name.partition("-")[0], b.device, b.dtype,
                          int(b.context_window), b.kv_shape)

    @cached_property
    def replay(self) -> dict:
        return replay_info(self.backend)

    # --- input

    def prompt_ids(self, prompt: str, settings: GenerationSettings) -> tuple[str, list[int]]:
        """(the text the model reads, its token ids); raises ValueError on bad input.

        Raw mode feeds exactly what the user typed; the tokenizer adds a BOS token only where the
        model's own files ask for one (the bundled GGUF does not).
        """
        check_prompt(prompt)
        tok = self.backend.tokenizer
        if settings.chat and getattr(tok, "chat_template", None):
            messages = [{"role": "user", "content": prompt}]
            if settings.system_prompt:
                messages.insert(0, {"role": "system", "content": settings.system_prompt})
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        else:
            text = prompt
        ids = tok(text, add_special_tokens=not settings.chat)["input_ids"]
        self._check_length(len(ids))
        return text, ids

    def encode(self, text: str) -> list[int]:
        """Token ids of plain text: no template, no special tokens (what exact-length prompts are cut from)."""
        return self.backend.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _check_length(self, n: int) -> None:
        limit = self.backend.context_window
        if n >= limit:
            raise ValueError(f"prompt is {n} tokens; the model's context window is {limit} tokens "
                             f"(leave room for at least one new token)")

    # --- running

    def run(self, prompt: str, settings: GenerationSettings | None = None, prefix: "Prefix | None" = None) -> Run:
        """Validate now (raising ValueError), run lazily as the returned Run is iterated.

        `prefix`: a cached start of the prompt (cache_prefix); when the prompt's ids begin with it, only
        the rest is prefilled onto a copy of its cache, and the trace counts the cached tokens.
        """
        settings = (settings or GenerationSettings()).validate()
        t0 = self.clock()
        text, ids = self.prompt_ids(prompt, settings)
        return self._start(prompt, text, ids, settings, t0, prefix=prefix)

    def cache_prefix(self, ids: list[int]) -> "Prefix":
        """Prefill `ids` once and keep the cache, for prompts that start with them (a shared system prompt)."""
        ids = [int(i) for i in ids]
        _, state = self.backend.prefill(ids)
        return Prefix(tuple(ids), state)

    def run_ids(self, ids: list[int], settings: GenerationSettings | None = None, *, ignore_eos: bool = False,
                use_cache: bool = True) -> Run:
        """A run from exact token ids (no template, no tokenizing): what experiments and the bench time.

        `ignore_eos` runs on past end-of-sequence tokens (the token budget decides the length);
        `use_cache=False` re-reads the whole context at every step (prefill of prompt + tokens so far).
        """
        settings = (settings or GenerationSettings()).validate()
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("ids is empty: a run needs at least one prompt token")
        self._check_length(len(ids))
        t0 = self.clock()
        return self._start("", "", ids, settings, t0, ignore_eos=ignore_eos, use_cache=use_cache)

    def _start(self, prompt, text, ids, settings, t0, ignore_eos=False, use_cache=True, prefix=None) -> Run:
        b = self.backend
        trace = Trace(prompt, text, ids, settings, b.name, b.device, b.dtype, b.model_name, b.kv_shape,
                      tokenize_time=self.clock() - t0, ignore_eos=ignore_eos, use_cache=use_cache,
                      replay=self.replay)
        usable = prefix is not None and use_cache and len(prefix.ids) < len(ids) and tuple(
            ids[:len(prefix.ids)]) == prefix.ids
        if usable:
            trace.cached_tokens = len(prefix.ids)
        return Run(trace, lambda run: self._steps(run, prefix if usable else None), t0)

    def warm_up(self) -> None:
        """One short run, discarded: a runtime's first calls allocate and plan, as a server's warm-up does."""
        self.generate("Hello", GenerationSettings(max_new_tokens=2))

    def generate(self, prompt: str, settings: GenerationSettings | None = None) -> Trace:
        return self.run(prompt, settings).wait()

    def stream(self, prompt: str, settings: GenerationSettings | None = None) -> Iterator[Step]:
        return iter(self.run(prompt, settings))

    # --- the step loop: the one place a local model is timed

    def _steps(self, run: Run, prefix: "Prefix | None" = None) -> Iterator[Step]:
        trace, b, clock = run.trace, self.backend, self.clock
        s = trace.settings
        t_prev, cpu_prev = run.t0, time.process_time()
        sampler, detok, ids, eos, logits, state = self._read_prompt(run, prefix)
        for index in range(s.max_new_tokens):
            pick = sampler.choose(ids, logits, s.top_candidates)
            b.synchronize()
            t, wall_ns, cpu = clock(), time.time_ns(), time.process_time()
            token = pick.token
            ids.append(token)
            kv = b.kv_cache_bytes(state) if trace.use_cache else None   # no cache kept: nothing to measure
            step = sampled_step(trace.steps, pick, detok, time=t - run.t0, latency=t - t_prev, seq_len=len(ids) - 1,
                                kv_bytes=kv, wall_ns=wall_ns, cpu=cpu - cpu_prev)
            t_prev, cpu_prev = t, cpu
            yield step
            trace.stop_reason = stop_reason(token, made=index + 1, length=len(ids), eos=eos,
                                            max_new_tokens=s.max_new_tokens, window=b.context_window,
                                            cancelled=run.cancelled)
            if trace.stop_reason:
                return
            if trace.use_cache:
                logits, state = b.decode(token, state)
            else:
                logits, state = b.prefill(ids)


    def _read_prompt(self, run: Run, prefix: "Prefix | None"):
        """(sampler, detokenizer, ids so far, stop ids, first logits, cache state): the prompt read (prefilled)."""
        trace, b = run.trace, self.backend
        sampler = Sampler(trace.settings)
        trace.seed = sampler.seed
        detok = Detokenizer(b.tokenizer, trace.prompt_ids)
        ids = list(trace.prompt_ids)
        eos = frozenset() if trace.ignore_eos else b.eos_token_ids
        if prefix is None:
            logits, state = b.prefill(ids)
        else:   # the prompt's start is cached: read only the rest onto a copy of its cache
            logits, state = b.extend(ids[len(prefix.ids):], prefix.state)
        return sampler, detok, ids, eos, logits, state


class Prefix(NamedTuple):
    """A prompt's start read once, its cache kept: what prefix caching reuses across requests."""
    ids: tuple[int, ...]
    state: object


def common_prefix(a: list[int], b: list[int]) -> list[int]:
    """The ids two prompts share from the start (what a prefix cache can serve to both).

    >>> common_prefix([1, 2, 3, 4], [1, 2, 5])
    [1, 2]
    """
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return list(a[:n])


def check_prompt(prompt) -> None:
    """Reject what no model should be fed, with a message that says what is wrong."""
    check_text(prompt, "prompt")   # the endpoint's request reader makes the same decision (config.check_text)
    if not prompt.strip():
        raise ValueError("prompt is empty: type something for the model to read")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"prompt is {len(prompt):,} characters; the limit is {MAX_PROMPT_CHARS:,}")
