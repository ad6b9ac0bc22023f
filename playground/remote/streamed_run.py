"""A remote Run: one request streamed, one Step per event that carries tokens, the server's figures.

    Run(trace, lambda run: stream_steps(source, run, path, body, exact_prompt), clock())   # as source.py does

It checks Stop between events (and the stream itself polls it while the server is silent), samples the
server's live figures from the first token on, and, however the stream ends, keeps the steps made so far
and records what the server reported (usage, timings, warnings) in `trace.server`. A stream that ends
without a finish reason or [DONE] raises RemoteStreamCut; an error event, RemoteServerError.

Left out: retries and resuming a cut stream.
"""
from __future__ import annotations

import json
from typing import Iterator

from ..source import Run
from ..trace import Step, StopReason
from .errors import RemoteServerError, RemoteStreamCut, server_message
from .server_metrics import ServerMetricsSampler
from .steps import EventSteps


def stream_steps(source, run: Run, path: str, body: dict, exact_prompt: bool) -> Iterator[Step]:
    """Send the request; make a Step of each event that carries tokens; keep the server's figures."""
    trace = run.trace
    stream = source.client.stream(path, body, source.clock)
    run.t0 = stream.t0
    maker = EventSteps(len(trace.prompt_ids), stream.t0, exact_prompt, source.decode)
    sampler = (ServerMetricsSampler(source.figures, stream.t0, source.clock,
                                    source.figure_interval) if source.figure_interval else None)   # 0: the bench's choice
    try:
        for arrived, wall_ns, event in stream.events(stop=lambda: run.cancelled):
            if event.get("error"):   # llama.cpp and vLLM report a failure mid-stream as an event
                raise RemoteServerError(source.info.name, server_message(json.dumps(event)))
            step = maker.add(arrived, wall_ns, event)
            if step is not None:
                if step.index == 0 and sampler:
                    sampler.first_token()
                trace.steps.append(step)
                yield step
            if run.cancelled:
                break
    finally:
        stream.abort()
        if sampler:
            ended = maker.finish is not None or stream.done   # else cancelled, closed or failed: do not wait
            sampler.finish(wait=3.0 if ended and not run.cancelled else 0.2)
        warnings = maker.warnings(len(trace.prompt_ids), trace.server["prompt_ids_source"], source.tokenizer,
                                  source.copy.label if source.copy else "")
        warnings = trace.server.get("warnings", []) + warnings
        trace.server.update(maker.report(), samples=sampler.samples if sampler else [],
                            **({"warnings": warnings} if warnings else {}))
    if run.cancelled:
        trace.stop_reason = StopReason.CANCELLED
    elif maker.finish is None and not stream.done:
        raise RemoteStreamCut(source.info.name, f"the stream ended after {len(trace.steps)} events "
                                                "without a finish reason")
    else:
        trace.stop_reason = maker.stop_reason() or "unknown (the server gave no finish_reason)"
        if trace.stop_reason == StopReason.ERROR and not trace.error:
            trace.error = f'{source.info.name} ended the request with finish_reason "error" (it failed there)'
