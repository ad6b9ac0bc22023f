"""Which conversation a request continues, and its record of the prefix cache's lookup (cache_miss.py).

    book = Conversations()                                  # one per Batcher with a prefix cache
    seq.turn = Turn(key="chat-7", messages=..., spans=...)  # what a chat request says of itself (the endpoint)
    looked = book.record(seq, found, cache, decode)         # its first admission's lookup: a TurnRecord (the plan's
    #                                                         admission entry carries it; batcher.py)
    book.finished(seq)                                      # when it ends: its whole sequence, for the next turn

The rule, for a stateless API (every turn sends the whole history):

  1. a client's key: the session the request names (api/session_hint.py, in its order: Anthropic's
     `cache_control`, OpenAI's `prompt_cache_key`, the Responses chain, an `X-Session-Id` header, vLLM's
     `agent_hint`), else OpenAI's `user`. The request continues the latest finished sequence of that key;
  2. else (no key, or a key with no finished sequence yet) the longest common prefix: of the client's recently
     finished sequences that no key named (the newest RECENT of all clients', the oldest dropped first), the one
     sharing the longest beginning with this prompt, when that beginning is at least SIMILARITY of its prompt (as
     llama-server picks the slot whose prompt is most like the new one, `--slot-prompt-similarity`). So a
     Responses chain is one conversation from its first response, which names no session: the second names the
     chain by the first one's id, and continues it by its prefix; from the third on, by that key;
  3. else it starts a new conversation.

A keyed request is always its key's conversation, found by key or by prefix.

A conversation is always within one client (a page session, an API key or address: the Batcher's `client`),
so a record never shows another client's tokens. A request with no `Turn` (a Serve workload, a page's Generate
run) makes no record; the endpoint gives every request one (a raw completion's has no messages: its record places
a difference in none).

>>> book = Conversations()
>>> book.pick("client 1", "", [1, 2, 3]) is None           # nothing finished yet: a new conversation
True
>>> book.book["c · k"] = Finished("c · k", "c", "k", Previous((1, 2, 3, 4), 3))
>>> book.book["conversation 1"] = Finished("conversation 1", "c", "", Previous((7, 8, 9, 4), 3))
>>> [(f.name, how) for f, how in (book.pick("c", "k", [7, 8, 9, 4, 5]), book.pick("c", "new", [7, 8, 9, 4, 5]))]
[('c · k', 'key'), ('conversation 1', 'prefix')]

Left out: persistence (the book lives as long as the engine loop) and forgetting by age (only by count).
"""
from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .cache_miss import CacheRecord, Previous, explain
from .prefix_cache import BLOCK_SIZE, block_hashes

RECENT = 256        # finished sequences remembered (one per conversation: its latest turn)
SIMILARITY = 0.5    # share of a finished sequence's prompt a new prompt must begin with to continue it by prefix


@dataclass(frozen=True)
class Turn:
    """What a chat request says of itself beyond its token ids."""
    key: str = ""                       # the client's own conversation key; "": none
    messages: tuple[dict, ...] = ()     # role and content, as rendered
    spans: tuple = ()                   # its prompt's MessageSpans (tokens/chat.py)
    tools: tuple[str, ...] = ()         # its tool lines, as rendered
    template: str = ""                  # the chat template's name


class TurnRecord(NamedTuple):
    """A request's record of its lookup, and the conversation it belongs to in the book."""
    record: CacheRecord
    name: str | None    # the conversation's name in the book; None: a new one without a key (named when it ends)


@dataclass(frozen=True)
class Finished:
    name: str
    client: str
    key: str
    previous: Previous


class Conversations:
    def __init__(self, recent: int = RECENT):
        self.recent = recent
        self.book: OrderedDict[str, Finished] = OrderedDict()   # conversation name -> its latest turn, oldest first
        self._names = itertools.count(1)

    def pick(self, client: str, key: str, ids) -> tuple[Finished, str] | None:
        """(the finished turn this prompt continues, "key" or "prefix"), or None: a new conversation."""
        if key and (found := self.book.get(_keyed(client, key))) is not None:
            return found, "key"
        best, most = None, 0
        prompt = np.asarray(ids, np.int64)
        for finished in self.book.values():
            if finished.client != client or finished.key:
                continue
            shared = _shared(prompt, finished.previous.ids)
            if shared > most and shared >= SIMILARITY * finished.previous.prompt:
                best, most = finished, shared
        return (best, "prefix") if best is not None else None

    def record(self, seq, found: int, cache, decode) -> TurnRecord:
        """`seq`'s record of its first lookup, which found `found` positions of its prompt in `cache` (`decode`:
        ids -> text); reads the book and the cache's eviction log, changes nothing."""
        turn = seq.turn
        picked = self.pick(seq.client, turn.key, seq.ids)
        finished, matched_by = picked if picked is not None else (None, "none")
        name = _keyed(seq.client, turn.key) if turn.key else finished.name if finished is not None else None
        eviction = None
        hashes = seq.hashes or block_hashes(seq.ids)
        if found // BLOCK_SIZE < len(hashes):
            eviction = cache.evictions.get(hashes[found // BLOCK_SIZE])
        record = explain(seq.ids, found, finished.previous if finished else None, spans=turn.spans,
                         messages=turn.messages, tools=turn.tools, decode=decode, eviction=eviction,
                         conversation=turn.key or (name or ""), matched_by=matched_by, now=cache.clock())
        return TurnRecord(record, name)

    def finished(self, seq) -> None:
        """Remember `seq`'s whole sequence (`seq.conversation`: its TurnRecord) as its conversation's latest turn,
        the one the next turn continues."""
        if seq.conversation is None:
            return
        name, turn = seq.conversation.name or f"conversation {next(self._names)}", seq.conversation.record.turn
        steps = seq.trace.steps
        answer = "".join(s.text for s in steps if not s.special)
        previous = Previous(tuple(seq.ids) + tuple(s.token_id for s in steps), len(seq.ids), seq.turn.messages,
                            seq.turn.spans, answer, seq.turn.tools, turn, time.time())
        self.book.pop(name, None)
        self.book[name] = Finished(name, seq.client, seq.turn.key, previous)
        while len(self.book) > self.recent:
            self.book.popitem(last=False)


def _keyed(client: str, key: str) -> str:
    return f"{client} · {key}"


def _shared(prompt: np.ndarray, ids) -> int:
    """Tokens `prompt` and `ids` share from position 0 (numpy: a few hundred sequences per lookup)."""
    n = min(len(prompt), len(ids))
    if n == 0:
        return 0
    differ = np.flatnonzero(prompt[:n] != np.asarray(ids[:n], np.int64))
    return int(differ[0]) if differ.size else n
