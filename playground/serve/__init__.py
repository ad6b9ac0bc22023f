"""Many different requests sharing one engine: workloads, schedulers, per-request timelines.

    from playground.serve import SCHEDULERS, Workload, default_classes
    workload = Workload.build(default_classes(engine), 16, "poisson", rate=2.0, seed=0)
    result = SCHEDULERS["batching"].create(torch_engine).run(workload)
    result.records[0].ttft, summarize(result)["lesson"]

Modules: workload.py (requests, classes, arrivals), prompts.py (the lesson's classes, the token cap),
registry.py (the schedulers), schedulers.py (the harness, one at a time), batching.py, slots.py and
prefix_cache.py (our continuous batching: KV slots, a KV budget, the prefix cache), presets.py (KV-memory
workloads run on A and B that differ by one setting), batching_torch.py and
batching_torch_adapter.py (transformers' continuous-batching manager), concurrent.py (requests in parallel
to a server), records.py (per-request timelines), summary.py (percentiles, throughput, goodput, the
lesson sentence), sweeps.py (batch-size and rate sweeps), report.py (a standalone HTML report),
cli.py (`python -m playground.serve`).

Left out: gradio (playground/ui/serve_tab.py) and charts (playground/charts/serve.py).
"""
from .records import BatchStep, RequestRecord, WorkloadResult
from .prompts import MAX_WORKLOAD_TOKENS, check_tokens, default_classes, fit_to_window
from .registry import SCHEDULERS, SchedulerSpec
from .schedulers import OneAtATime, Scheduler
from .summary import compare, goodput, lesson, summarize
from .workload import MAX_REQUESTS, Request, RequestClass, Workload, parse_mix
