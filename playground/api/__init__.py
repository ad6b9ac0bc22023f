"""An OpenAI-compatible endpoint into the playground's engine: audiences' own requests, batched together.

    service = ApiService(lambda: registry.get("onnx-gguf4"), ApiConfig.from_env(), observer=ClientTraffic())
    routes = api_routes(service)      # /v1/chat/completions, /v1/completions, /v1/models, /tokenize, …

Modules: request_body.py and response_body.py (OpenAI's shapes), errors.py (OpenAI's error JSON), limits.py (keys and limits),
service.py (a request's path without HTTP), routes.py (FastAPI: every failure answered in OpenAI's shape,
/health, /metrics), prometheus.py (the figures under vLLM's metric names), record.py (client traffic as a
live workload record for the Serve tab). The engine loop every request joins (the page's Generate runs too)
is serve/engine_loop.py's EngineLoop.

Left out: gradio (the app mounts the routes: app.py --openai-api), and the Responses API.
"""
from .limits import ApiConfig, ApiLimits
from ..serve.engine_loop import EngineLoop
from .record import ClientTraffic
from .routes import api_routes
from ..serve.registry import batching_backend
from .service import ApiService, Received

__all__ = ["ApiConfig", "ApiLimits", "ApiService", "ClientTraffic", "EngineLoop", "Received", "api_routes", "batching_backend"]
