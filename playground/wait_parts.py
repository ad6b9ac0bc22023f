"""Where a request's time to its first token went: named parts that add up to its TTFT, each on its clock.

    parts = trace.waits                 # a WaitParts, written by the batcher at the request's first token
    parts.total                         # the server's TTFT: the request's arrival in the engine -> its first token
    parts.named()                       # [Part] in the order the time passed; parts of no time left out
    parts.named(ttft=2.4)               # and the client's own part: what is left of the TTFT it measured (derived)
    first_token_words(parts, 845)       # "2.1 s on the server: 120 ms waiting for the iteration in progress, ..."

The server's parts are measured on the engine loop's clock from the marks the batcher sets as it carries out its
plans (serve/plan.py, serve/batcher.py); the reasons a request waited are the ones the plans gave:

    waiting, by reason     its arrival -> a KV slot, split by the reason each plan gave: the iteration in progress
                           (it came after the plan was made), no free slot, its turn among clients, a request of a
                           higher priority (it yields), the KV budget,
                           the machine (work that needs it alone held it; the engine loop's pause)
    cached tokens copied   its cached prefix copied into its slot from the prefix cache
    its prompt computed    its own prefill chunks, and its first token sampled after the last one
    the machine held       paused while it held a slot (the engine loop steps nothing while work runs alone)
    others' steps          the rest from its slot to its first token: the decode passes and other requests'
                           chunks the iterations ran before and between its chunks

They add up to the server's TTFT (the Trace's `queued` + its first Step's `time`) exactly: "others' steps" is what
the marks leave. A client measures more (its request on the way in, its first token on the way out): that part is
the client's TTFT less the server's parts, derived, never measured on the server, and named so.

>>> parts = WaitParts(waited=(("the iteration in progress", 0.12),), computed=3.1, computed_tokens=845, chunks=7,
...                   chunk=128, others=13.2)
>>> [(p.key, round(p.seconds, 2), p.clock) for p in parts.named(ttft=16.5)]
[('waiting: the iteration in progress', 0.12, 'server'), ('computed', 3.1, 'server'), ('others', 13.2, 'server'), ('submit and delivery', 0.08, 'derived')]
>>> print(first_token_words(parts))
16.4 s on the server: 120 ms waiting for the iteration in progress (it came after the batcher had planned the iteration running), 3.1 s computing its 845 prompt tokens (7 chunks of up to 128), 13.2 s for other requests' steps run between its chunks

Left out: where a remote server's time went (a client sees only its events: remote/), and a speculative run's
(it runs alone: one pass reads the whole prompt).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .units import format_seconds

SERVER, DERIVED = "server", "derived"   # the two clocks: the engine loop's own marks; a client's TTFT less them

# what a request waited for before its KV slot, by the batcher's reason (serve/plan.py WaitReason's values, and the
# engine loop's pause: MACHINE), in words
MACHINE = "the machine"
WAITING_WORDS = {
    "the iteration in progress": "waiting for the iteration in progress (it came after the batcher had planned "
                                 "the iteration running)",
    "no free slot": "waiting for a KV slot (every slot was held)",
    "its turn among clients": "waiting for its turn among clients (a freed slot goes to the client holding the "
                              "fewest)",
    "a request of a higher priority": "yielding: a freed slot went to a request of a higher priority (it was sent "
                                      "with priority 1 or more)",
    "no KV budget": "waiting for KV budget (a slot was free, the blocks its prompt needs were not)",
    "behind a request short of KV budget": "waiting behind a request short of KV budget (no one overtakes it)",
    MACHINE: "waiting for the machine (work that needs it alone held it)",
}


# the same reasons in two or three words, for a sentence that names only the largest
WAITED_FOR = {"the iteration in progress": "the iteration in progress", "no free slot": "a free slot",
              "its turn among clients": "its turn among clients", "no KV budget": "KV budget",
              "a request of a higher priority": "requests of a higher priority",
              "behind a request short of KV budget": "a request short of KV budget", MACHINE: "the machine"}


def main_reason(waited) -> str | None:
    """The reason of the most seconds among (reason, seconds) pairs, in a few words; None for none.

    >>> main_reason((("the iteration in progress", 0.4), ("the machine", 7.2))), main_reason(())
    ('the machine', None)
    """
    reason = max(waited, key=lambda x: x[1], default=(None, 0.0))[0]
    return None if reason is None else WAITED_FOR.get(reason, reason)


class Part(NamedTuple):
    key: str         # what an export names it: "waiting: <reason>", "copied", "computed", "machine", "others", …
    words: str       # what a reader reads
    seconds: float
    clock: str       # SERVER (the engine loop's marks) | DERIVED (a client's TTFT less the server's parts)

    def as_dict(self) -> dict:
        return self._asdict()


@dataclass(frozen=True)
class WaitParts:
    """A request's time from its arrival in the engine to its first token, in parts measured on the server."""
    waited: tuple[tuple[str, float], ...] = ()   # (reason, seconds) before it held a KV slot, in the order first met
    copied: float = 0.0           # its cached prefix copied into its slot
    copied_tokens: int = 0
    computed: float = 0.0         # its own prefill chunks, and its first token sampled
    computed_tokens: int = 0
    chunks: int = 0               # its prefill chunks
    chunk: int = 0                # prompt tokens an iteration computes at most (the batcher's prefill chunk)
    machine: float = 0.0          # paused while it held a slot: work that needs the machine alone held it
    others: float = 0.0           # what is left: other requests' passes before and between its chunks

    @property
    def queued(self) -> float:
        """Its arrival -> a KV slot: every reason's wait together."""
        return sum(s for _, s in self.waited)

    @property
    def total(self) -> float:
        """The server's TTFT: its arrival in the engine -> its first token."""
        return self.queued + self.copied + self.computed + self.machine + self.others

    def named(self, ttft: float | None = None) -> list[Part]:
        """The parts in the order the time passed, those of no time left out; with `ttft` (what a client measured,
        from its click or its request to the first token shown), the client's own part after them: what is left."""
        parts = [Part(f"waiting: {reason}", WAITING_WORDS.get(reason, f"waiting: {reason}"), s, SERVER)
                 for reason, s in self.waited]
        parts += [Part("copied", f"copying {self.copied_tokens:,} cached prompt tokens from the prefix cache",
                       self.copied, SERVER),
                  Part("computed", f"computing its {self.computed_tokens:,} prompt tokens"
                       + (f" ({self.chunks} chunks of up to {self.chunk:,})" if self.chunks > 1 else ""),
                       self.computed, SERVER),
                  Part("machine", "paused for the machine while it held a slot (work that needs it alone held it)",
                       self.machine, SERVER),
                  Part("others", "for other requests' steps run " + ("between its chunks" if self.chunks > 1 else
                                                                      "before its chunk"), self.others, SERVER)]
        if ttft is not None:
            parts.append(Part("submit and delivery", "submit and delivery (derived: the TTFT measured there less "
                              "the server's parts)", max(0.0, ttft - self.total), DERIVED))
        return [p for p in parts if p.seconds > 0 or (p.key == "computed" and self.computed_tokens)]

    def as_dict(self, ttft: float | None = None) -> dict:
        """For the exports: the server's TTFT and every part with its clock."""
        return {"server_ttft": self.total, "parts": [p.as_dict() for p in self.named(ttft)]}


def first_token_words(parts: WaitParts, shown_from: float = 0.0005) -> str:
    """The server's TTFT and its parts in words; parts under `shown_from` seconds are left out of the words (the
    exports keep them)."""
    said = [f"{format_seconds(p.seconds)} {p.words}" for p in parts.named() if p.seconds >= shown_from]
    return f"{format_seconds(parts.total)} on the server: " + ", ".join(said)


def waiting_words(reason: str | None, ahead: int | None, slots: int, in_flight: int) -> str:
    """The live status of a request still waiting for a KV slot, named by the reason the latest plan gave (None: no
    plan has seen it yet: the iteration in progress).

    >>> waiting_words("no free slot", 2, 8, 11)
    "Waiting for a KV slot: all 8 are held; 2 requests ahead of you in the engine's queue (11 in it now)…"
    >>> waiting_words(None, 0, 32, 17)
    'Waiting for the iteration in progress: the engine admits you when it plans the next one (17 requests in it now, 32 slots)…'
    >>> waiting_words("its turn among clients", 1, 4, 6)[:73]
    'Waiting for your turn among clients: a freed slot goes to the client hold'
    """
    reason = reason or "the iteration in progress"
    queue = f"{ahead} request{'s' * (ahead != 1)} ahead of you in the engine's queue" if ahead else "none ahead of you"
    if reason == "no free slot":
        return f"Waiting for a KV slot: all {slots} are held; {queue} ({in_flight} in it now)…"
    if reason == "its turn among clients":
        return (f"Waiting for your turn among clients: a freed slot goes to the client holding the fewest; {queue} "
                f"({in_flight} in it now, {slots} slots)…")
    if reason == "a request of a higher priority":
        return (f"Yielding: a freed slot goes to a request of a higher priority first (yours was sent with priority 1 "
                f"or more); {queue} ({in_flight} in it now, {slots} slots)…")
    if reason == "the iteration in progress":
        return (f"Waiting for the iteration in progress: the engine admits you when it plans the next one "
                f"({in_flight} requests in it now, {slots} slots)…")
    if reason == MACHINE:
        return ("Waiting for the machine: a Serve workload has the machine alone (its figures need it); the engine's "
                "queue goes on when it ends…")
    return f"Waiting: {WAITING_WORDS.get(reason, reason)}; {queue} ({in_flight} in it now)…"
