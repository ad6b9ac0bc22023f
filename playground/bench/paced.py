"""The app over a PacedEngine: Steps at a fixed pace with no model behind them.

    python -m playground.bench paced-app --steps-per-s 100 --port 7861   # what AppProcess.paced starts

PacedEngine sleeps between steps and makes each from a word list: served by the app, all the server's
CPU is then the UI's, which is what the ui-flat row's 2048-step check reads.

Left out: a model (the tiny one lends its tokenizer and KV shape only).
"""
from __future__ import annotations

import time

from ..engine import Engine
from ..next_token import new_step, stop_reason
from ..trace import Candidate, Step

WORDS = [" the", " KV", " cache", " keeps", " keys", " and", " values", " of", " past", " tokens", ",", " so",
         " each", " decode", " step", " reads", " them", " instead", " of", " recomputing", " attention", "."]


class PacedEngine(Engine):
    """The tiny model's tokenizer and shapes, but Steps made at `steps_per_s` with no forward pass: a word
    per step, five candidates, KV bytes from the formula. What the app does with them is all it costs."""

    def __init__(self, backend, steps_per_s: float):
        super().__init__(backend)
        self.period = 1.0 / steps_per_s

    def _steps(self, run, prefix=None):
        trace, prev = run.trace, run.t0
        for i in range(trace.settings.max_new_tokens):
            time.sleep(max(0.0, run.t0 + (i + 1) * self.period - self.clock()))   # on schedule, whatever else runs
            now = self.clock()
            step = self._step(trace.steps, len(trace.prompt_ids) + i + 1, now - run.t0, now - prev)
            prev = now
            yield step
            trace.stop_reason = stop_reason(step.token_id, made=i + 1, length=len(trace.prompt_ids) + i + 1,
                                            eos=frozenset(), max_new_tokens=trace.settings.max_new_tokens,
                                            window=None, cancelled=run.cancelled)
            if trace.stop_reason:
                return

    def _step(self, steps: list, seq_len: int, time_s: float, latency: float) -> Step:
        """The next of `steps`: WORDS[i] chosen among five candidates, the KV bytes of `seq_len` tokens by the
        formula; appended to `steps`."""
        i = len(steps)
        top = tuple(Candidate(100 + (i + j) % len(WORDS), WORDS[(i + j) % len(WORDS)], 0.5 / (j + 1), 1.0 * (j == 0))
                    for j in range(5))
        return new_step(steps, token_id=top[0].token_id, text=top[0].text, special=False, time=time_s,
                        latency=latency, prob=0.5, sample_prob=1.0, top=top, seq_len=seq_len,
                        kv_bytes=self.backend.kv_shape.formula_bytes(seq_len), wall_ns=time.time_ns())


def main(argv: list[str]) -> None:
    """`python -m playground.bench paced-app --steps-per-s N --port P`: the app over a PacedEngine."""
    import argparse

    from ..backends import create_backend
    from ..ui import GENERATE_CONCURRENCY, build_demo, launch_kwargs
    p = argparse.ArgumentParser(prog="python -m playground.bench paced-app", description=__doc__.splitlines()[0])
    p.add_argument("--steps-per-s", type=float, default=100.0)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    demo = build_demo(PacedEngine(create_backend("torch", "tiny", device="cpu", dtype="float32"), args.steps_per_s))
    demo.queue(default_concurrency_limit=GENERATE_CONCURRENCY).launch(server_name="127.0.0.1", server_port=args.port,
                                                                  **launch_kwargs())
