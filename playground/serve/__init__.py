"""Many different requests sharing one engine: workloads, schedulers, per-request timelines.

    from playground.serve import SCHEDULERS, Workload, default_classes
    workload = Workload.build(default_classes(engine), 16, "poisson", rate=2.0, seed=0)
    result = SCHEDULERS["batching"].create(torch_engine).run(workload)
    result.records[0].ttft, summarize(result)["lesson"]

Modules: workload.py (requests, classes, arrivals), schedulers.py (the registry, the harness, one at a
time), batching.py + batching_adapter.py (transformers' continuous-batching manager), concurrent.py
(requests in parallel to a server), records.py (per-request timelines), summary.py (percentiles,
throughput, goodput, the lesson sentence), sweeps.py (batch-size and rate sweeps), report.py (a
standalone HTML report), cli.py (`python -m playground.experiments serve`).

Left out: gradio (playground/ui/serve_tab.py) and charts (playground/charts/serve.py).
"""
from .records import BatchStep, RequestRecord, WorkloadResult
from .schedulers import SCHEDULERS, OneAtATime, Scheduler, SchedulerSpec
from .summary import compare, goodput, lesson, over_time, summarize
from .workload import (MAX_REQUESTS, MAX_WORKLOAD_TOKENS, Request, RequestClass, Workload, check_tokens,
                       default_classes, parse_mix)
