"""OpenAI-compatible servers (llama.cpp's llama-server, vLLM, Ollama, …) as step sources.

    source = RemoteSource("http://127.0.0.1:8080/v1", api_key=os.environ.get("MY_KEY"))
    add_endpoints(registry, ["http://127.0.0.1:8080/v1"], api_key_env="MY_KEY")   # app.py --endpoint

Modules: client.py (httpx), stream.py (SSE via httpx-sse, read in a thread; Stop at any moment),
errors.py (one exception per failure), servers.py (what each kind of server offers), steps.py (events ->
Steps), streamed_run.py (one request streamed into a Run's Steps),
server_metrics.py (the server's own figures), report.py (them in words),
local_copy.py (the bundled model's tokenizer when the server serves it), source.py (the StepSource),
endpoints.py (app wiring). Starting a local llama-server is llamacpp/server.py's.

Left out: servers that are not OpenAI-compatible; anything a page visitor types (endpoints are set by
whoever runs the app).
"""
from .errors import (RemoteAuthError, RemoteBadRequest, RemoteError, RemoteMalformed, RemoteNotFound,
                     RemoteRateLimited, RemoteServerError, RemoteStreamCut, RemoteTimeout, RemoteTLSError,
                     RemoteUnreachable)
from .source import RemoteSource
