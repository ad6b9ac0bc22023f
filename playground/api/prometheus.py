"""The endpoint's figures in Prometheus text (GET /metrics), under the names vLLM exports, so a dashboard or a
client that watches vLLM (the playground's own RemoteSource, Grafana's vLLM boards) watches this server too,
and beside them under OpenTelemetry's GenAI semantic conventions.

    metrics = ServerMetrics(service)         # the service's loop is read at each scrape
    metrics.admitted(prompt_tokens)          # a request joined the loop
    metrics.ended(trace, finish_reason, "chat")   # it ended: its tokens, TTFT, ITL, TPOT and end-to-end time
    metrics.exposition()                     # (bytes, content type) for the route

    vllm:num_requests_running      gauge      requests holding a KV slot (prefilling or decoding)
    vllm:num_requests_waiting      gauge      requests queued for a free slot
    vllm:kv_cache_usage_perc       gauge      KV positions in use / all the pool's positions (0-1, as vLLM's)
    vllm:prompt_tokens_total       counter    prompt tokens of admitted requests
    vllm:generation_tokens_total   counter    tokens generated (a cancelled request's too)
    vllm:request_success_total     counter    requests ended, by finished_reason (vLLM's: stop, length, abort
                                              when cancelled, error when the engine failed)
    vllm:time_to_first_token_seconds   histogram  from the route's arrival to the first Step
    vllm:inter_token_latency_seconds   histogram  between consecutive Steps (wall clock)
    vllm:e2e_request_latency_seconds   histogram  from the route's arrival to the last Step
    vllm:prefix_cache_queries_total    counter    prompt tokens looked up in the prefix cache (as vLLM v1 counts)
    vllm:prefix_cache_hits_total       counter    of them, tokens found cached (copied, not computed)
    playground:prefix_cache_capacity_positions  gauge  the prefix cache's budget in KV positions (blocks of 16),
                                                       sized from the memory available at load unless set
    playground:prefix_cache_positions           gauge  positions it keeps now (a prompt's blocks, and the ones
                                                       requests generated)
    playground:prefix_cache_evictions_total     counter  blocks evicted (least recently used first)
    playground:prefix_cache_session_held_positions  gauge  positions held for sessions across their gaps now (a
                                                           TTL asked, at most the operator's share of the budget)
    playground:prefix_cache_evictions_by_reason_total  counter  blocks evicted, by reason: least recently used (no
                                                       session held it), TTL expired, over the held share, pressure
                                                       (evicted while a session held it: nothing else was left)

OpenTelemetry's GenAI metrics (semantic conventions, gen_ai.*), spelled as OpenTelemetry's Prometheus exporter
spells them (dots as underscores; the unit "s" as the suffix _seconds; an annotation unit such as {token} dropped):

    gen_ai_server_time_to_first_token_seconds    histogram  gen_ai.server.time_to_first_token (as vLLM's TTFT)
    gen_ai_server_time_per_output_token_seconds  histogram  gen_ai.server.time_per_output_token: per request,
                                                            (last token - first) / (tokens - 1), 2 tokens or more
    gen_ai_server_request_duration_seconds       histogram  gen_ai.server.request.duration (as vLLM's E2E)
    gen_ai_client_token_usage                    histogram  gen_ai.client.token.usage: a request's tokens, by
                                                            gen_ai_token_type (input: its prompt; output)

with the convention's buckets and attributes as labels: gen_ai_operation_name (chat or text_completion),
gen_ai_provider_name (required; "playground": none of the convention's well-known values, each a hosted
provider, applies to this server, and `openai` would claim OpenAI's service and its openai.* attributes, so it
writes the custom value the convention allows, the name its /v1/models gives in `owned_by`) and
gen_ai_response_model (the model served); the request duration adds error_type (conditionally required: on a
request the engine failed, "engine_error", the code of the 500 it answers; empty, which Prometheus reads as
absent, on every other). Time to first token and time per output token are recorded for successful responses
only (finish reason stop or length), as the convention defines them; a failed or cancelled request has its
duration. Token usage is the convention's client metric, recorded here on the server: the convention names no
server-side token metric.

Every vllm: series carries `model_name`. llama.cpp's server exports the same figures as llamacpp:requests_processing,
llamacpp:requests_deferred, llamacpp:prompt_tokens_total and llamacpp:tokens_predicted_total; one naming is
kept here, vLLM's, since only it has the histograms. The times are the Steps' `wall_ns` (the engine loop's
clock when each token was made) against the route's `received_ns`: the server's side, without the network.

Left out: vLLM's per-engine labels and preemption figures (the endpoint runs without a KV budget: no preemption).
"""
from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..serve.prefix_cache import Reason
from .errors import ENGINE_ERROR

# vLLM's buckets (seconds), so its dashboards' quantiles read the same
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
               960.0, 1920.0, 7680.0)
LABEL = ("model_name",)
# OpenTelemetry's GenAI semantic conventions: their explicit bucket boundaries and attributes
OTEL_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
OTEL_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
OTEL_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
OTEL_TOKEN_BUCKETS = tuple(4 ** i for i in range(14))   # 1, 4, 16 … 67108864
GENAI = ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_response_model")
PROVIDER = "playground"    # gen_ai.provider.name: a custom value (no well-known one applies; see above)
SUCCESSFUL = ("stop", "length")   # the finish reasons of a successful response


class _Live:
    """The gauges, read from the engine loop at each scrape (no thread keeps them up to date)."""

    def __init__(self, service):
        self.service = service

    def collect(self):
        loop, model = self.service.engine_loop, self.service.model_id
        running = GaugeMetricFamily("vllm:num_requests_running", "Requests holding a KV slot", labels=LABEL)
        waiting = GaugeMetricFamily("vllm:num_requests_waiting", "Requests waiting for a KV slot", labels=LABEL)
        usage = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage: 1 means every position in use",
                                  labels=LABEL)
        queries = CounterMetricFamily("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache",
                                      labels=LABEL)
        hits = CounterMetricFamily("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache", labels=LABEL)
        budget = GaugeMetricFamily("playground:prefix_cache_capacity_positions", "The prefix cache's budget in KV "
                                   "positions (blocks of 16)", labels=LABEL)
        kept = GaugeMetricFamily("playground:prefix_cache_positions", "KV positions the prefix cache keeps now",
                                 labels=LABEL)
        evicted = CounterMetricFamily("playground:prefix_cache_evictions", "Prefix-cache blocks evicted, least "
                                      "recently used first", labels=LABEL)
        session_held = GaugeMetricFamily("playground:prefix_cache_session_held_positions", "KV positions the prefix "
                                         "cache holds for sessions across their gaps", labels=LABEL)
        by_reason = CounterMetricFamily("playground:prefix_cache_evictions_by_reason", "Prefix-cache blocks "
                                        "evicted, by reason", labels=LABEL + ("reason",))
        if loop is not None:
            batcher = loop.batcher
            held = batcher.holders()
            running.add_metric([model], len(held))
            waiting.add_metric([model], len(batcher.waiting))
            usage.add_metric([model], sum(s.length for _, s in held) / (batcher.kv.slots * batcher.kv.capacity))
            queries.add_metric([model], batcher.looked_up)
            hits.add_metric([model], batcher.cached)
            cache = batcher.cache
            budget.add_metric([model], cache.capacity * cache.block_size if cache is not None else 0)
            kept.add_metric([model], len(cache) * cache.block_size if cache is not None else 0)
            evicted.add_metric([model], cache.evicted if cache is not None else 0)
            session_held.add_metric([model], cache.held_positions() if cache is not None else 0)
            for reason in Reason:
                by_reason.add_metric([model, reason.value], cache.by_reason[reason] if cache is not None else 0)
        return [running, waiting, usage, queries, hits, budget, kept, evicted, session_held, by_reason]


class ServerMetrics:
    def __init__(self, service):
        self.service = service
        self.registry = r = CollectorRegistry()
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens of admitted requests", LABEL, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated", LABEL, registry=r)
        self.success = Counter("vllm:request_success", "Requests ended, by finished_reason",
                               LABEL + ("finished_reason",), registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token (server side)", LABEL,
                              buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Time between consecutive tokens", LABEL,
                             buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Arrival to last token (server side)", LABEL,
                             buckets=E2E_BUCKETS, registry=r)
        self.otel_ttft = Histogram("gen_ai_server_time_to_first_token_seconds", "gen_ai.server.time_to_first_token: "
                                   "time to generate the first token", GENAI, buckets=OTEL_TTFT_BUCKETS, registry=r)
        self.otel_tpot = Histogram("gen_ai_server_time_per_output_token_seconds", "gen_ai.server.time_per_output_token:"
                                   " time per output token after the first", GENAI, buckets=OTEL_TPOT_BUCKETS,
                                   registry=r)
        self.otel_duration = Histogram("gen_ai_server_request_duration_seconds", "gen_ai.server.request.duration: "
                                       "generative AI server request duration", GENAI + ("error_type",),
                                       buckets=OTEL_DURATION_BUCKETS, registry=r)
        self.otel_tokens = Histogram("gen_ai_client_token_usage", "gen_ai.client.token.usage: input and output "
                                     "tokens used", GENAI + ("gen_ai_token_type",), buckets=OTEL_TOKEN_BUCKETS,
                                     registry=r)
        r.register(_Live(service))

    def admitted(self, prompt_tokens: int) -> None:
        self.prompt_tokens.labels(self.service.model_id).inc(prompt_tokens)

    def ended(self, trace, finish_reason: str | None, operation: str = "chat") -> None:
        """Count a request that ended (any way): its tokens, its times, how it ended (`finish_reason`, vLLM's
        words: response_body.finish_reason; None is counted as "abort"). `operation`: OpenTelemetry's
        gen_ai.operation.name ("chat" or "text_completion")."""
        model, steps = self.service.model_id, trace.steps
        finish_reason = finish_reason or "abort"
        genai = (operation, PROVIDER, model)
        received = trace.server.get("received_ns")
        self.generation_tokens.labels(model).inc(len(steps))
        self.success.labels(model, finish_reason).inc()
        self.otel_tokens.labels(*genai, "input").observe(len(trace.prompt_ids))
        self.otel_tokens.labels(*genai, "output").observe(len(steps))
        if received is None:
            return
        end_ns = steps[-1].wall_ns if steps else time.time_ns()
        e2e = max(0, end_ns - received) / 1e9
        self.otel_duration.labels(*genai, ENGINE_ERROR if finish_reason == "error" else "").observe(e2e)
        if not steps:
            return
        ttft = max(0, steps[0].wall_ns - received) / 1e9
        self.ttft.labels(model).observe(ttft)
        for a, b in zip(steps, steps[1:]):
            self.itl.labels(model).observe(max(0, b.wall_ns - a.wall_ns) / 1e9)
        self.e2e.labels(model).observe(e2e)
        if finish_reason in SUCCESSFUL:
            self.otel_ttft.labels(*genai).observe(ttft)
            if len(steps) > 1:
                self.otel_tpot.labels(*genai).observe(max(0, steps[-1].wall_ns - steps[0].wall_ns) / 1e9
                                                      / (len(steps) - 1))

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
