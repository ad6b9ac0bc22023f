"""The step loop: tokenize, prefill, then decode one token at a time, yielding a `Step` per token.

    engine = Engine(create_backend("torch"))
    run = engine.run("What is the capital of France?", GenerationSettings(max_new_tokens=16))
    for step in run:                 # Step records, as they happen
        print(step.text, end="")
    run.trace.metrics().ttft         # the finished (or cancelled) Trace

Sampling uses transformers' logits warpers (temperature, top-k, top-p) on the backend's logits; a
seed fixes the sampler's own generator. `run.cancel()` (any thread) or closing the iterator stops
compute within one step; the partial trace is kept with stop_reason "cancelled".

Left out: batching several requests into one forward pass, and speculative decoding.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Iterator

from .backends.base import Backend
from .config import MAX_PROMPT_CHARS, GenerationSettings
from .sampling import Detokenizer, Sampler
from .trace import Candidate, Step, Trace

__all__ = ["BackgroundRun", "Detokenizer", "Engine", "Run", "Sampler", "check_prompt"]


class Engine:
    def __init__(self, backend: Backend, clock: Callable[[], float] = time.perf_counter):
        self.backend, self.clock = backend, clock

    # --- input

    def prompt_ids(self, prompt: str, settings: GenerationSettings) -> tuple[str, list[int]]:
        """(the text the model reads, its token ids); raises ValueError on bad input."""
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
        limit = self.backend.context_window
        if len(ids) >= limit:
            raise ValueError(f"prompt is {len(ids)} tokens; the model's context window is {limit} tokens "
                             f"(leave room for at least one new token)")
        return text, ids

    # --- running

    def run(self, prompt: str, settings: GenerationSettings | None = None) -> "Run":
        """Validate now (raising ValueError), run lazily as the returned Run is iterated."""
        settings = (settings or GenerationSettings()).validate()
        t0 = self.clock()
        text, ids = self.prompt_ids(prompt, settings)
        b = self.backend
        trace = Trace(prompt, text, ids, settings, b.name, b.device, b.dtype, b.model_name, b.kv_shape,
                      tokenize_time=self.clock() - t0)
        return Run(self, trace, t0)

    def stream(self, prompt: str, settings: GenerationSettings | None = None) -> Iterator[Step]:
        return iter(self.run(prompt, settings))

    def warm_up(self) -> None:
        """One short run, discarded: a runtime's first calls allocate and plan, as a server's warm-up does."""
        self.generate("Hello", GenerationSettings(max_new_tokens=2))

    def generate(self, prompt: str, settings: GenerationSettings | None = None) -> Trace:
        run = self.run(prompt, settings)
        for _ in run:
            pass
        return run.trace


class Run:
    """One request in flight: iterate it for Steps; `trace` grows as it goes; `cancel()` stops it."""

    def __init__(self, engine: Engine, trace: Trace, t0: float):
        self.engine, self.trace, self.t0 = engine, trace, t0
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    def __iter__(self) -> Iterator[Step]:
        trace, b, clock = self.trace, self.engine.backend, self.engine.clock
        s = trace.settings
        sampler = Sampler(s)
        detok = Detokenizer(b.tokenizer, trace.prompt_ids)
        ids = list(trace.prompt_ids)
        t_prev = self.t0
        try:
            if self._cancel.is_set():
                return   # cancelled before it started (finally says so)
            logits, state = b.prefill(ids)
            for index in range(s.max_new_tokens):
                token, prob, top = sampler.choose(ids, logits, s.top_candidates)
                b.synchronize()
                t = clock()
                ids.append(token)
                step = Step(index, token, detok.add(token), token in detok.special_ids,
                            "prefill" if index == 0 else "decode", t - self.t0, t - t_prev, prob,
                            tuple(Candidate(i, detok.token_text(i), p) for i, p in top),
                            len(ids) - 1, b.kv_cache_bytes(state))
                t_prev = t
                trace.steps.append(step)
                yield step
                if token in b.eos_token_ids:
                    trace.stop_reason = "eos"
                elif index + 1 == s.max_new_tokens:
                    trace.stop_reason = "length"
                elif len(ids) >= b.context_window:
                    trace.stop_reason = "context"
                elif self._cancel.is_set():
                    trace.stop_reason = "cancelled"
                if trace.stop_reason:
                    return
                logits, state = b.decode(token, state)
        except Exception as exc:
            trace.stop_reason, trace.error = "error", f"{type(exc).__name__}: {exc}"
            raise
        finally:   # cancel(), the iterator closed (GeneratorExit) or dropped: whatever was made is kept
            trace.stop_reason = trace.stop_reason or "cancelled"


class BackgroundRun:
    """A Run iterated in its own thread; the consumer takes the Steps made so far, in batches.

    A slow consumer (a page redrawing charts) then never stalls the step loop, so the time between two
    tokens measures the model, not the UI. `cancel()` stops it within one step, like `Run.cancel()`.
    With `lease` (seconds), a consumer that stops asking for that long without ending the iteration
    (a handler abandoned by a closed page, never closed) is taken as gone: the run cancels itself.

        for batch in BackgroundRun(engine.run(prompt, settings)):   # [Step, ...], at least one each
            draw(batch)
    """

    def __init__(self, run: Run, lease: float | None = None):
        self.run, self._steps, self.lease = run, queue.SimpleQueue(), lease
        self._asked, self._waiting = time.monotonic(), False   # when the consumer last asked; asking now?
        self.thread = threading.Thread(target=self._work, daemon=True, name="run-steps")
        self.thread.start()

    def _work(self) -> None:
        try:
            for step in self.run:
                self._steps.put(step)
                if self.lease and not self._waiting and time.monotonic() - self._asked > self.lease:
                    self.run.cancel()   # nobody has asked for tokens in `lease` seconds: stop within a step
        except Exception:  # noqa: BLE001 - the trace holds the error (stop_reason "error")
            pass
        finally:
            self._steps.put(None)   # the end

    def __iter__(self) -> Iterator[list[Step]]:
        while True:
            self._waiting = True
            batch = [self._steps.get()]
            self._waiting, self._asked = False, time.monotonic()
            while not self._steps.empty():
                batch.append(self._steps.get())
            ended = batch[-1] is None
            batch = [s for s in batch if s is not None]
            if batch:
                yield batch
            if ended:
                return

    def cancel(self, wait: float = 0.0) -> None:
        self.run.cancel()
        if wait:
            self.thread.join(wait)


def check_prompt(prompt) -> None:
    """Reject what no model should be fed, with a message that says what is wrong."""
    if not isinstance(prompt, str):
        raise ValueError(f"prompt must be text, got {type(prompt).__name__}")
    if not prompt.strip():
        raise ValueError("prompt is empty: type something for the model to read")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"prompt is {len(prompt):,} characters; the limit is {MAX_PROMPT_CHARS:,}")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"prompt is not valid Unicode (a lone surrogate at position {exc.start}); "
                         "paste it again as UTF-8 text") from None
