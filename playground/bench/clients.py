"""`make bench`'s clients row: the app's endpoint under misbehaving clients while one client behaves, on loopback.

    python -m playground.bench clients                  # the bundled model
    python -m playground.bench clients --model tiny     # the tiny test model (what the suite runs)

The endpoint (uvicorn over `api_routes(ApiService(...))`, continuous batching on ONNX Runtime, its default
limits: 4 requests in flight per client, 16 in all) runs in a thread of this process on 127.0.0.1; every
client has a key of its own, so each is one client to the limits. At once, for LOAD_S seconds at most:

    disconnect   DISCONNECTERS clients, each streams and hangs up after 3 events, again and again
    stop reading STALLERS clients, each opens a stream, reads one event, then holds the connection unread
    slow reader  SLOW_READERS clients, each reads one event every SLOW_READ_S
    burst        BURSTERS clients, each sends BURST requests at once (over its limit of 4: 429s expected)
    well-behaved one client, streamed requests one after another, TTFT timed on the client

before which the well-behaved client runs alone (its p95 TTFT alone, the same requests). After the load:
whether every KV slot came back (nothing held, nothing waiting, no request counted in flight by the limits)
and the process's RSS against its start (measured after a warm-up load, so allocators' first growth is not
counted). Requests are short (WELL_TOKENS / LOAD_TOKENS new tokens, EOS ignored) so the row takes seconds.

Left out: clients on other machines (loopback only) and slowloris-style partial headers (uvicorn's own).
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field

from ..metrics import NEAREST_RANK, percentile
from . import aiperf
from .rows import Row, parser, say_timed


@dataclass(frozen=True, kw_only=True)
class ClientsRow(Row):
    """The endpoint under misbehaving clients while one behaves (clients.clients_row)."""

    bench: str = field(default="clients", init=False)
    backend: str                          # "endpoint (<backend>, continuous batching)"
    model: str
    clients: int                          # at once: disconnecting, not reading, slow, bursting, one well-behaved
    load_s: float                         # how long the load ran
    requests: int                         # every request sent during the load (refused ones too)
    statuses: dict[str, int]              # HTTP status -> how many ("200", "429")
    well_behaved_requests: int            # the well-behaved client's requests served during the load
    well_behaved_failures: int            # its requests that got no first token (should be 0)
    well_behaved_failure_statuses: dict[str, int]   # each failure's HTTP status -> how many (empty when none)
    well_behaved_ttft_p95_ms: float | None        # its p95 TTFT during the load (client side, ms)
    well_behaved_ttft_p95_alone_ms: float | None  # the same requests alone, before the load
    slots_back: bool                      # after the load: no KV slot held, nothing waiting or in flight
    rss_before_mb: float                  # the process's RSS before the load (after a warm-up load), MB
    rss_after_mb: float                   # after it, every client gone
    rss_within_margin: bool               # after <= before + max(10%, 32 MB)
    load_average_1m: float


LOAD_S = 8.0                     # the load's duration at most
DISCONNECTERS, STALLERS, SLOW_READERS, BURSTERS = 4, 2, 2, 2
BURST = 12                       # requests a burster sends at once
SLOW_READ_S = 0.2
WELL_TOKENS, LOAD_TOKENS = 8, 48
ALONE_REQUESTS = 10              # the well-behaved client alone, before the load
RSS_MARGIN = 0.10                # the row's verdict: RSS after within 10% (and at least 32 MB) of before


def rss_bytes() -> int:
    import psutil
    return psutil.Process(os.getpid()).memory_info().rss


class Endpoint(aiperf.Endpoint):
    """The app's endpoint over `engine` with one key per client (aiperf.Endpoint), and a way to wait for it to
    hold nothing."""

    def __init__(self, engine, keys: tuple[str, ...], slots: int = 4):
        from ..api import ApiConfig
        super().__init__(engine, ApiConfig(keys=keys, slots=slots, capacity=256))

    def settled(self, timeout: float = 15.0) -> bool:
        """Wait until no request holds a slot, waits or is counted in flight; whether that came in time."""
        loop, guard = self.service.engine_loop, self.service.guard
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not (loop.in_flight() or loop.batcher.busy() or loop.batcher.holders()
                    or any(guard._in_flight.values())):
                return True
            time.sleep(0.05)
        return False


class Tally:
    def __init__(self):
        self.statuses: dict[str, int] = {}
        self.requests = 0
        self.failures: list[str] = []   # each well-behaved request that got no first token: its HTTP status

    def count(self, status) -> None:
        self.requests += 1
        self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1


def _body(tokens: int, stream: bool = True) -> dict:
    return {"prompt": "Tell me about the sea.", "max_tokens": tokens, "stream": stream, "ignore_eos": True,
            "temperature": 0}


async def _stream(http, key: str, tally: Tally, tokens: int, read):
    """One streamed request; `read(lines)` consumes the event lines as this client does."""
    async with http.stream("POST", "/v1/completions", json=_body(tokens),
                           headers={"Authorization": f"Bearer {key}"}) as r:
        tally.count(r.status_code)
        if r.status_code == 200:
            await read(r.aiter_lines())


async def _well_behaved(http, key: str, tally: Tally, until: float, ttfts: list[float], least: int = 0):
    n = 0
    while time.monotonic() < until or n < least:
        start = time.perf_counter()
        first = None
        async with http.stream("POST", "/v1/completions", json=_body(WELL_TOKENS),
                               headers={"Authorization": f"Bearer {key}"}) as r:
            tally.count(r.status_code)
            async for line in r.aiter_lines():
                if first is None and line.startswith("data: {"):
                    first = time.perf_counter() - start
            if r.status_code != 200 or first is None:
                tally.failures.append(str(r.status_code) if r.status_code != 200 else "200 without a token")
            else:
                ttfts.append(first)
        n += 1


async def _disconnecter(http, key, tally, until):
    async def three(lines):
        seen = 0
        async for line in lines:
            seen += bool(line)
            if seen >= 3:
                return   # leaving the block closes the response mid-stream
    while time.monotonic() < until:
        await _stream(http, key, tally, LOAD_TOKENS, three)


async def _staller(http, key, tally, until):
    async def stall(lines):
        await lines.__anext__()
        await asyncio.sleep(max(0.0, until - time.monotonic()))   # holds the connection, reads nothing
    await _stream(http, key, tally, 200, stall)


async def _slow_reader(http, key, tally, until):
    async def slowly(lines):
        async for _ in lines:
            await asyncio.sleep(SLOW_READ_S)
            if time.monotonic() > until:
                return
    while time.monotonic() < until:
        await _stream(http, key, tally, LOAD_TOKENS, slowly)


async def _burster(http, key, tally, until):
    async def one():
        r = await http.post("/v1/completions", json=_body(4, stream=False), headers={"Authorization": f"Bearer {key}"})
        tally.count(r.status_code)
    while time.monotonic() < until:
        await asyncio.gather(*(one() for _ in range(BURST)))
        await asyncio.sleep(0.5)


async def _load(url: str, keys: list[str], seconds: float, with_well: bool = True) -> tuple[Tally, list[float]]:
    import httpx
    tally, ttfts = Tally(), []
    until = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        keys = iter(keys)
        tasks = [_disconnecter(http, next(keys), tally, until) for _ in range(DISCONNECTERS)]
        tasks += [_staller(http, next(keys), tally, until) for _ in range(STALLERS)]
        tasks += [_slow_reader(http, next(keys), tally, until) for _ in range(SLOW_READERS)]
        tasks += [_burster(http, next(keys), tally, until) for _ in range(BURSTERS)]
        if with_well:
            tasks.append(_well_behaved(http, next(keys), tally, until, ttfts, least=3))
        await asyncio.gather(*tasks)
    return tally, ttfts


def _alone(url: str, key: str) -> list[float]:
    import httpx

    async def run():
        ttfts = []
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            await _well_behaved(http, key, Tally(), 0, ttfts, least=ALONE_REQUESTS)
        return ttfts
    return asyncio.run(run())


def p95(values: list[float]) -> float | None:
    """The 95th percentile (nearest rank) in ms, None for no values.

    >>> p95([0.010] * 19 + [0.5])
    10.0
    """
    value = percentile(values, 95, NEAREST_RANK)
    return None if value is None else round(1000 * value, 1)


def clients_row(model: str | None = None, seconds: float = LOAD_S) -> ClientsRow:
    from ..api import batching_backend
    from ..backends import available_backends, create_backend, default_backend_name
    from ..engine import Engine

    logging.getLogger("asyncio").setLevel(logging.ERROR)   # not a warning per write to a client that hung up
    clients = DISCONNECTERS + STALLERS + SLOW_READERS + BURSTERS + 1
    keys = [f"client-{i}-key" for i in range(clients)]
    name = batching_backend(list(available_backends()), default_backend_name("cpu", model))
    endpoint = Endpoint(Engine(create_backend(name, model)), tuple(keys))
    try:
        alone = _alone(endpoint.url, keys[-1])
        asyncio.run(_load(endpoint.url, keys, min(2.0, seconds), with_well=False))   # warm-up: first allocations
        endpoint.settled()
        gc.collect()
        before = rss_bytes()
        tally, ttfts = asyncio.run(_load(endpoint.url, keys, seconds))
        slots_back = endpoint.settled()
        gc.collect()
        after = rss_bytes()
        model_id = endpoint.service.model_id
    finally:
        endpoint.close()
    margin = max(RSS_MARGIN * before, 32e6)
    return ClientsRow(
        backend=f"endpoint ({name}, continuous batching)", model=model_id, clients=clients,
        load_s=seconds, requests=tally.requests, statuses=dict(sorted(tally.statuses.items())),
        well_behaved_requests=len(ttfts), well_behaved_failures=len(tally.failures),
        well_behaved_failure_statuses=dict(sorted(Counter(tally.failures).items())),
        well_behaved_ttft_p95_ms=p95(ttfts), well_behaved_ttft_p95_alone_ms=p95(alone),
        slots_back=slots_back, rss_before_mb=round(before / 1e6, 1), rss_after_mb=round(after / 1e6, 1),
        rss_within_margin=after <= before + margin, load_average_1m=round(os.getloadavg()[0], 2))


def main(argv: list[str]) -> None:
    p = parser("clients", __doc__)
    p.add_argument("--seconds", type=float, default=LOAD_S, help=f"the load's duration (default {LOAD_S:g})")
    args = p.parse_args(argv)
    say_timed(lambda: clients_row(args.model, args.seconds))

