"""`make bench`'s conversations row: N chats of T turns at once, through our endpoint and through llama-server.

    python -m playground.bench conversations                      # 8 conversations x 6 turns, 48-token answers
    python -m playground.bench conversations --conversations 4 --turns 3 --rounds 1
    python -m playground.bench conversations --model tiny --conversations 2 --turns 2 --tokens 3 --question-tokens 4 8

Each conversation is a chat client: turn after turn it adds a user question and sends the conversation back whole
(the earlier answers as the text it received), streamed, greedy, `max_tokens` ANSWER_TOKENS with EOS ignored
(`ignore_eos`, which both servers take). The N conversations run at once (N clients, each doing its T turns one
after another, the next as soon as its answer ends: no think time), from one barrier. The script is fixed
(`script`): each question is a passage of the shipped long document (prompts.long_document), from a sentence
drawn by a seeded generator (SEED), cut to a length drawn from QUESTION_TOKENS by the served model's own tokenizer
(`/tokenize`, which both servers answer); a conversation's first question is tagged with its number and round, so no
conversation or round finds another's history in a cache (the chat template's head is theirs to share).

Two servers on the same GGUF and threads, both up for the whole row, their rounds interleaved (ROUNDS, `--rounds`:
ours, then llama-server's, then ours again...):

    ours          the app (app.py --openai-api, the batching backend: onnx-gguf4 on the bundled model), started as
                  the room row starts it, one API key and one `prompt_cache_key` a conversation (serve/conversations.py
                  matches each turn to its conversation by that key); its prefix cache as it ships, whose budget in
                  positions the row prints (`prefix_cache_positions`, read from /metrics'
                  playground:prefix_cache_capacity_positions) with the blocks it evicted during the row
    llama_server  llama.cpp's `llama-server` as it ships: `cache_prompt` on per request and its RAM prompt cache on
                  (both its defaults), LLAMA_SLOTS slots (`--parallel`) and a context (`-c`) of LLAMA_SLOTS x what one
                  conversation needs (`conversation_tokens`: its questions, answers, the template's tokens a message
                  and the template's head), so each slot holds one whole conversation

Per turn (1..T), over the N conversations: served, TTFT p50 / p95 (nearest rank; from the request to its first
streamed token as the client sees it, a wait for a slot included), prompt tokens and cached prompt tokens p50 and the
share of the turn's prompt tokens that were cached (ours: `usage.prompt_tokens_details.cached_tokens`; llama-server:
`timings.cache_n`), and output tok/s p50 (each answer's tokens after its first over the time from its first token to
its last: its decode rate); ours also what its `x_playground.cache` records say (serve/cache_miss.py): the most the
cache could have found (`ideal_tokens_p50`) and the causes they name. Per
path: the TTFT p95 over turns 2..T (`later_ttft_p95_s`: every later turn of every conversation pooled), the output
tokens over the wall time from the first request to the last answer (`output_tps`). Each figure is the median of
its rounds, each round's kept. The ratio the target names:

    ttft_p95_later_turns_vs_llama   ours / llama-server's later_ttft_p95_s, taken within each round, their median
                                    (target <= 0.8), printed only from a quiet machine (quiet.validity over every
                                    window of both paths, as every ratio to llama.cpp)

Left out: think time between turns, conversations that start at different times, and tool calls; a conversation
whose turn fails (no answer) stops there, its later turns counted as not served.
"""
from __future__ import annotations

import json
import math
import random
import re
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

from ..metrics import NEAREST_RANK, percentile
from ..prompts import long_document
from .quiet import LoadWindow, cpu_flags, gated, validity
from .attendees import app_limits, busiest, endpoint_app, openai_person, press_together
from .rows import Row, parser, say_timed
from .stats import median, ratio, rounded, targets_met, targets_text

CONVERSATIONS = 8
TURNS = 6
ANSWER_TOKENS = 48
QUESTION_TOKENS = (30, 80)   # a question's tokens, drawn uniformly (the served model's tokenizer)
ROUNDS = 3
SEED = 57
LLAMA_SLOTS = 4
MESSAGE_TOKENS = 8    # the chat template's own tokens around one message, at most (SmolLM2's: 5)
HEAD_TOKENS = 64      # the template's head and a conversation's tag (SmolLM2's default system prompt: ~30)
CONTEXT_STEP = 256    # conversation_tokens is rounded up to a multiple of this
TARGETS = {"ttft_p95_later_turns_vs_llama": ("<=", 0.8)}
TURN_MEDIANS = ("ttft_p50_s", "ttft_p95_s", "prompt_tokens_p50", "cached_tokens_p50", "cached_share",
                "output_tps_p50", "ideal_tokens_p50")
PATH_MEDIANS = ("later_ttft_p95_s", "wall_s", "output_tps")


@dataclass(frozen=True, kw_only=True)
class ConversationsRow(Row):
    """N conversations of T turns at once through our endpoint and llama-server, rounds interleaved
    (conversations.conversations_row). Each path's dict: served, requests, statuses, later_ttft_p95_s, wall_s,
    output_tokens, output_tps, turns ({"1": turn 1's dict, ...}: served, ttft_p50_s, ttft_p95_s, prompt_tokens_p50,
    cached_tokens_p50, cached_share, output_tps_p50; ours also ideal_tokens_p50 and causes), load, validity, and
    rounds when more than one."""

    bench: str = field(default="conversations", init=False)
    backend: str                          # the app's batching backend
    model: str
    conversations: int
    turns: int
    answer_tokens: int                    # max_tokens a turn, EOS ignored on both servers
    question_tokens: list[int]            # the range a question's length is drawn from
    seed: int
    schedule: str                         # how the conversations run: at once, each its turns in sequence
    threads: int                          # the app's ONNX Runtime threads, llama-server's -t
    rounds: int                           # rounds of both paths, interleaved; each figure the median of its rounds
    conversation_tokens: int              # what one conversation needs (llama-server's context a slot)
    prefix_cache_positions: int | None    # our prefix cache's budget in KV positions (/metrics); None: not read
    prefix_cache_evictions: int | None    # blocks it evicted during the rounds
    limits: dict                          # our endpoint's limits and KV slots as the app reads them
    ours: dict
    llama_server: dict                    # its path's figures with parallel, ctx, configuration; or why not
    ratios: dict[str, float | None]
    round_ratios: list[float | None]      # the ratio within each round (not gated)
    llama_validity: dict | None           # quiet.validity over both paths' windows (null without llama-server)
    cpu_flags: dict[str, bool] | None
    targets: dict[str, str]
    targets_met: dict[str, bool | None]


# --- the script

def sentence_starts(text: str) -> list[int]:
    """Where each sentence of `text` begins (after a full stop and spaces, or a blank line).

    >>> sentence_starts("One. Two three.\\n\\nFour.")
    [0, 5, 17]
    """
    return [0] + [m.end() for m in re.finditer(r"[.!?]\s+", text) if m.end() < len(text)]


def script(conversations: int, turns: int, pieces, lengths: tuple[int, int] = QUESTION_TOKENS, seed: int = SEED,
           text: str | None = None) -> list[list[str]]:
    """Each conversation's questions, turn by turn: a passage of `text` (the long document) from a sentence the
    seeded generator draws, cut to a length drawn from `lengths` (inclusive) in the tokens `pieces(text)` gives
    (the served tokenizer's pieces, in order). The same arguments give the same script.

    >>> words = lambda t: re.findall(r"\\S+\\s*", t)
    >>> s = script(2, 3, words, (3, 5), text="Alpha beta gamma. Delta epsilon zeta eta. Theta iota kappa lambda mu.")
    >>> len(s), [len(q) for q in s], all(3 <= len(words(q)) <= 5 for c in s for q in c)
    (2, [3, 3], True)
    >>> s == script(2, 3, words, (3, 5), text="Alpha beta gamma. Delta epsilon zeta eta. Theta iota kappa lambda mu.")
    True
    """
    lo, hi = lengths
    if not 1 <= lo <= hi:
        raise ValueError(f"question tokens must be 1 <= low <= high, got {lo} {hi}")
    if conversations < 1 or turns < 1:
        raise ValueError(f"conversations and turns must be at least 1, got {conversations} and {turns}")
    text = " ".join((text or long_document()).split())
    starts, rng = sentence_starts(text), random.Random(seed)
    out = []
    for _ in range(conversations):
        questions = []
        for _ in range(turns):
            n, start = rng.randint(lo, hi), rng.choice(starts)
            passage = (text[start:] + " " + text) * 2   # from the sentence on, the document again after it
            cut = pieces(passage[:n * 16])             # no token is longer than 16 characters
            if len(cut) < n:
                raise ValueError(f"the text gives {len(cut)} tokens from a sentence, fewer than {n}")
            questions.append("".join(cut[:n]).strip())
        out.append(questions)
    return out


def tagged(questions: list[str], conversation: int, round_: int) -> list[str]:
    """The questions with the first one tagged by its conversation and round, so no conversation or round begins
    as another does.

    >>> tagged(["Why?", "And then?"], 2, 1)
    ['Chat 03, round 2: Why?', 'And then?']
    """
    return [f"Chat {conversation + 1:02d}, round {round_ + 1}: {questions[0]}", *questions[1:]]


def conversation_tokens(questions: list[list[str]], count, answer_tokens: int) -> int:
    """The positions one conversation needs at most: its questions' tokens (`count(text)`), every answer, the
    template's tokens a message (MESSAGE_TOKENS) and its head and tag (HEAD_TOKENS), rounded up to CONTEXT_STEP.

    >>> conversation_tokens([["a b", "c"], ["d e f", "g h"]], lambda t: len(t.split()), 48)
    256
    >>> conversation_tokens([["x " * 300]], lambda t: len(t.split()), 48)
    512
    """
    most = max(sum(count(q) for q in c) + len(c) * (answer_tokens + 2 * MESSAGE_TOKENS) for c in questions)
    return math.ceil((most + HEAD_TOKENS) / CONTEXT_STEP) * CONTEXT_STEP


def tokenizer_pieces(base: str, headers: dict | None = None):
    """`pieces(text)` through a server's llama.cpp-shaped POST /tokenize (ours and llama-server's), `base` its root
    URL without /v1: the text's tokens as their texts."""
    import httpx

    def pieces(text: str) -> list[str]:
        r = httpx.post(base + "/tokenize", json={"content": text, "with_pieces": True}, headers=headers or {},
                       timeout=60)
        r.raise_for_status()
        out = []
        for token in r.json()["tokens"]:
            piece = token["piece"]   # llama-server: a list of bytes where the piece is not valid UTF-8
            out.append(piece if isinstance(piece, str) else bytes(piece).decode("utf-8", "replace"))
        return out
    return pieces


# --- one conversation

@dataclass
class Turn:
    """One turn as the client saw it: times in seconds from its request (perf_counter)."""
    turn: int                        # from 1
    ttft: float | None = None        # to its first token; None: none came
    last: float | None = None        # to its last token
    done: float | None = None        # to the answer's end (or its failure)
    tokens: int = 0                  # output tokens
    status: str = "200"
    prompt_tokens: int | None = None
    cached: int | None = None        # cached prompt tokens as the path reads them (CACHED)
    cause: str | None = None         # ours: x_playground.cache's cause
    ideal: int | None = None         # ours: x_playground.cache's ideal (the most the cache could have found)

    @property
    def served(self) -> bool:
        return self.ttft is not None and self.tokens > 0

    @property
    def output_tps(self) -> float | None:
        """Its output tokens after the first over the time from the first to the last: its decode rate."""
        if not self.served or self.tokens < 2 or not self.last or self.last <= self.ttft:
            return None
        return (self.tokens - 1) / (self.last - self.ttft)


@dataclass
class Chat:
    """A conversation's turns; `pressed`: perf_counter at its first request."""
    pressed: float
    turns: list[Turn] = field(default_factory=list)
    ended: float | None = None       # perf_counter at its last answer's end


CACHED = {"ours": ("usage", "prompt_tokens_details", "cached_tokens"), "llama_server": ("timings", "cache_n")}


def read_cached(final: dict, path: str) -> int | None:
    """The cached prompt tokens a stream's final figures give, where `path`'s server puts them (CACHED); None when
    absent.

    >>> read_cached({"usage": {"prompt_tokens_details": {"cached_tokens": 32}}, "timings": {"cache_n": 30}}, "ours")
    32
    >>> read_cached({"timings": {"cache_n": 30}}, "llama_server"), read_cached({}, "ours")
    (30, None)
    """
    value = final
    for key in CACHED[path]:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, int) else None


def stream_turn(http, url: str, body: dict, headers: dict, turn: int, path: str) -> tuple[Turn, str]:
    """One streamed chat request: (its Turn, the answer's text)."""
    import httpx
    t = Turn(turn)
    start, text, final = time.perf_counter(), [], {}
    try:
        with http.stream("POST", url, json=body, headers=headers) as r:
            t.status = str(r.status_code)
            if r.status_code == 200:
                for line in r.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    event = json.loads(line[6:])
                    for key in ("usage", "timings", "x_playground"):
                        if event.get(key):
                            final[key] = event[key]
                    for choice in event.get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            text.append(piece)
                            t.last = time.perf_counter() - start
                            t.tokens += 1
                            if t.ttft is None:
                                t.ttft = t.last
    except (httpx.HTTPError, ValueError) as exc:   # a failed turn is counted, not raised
        t.status = type(exc).__name__
    t.done = time.perf_counter() - start
    usage, timings = final.get("usage") or {}, final.get("timings") or {}
    t.tokens = usage.get("completion_tokens") or t.tokens
    t.prompt_tokens = usage.get("prompt_tokens")
    if t.prompt_tokens is None and timings.get("prompt_n") is not None:   # llama-server's prompt_n: computed only
        t.prompt_tokens = timings["prompt_n"] + (timings.get("cache_n") or 0)
    t.cached = read_cached(final, path)
    record = (final.get("x_playground") or {}).get("cache") or {}
    t.cause, t.ideal = record.get("cause"), record.get("ideal")
    return t, "".join(text)


def chatter(base_url: str, key: str | None, questions: list[str], tokens: int, path: str, cache_key: str):
    """A chat client (attendees.press_together's `press`): each question in turn, the whole conversation sent back
    each time with the answers as the text received; stops at a turn that brought no answer."""
    def press(http) -> Chat:
        chat, messages = Chat(time.perf_counter()), []
        # A fresh connection per turn: llama-server at times closes a connection right after a streamed answer
        # although it answered with Keep-Alive (seen while another connection was streaming), and a turn sent
        # on it gets no response at all (httpx's RemoteProtocolError "Server disconnected without sending a
        # response"; the server lives on and never logs that request). Both paths get the same: a loopback
        # connect, well under a millisecond of each TTFT.
        headers = {"Connection": "close", **({"Authorization": f"Bearer {key}"} if key else {})}
        for i, question in enumerate(questions):
            messages.append({"role": "user", "content": question})
            body = {"model": "conversations", "messages": messages, "max_tokens": tokens, "temperature": 0,
                    "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True,
                    "prompt_cache_key": cache_key}
            turn, answer = stream_turn(http, f"{base_url}/chat/completions", body, headers, i + 1, path)
            chat.turns.append(turn)
            chat.ended = time.perf_counter()
            if not turn.served:
                break
            messages.append({"role": "assistant", "content": answer})
        return chat
    return press


# --- the figures

def turn_figures(turns: list[Turn], conversations: int) -> dict:
    """One turn's figures over the conversations (`turns`: that turn of each conversation that reached it).

    >>> ts = [Turn(2, ttft=0.1, last=0.5, tokens=5, prompt_tokens=100, cached=64, cause="no miss", ideal=64),
    ...       Turn(2, ttft=0.3, last=1.3, tokens=5, prompt_tokens=120, cached=96, cause="no miss", ideal=96)]
    >>> f = turn_figures(ts, 3)
    >>> f["served"], f["ttft_p50_s"], f["ttft_p95_s"], f["cached_tokens_p50"], f["cached_share"], f["output_tps_p50"]
    ('2/3', 0.2, 0.3, 80.0, 0.727, 7.0)
    >>> f["ideal_tokens_p50"], f["causes"]
    (80.0, {'no miss': 2})
    """
    served = [t for t in turns if t.served]
    prompts = [t.prompt_tokens for t in served]
    cached = [t.cached for t in served]
    share = None
    if served and None not in prompts and None not in cached and sum(prompts):
        share = round(sum(cached) / sum(prompts), 3)
    out = {"served": f"{len(served)}/{conversations}",
           "ttft_p50_s": median((t.ttft for t in served), 3),
           "ttft_p95_s": rounded(percentile([t.ttft for t in served], 95, NEAREST_RANK), 3),
           "prompt_tokens_p50": median(prompts, 1), "cached_tokens_p50": median(cached, 1), "cached_share": share,
           "output_tps_p50": median((t.output_tps for t in served), 1)}
    ideals = [t.ideal for t in served if t.ideal is not None]
    if ideals:
        out["ideal_tokens_p50"] = median(ideals, 1)
    causes: dict[str, int] = {}
    for t in served:
        if t.cause is not None:
            causes[t.cause] = causes.get(t.cause, 0) + 1
    if causes:
        out["causes"] = dict(sorted(causes.items()))
    return out


def path_figures(chats: list[Chat], turns: int, load: dict) -> dict:
    """A path's figures in one round from its conversations (see the module doc); `load`: its window.

    >>> a = Chat(10.0, [Turn(1, ttft=0.2, last=1.0, done=1.1, tokens=4), Turn(2, ttft=0.4, last=1.2, done=1.3,
    ...                                                                          tokens=4)], ended=12.5)
    >>> b = Chat(10.1, [Turn(1, ttft=0.3, last=0.9, done=1.0, tokens=4), Turn(2, status="429")], ended=11.2)
    >>> f = path_figures([a, b], 2, {"others_cores": 0.0, "cores": 2})
    >>> f["served"], f["requests"], f["statuses"], f["later_ttft_p95_s"], f["wall_s"], f["output_tokens"]
    (3, 4, {'200': 3, '429': 1}, 0.4, 2.5, 12)
    >>> {n: t["served"] for n, t in f["turns"].items()}, f["validity"]["valid"]
    ({'1': '2/2', '2': '1/2'}, True)
    """
    first = min(c.pressed for c in chats)
    ends = [c.ended for c in chats if c.ended is not None]
    wall = max(ends) - first if ends else None
    every = [t for c in chats for t in c.turns]
    served = [t for t in every if t.served]
    statuses: dict[str, int] = {}
    for t in every:
        statuses[t.status] = statuses.get(t.status, 0) + 1
    tokens = sum(t.tokens for t in served)
    later = [t.ttft for t in served if t.turn >= 2]
    return {"served": len(served), "requests": len(chats) * turns, "statuses": dict(sorted(statuses.items())),
            "later_ttft_p95_s": rounded(percentile(later, 95, NEAREST_RANK), 3),
            "wall_s": rounded(wall, 3), "output_tokens": tokens,
            "output_tps": round(tokens / wall, 1) if wall else None,
            "turns": {str(n): turn_figures([t for t in every if t.turn == n], len(chats)) for n in range(1, turns + 1)},
            "load": load, "validity": validity([load])}


def merge_rounds(rounds: list[dict]) -> dict:
    """A path's figures over its rounds: the median of each timing and count of a turn (TURN_MEDIANS) and of the
    path (PATH_MEDIANS), the fewest served, the statuses and causes of all, the busiest round's load; `rounds` keeps
    each round's path figures.

    >>> t = {"served": "2/2", "ttft_p95_s": 1.0, "cached_tokens_p50": 16.0, "causes": {"no miss": 2}}
    >>> one = {"served": 2, "requests": 2, "statuses": {"200": 2}, "later_ttft_p95_s": None, "wall_s": 3.0,
    ...        "output_tokens": 8, "output_tps": 2.7, "turns": {"1": t}, "load": {"others_cores": 0.1, "cores": 2}}
    >>> m = merge_rounds([one, {**one, "wall_s": 5.0, "turns": {"1": {**t, "ttft_p95_s": 3.0}}}, {**one, "wall_s": 4.0}])
    >>> m["wall_s"], m["turns"]["1"]["ttft_p95_s"], m["turns"]["1"]["causes"], m["statuses"], len(m["rounds"])
    (4.0, 1.0, {'no miss': 6}, {'200': 6}, 3)
    """
    if len(rounds) == 1:
        return rounds[0]
    out = dict(rounds[0])
    for name in PATH_MEDIANS:
        out[name] = median((r[name] for r in rounds), 3 if name.endswith("_s") else 1)
    out["served"] = min(r["served"] for r in rounds)
    out["output_tokens"] = min(r["output_tokens"] for r in rounds)
    out["statuses"] = summed(r["statuses"] for r in rounds)
    turns = {}
    for n, first in rounds[0]["turns"].items():
        each = [r["turns"][n] for r in rounds]
        merged = {**first, "served": min((t["served"] for t in each), key=lambda s: int(s.split("/")[0]))}
        for name in TURN_MEDIANS:
            if name in first:
                merged[name] = median((t.get(name) for t in each), 3 if name.endswith(("_s", "share")) else 1)
        if any("causes" in t for t in each):
            merged["causes"] = summed(t.get("causes", {}) for t in each)
        turns[n] = merged
    out["turns"] = turns
    out["load"] = busiest([r["load"] for r in rounds])
    out["validity"] = validity([r["load"] for r in rounds])
    out["rounds"] = [{k: r[k] for k in ("served", *PATH_MEDIANS)} for r in rounds]
    return out


def summed(counts) -> dict[str, int]:
    """Counts by name, added.

    >>> summed([{"a": 1}, {"a": 2, "b": 1}])
    {'a': 3, 'b': 1}
    """
    out: dict[str, int] = {}
    for count in counts:
        for name, n in count.items():
            out[name] = out.get(name, 0) + n
    return dict(sorted(out.items()))


def later_ratios(ours: list[dict], theirs: list[dict]) -> tuple[dict, list[float | None], dict | None]:
    """(the ratios of TARGETS, the ratio within each round, the validity over every window of both paths: None
    without llama-server's rounds). The ratio is the median of the rounds' ratios, printed only from a quiet machine.

    >>> quiet = {"others_cores": 0.0, "cores": 2}
    >>> r = lambda p95, load=quiet: {"later_ttft_p95_s": p95, "load": load}
    >>> ratios, each, check = later_ratios([r(0.4), r(0.6), r(0.5)], [r(1.0), r(1.0), r(0.5)])
    >>> ratios, each, check["valid"]
    ({'ttft_p95_later_turns_vs_llama': 0.6}, [0.4, 0.6, 1.0], True)
    >>> later_ratios([r(0.4)], [r(1.0, {"others_cores": 1.5, "cores": 2})])[0]
    {'ttft_p95_later_turns_vs_llama': None}
    >>> later_ratios([r(0.4)], [])
    ({'ttft_p95_later_turns_vs_llama': None}, [], None)
    """
    if not theirs:
        return {"ttft_p95_later_turns_vs_llama": None}, [], None
    each = [ratio(a["later_ttft_p95_s"], b["later_ttft_p95_s"]) for a, b in zip(ours, theirs)]
    check = validity([r["load"] for r in (*ours, *theirs)])
    return {"ttft_p95_later_turns_vs_llama": gated(median(each, 2), check)}, each, check


def metric(text: str, name: str) -> float | None:
    """A Prometheus text's first sample of `name` (any labels); None when absent.

    >>> metric('# HELP x\\nplayground:prefix_cache_capacity_positions{model_name="m"} 4096.0\\n',
    ...        "playground:prefix_cache_capacity_positions")
    4096.0
    >>> metric("", "x") is None
    True
    """
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


# --- the run

def run_round(base_url: str, keys: list, questions: list[list[str]], tokens: int, path: str, round_: int,
              servers: tuple) -> dict:
    """The conversations at once on one server, in a load window (`servers`: the bench's, their CPU its own)."""
    window = LoadWindow.start(servers)
    done, _ = press_together([chatter(base_url, keys[i], tagged(q, i, round_), tokens, path,
                                      f"{path}-{round_ + 1}-{i + 1}") for i, q in enumerate(questions)],
                             requests=len(questions[0]))
    load = window.stop()
    chats = [c if isinstance(c, Chat) else Chat(c.pressed, [Turn(1, status=c.status)]) for c in done]
    return path_figures(chats, len(questions[0]), load)


def prefix_cache(app_url: str, key: str) -> tuple[int | None, int | None]:
    """(the prefix cache's budget in positions, the blocks it evicted so far) from the app's /metrics."""
    import httpx
    text = httpx.get(app_url + "metrics", headers={"Authorization": f"Bearer {key}"}, timeout=30).text
    budget = metric(text, "playground:prefix_cache_capacity_positions")
    evicted = metric(text, "playground:prefix_cache_evictions_total")
    return (None if budget is None else int(budget)), (None if evicted is None else int(evicted))


def conversations_row(model: str | None = None, conversations: int = CONVERSATIONS, turns: int = TURNS,
                      tokens: int = ANSWER_TOKENS, lengths: tuple[int, int] = QUESTION_TOKENS,
                      rounds: int = ROUNDS, backend: str | None = None, seed: int = SEED) -> ConversationsRow:
    from ..api import batching_backend
    from ..backends import available_backends, default_backend_name
    from ..backends.onnx_backend import physical_cores
    from ..llamacpp import LlamaCppMissing, LlamaServer, llama_choice

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    name = backend or batching_backend(list(available_backends()), default_backend_name("cpu", model))
    threads = physical_cores()
    keys = [f"conversation-{i + 1}" for i in range(conversations)]
    ours_rounds, theirs_rounds = [], []
    llama: dict = {"skipped": "llama-server runs the bundled GGUF only"} if model is not None else {}
    with ExitStack() as stack:
        app, base, model_id = stack.enter_context(endpoint_app(model, name, keys))
        pieces = tokenizer_pieces(app.url.rstrip("/"), {"Authorization": f"Bearer {keys[0]}"})
        questions = script(conversations, turns, pieces, lengths, seed)
        tagged_most = [tagged(q, i, rounds - 1) for i, q in enumerate(questions)]
        need = conversation_tokens(tagged_most, lambda text: len(pieces(text)), tokens)
        server = None
        if model is None:
            try:
                server = stack.enter_context(LlamaServer(threads=threads, parallel=LLAMA_SLOTS,
                                                         ctx=LLAMA_SLOTS * need))
            except (LlamaCppMissing, FileNotFoundError, RuntimeError, OSError) as exc:
                llama = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        # warm-up: every key's first request, then llama-server's, each all at once
        press_together([openai_person(base, key, "Warm up.", 2) for key in keys])
        if server is not None:
            import psutil
            press_together([openai_person(server.url, None, "Warm up.", 4) for _ in range(conversations)])
            llama_process = (psutil.Process(server.process.pid),)
        budget, evicted_before = prefix_cache(app.url, keys[0])
        for r in range(rounds):   # ours, then theirs, round after round
            ours_rounds.append(run_round(base, keys, questions, tokens, "ours", r, (app.server,)))
            if server is not None:
                theirs_rounds.append(run_round(server.url, [None] * conversations, questions, tokens,
                                               "llama_server", r, llama_process))
        _, evicted_after = prefix_cache(app.url, keys[0])
    if server is not None:
        llama = {"parallel": LLAMA_SLOTS, "ctx": LLAMA_SLOTS * need, "threads": threads,
                 "cache_prompt": "not sent: its default, on", "cache_ram": "--cache-ram not given: its default",
                 "configuration": llama_choice().summary(), **merge_rounds(theirs_rounds)}
    ratios, each, check = later_ratios(ours_rounds, theirs_rounds)
    return ConversationsRow(
        backend=name, model=model_id, conversations=conversations, turns=turns, answer_tokens=tokens,
        question_tokens=list(lengths), seed=seed,
        schedule=f"{conversations} conversations at once, each its {turns} turns one after another (no think time), "
                 "the whole conversation sent each turn",
        threads=threads, rounds=rounds, conversation_tokens=need, prefix_cache_positions=budget,
        prefix_cache_evictions=None if evicted_before is None or evicted_after is None
        else evicted_after - evicted_before,
        limits=app_limits(None), ours=merge_rounds(ours_rounds), llama_server=llama, ratios=ratios,
        round_ratios=each, llama_validity=check, cpu_flags=cpu_flags(), targets=targets_text(TARGETS),
        targets_met=targets_met(ratios, TARGETS))


def main(argv: list[str]) -> None:
    p = parser("conversations", __doc__)
    p.add_argument("--conversations", type=int, default=CONVERSATIONS,
                   help=f"conversations at once (default {CONVERSATIONS})")
    p.add_argument("--turns", type=int, default=TURNS, help=f"turns each (default {TURNS})")
    p.add_argument("--tokens", type=int, default=ANSWER_TOKENS, help=f"an answer's tokens (default {ANSWER_TOKENS})")
    p.add_argument("--question-tokens", type=int, nargs=2, default=QUESTION_TOKENS, metavar=("LOW", "HIGH"),
                   help=f"a question's tokens, drawn from this range (default {QUESTION_TOKENS[0]} "
                        f"{QUESTION_TOKENS[1]})")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of both paths, interleaved; each figure "
                                                               f"their median (default {ROUNDS})")
    p.add_argument("--backend", default=None, help="a backend our batching runs (default: the app's)")
    p.add_argument("--seed", type=int, default=SEED, help=f"the script's seed (default {SEED})")
    args = p.parse_args(argv)
    say_timed(lambda: conversations_row(args.model, args.conversations, args.turns, args.tokens,
                                        tuple(args.question_tokens), args.rounds, args.backend, args.seed))
