"""An OpenAI-compatible endpoint into the playground's engine: audiences' own requests, batched together.

    config = ApiConfig.from_env()
    room = Room(lambda: registry.get("onnx-gguf4"), "onnx-gguf4", config.loop_size, traffic=ClientTraffic())
    routes = api_routes(ApiService(room, config))   # /v1/chat/completions, /v1/completions, /v1/models, /tokenize, …

Modules: request_body.py and response_body.py (OpenAI's shapes), errors.py (OpenAI's error JSON), limits.py (keys and limits),
service.py (a request's path without HTTP), routes.py (FastAPI: every failure answered in OpenAI's shape,
/health, /metrics), prometheus.py (the figures under vLLM's metric names); the agent APIs over the same guard and
loop: turn.py (a conversation with tool calls as the chat the model reads, one turn's answer as text blocks and
calls), responses.py (OpenAI's Responses API, /v1/responses, and its stored responses) and messages.py (Anthropic's
Messages API, /v1/messages). The room every request joins (the page's Generate runs too) is serve/room.py's Room:
its EngineLoop, the machine gate, and its record of client traffic (serve/traffic.py's ClientTraffic, which the
Serve tab draws).

Left out: gradio (the app mounts the routes: app.py --openai-api).
"""
from ..serve.engine_loop import EngineLoop
from ..serve.registry import batching_backend
from ..serve.traffic import ClientTraffic
from .limits import ApiConfig, ApiLimits
from .routes import api_routes
from .service import ApiService, Received

__all__ = ["ApiConfig", "ApiLimits", "ApiService", "ClientTraffic", "EngineLoop", "Received", "api_routes", "batching_backend"]
