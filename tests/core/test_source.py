"""The step-source seam: experiments, the bench and every view run on a source that is not a local
backend, and label what it cannot give (here: no KV bytes, no top-k, no runs without cache)."""
from __future__ import annotations

import time

import pytest

from playground.bench.prefill import measure_prefill
from playground.charts import plot_kv_cache, plot_top_k
from playground.config import GenerationSettings
from playground.experiments import EXPERIMENTS
from playground.run_view import chip_html, metrics_html
from playground.source import Capabilities, Run, SourceInfo, StepSource
from playground.trace import Step, Trace

SECONDS_PER_PROMPT_TOKEN, SECONDS_PER_STEP = 20e-6, 1e-3


class FakeServer:
    """A step source with a word tokenizer of its own: each word is one id, prefill costs 20 µs a token and
    decode 1 ms a step on its own clock (the step times it reports, whatever the machine's load); it
    measures no KV cache and sends no top-k."""
    capabilities = Capabilities(kv_bytes=False, top_k=False, local_tokenizer=False, no_cache=False)
    info = SourceInfo("fake-server", "fake-model", "remote", "server", "unknown", 4096, None, origin="remote")
    tokenizer = None

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        return [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]

    def prompt_ids(self, prompt, settings):
        return prompt, self.encode(prompt)

    def run(self, prompt, settings=None):
        return self._start(prompt, self.encode(prompt), settings or GenerationSettings())

    def run_ids(self, ids, settings=None, *, ignore_eos=False, use_cache=True):
        if not use_cache:
            raise ValueError("fake-server cannot run without its KV cache")
        return self._start("", list(ids), settings or GenerationSettings())

    def warm_up(self):
        pass

    def _start(self, prompt, ids, settings):
        trace = Trace(prompt, prompt, ids, settings, self.info.name, "server", "unknown", "fake-model", None)
        return Run(trace, self._steps, time.perf_counter())

    def _steps(self, run):
        trace, now = run.trace, 0.0
        for i in range(trace.settings.max_new_tokens):
            cost = SECONDS_PER_PROMPT_TOKEN * len(trace.prompt_ids) if i == 0 else SECONDS_PER_STEP
            now += cost
            step = Step(index=i, token_id=None, text=f" w{i}", special=False, phase="prefill" if i == 0 else "decode", time=now, latency=cost,
                        prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None, wall_ns=time.time_ns())
            trace.steps.append(step)
            yield step
            if run.cancelled:
                trace.stop_reason = "cancelled"
                return
        trace.stop_reason = "length"


def test_the_fake_server_is_a_step_source():
    assert isinstance(FakeServer(), StepSource)
    assert FakeServer.capabilities.missing() == ["measured KV-cache bytes", "top-k probabilities",
                                                 "a local tokenizer", "runs without a KV cache"]


def test_the_prefill_sweep_and_depth_sweep_run_on_a_source_that_is_not_a_backend():
    server = FakeServer()
    sweep = EXPERIMENTS["prefill"].run(server, {"min_length": 100, "max_length": 1600, "points": 3, "repeats": 1})
    assert [p.length for p in sweep.points] == [100, 400, 1600] and sweep.info.backend == "fake-server"
    medians = [p.median for p in sweep.points]
    assert medians == sorted(medians) and medians[-1] == pytest.approx(1600 * SECONDS_PER_PROMPT_TOKEN)   # the costs, seen
    depth = EXPERIMENTS["depth"].run(server, {"prompt_tokens": 8, "new_tokens": 5})
    assert depth.seq_len == [9, 10, 11, 12, 13] and depth.latency == pytest.approx([SECONDS_PER_STEP] * 5)
    assert depth.kv_bytes == [None] * 5 and depth.kv_formula_bytes == [None] * 5   # missing, never zero
    EXPERIMENTS["depth"].plot(depth)


def test_an_experiment_a_source_cannot_do_says_what_is_missing():
    with pytest.raises(ValueError, match="runs without a KV cache; fake-server does not offer it"):
        EXPERIMENTS["cache"].run(FakeServer(), {"prompt_tokens": 8, "new_tokens": 3})


def test_short_vs_long_on_the_source_labels_the_missing_kv_cache():
    r = EXPERIMENTS["short-long"].run(FakeServer(), {"max_new_tokens": 3})
    assert r.short.kv_bytes is None and r.long.input_tokens > r.short.input_tokens
    assert "kv_bytes" not in r.summary()["ratios"]
    fig = EXPERIMENTS["short-long"].plot(r)
    assert "missing for short, long" in " ".join(a.text for a in fig.layout.annotations)


def test_the_bench_prefill_row_runs_on_the_source():
    row = measure_prefill(FakeServer(), tokens=500, repeats=1)
    assert row.backend == "fake-server" and row.prefill_tokens == 500
    assert row.prefill_s == pytest.approx(500 * SECONDS_PER_PROMPT_TOKEN)


def test_every_view_labels_what_the_source_lacks():
    trace = FakeServer().run("a short question", GenerationSettings(max_new_tokens=3)).wait()
    assert "not measured by this source" in metrics_html(trace)
    assert "KV not measured" in chip_html(trace.steps[0]) and "model p missing" in chip_html(trace.steps[0])
    kv = plot_kv_cache(trace)
    assert not kv.data and "missing: fake-server does not give measured KV-cache bytes" in kv.layout.annotations[0].text
    assert "missing: fake-server does not give top-k" in plot_top_k(trace).layout.annotations[0].text
    csv = trace.to_csv().splitlines()
    assert csv[1].split(",")[1] == "" and ",,,,," in csv[1]   # token id, probabilities, KV: empty cells
