"""`make bench`'s remote row: the playground's client against a llama-server the bench starts on the bundled GGUF.

    python -m playground.bench remote                         # one JSON row, on a llama-server started here
    python -m playground.bench remote http://gpu:8000/v1       # against a server already running (vLLM script)

For each of `repeats` requests (exact prompt ids, EOS ignored, a fresh prefill each time) the same request
is measured twice: by this client (TTFT, decode tok/s from each event's arrival, metrics.py definitions)
and by the server itself (llama.cpp's `timings`: prompt_ms, predicted_n over predicted_ms). Both decode
rates use one definition, (N - 1) tokens over the span from the first token to the last, and
    client_overhead = 1 - client decode tok/s / server decode tok/s      (target <= 0.03)
is the share of the server's own speed that the client's streaming, parsing and Steps cost (llama.cpp's
own `predicted_per_second` uses the same N - 1; it is reported as the server says it). A server without
per-request timings (vLLM) gets the client's figures only.

Left out: standard clients (vLLM's `bench serve`, guidellm): not installed here; the README says so.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import GenerationSettings
from .backends import MAX_NEW_TOKENS, PROMPT
from .rows import ErrorRow, Row, say
from .stats import median


@dataclass(frozen=True, kw_only=True)
class RemoteRow(Row):
    """The client's figures of a request against the server's own (remote.measure); the server's only where
    it reports per-request timings (llama-server does, vLLM does not)."""

    OPTIONAL = ("server_prompt_ms", "server_cached_prompt_tokens", "server_decode_tps",
                "server_reported_predicted_per_second", "client_overhead", "client_overhead_target")

    backend: str
    model: str
    prompt_tokens: int
    new_tokens: int
    repeats: int
    client_ttft_s: float | None           # medians over the repeats
    client_decode_tps: float | None
    server_prompt_ms: float | None = None
    server_cached_prompt_tokens: int | None = None
    server_decode_tps: float | None = None            # (N - 1) tokens over the first-to-last span, as the client's
    server_reported_predicted_per_second: float | None = None
    client_overhead: float | None = None              # 1 - client / server decode tok/s
    client_overhead_target: float | None = None


def measure(source, repeats: int = 3, max_new_tokens: int = MAX_NEW_TOKENS) -> RemoteRow:
    _, ids = source.prompt_ids(PROMPT, GenerationSettings())
    settings = GenerationSettings(max_new_tokens=max_new_tokens)
    source.run_ids(ids, settings.with_(max_new_tokens=4), ignore_eos=True).wait()   # warm-up
    traces = [source.run_ids(ids, settings, ignore_eos=True).wait() for _ in range(repeats)]
    client = [t.metrics() for t in traces]
    timings = [t.server.get("timings") or {} for t in traces]
    server = {}
    if all(t.get("predicted_n") and t.get("predicted_ms") for t in timings):
        server_tps = [(t["predicted_n"] - 1) / (t["predicted_ms"] / 1e3) for t in timings]
        overheads = [1 - m.decode_tps / s for m, s in zip(client, server_tps)]
        server = {"server_prompt_ms": median((t["prompt_ms"] for t in timings), 4),
                  "server_cached_prompt_tokens": max(t.get("cache_n", 0) for t in timings),
                  "server_decode_tps": median(server_tps, 4),
                  "server_reported_predicted_per_second": median((t["predicted_per_second"] for t in timings), 4),
                  "client_overhead": median(overheads, 4), "client_overhead_target": 0.03}
    return RemoteRow(backend=source.info.name, model=source.info.model, prompt_tokens=len(ids),
                     new_tokens=client[0].output_tokens, repeats=repeats,
                     client_ttft_s=median((m.ttft for m in client), 4),
                     client_decode_tps=median((m.decode_tps for m in client), 4), **server)


def remote_row(url: str | None = None, repeats: int = 3) -> RemoteRow | ErrorRow:
    """Against `url`, or a llama-server started here (stopped afterwards); an error row when it cannot run."""
    from ..remote import RemoteSource
    try:
        if url:
            return measure(RemoteSource(url, figure_interval=0), repeats)
        from ..llamacpp import LlamaServer
        with LlamaServer(threads=2, parallel=1) as server:
            return measure(RemoteSource(server.url, figure_interval=0), repeats)
    except Exception as exc:  # noqa: BLE001 - a bench row that cannot run says why
        return ErrorRow(f"remote ({url or 'llama-server'})", f"{type(exc).__name__}: {exc}")


def main(argv: list[str]) -> None:
    import argparse
    p = argparse.ArgumentParser(prog="python -m playground.bench remote", description=__doc__.splitlines()[0])
    p.add_argument("url", nargs="?", default=None, help="a server already running (default: start llama-server)")
    say(remote_row(p.parse_args(argv).url))
