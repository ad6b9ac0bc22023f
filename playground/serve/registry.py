"""The schedulers, one registry entry each (the CLI and the Serve tab read it).

    scheduler = SCHEDULERS["batching"].create(onnx_engine, batch=BatchConfig(slots=8, prefill_chunk=128))
    SCHEDULERS["batching-torch"].create(torch_engine, pool=PoolConfig(max_batch_tokens=128))
    SCHEDULERS["concurrent"].needs    # Needs.REMOTE: a source whose runs may be iterated from several threads

| name           | file              | what it is                                       | source it needs                         |
| one-at-a-time  | one_at_a_time.py  | first come first served, one request at a time   | any StepSource                          |
| batching       | batching.py       | ours (batcher.py): KV slots, chunked prefill     | a local ONNX backend (onnx-gguf4, onnx) |
| batching-torch | batching_torch.py | transformers' continuous-batching manager        | the local torch backend (a GPU)         |
| concurrent     | concurrent.py     | all requests sent at once; the server batches    | a source whose runs are thread-safe     |

Each create takes the source and the options of every batching scheduler (`batch`, `pool`), using its own.

>>> list(SCHEDULERS)
['one-at-a-time', 'batching', 'batching-torch', 'concurrent']

To add one: a Scheduler subclass (schedulers.py) and one SchedulerSpec below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .one_at_a_time import OneAtATime
from .schedulers import Scheduler
from ..source import Origin
from ..trace import TextEnum


class Needs(TextEnum):
    """The source a scheduler needs. Serialized as its string.

    >>> SCHEDULERS["concurrent"].needs is Needs.REMOTE, Needs.ONNX == "onnx"
    (True, True)
    """
    ANY = "any"         # any StepSource
    ONNX = "onnx"       # a local ONNX backend
    TORCH = "torch"     # the local torch backend
    REMOTE = "remote"   # a source whose runs may be iterated from several threads


@dataclass(frozen=True)
class SchedulerSpec:
    name: str
    label: str
    needs: Needs
    create: Callable[..., Scheduler]


def _batching(source, batch=None, **_):
    from .batching import ContinuousBatching
    return ContinuousBatching(source, batch)


def _batching_torch(source, pool=None, **_):
    from .batching_torch import BatchingScheduler
    return BatchingScheduler(source, pool)


def _concurrent(source, **_):
    from .concurrent import ConcurrentScheduler
    return ConcurrentScheduler(source)


SCHEDULERS: dict[str, SchedulerSpec] = {spec.name: spec for spec in (
    SchedulerSpec(OneAtATime.name, OneAtATime.label, Needs.ANY, lambda source, **_: OneAtATime(source)),
    SchedulerSpec("batching", "continuous batching (ours: KV slots, chunked prefill; ONNX Runtime)", Needs.ONNX, _batching),
    SchedulerSpec("batching-torch", "continuous batching (transformers' manager, paged KV; torch)", Needs.TORCH,
                  _batching_torch),
    SchedulerSpec("concurrent", "concurrent requests (the server batches them itself)", Needs.REMOTE, _concurrent),
)}


ONNX_BATCHING = ("onnx-gguf4", "onnx")   # by name: the backends our batching runs on (GroupQueryAttention), best first


def batching_for(source) -> str | None:
    """The scheduler that batches requests on `source`: ours on an ONNX engine, transformers' manager on torch,
    the server's own for a remote source; None when none does (e.g. an ONNX graph without fused attention).
    `source` may be a backend's name, before it is loaded: then ours only on ONNX_BATCHING.

    >>> batching_for("onnx-gguf4"), batching_for("torch"), batching_for("onnx-int4")
    ('batching', 'batching-torch', None)
    """
    if isinstance(source, str):
        return "batching-torch" if source == "torch" else "batching" if source in ONNX_BATCHING else None
    if source.info.origin == Origin.REMOTE:
        return "concurrent"
    backend = getattr(source, "backend", None)
    if getattr(backend, "name", None) == "torch":
        return "batching-torch"
    from ..backends.onnx_batch import check_batchable
    try:
        check_batchable(backend)
    except ValueError:
        return None
    return "batching"


def batching_backend(names: list[str], default: str) -> str:
    """The backend the endpoint runs (our batching): the app's default when ours batches on it, else the first of
    ONNX_BATCHING the app has.

    >>> batching_backend(["torch", "onnx", "onnx-gguf4"], "torch"), batching_backend(["onnx", "torch"], "onnx")
    ('onnx-gguf4', 'onnx')
    """
    for name in (default, *ONNX_BATCHING):
        if name in names and batching_for(name) == "batching":
            return name
    raise ValueError(f"the OpenAI-compatible endpoint needs one of {', '.join(ONNX_BATCHING)}; this app has "
                     f"{', '.join(names)}")
