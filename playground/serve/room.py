"""The room: everyone the app serves at once, and the one object that owns what they share.

    room = Room(lambda: registry.get("onnx-gguf4"), "onnx-gguf4", LoopSize(slots=8), traffic=ClientTraffic())
    room.start_loading()                      # the engine loads in a thread; its loop starts when it has
    loop = room.loop_for("onnx-gguf4")        # the page's Generate: the loop when it batches that backend, else None
    room.ready_for("onnx-gguf4")              # the same without waiting: None while it loads
    room.gate                                 # the machine's CPU slots (machine.py), one per app
    room.traffic                              # the record of its clients' requests (traffic.py), or None
    room.close()

A `Room` holds the three things every local request of the app shares: the engine loop (engine_loop.py: one
Batcher for the endpoint's clients and the page's Generate runs), the machine gate (machine.py: the loop holds
one CPU slot while it has work; a Serve workload takes the machine alone) and the client traffic (traffic.py:
each request the loop sees, for the Serve tab's Watch view and the Lesson's "You are the workload"). The app
makes one (app.py `make_room`); the endpoint (api/service.py), Generate, the Serve tab and the Lesson use it.
A room without a backend our batching runs (`backend` None) has no loop: its gate and traffic still serve.

The loop's size is set once, when the engine loads: KV slots of `capacity` positions (at most the model's
window), as many as the memory available allows for a room of ROOM people (room_slots), or `slots` when asked;
prefix caching on unless `prefix_cache` is 0: its size in positions, or, unset, sized from the memory the slots
leave (cache_positions), so a room's conversations keep their histories between turns. A session's blocks are held
across its gaps for the TTL it asks (`session_ttl` when it asks none), at most `session_share` of the cache.

Left out: HTTP, keys and limits (api/), gradio (ui/).
"""
from __future__ import annotations

import hashlib
import hmac
import threading
from dataclasses import dataclass
from typing import Callable

import psutil

from ..backends.onnx_batch import position_bytes
from ..machine import MachineGate
from .batching import BatchConfig, pool_slots
from .prefix_cache import BLOCK_SIZE
from .engine_loop import EngineLoop
from .registry import batching_backend
from .traffic import ClientTraffic

CACHE_SHARE = 0.25   # the share of the memory the KV slots leave at load that the prefix cache may take at most
MOST_CACHE_POSITIONS = 1 << 20   # BatchConfig's bound
ROOM = 30          # people the defaults serve at once, one request each (a workshop's room)
MOST_SLOTS = 32    # KV slots the loop gives itself at most: a room of ROOM held at once, as rows of one decode step
KV_SHARE = 0.25    # the share of the memory available at load the KV slots may take at most
SESSION_SHARE = 0.5   # the share of the prefix cache's blocks sessions may hold across their gaps at most
SESSION_TTL_S = 300.0   # seconds a session that asks no TTL (prompt_cache_key, X-Session-Id, …) is held: vLLM's default
CLIENT_SHARE = 4   # requests one client of the room has in flight at once (the endpoint's per-client limit's default)
PRESENTER_KEY_ENV = "PLAYGROUND_PRESENTER_KEY"   # the human presenter's key: who may take the machine alone


@dataclass(frozen=True)
class LoopSize:
    """The engine loop's size: `slots` (0: room_slots from the memory available at load), `capacity` (positions
    per slot: prompt + new tokens of one request, at most the model's window), `prefix_cache` (positions; 0: off;
    None: cache_positions from the memory available at load), `session_share` and `session_ttl` (a session's
    blocks held across its gaps: prefix_cache.py's retain)."""
    slots: int = 0
    capacity: int = 1024
    prefix_cache: int | None = None
    session_share: float = SESSION_SHARE   # the share of the prefix cache sessions may hold across their gaps
    session_ttl: float = SESSION_TTL_S     # seconds a session that asks no TTL is held (0: only those asking)


def room_slots(capacity: int, position_bytes: int, available_bytes: int, share: float = KV_SHARE,
               most: int = MOST_SLOTS) -> int:
    """KV slots of `capacity` positions (prompt + answer of one request; `position_bytes` each: every layer's K and V)
    that fit in `share` of `available_bytes` (the memory the machine has free), at most `most`, at least one.

    >>> room_slots(1024, 46_080, 16 * 2**30)   # the bundled model: 45 MiB a slot; 16 GiB free: a room at once
    32
    >>> room_slots(1024, 46_080, 2 * 2**30)    # 2 GiB free: 11 slots (495 MiB); the rest of a room waits its turn
    11
    >>> room_slots(4096, 46_080, 2 * 2**30)    # a longer context asked: fewer slots from the same memory
    2
    >>> room_slots(8192, 46_080, 2**30)        # never none: one request at a time
    1
    """
    return max(1, min(most, int(available_bytes * share) // (capacity * position_bytes)))


def loop_slots(asked: int, capacity: int, backend) -> int:
    """The loop's KV slots on `backend` for `capacity` positions each: `asked` (LoopSize.slots; fewer when they
    would take more memory than the Serve tab's pools may: batching.pool_slots) or, when 0, room_slots from the
    memory available now."""
    if asked:
        return pool_slots(asked, capacity, backend)
    return room_slots(capacity, position_bytes(backend), psutil.virtual_memory().available)


def cache_positions(position_bytes: int, available_bytes: int, slots_bytes: int = 0, share: float = CACHE_SHARE) -> int:
    """Prefix-cache positions (whole blocks) that fit in `share` of the memory `available_bytes` less the KV slots'
    `slots_bytes`, at most MOST_CACHE_POSITIONS.

    >>> cache_positions(46_080, 2 * 2**30, 11 * 1024 * 46_080)   # the bundled model, 2 GiB free, 11 slots of 1024
    8832
    >>> cache_positions(46_080, 16 * 2**30, 32 * 1024 * 46_080)  # 16 GiB free, a room's 32 slots
    85008
    >>> cache_positions(46_080, 2**20)                            # little memory: no whole block fits, off
    0
    """
    room = int(max(0, available_bytes - slots_bytes) * share)
    return min(MOST_CACHE_POSITIONS, room // position_bytes // BLOCK_SIZE * BLOCK_SIZE)


def loop_cache(asked: int | None, slot_positions: int, backend) -> int:
    """The loop's prefix-cache positions on `backend`: `asked` (LoopSize.prefix_cache) or, when None,
    cache_positions from the memory available now beside `slot_positions` of KV slots."""
    if asked is not None:
        return asked
    each = position_bytes(backend)
    return cache_positions(each, psutil.virtual_memory().available, slot_positions * each)


class Room:
    """The engine loop, the machine gate and the client traffic every local request of the app shares.

    >>> room = Room()                 # no backend: no loop, a gate of its own, no traffic recorded
    >>> room.loop_for("onnx") is None, room.gate.slots, room.traffic is None
    (True, 2, True)
    """

    def __init__(self, get_engine: Callable[[], object] | None = None, backend: str | None = None,
                 size: LoopSize | None = None, gate: MachineGate | None = None, traffic: ClientTraffic | None = None):
        """`get_engine()`: the engine the loop batches (loaded on first use), named `backend`; None: no loop.
        `gate`: the app's MachineGate (a new one when not given); `traffic`: the record the loop tells of each
        request and iteration (None: nothing recorded)."""
        self.get_engine, self.backend = get_engine, backend if get_engine is not None else None
        self.size = size or LoopSize()
        self.gate = gate or MachineGate()
        self.traffic = traffic
        self.engine_loop: EngineLoop | None = None
        self.loop_sources: set[str] = set()   # sources whose requests run through this loop (the app's endpoint)
        self.served = ""   # why others reach the room (ports.room_served): "" when this machine alone does
        self.client_share = CLIENT_SHARE   # requests one client has in flight at once (the endpoint's per-client limit)
        self._presenter: bytes | None = None   # the presenter key's digest (set_presenter_key); None: no key set
        self.error: str | None = None       # why the engine failed to load
        self._ready = threading.Event()     # set once the loop runs or loading failed
        self._loading: threading.Thread | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_registry(cls, registry, size: LoopSize | None = None, gate: MachineGate | None = None,
                     traffic: ClientTraffic | None = None) -> "Room":
        """The room over a SourceRegistry: its loop batches the backend our batching runs there (serve.registry.
        batching_backend; none: a room without a loop), loaded on first use and closed with the registry."""
        try:
            name = batching_backend(registry.names, registry.default)
        except ValueError:
            return cls(gate=gate, traffic=traffic)
        room = cls(lambda: registry.get(name), name, size, gate, traffic)
        registry.on_close(room.close)
        return room

    # --- who may take the machine alone

    def set_presenter_key(self, key: str | None) -> None:
        """The human presenter's key (PRESENTER_KEY_ENV; None or "": none): typed on the page, it lets a Serve run
        take the machine alone while the room is served. Kept as a digest, compared in constant time."""
        self._presenter = hashlib.sha256(key.strip().encode()).digest() if key and key.strip() else None

    def alone_refused(self, key: str | None) -> str:
        """Why the person who typed `key` may not take the machine alone now ("": they may). While the room is served
        (`served`), work that holds the machine alone stalls everyone's requests: only the presenter may start it.

        >>> room = Room()
        >>> room.alone_refused(None)   # this machine alone: anyone at it may
        ''
        >>> room.served = "the page listens on 0.0.0.0"
        >>> room.alone_refused("x").split(": ")[0], room.set_presenter_key("s3cret"), room.alone_refused(" s3cret ")
        ('This room is served (the page listens on 0.0.0.0)', None, '')
        >>> room.alone_refused("guess").endswith("The key typed is not it.")
        True
        """
        if not self.served:
            return ""
        head = (f"This room is served ({self.served}): a Serve run takes the machine alone and every other request, "
                "the page's and the API's, waits until it ends, so only the presenter may start one")
        if self._presenter is None:
            return f"{head}; no presenter key is set here ({PRESENTER_KEY_ENV}), so none may start while it is served."
        if key and hmac.compare_digest(hashlib.sha256(key.strip().encode()).digest(), self._presenter):
            return ""
        return (f"{head}: type the presenter key ({PRESENTER_KEY_ENV}) in “Presenter key” above Run."
                + (" The key typed is not it." if key and key.strip() else ""))

    def joined_share(self, key: str | None) -> int | None:
        """The requests at most in flight at once for a workload that joins the room's loop, started by the person
        who typed `key`: while the room is served, an attendee's (anyone who may not take the machine alone) is one
        more client of the room, held to a client's share (`client_share`, the endpoint's per-client limit) so
        the others' requests keep their pace; None (no cap) for the presenter, and on a room nobody else reaches.

        >>> room = Room()
        >>> room.joined_share(None) is None                  # this machine alone
        True
        >>> room.served = "the endpoint is on"; room.set_presenter_key("s3cret")
        >>> room.joined_share(None), room.joined_share("s3cret")
        (4, None)
        """
        return self.client_share if self.alone_refused(key) else None

    # --- the engine loop

    def start_loading(self) -> None:
        """Load the engine and start its loop in a background thread (once; nothing without a backend)."""
        with self._lock:
            if self._loading is None and self.get_engine is not None:
                self._loading = threading.Thread(target=self._load, name="room-load", daemon=True)
                self._loading.start()

    def _load(self) -> None:
        try:
            engine = self.get_engine()
            capacity = min(self.size.capacity, int(engine.backend.context_window))
            slots = loop_slots(self.size.slots, capacity, engine.backend)
            cache = loop_cache(self.size.prefix_cache, slots * capacity, engine.backend)
            batch = BatchConfig(slots=slots, prefix_cache=cache, session_share=self.size.session_share,
                                session_ttl=self.size.session_ttl)
            self.engine_loop = EngineLoop(engine, batch, capacity, self.traffic, self.gate)
            if self.traffic is not None:
                self.traffic.described(context=capacity, window=int(engine.backend.context_window), slots=slots,
                                       prefix_cache=batch.prefix_cache)
        except Exception as exc:   # noqa: BLE001 - every request is told why
            self.error = f"the model failed to load: {type(exc).__name__}: {exc}"
        finally:
            self._ready.set()

    def ready_for(self, backend: str) -> EngineLoop | None:
        """The running loop when it batches `backend`'s requests, without waiting: None while it loads, when it
        failed, or when it runs another backend."""
        loop = self.engine_loop
        if backend != self.backend or self.error or loop is None or loop.error:
            return None
        return loop

    def loop_for(self, backend: str, wait: float = 60.0) -> EngineLoop | None:
        """The running loop when it batches `backend`'s requests (waiting up to `wait` s for it to load); None when
        it runs another backend, failed, or is still loading."""
        if backend != self.backend:
            return None
        self.start_loading()
        self._ready.wait(wait)
        return self.ready_for(backend)

    def close(self) -> None:
        if self.engine_loop is not None:
            self.engine_loop.close()
