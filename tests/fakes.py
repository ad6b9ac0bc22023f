"""Stand-ins the tests build runs on: backends that pause, count or swerve around the tiny model, an Engine
that keeps its runs, and ThreadSafeFakeSource, a step source whose runs may be iterated from several threads.

Left out: fixtures (tests/conftest.py) and assertion or app helpers (tests/helpers.py).
"""
from __future__ import annotations

import threading
import time

from playground.engine import Engine
from playground.source import Capabilities, Run, SourceInfo
from playground.trace import Step, Trace


class SlowBackend:
    """The tiny backend with a pause in every prefill and decode, so a run lasts long enough to cancel."""

    def __init__(self, backend, pause=0.02):
        self._backend, self._pause = backend, pause

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def prefill(self, ids):
        time.sleep(self._pause)
        return self._backend.prefill(ids)

    def decode(self, token, state):
        time.sleep(self._pause)
        return self._backend.decode(token, state)


class SwervingBackend(SlowBackend):
    """The tiny backend, except that its decode call number `at` (1 = the second output token) is pushed
    to token `token`: a second source whose answer departs from the first at a known place."""

    def __init__(self, backend, at: int, token: int):
        super().__init__(backend, pause=0.0)
        self.at, self.token, self.calls = at, token, 0

    def prefill(self, ids):
        self.calls = 0
        return self._backend.prefill(ids)

    def decode(self, token, state):
        self.calls += 1
        logits, state = self._backend.decode(token, state)
        if self.calls == self.at:
            logits = logits.clone()
            logits[self.token] = logits.max() + 100.0
        return logits, state


class CountingBackend(SlowBackend):
    """SlowBackend that counts forward passes (`calls`) and those in progress (`active`), so a test can see
    compute stop."""

    def __init__(self, backend, pause=0.03):
        super().__init__(backend, pause)
        self.calls = self.active = 0
        self._lock = threading.Lock()

    def _counted(self, forward, *args):
        with self._lock:
            self.calls += 1
            self.active += 1
        try:
            return forward(*args)
        finally:
            with self._lock:
                self.active -= 1

    def prefill(self, ids):
        return self._counted(super().prefill, ids)

    def decode(self, token, state):
        return self._counted(super().decode, token, state)


class RecordingEngine(Engine):
    """An Engine that keeps every Run it starts, so a test can read their traces."""

    def __init__(self, backend):
        super().__init__(backend)
        self.runs = []

    def run(self, prompt, settings=None):
        self.runs.append(super().run(prompt, settings))
        return self.runs[-1]


class ThreadSafeFakeSource:
    """A step source whose runs are thread-safe: each sleeps `delay` per token; counts runs in flight. With
    `together`, a run sends its first token only once that many are in flight (or after 30 s): requests that
    overlap whatever the machine's speed."""
    info = SourceInfo("fake server", "m", "remote", "remote", "", None, None, origin="remote")
    capabilities = Capabilities(kv_bytes=False, top_k=False, local_tokenizer=False, no_cache=False, exact_ids=False)
    tokenizer = None

    def __init__(self, tokens=5, delay=0.04, refuse=(), cut=(), together=0):
        self.tokens, self.delay, self.refuse, self.cut, self.together = tokens, delay, refuse, cut, together
        self.in_flight = self.most = 0
        self.lock = threading.Condition()

    def kv_cache_usage(self):
        return self.in_flight / 8, 1.0, "fraction"

    def run(self, prompt, settings=None):
        if prompt in self.refuse:
            raise ValueError("the server said 400: bad request")
        t0 = time.perf_counter()
        trace = Trace(prompt, prompt, [], settings, "fake server", "remote", "", "m", None)

        def produce(run):
            with self.lock:
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
                self.lock.notify_all()
                self.lock.wait_for(lambda: self.most >= self.together, timeout=30)
            try:
                for i in range(self.tokens):
                    if run.cancelled:
                        trace.stop_reason = "cancelled"
                        return
                    time.sleep(self.delay)
                    if prompt in self.cut and i == 2:
                        raise ConnectionError("stream cut")
                    t = time.perf_counter() - t0
                    step = Step(index=i, token_id=None, text="x", special=False, phase="decode" if i else "prefill", time=t, latency=t, prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None)
                    trace.steps.append(step)
                    yield step
                trace.stop_reason = "length"
            finally:
                with self.lock:
                    self.in_flight -= 1
        return Run(trace, produce, t0)


class SlowPrefillBackend(SlowBackend):
    """The tiny backend whose prefill takes `pause` seconds, as a long prompt's does; decode at full speed."""

    def __init__(self, backend, pause=3.0):
        super().__init__(backend, pause)

    def decode(self, token, state):
        return self._backend.decode(token, state)


class ScriptedAnswers:
    """What the model writes, scripted: each request the batcher takes in gets the next text's tokens, then the
    end-of-sequence token (or no end: `cut=True`, for a request that runs to its max_tokens); a request with no
    script left is sampled as usual. Install with `monkeypatch.setattr(batcher, "Sampler", script.sampler)`
    (batcher: playground.serve.batcher, where the Batcher makes each request's sampler).

    The forward passes still run (every Step is timed and recorded as usual): only the pick of each token is
    replaced, so what a test asserts is what the route made of these tokens, never the script itself."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.queue: list[list[int]] = []
        self.lock = threading.Lock()

    def add(self, *texts: str, cut: bool = False) -> None:
        for text in texts:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            with self.lock:
                self.queue.append(ids + ([] if cut else [self.tokenizer.eos_token_id]))

    def add_ids(self, ids, end: bool = True) -> None:
        """An answer as these ids, whatever its text would tokenize to (then the end-of-sequence token unless not
        `end`)."""
        with self.lock:
            self.queue.append(list(ids) + ([self.tokenizer.eos_token_id] if end else []))

    def sampler(self, settings):
        from playground.sampling import Sampler
        with self.lock:
            script = self.queue.pop(0) if self.queue else None
        return Sampler(settings) if script is None else _ScriptedSampler(settings, script)


class _ScriptedSampler:
    def __init__(self, settings, script: list[int]):
        from playground.sampling import Sampler
        self.inner, self.script = Sampler(settings), list(script)
        self.seed = self.inner.seed

    def choose(self, ids, logits, k):
        import numpy as np

        from playground.sampling import Pick
        pick = self.inner.choose(ids, logits, k)
        if not self.script:
            return pick
        token = self.script.pop(0)
        row = logits.detach().to("cpu").float().numpy()
        weights = np.exp(row - row.max())
        return Pick(token, float(weights[token] / weights.sum()), 1.0, pick.top)
