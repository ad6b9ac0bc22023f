"""Many different requests sharing one engine: workloads, schedulers, per-request timelines.

    from playground.serve import SCHEDULERS, Workload, batching_for, default_classes, summarize
    workload = Workload.build(default_classes(engine), 4)            # the lesson's short and long requests
    result = SCHEDULERS[batching_for(engine)].create(engine).run(workload)   # ours on ONNX, transformers' on torch
    result.records[0].ttft, summarize(result)["lesson"]
    SCHEDULERS["one-at-a-time"].create(engine).run(workload)         # any source: the baseline

Modules, by concept:
- requests: workload.py (requests, classes, arrivals, the lesson's classes, the token cap; the prompts themselves
  are playground/prompts.py's), sessions.py (which agent session a request names; when a session's later turn is
  released);
- schedulers: registry.py (their names, what each needs, which one batches a source), schedulers.py (the
  harness every scheduler shares), one_at_a_time.py (first come, first served), batching.py (ours: continuous
  batching over KV slots, a workload run through the batcher), batcher.py (its loop: decide, run, apply), plan.py
  (an iteration's decisions as a value: who is admitted, decoded, read, preempted, and who waits and why),
  slots.py (the slot table, the KV budget) and prefix_cache.py (its prefix cache; a prompt's blocks and the ones a
  request generated), conversations.py (which conversation a request continues), page_chat.py (a page's conversation: its turns, the ids
  it generated, its bounds and export) and cache_miss.py (a turn's
  record of its lookup: where and why its prompt missed),
  batching_torch.py and batching_torch_adapter.py (transformers' continuous-batching manager), concurrent.py
  (requests in parallel to a server that batches them), engine_loop.py (our batching as a live service: one
  thread steps it for requests from any thread, the endpoint's and the page's), room.py (the Room: the engine loop,
  the machine gate and the client traffic every local request shares), traffic.py (the room's requests as a live
  workload record), remote_record.py (the page's runs
  on a remote server as a live record, the server's own figures beside each);
- results: records.py (per-request timelines), summary.py (percentiles, throughput, goodput, the lesson
  sentence), shares.py (each client's share of the engine and who waited longest), cost.py (a token's price on
  this machine), presets.py (KV-memory workloads run on A and B that differ by one setting) with session_preset.py
  (its two agents with tool gaps, retention on and off), agreement.py (a
  preempted request's recompute replayed teacher-forced: why its greedy tokens parted), sweeps.py (batch-size and
  rate sweeps), report.py (a standalone HTML report),
  perfetto.py (a run as Chrome Trace Events, for ui.perfetto.dev), mooncake.py (Mooncake traces: replayed as a
  workload, and every workload written as one), agent_trace.py (agent traces: Mooncake lines with AIPerf's session
  fields, replayed with each session in order, and a run written as them), trace_import.py (Weka traces and ATIF
  trajectories read as those lines), session_gaps.py (a trace's session gaps against the prefix cache alone: each
  session's blocks held, evictable or evicted, and why);
- setup.py (a Serve form, the tab's or the CLI's flags, read into picks and a workload form), run.py (a workload,
  a preset and a sweep built and run: the tab and the CLI both run through it), cli.py and __main__.py
  (`python -m playground.serve`).

Left out: gradio (playground/ui/serve_tab.py) and charts (playground/charts/serve.py).
"""
from .records import BatchStep, RequestRecord, WorkloadResult
from ..prompts import fit_to_window
from .one_at_a_time import OneAtATime
from .registry import SCHEDULERS, SchedulerSpec, batching_for
from .schedulers import Scheduler
from .summary import compare, goodput, lesson, summarize
from .workload import (MAX_REQUESTS, MAX_WORKLOAD_TOKENS, Request, RequestClass, Workload, check_tokens,
                       default_classes, parse_mix)
