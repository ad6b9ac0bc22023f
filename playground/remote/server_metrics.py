"""The server's own figures, as it reports them: Prometheus /metrics, llama.cpp's /slots, sampled during a run.

    >>> text = 'vllm:kv_cache_usage_perc{model_name="m"} 0.25\\nvllm:num_requests_running{model_name="m"} 2\\n'
    >>> read_metrics(text, {"vllm:kv_cache_usage_perc": "kv_pool_used_share", "vllm:num_requests_running": "running"})
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
from typing import Callable

from prometheus_client.parser import text_string_to_metric_families


def read_metrics(text: str, wanted: dict[str, str]) -> dict[str, float]:
    """{our name: value} for each wanted metric present (summed over label sets, e.g. one per model)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                key = wanted[sample.name]
                out[key] = out.get(key, 0.0) + float(sample.value)
    return out


def summarize_slots(slots) -> list[dict]:
    """llama.cpp's /slots, cut to what a reader needs: each slot's context size and what it holds now."""
    out = []
    for slot in slots if isinstance(slots, list) else []:
        nxt = (slot.get("next_token") or [{}])[0] if isinstance(slot.get("next_token"), list) else {}
        out.append({"id": slot.get("id"), "n_ctx": slot.get("n_ctx"), "processing": slot.get("is_processing"),
                    "prompt_tokens": slot.get("n_prompt_tokens"), "decoded": nxt.get("n_decoded")})
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
