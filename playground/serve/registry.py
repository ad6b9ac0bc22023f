"""The schedulers, one registry entry each (the CLI and the Serve tab read it).

    scheduler = SCHEDULERS["batching"].create(torch_engine, pool=PoolConfig(max_batch_tokens=128))
    SCHEDULERS["concurrent"].needs    # "remote": a source whose runs may be iterated from several threads

| name          | what it is                                              | source it needs                |
| one-at-a-time | first come first served, one request at a time          | any StepSource                 |
| batching      | transformers' continuous-batching manager (batching.py) | the local torch backend        |
| concurrent    | every request sent at once; the server batches them     | a source whose runs are thread-safe (remote/) |

>>> list(SCHEDULERS)
['one-at-a-time', 'batching', 'concurrent']

To add one: a Scheduler subclass (schedulers.py) and one SchedulerSpec below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .schedulers import OneAtATime, Scheduler


@dataclass(frozen=True)
class SchedulerSpec:
    name: str
    label: str
    needs: str                      # "any" | "torch" (the local torch backend) | "remote" (requests in parallel)
    create: Callable[..., Scheduler]


def _batching(source, **options):
    from .batching import BatchingScheduler
    return BatchingScheduler(source, **options)


def _concurrent(source, **options):
    from .concurrent import ConcurrentScheduler
    return ConcurrentScheduler(source, **options)


SCHEDULERS: dict[str, SchedulerSpec] = {spec.name: spec for spec in (
    SchedulerSpec(OneAtATime.name, OneAtATime.label, "any", lambda source, **options: OneAtATime(source)),
    SchedulerSpec("batching", "continuous batching (transformers' manager, paged KV cache)", "torch", _batching),
    SchedulerSpec("concurrent", "concurrent requests (the server batches them itself)", "remote", _concurrent),
)}
