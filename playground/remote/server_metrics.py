"""The server's own figures, as it reports them: Prometheus /metrics, llama.cpp's /slots, sampled during a run.

One rule reads a Prometheus figure, by what it means (`Figure`):

- a count (a counter, or a gauge that counts requests) is summed over every engine behind the page;
- a share (vLLM's `*_perc`, `*_usage`: a fraction of one engine's pool) is read per engine: one engine gives
  its value; several give the mean under the figure's name and each engine's own under `<name>_by_engine`,
  so a view shows them one by one (a sum of two pools' shares means nothing);
- when several models share one /metrics, only the served model's samples (`model_name`) are read;
- a deprecated alias is read only when the current name is absent (a vLLM that exports both
  `vllm:kv_cache_usage_perc` and the deprecated `vllm:gpu_cache_usage_perc` is read once).

    >>> text = ('vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.25\\n'
    ...         'vllm:gpu_cache_usage_perc{model_name="m",engine="0"} 0.25\\n'
    ...         'vllm:num_requests_running{model_name="m",engine="0"} 2\\n')
    >>> read_metrics(text, VLLM_FIGURES, "m")
    {'kv_pool_used_share': 0.25, 'running': 2.0}
    >>> summarize_slots([{"id": 0, "n_ctx": 2048, "is_processing": True, "n_prompt_tokens": 37,
    ...                   "next_token": [{"n_decoded": 5}]}])
    [{'id': 0, 'n_ctx': 2048, 'processing': True, 'prompt_tokens': 37, 'decoded': 5}]

`ServerMetricsSampler` asks the server for its live figures while a request streams (once the first token has
come, then every `interval` seconds, and once after the end), each sample stamped with the client's
seconds since t0: vLLM's KV-pool share is only worth reading while the request holds its blocks.
Every figure here is server-reported; views label it so and never draw it as a client measurement.

Left out: histograms and counters' rates (the client's own step times measure latency per request).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from prometheus_client.parser import text_string_to_metric_families

COUNT, SHARE = "count", "share"
ENGINE_LABEL, MODEL_LABEL = "engine", "model_name"   # vLLM v1's labels on every vllm: series


@dataclass(frozen=True)
class Figure:
    """One figure read from /metrics: our name, its Prometheus names (the current one first, then deprecated
    aliases, each read only when every name before it is absent) and what it means (COUNT or SHARE)."""
    key: str
    names: tuple[str, ...]
    means: str = COUNT


# vLLM (vllm/v1/metrics/loggers.py, PrometheusStatLogger: labels model_name and engine on every series);
# `vllm:gpu_cache_usage_perc` is the name deprecated in 0.9.2 (shown by 0.10/0.11 with
# --show-hidden-metrics-for-version), `vllm:kv_cache_usage_perc` the current one
VLLM_FIGURES = (Figure("kv_pool_used_share", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), SHARE),
                Figure("running", ("vllm:num_requests_running",)),
                Figure("waiting", ("vllm:num_requests_waiting",)))
# llama.cpp's llama-server (tools/server/README.md, "Available metrics"): unlabelled gauges
LLAMA_FIGURES = (Figure("running", ("llamacpp:requests_processing",)),
                 Figure("waiting", ("llamacpp:requests_deferred",)))


def _served(samples: list, model: str | None) -> list:
    """The samples of the served model: all of them when they name one model (or none), else only `model`'s."""
    named = {s.labels.get(MODEL_LABEL) for s in samples} - {None}
    if len(named) <= 1:
        return samples
    return [s for s in samples if s.labels.get(MODEL_LABEL) == model]


def read_metrics(text: str, figures, model: str | None = None) -> dict:
    """{our name: value} for each figure present in the Prometheus `text`, read by the rule above; a share of
    several engines adds {engine: share} under `<name>_by_engine`, and `engines` says how many engines the figures
    were read over when more than one. `model`: the served model's name."""
    by_name: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            by_name.setdefault(sample.name, []).append(sample)
    out: dict = {}
    engines: set = set()
    for figure in figures:
        samples = next((found for found in (_served(by_name.get(n, []), model) for n in figure.names) if found), [])
        if not samples:
            continue
        engines |= {s.labels.get(ENGINE_LABEL, "") for s in samples}
        if figure.means == COUNT:
            out[figure.key] = float(sum(s.value for s in samples))
            continue
        shares = {s.labels.get(ENGINE_LABEL, ""): float(s.value) for s in samples}
        out[figure.key] = sum(shares.values()) / len(shares)
        if len(shares) > 1:
            out[f"{figure.key}_by_engine"] = dict(sorted(shares.items()))
    if len(engines) > 1:
        out["engines"] = len(engines)
    return out


def _decoded(slot: dict):
    """`next_token.n_decoded`: an object in llama-server's README example, a one-item array in its to_json."""
    nxt = slot.get("next_token")
    if isinstance(nxt, list):
        nxt = nxt[0] if nxt else {}
    return nxt.get("n_decoded") if isinstance(nxt, dict) else None


def summarize_slots(slots) -> list[dict]:
    """llama.cpp's /slots, cut to what a reader needs: each slot's context size and what it holds now (None: the
    server did not say, as an idle slot that never ran a task does not)."""
    out = []
    for slot in slots if isinstance(slots, list) else []:
        if isinstance(slot, dict):
            out.append({"id": slot.get("id"), "n_ctx": slot.get("n_ctx"), "processing": slot.get("is_processing"),
                        "prompt_tokens": slot.get("n_prompt_tokens"), "decoded": _decoded(slot)})
    return out


class ServerMetricsSampler:
    """Calls `read()` (the server's live figures) on a side thread while a run streams; keeps the samples."""

    def __init__(self, read: Callable[[], dict], t0: float, clock: Callable[[], float] = time.perf_counter,
                 interval: float = 1.0):
        self.read, self.t0, self.clock, self.interval = read, t0, clock, interval
        self.samples: list[dict] = []
        self.errors: list[str] = []
        self._go, self._end = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="server-figures")
        self._thread.start()

    def first_token(self) -> None:
        self._go.set()

    def finish(self, wait: float = 3.0) -> None:
        """Take one last sample after the end and stop (waits at most `wait` seconds for the server)."""
        self._end.set()
        self._go.set()
        self._thread.join(wait)

    def _sample(self, when: str) -> None:
        try:
            figures = self.read()
        except Exception as exc:   # noqa: BLE001 - a server without a figure is noted, never fatal
            if len(self.errors) < 3:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        if figures:
            self.samples.append({"time": round(self.clock() - self.t0, 4), "when": when, **figures})

    def _loop(self) -> None:
        self._go.wait()
        while not self._end.is_set():
            self._sample("during the run")
            self._end.wait(self.interval)
        self._sample("after the run")
