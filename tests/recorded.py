"""Real servers' own text, recorded from the projects' documentation and sources: what the tests of the server
formats (tests/remote/test_server_formats.py and the tests named beside each) hold the playground's reading and
writing against. Each fixture names where its lines come from; one assembled from several places names each line's.
Nothing here is made up to fit the code: a value the source does not give is marked so in the comment.
"""
from __future__ import annotations

# --- vLLM /metrics: both KV names, two engines, two models on one page
# Assembled, since no single published page carries every case. The HELP and TYPE lines and the label names
# (model_name, engine) are those vllm/v1/metrics/loggers.py (vLLM 0.11, PrometheusStatLogger) registers:
#   "vllm:num_requests_running"   "Number of requests in model execution batches."
#   "vllm:num_requests_waiting"   "Number of requests waiting to be processed."
#   "vllm:gpu_cache_usage_perc"   "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use
#                                  vllm:kv_cache_usage_perc instead."   (shown with
#                                  --show-hidden-metrics-for-version=0.10, beside the current name)
#   "vllm:kv_cache_usage_perc"    "KV-cache usage. 1 means 100 percent usage."
#   "vllm:request_success"        "Count of successfully processed requests." (labels + finished_reason)
# one series per engine index (make_per_engine, a data-parallel server's `engine="0"`, `engine="1"`); the label
# order is prometheus_client's (the labelnames' order). The values are chosen here; the second model's lines
# (engine 0 of a server whose /metrics carries two served models) use the same names and labels.
VLLM_METRICS_TWO_ENGINES = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="Qwen/Qwen3-0.6B",engine="0"} 3.0
vllm:num_requests_running{model_name="Qwen/Qwen3-0.6B",engine="1"} 2.0
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="Qwen/Qwen3-0.6B",engine="0"} 1.0
vllm:num_requests_waiting{model_name="Qwen/Qwen3-0.6B",engine="1"} 0.0
vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 4.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen3-0.6B",engine="0"} 0.8
vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen3-0.6B",engine="1"} 0.3
vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 0.95
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="Qwen/Qwen3-0.6B",engine="0"} 0.8
vllm:kv_cache_usage_perc{model_name="Qwen/Qwen3-0.6B",engine="1"} 0.3
vllm:kv_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 0.95
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{model_name="Qwen/Qwen3-0.6B",engine="0",finished_reason="stop"} 12.0
vllm:request_success_total{model_name="Qwen/Qwen3-0.6B",engine="0",finished_reason="error"} 1.0
"""
VLLM_SERVED = "Qwen/Qwen3-0.6B"

# A vLLM of one engine from before the rename (vLLM 0.9.1 and older: vllm/v1/metrics/loggers.py registered
# "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", labelnames ["model_name"] and
# no current name); docs/design/metrics.md's example output names the model as below.
VLLM_METRICS_DEPRECATED_ONLY = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.42
"""

# vLLM's finish reasons (vllm/v1/engine/__init__.py FINISH_REASON_STRINGS; FinishReason's docstring: "abort -
# aborted by client", "error - retryable request-level internal error (e.g., KV load failure). Invariant: always
# converted to 500 Internal Server Error.")
VLLM_FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

# --- vLLM's per-request metrics on a stream (docs/features/per_request_metrics.md)
# "In streaming responses, metrics are attached to the final usage chunk (the chunk sent after all content
# chunks). That chunk is only emitted when usage reporting is enabled with `stream_options.include_usage: true`"
# The chunk: OpenAI's usage chunk (`choices: []`) with the page's `usage` and `metrics` objects as its Response
# Format example gives them; id, created and model from the same example.
VLLM_USAGE_CHUNK_WITH_METRICS = {
    "id": "chatcmpl-abc123", "object": "chat.completion.chunk", "created": 1700000000,
    "model": "meta-llama/Llama-3.1-8B-Instruct", "choices": [],
    "usage": {"prompt_tokens": 42, "completion_tokens": 128, "total_tokens": 170},
    "metrics": {"time_to_first_token_ms": 85.2, "generation_time_ms": 1240.5, "queue_time_ms": 12.3,
                "mean_itl_ms": 9.1, "tokens_per_second": 103.2},
}
# the page's field table: "queue_time_ms | Time the request spent waiting in the scheduler queue before
# processing began."; "mean_itl_ms ... `null` for single-token responses."
VLLM_METRICS_FIELDS = ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms",
                       "tokens_per_second")

# --- llama.cpp's llama-server
# timings (tools/server/README.md, "Timings and context usage": the example's fields and values)
LLAMA_TIMINGS = {"cache_n": 236, "prompt_n": 1, "prompt_ms": 30.958, "prompt_per_token_ms": 30.958,
                 "prompt_per_second": 32.301828283480845, "predicted_n": 35, "predicted_ms": 661.064,
                 "predicted_per_token_ms": 18.887542857142858, "predicted_per_second": 52.94494935437416}
# A one-token answer's timings: the README's prompt figures, the generation figures as tools/server computes
# them for predicted_n 1: `t_token_generation = std::max<int64_t>(1, t_current - t_start_generation) / 1e3`
# (a generation time of at least 1 µs, in ms), `predicted_per_token_ms = t_token_generation / n_decoded`,
# `predicted_per_second = 1e3 / t_token_generation * n_decoded` (result_timings, server_slot::get_timings).
LLAMA_ONE_TOKEN_TIMINGS = {**LLAMA_TIMINGS, "predicted_n": 1, "predicted_ms": 0.001,
                           "predicted_per_token_ms": 0.001, "predicted_per_second": 1e3 / 0.001 * 1}

# /slots, as its README documents it ("Example with 2 slots", GET /slots; `params` cut to two of its fields):
# no prompt count, `next_token` an object
LLAMA_SLOTS_README = [
    {"id": 0, "id_task": 135, "n_ctx": 65536, "speculative": False, "is_processing": True,
     "params": {"n_predict": -1, "seed": 4294967295},
     "next_token": {"has_next_token": True, "has_new_line": False, "n_remain": -1, "n_decoded": 0}},
    {"id": 1, "id_task": 0, "n_ctx": 65536, "speculative": False, "is_processing": True,
     "params": {"n_predict": -1, "seed": 4294967295},
     "next_token": {"has_next_token": True, "has_new_line": True, "n_remain": -1, "n_decoded": 136}},
]
# /slots as tools/server/server-context.cpp's server_slot::to_json writes it: id, n_ctx, speculative,
# is_processing, then, for a slot that has run a task, id_task, n_prompt_tokens, n_prompt_tokens_processed,
# n_prompt_tokens_cache, params and next_token as a one-item array (has_next_token, has_new_line, n_remain,
# n_decoded); an idle slot that never ran a task has only the first four. Values chosen here.
LLAMA_SLOTS_TO_JSON = [
    {"id": 0, "n_ctx": 2048, "speculative": False, "is_processing": True, "id_task": 7, "n_prompt_tokens": 37,
     "n_prompt_tokens_processed": 8, "n_prompt_tokens_cache": 29, "params": {"n_predict": 16},
     "next_token": [{"has_next_token": True, "has_new_line": False, "n_remain": 11, "n_decoded": 5}]},
    {"id": 1, "n_ctx": 2048, "speculative": False, "is_processing": False},
]

# /metrics (tools/server/README.md, "Available metrics": names, types and descriptions; llama-server writes each
# as `# HELP llamacpp:<name> <description>`, `# TYPE llamacpp:<name> <type>`, then the unlabelled value).
# Values chosen here.
LLAMA_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1850
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 412
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""

# --- OpenTelemetry's GenAI semantic conventions (open-telemetry/semantic-conventions, docs/gen-ai/
# gen-ai-metrics.md as of v1.56.0, "Generative AI model server metrics"; the conventions have since moved to
# open-telemetry/semantic-conventions-genai). For each server metric: its brief, and the attributes marked
# `Required` or `Conditionally Required`.
OTEL_SERVER_METRICS = {
    "gen_ai.server.request.duration": {
        "brief": "Generative AI server request duration such as time-to-last byte or last output token.",
        "required": ("gen_ai.operation.name", "gen_ai.provider.name"),
        "conditionally_required": {"error.type": "if the operation ended in an error"}},
    "gen_ai.server.time_per_output_token": {
        "brief": "Time per output token generated after the first token for successful responses.",
        "required": ("gen_ai.operation.name", "gen_ai.provider.name")},
    "gen_ai.server.time_to_first_token": {
        "brief": "Time to generate first token for successful responses.",
        "required": ("gen_ai.operation.name", "gen_ai.provider.name")},
}
# "`gen_ai.provider.name` has the following list of well-known values. If one of them applies, then the
# respective value MUST be used; otherwise, a custom value MAY be used."
OTEL_PROVIDER_NAMES = ("anthropic", "aws.bedrock", "azure.ai.inference", "azure.ai.openai", "cohere", "deepseek",
                       "gcp.gemini", "gcp.gen_ai", "gcp.vertex_ai", "groq", "ibm.watsonx.ai", "mistral_ai", "openai",
                       "perplexity", "x_ai")

# --- the Trace Event Format (Google's "Trace Event Format" document, what chrome://tracing and ui.perfetto.dev
# load), "Counter Events": "Each counter can be provided with multiple series of data to display. When multiple
# series are provided they will be displayed as a stacked area chart in Trace Viewer." Its example:
TRACE_EVENT_COUNTER = {"name": "ctr", "ph": "C", "ts": 0, "args": {"cats": 0}}


def otel_label(attribute: str) -> str:
    """An OpenTelemetry attribute as OpenTelemetry's Prometheus exporter names its label (dots as underscores).

    >>> otel_label("gen_ai.provider.name")
    'gen_ai_provider_name'
    """
    return attribute.replace(".", "_")
