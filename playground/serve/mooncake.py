"""Mooncake traces in and out: one JSON object a line, `{"timestamp": ms, "input_length": n, "output_length": n,
"hash_ids": [...]}`, as Mooncake's FAST'25 traces (kvcache-ai/Mooncake) publish a serving day's requests.

    rows = read_rows(path.read_text().splitlines())        # ValueError naming the line that is not a row
    workload, notes = to_workload(rows, engine.tokenizer, time_scale=0.5, limit=16)   # a replayable Workload
    text = results_jsonl([result_a, result_b])            # what ran, back out: one request a line

`hash_ids` name the prompt's blocks of 512 tokens: equal ids are equal blocks, and since a block's id covers
every block before it (a hash chain, as a prefix cache names blocks), equal leading ids are a shared prefix.
Reading builds each request's exact prompt ids: block id h is 512 token ids drawn from a generator seeded by h
(ordinary tokens of the model's vocabulary, no special ones), so equal ids give equal tokens; the prompt is
its blocks in order, cut to `input_length` (tokens past its blocks are the request's own). The ids are what
the model reads: no chat template is added. Arrivals are the timestamps from the first one, times
`time_scale`; each request runs to `output_length` tokens (EOS ignored). Writing names each request's blocks
by a hash chain of the token ids the model read (chat template included) and numbers the distinct names
0, 1, 2 … in order of first appearance; a last, partial block has its own name.

>>> rows = read_rows(['{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [7]}',
...                   '{"timestamp": 250, "input_length": 6, "output_length": 1, "hash_ids": [7]}'])
>>> ids = [prompt_ids(r, block_size=4, vocab=range(10, 20)) for r in rows]
>>> ids[0][:4] == ids[1][:4], len(ids[0]), len(ids[1])     # block 7 is the same tokens in both
(True, 5, 6)
>>> names = Names(); [names.ids(x, 4) for x in ([1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [9, 2, 3, 4, 5])]
[[0, 1], [0, 2], [3, 4]]

Left out: Mooncake's other trace fields (none in the published traces), and prompts that mean anything: a
replayed prompt is random tokens with the trace's sharing, which is what a cache and a scheduler see.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .prefix_cache import chain_hash
from .workload import MAX_REQUESTS, TRACE, Request, Workload

BLOCK_TOKENS = 512   # the published traces' block size
KEYS = ("timestamp", "input_length", "output_length", "hash_ids")


@dataclass(frozen=True)
class Row:
    timestamp: float        # milliseconds
    input_length: int       # prompt tokens the model reads
    output_length: int      # tokens it generated
    hash_ids: tuple[int, ...]

    def to_json(self) -> str:
        ts = int(self.timestamp) if float(self.timestamp).is_integer() else self.timestamp
        return json.dumps({"timestamp": ts, "input_length": self.input_length, "output_length": self.output_length,
                           "hash_ids": list(self.hash_ids)})


def is_trace(path) -> bool:
    """A Mooncake trace: a .jsonl file, or one whose first line is a row (a workload.json begins with '{' alone)."""
    if str(path).endswith(".jsonl"):
        return True
    with open(path, encoding="utf-8") as fh:
        first = fh.readline()
    try:
        return isinstance(row := json.loads(first), dict) and set(KEYS) <= set(row)
    except ValueError:
        return False


def read_rows(lines) -> list[Row]:
    """The trace's rows (blank lines skipped); ValueError naming the first line that is not a row."""
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            row = Row(float(d["timestamp"]), int(d["input_length"]), int(d["output_length"]),
                      tuple(int(h) for h in d["hash_ids"]))
            if not isinstance(d["hash_ids"], list) or row.input_length < 1 or row.output_length < 0 or \
                    row.timestamp < 0 or min(row.hash_ids, default=0) < 0:
                raise ValueError("a length, time or id out of range")
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"line {number} is not a Mooncake row {{{', '.join(KEYS)}}}: {exc}") from None
        rows.append(row)
    if not rows:
        raise ValueError("the trace has no rows")
    return rows


def ordinary_ids(tokenizer) -> list[int]:
    """The vocabulary's token ids less the special ones (a replayed prompt never holds an end-of-turn)."""
    special = set(tokenizer.all_special_ids)
    return [i for i in range(len(tokenizer)) if i not in special]


def block_tokens(h: int, block_size: int, vocab) -> list[int]:
    """Block id `h`'s tokens: the same for the same id, block size and vocabulary, in every request and run."""
    vocab = np.asarray(vocab)
    return vocab[np.random.default_rng([h, block_size]).integers(0, len(vocab), block_size)].tolist()


def prompt_ids(row: Row, block_size: int, vocab, index: int = 0) -> list[int]:
    """The row's prompt: its blocks' tokens in order, cut to input_length; tokens past its blocks drawn for it
    alone (seeded by its index in the trace)."""
    ids = [t for h in row.hash_ids for t in block_tokens(h, block_size, vocab)][:row.input_length]
    if len(ids) < row.input_length:
        rng = np.random.default_rng([index, block_size, 1])
        ids += np.asarray(vocab)[rng.integers(0, len(vocab), row.input_length - len(ids))].tolist()
    return ids


def to_workload(rows, tokenizer, block_size: int = BLOCK_TOKENS, time_scale: float = 1.0,
                limit: int = MAX_REQUESTS) -> tuple[Workload, list[str]]:
    """(the first `limit` rows as a Workload, lines saying what was done to the trace)."""
    if not time_scale > 0 or block_size < 1:
        raise ValueError(f"the time scale must be > 0 and the block size >= 1; got {time_scale}, {block_size}")
    notes = []
    if len(rows) > limit:
        notes.append(f"the trace has {len(rows):,} requests: replaying the first {limit}")
        rows = rows[:limit]
    start, vocab = min(r.timestamp for r in rows), ordinary_ids(tokenizer)
    requests = []
    for i, row in enumerate(rows):
        ids = prompt_ids(row, block_size, vocab, i)
        requests.append(Request(i, "trace", tokenizer.decode(ids), max(1, row.output_length),
                                round((row.timestamp - start) / 1000 * time_scale, 6), ignore_eos=True,
                                prompt_ids=tuple(ids)))
    notes.append(f"arrivals: the trace's timestamps from its first, × {time_scale:g}"
                 + (" (slower)" if time_scale > 1 else " (faster)" if time_scale < 1 else "")
                 + f"; prompts: {block_size}-token blocks, equal hash_ids equal tokens; outputs run to output_length")
    return Workload(tuple(requests), TRACE), notes


class Names:
    """Small numbers for blocks' hash-chain names, in order of first appearance (one numbering per file)."""

    def __init__(self):
        self.known: dict[int, int] = {}

    def ids(self, ids, block_size: int = BLOCK_TOKENS) -> list[int]:
        out, previous = [], 0
        for start in range(0, len(ids), block_size):
            previous = chain_hash(previous, ids[start:start + block_size])
            out.append(self.known.setdefault(previous, len(self.known)))
        return out


def results_jsonl(results, block_size: int = BLOCK_TOKENS) -> str:
    """A workload as Mooncake rows, one request a line: its arrival, the prompt ids the model read (any run's
    Trace, or the request's own exact ids), and its output length (what a run that completed it made, else its
    budget). A request no run read is left out: its prompt's tokens are not known here."""
    from ..trace import COMPLETED
    first, names, lines = results[0], Names(), []
    for i, request in enumerate(first.workload.requests):
        records = [r.records[i] for r in results]
        ids = next((list(r.trace.prompt_ids) for r in records if r.trace is not None and r.trace.prompt_ids),
                   None if request.prompt_ids is None else list(request.prompt_ids))
        if not ids:
            continue
        made = next((r.output_tokens for r in records if r.stop_reason in COMPLETED), request.max_new_tokens)
        lines.append(Row(round(request.arrival * 1000, 3), len(ids), made, tuple(names.ids(ids, block_size))).to_json())
    return "".join(line + "\n" for line in lines)
