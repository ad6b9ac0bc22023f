"""Entry point (and the Hugging Face Space's): `python app.py [--model SPEC] [--backend NAME] [--port N]
[--endpoint URL]... [--api-key-env NAME] [--llama-server [--llama-parallel N]] [--openai-api]`.

The module-level `demo` loads nothing at import (on ZeroGPU, the torch backend: see below): each backend's
engine is created on first use and cached (playground/registry.py), so `import app` is fast and a Space starts
serving its page while the model loads, even when the default backend then fails to load (the UI names it and offers the others).
Settings come from the command line, else PLAYGROUND_MODEL / PLAYGROUND_BACKEND / PLAYGROUND_DEVICE /
PLAYGROUND_DTYPE, else the defaults (bundled SmolLM2; ONNX on CPU, torch on CUDA).
Servers to watch (OpenAI-compatible: llama.cpp, vLLM, Ollama, …) come from --endpoint (repeatable) and
PLAYGROUND_ENDPOINTS (comma-separated); a key, if they need one, from the environment variable that
--api-key-env (or PLAYGROUND_API_KEY_ENV) names. They join the backend dropdowns; a page visitor cannot add one.
The page's Generate runs on them (and on --llama-server's) are recorded (watch_remote) for the Serve tab's Watch
view, which draws them from the client side beside each server's own figures.
--llama-server (or PLAYGROUND_LLAMA_SERVER=1) adds llama.cpp's own server on the bundled GGUF, started on
first use with --llama-parallel slots (default 4) and stopped when the app exits (llamacpp/server.py).
--openai-api (or PLAYGROUND_OPENAI_API=1) serves an OpenAI-compatible endpoint on the page's own port
(/v1/chat/completions, /v1/completions, /v1/models, /tokenize, and the agent APIs /v1/responses and
/v1/messages: playground/api/) over the ONNX engine, all clients' requests batched together; it is off unless
asked for. Bearer keys, if any, come from PLAYGROUND_API_KEYS (comma-separated; never shown or logged), limits
from PLAYGROUND_API_LIMITS.
Host is --host, else Gradio's own GRADIO_SERVER_NAME, else 0.0.0.0 on a Space (SPACE_ID is set), else 127.0.0.1
(this machine alone); `--host 0.0.0.0` serves a room on the same network, and the start-up log prints the
addresses it opens (ports.room_urls).
On a Space: conversions go to PLAYGROUND_CACHE, else to /data/llm-serving-playground when /data is writable (where
the owner mounts a Storage Bucket; config.persistent_cache_dir), else the home cache, and the hub's downloads beside
them unless HF_HOME is set; the start-up log says where the cache lives and whether it survives a restart;
on ZeroGPU (SPACES_ZERO_GPU) `spaces` is imported before torch, as it requires, the torch
backend is loaded (to "cuda") at import in the main thread, and each of its runs is a spaces.GPU call
(playground/ui/zerogpu.py); the ONNX backends run on the CPU, outside it. `python app.py` starts loading
the default backend as the page comes up, and logs when it is ready.
"""
from __future__ import annotations

import os
import time

LAUNCHED = time.monotonic()


def hub_home() -> str | None:
    """HF_HOME for a Space whose caches are kept (PLAYGROUND_CACHE, or a writable /data where the owner mounts a
    bucket), so the hub's downloads survive a restart beside the conversions; None where the default stands. Read
    before huggingface_hub is imported (it reads HF_HOME once), so with os alone (config.py imports torch)."""
    if "HF_HOME" in os.environ or not os.environ.get("SPACE_ID"):
        return None
    if os.environ.get("PLAYGROUND_CACHE"):
        return os.path.join(os.environ["PLAYGROUND_CACHE"], ".huggingface")
    return "/data/.huggingface" if os.path.isdir("/data") and os.access("/data", os.W_OK | os.X_OK) else None


if hub_home():
    os.environ["HF_HOME"] = hub_home()
if os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true"):
    import spaces  # noqa: F401 - ZeroGPU patches torch; it must be imported before torch is

import argparse  # noqa: E402 - after the Space's environment is settled
import secrets  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402

from playground.api import ApiConfig, ApiService, ClientTraffic, api_routes, batching_backend  # noqa: E402
from playground.config import AppConfig, cache_location  # noqa: E402
from playground.llamacpp import APP_SOURCE, add_llama_server  # noqa: E402
from playground.ports import only_this_machine, room_served, room_urls, serve_host  # noqa: E402
from playground.registry import SourceRegistry  # noqa: E402
from playground.remote.endpoints import add_endpoints, endpoint_name, endpoint_urls  # noqa: E402
from playground.remote.source import RemoteSource  # noqa: E402
from playground.serve.remote_record import RemoteRecord  # noqa: E402
from playground.serve.room import PRESENTER_KEY_ENV, Room  # noqa: E402
from playground.ui import GENERATE_CONCURRENCY, build_demo, launch_kwargs as page_launch_kwargs  # noqa: E402
from playground.ui.zerogpu import start_up, zero_gpu  # noqa: E402


def make_registry(model: str | None = None, backend: str | None = None, endpoints: list[str] | None = None,
                  api_key_env: str | None = None, llama_server: bool = False,
                  llama_parallel: int | None = None) -> SourceRegistry:
    config = AppConfig.from_env(model=model, backend=backend)
    registry = SourceRegistry.for_model(config.model, config.backend, device=config.device, dtype=config.dtype)
    add_endpoints(registry, endpoint_urls(endpoints, os.environ.get("PLAYGROUND_ENDPOINTS")),
                  api_key_env or os.environ.get("PLAYGROUND_API_KEY_ENV"))
    if llama_server_wanted(llama_server):
        add_llama_server(registry, parallel=4 if llama_parallel is None else llama_parallel)
    if zero_gpu():   # now, in the main thread, before launch: where ZeroGPU takes the model to the GPU
        start_up(registry)
    return registry


def llama_server_wanted(flag: bool = False) -> bool:
    return flag or os.environ.get("PLAYGROUND_LLAMA_SERVER") == "1"


def remote_servers(registry: SourceRegistry, endpoints: list[str] | None = None, llama_server: bool = False) -> list[str]:
    """The names in `registry` of the remote servers make_registry was given (its same arguments): --endpoint's,
    PLAYGROUND_ENDPOINTS', --llama-server's. The app's own endpoint (SELF_SOURCE) is not one: its record is its own."""
    urls = endpoint_urls(endpoints, os.environ.get("PLAYGROUND_ENDPOINTS"))
    names = [*map(endpoint_name, urls), *([APP_SOURCE] if llama_server_wanted(llama_server) else [])]
    return [name for name in names if name in registry.names]


def watch_remote(servers: list[str], traffic: ClientTraffic | None = None) -> RemoteRecord | None:
    """The record of the page's Generate runs on the remote `servers` (remote_servers), which the Serve tab's Watch
    view draws from the client side beside each server's own figures; on the endpoint's clock where the app serves
    one (one watch, one t0). None without remote servers."""
    if not servers:
        return None
    return RemoteRecord(servers, clock=traffic.clock if traffic is not None else None)


def make_room(registry: SourceRegistry, traffic: ClientTraffic | None = None, config: ApiConfig | None = None) -> Room:
    """The room: the engine loop every local request of the batching backend joins (the page's Generate runs and,
    with `traffic`, the endpoint's clients, recorded there; it loads on first use), the machine gate it holds one
    CPU slot of while it has work, and the record of client traffic. Without a backend our batching runs, a room
    without a loop (ValueError with `traffic`: the endpoint was asked for, and cannot run)."""
    if traffic is not None:
        batching_backend(registry.names, registry.default)   # the endpoint was asked for: say why it cannot run
    config = config or ApiConfig.from_env()
    room = Room.for_registry(registry, config.loop_size, traffic=traffic)
    room.client_share = config.limits.in_flight_per_client   # an attendee's Serve run: one client's share
    if SELF_SOURCE in registry.names:   # a Serve workload on it joins the room's loop, never holds the machine alone
        room.loop_sources.add(SELF_SOURCE)
    return room


def make_demo(registry: SourceRegistry, room: Room | None = None, remote: RemoteRecord | None = None):
    """The page over a registry (make_registry) and its `room` (make_room: Generate's runs on its backend join its
    engine loop, the Serve tab watches its client traffic when it records one); with `remote` (watch_remote), the
    Watch view draws Generate's runs on the remote servers."""
    demo = build_demo(registry, room, remote)
    demo.queue(default_concurrency_limit=GENERATE_CONCURRENCY, max_size=64)
    return demo


SELF_SOURCE = "this app's endpoint"
PORT = int(os.environ.get("PORT", 7860))


def serve_the_endpoint(registry: SourceRegistry, port: int, host: str = "127.0.0.1") -> tuple[ClientTraffic, ApiConfig]:
    """Get ready to serve the OpenAI-compatible endpoint: its live record of clients, its config, and a source
    the Serve tab can send its own workload through (the endpoint on 127.0.0.1:port, with a key made here and
    never shown, so the presenter's requests join the audience's in one batch without the per-client limits). The
    record knows where the page answers (`host`, `port`: ports.room_urls), so the Serve tab shows the room's URL."""
    config = ApiConfig.from_env(presenter_key=secrets.token_urlsafe(24))

    def factory(name, progress):
        progress(0.5, "connecting to this app's own endpoint")
        return RemoteSource(f"http://127.0.0.1:{port}/v1", api_key=config.presenter_key)
    registry.add(SELF_SOURCE, factory, label=f"{SELF_SOURCE} · the OpenAI-compatible endpoint of this app: the "
                                              "Serve tab's requests join its clients' in one continuous batch")
    traffic = ClientTraffic()
    traffic.reach = room_urls(host, port)
    return traffic, config


def openai_routes(registry: SourceRegistry, traffic: ClientTraffic, config: ApiConfig | None = None,
                  room: Room | None = None) -> list:
    """The OpenAI-compatible endpoint's routes over `room` (make_room: the page's runs join the same loop; a new
    one without, recording its clients' requests in `traffic`), whose engine starts loading now."""
    room = room or make_room(registry, traffic, config)
    room.start_loading()
    return api_routes(ApiService(room, config or ApiConfig.from_env()))


def openai_api_wanted(flag: bool = False) -> bool:
    return flag or os.environ.get("PLAYGROUND_OPENAI_API") == "1"


def launch_kwargs(registry: SourceRegistry, traffic: ClientTraffic | None = None,
                  config: ApiConfig | None = None, room: Room | None = None) -> dict:
    """demo.launch's keywords besides host and port: the page's css, theme and head, and its app_kwargs (the live
    channel's route, and the endpoint's over `room` when `traffic` records one)."""
    return page_launch_kwargs(openai_routes(registry, traffic, config, room) if traffic is not None else ())


def load_in_background(registry: SourceRegistry, since: float = LAUNCHED) -> threading.Thread:
    """Start loading the default backend now, so the first visitor's answer does not pay for it; the log says
    when it is ready (seconds since `since`, the launch) or why it failed (the page says so too)."""
    def load():
        name = registry.default
        try:
            registry.get(name)
        except Exception as exc:  # noqa: BLE001 - the registry remembers it; the page names it and offers others
            print(f"model not ready: {exc}", flush=True)
            return
        print(f"model ready: backend {name} loaded {time.monotonic() - since:.1f} s after launch", flush=True)
    worker = threading.Thread(target=load, daemon=True, name="load-default")
    worker.start()
    return worker


def reach_line(host: str, port: int) -> str:
    """The start-up log's line saying where the page answers and who can open it."""
    if only_this_machine(host):
        return f"listening on {host}:{port}: this machine alone (--host 0.0.0.0 serves a room on its network)"
    shown = ", ".join(room_urls(host, port)) or "no address but loopback's found: the room cannot reach this machine"
    return f"listening on {host}:{port}; attendees open {shown}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="LLM Serving Playground")
    parser.add_argument("--model", help="model spec: a hub id, a local folder, a .gguf file, or 'tiny'")
    parser.add_argument("--backend", help="torch | onnx | onnx-int8 | onnx-int4 | onnx-gguf4 (default: torch on CUDA; "
                                          "else onnx-gguf4 for a GGUF model or a llama's float weights, onnx for others)")
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--host", help="the address to listen on: 0.0.0.0 serves every interface (a room on the same "
                                       "network); default GRADIO_SERVER_NAME, else 127.0.0.1 (0.0.0.0 on a Space)")
    parser.add_argument("--endpoint", action="append", default=[], metavar="URL",
                        help="an OpenAI-compatible server to watch, e.g. http://127.0.0.1:8080/v1 (repeatable)")
    parser.add_argument("--api-key-env", metavar="NAME",
                        help="the environment variable holding the endpoints' API key (the key itself is never shown)")
    parser.add_argument("--llama-server", action="store_true",
                        help="offer llama.cpp's llama-server on the bundled model (needs `make llama`), started on "
                             "first use on 127.0.0.1 and stopped when the app exits")
    parser.add_argument("--llama-parallel", type=int, metavar="N",
                        help="llama-server's slots: the requests it batches at once (default 4)")
    parser.add_argument("--openai-api", action="store_true",
                        help="serve an OpenAI-compatible endpoint (/v1/chat/completions, …) on this port over the "
                             "ONNX engine; keys from PLAYGROUND_API_KEYS, limits from PLAYGROUND_API_LIMITS")
    return parser.parse_args(argv)


def make_app(registry: SourceRegistry, traffic: ClientTraffic | None, config: ApiConfig | None,
             servers: list[str] | None = None, host: str = "127.0.0.1"):
    """(the page, its room): one room (make_room: the machine gate, the engine loop and the client traffic) shared by
    the page and the endpoint; the page's runs on the remote `servers` (remote_servers) recorded for the Watch view.
    The room is served when the endpoint is on or the page listens on `host` beyond loopback (ports.room_served):
    then only the presenter, with PLAYGROUND_PRESENTER_KEY typed on the page, may start a Serve run."""
    room = make_room(registry, traffic, config)
    room.served = room_served(host, traffic is not None)
    room.set_presenter_key(os.environ.get(PRESENTER_KEY_ENV))
    return make_demo(registry, room, watch_remote(servers or [], traffic)), room


registry = make_registry()
traffic, api_config = serve_the_endpoint(registry, PORT, serve_host(None)) if openai_api_wanted() else (None, None)
demo, room = make_app(registry, traffic, api_config, remote_servers(registry), serve_host(None))

if __name__ == "__main__":
    args = parse_args()
    host = serve_host(args.host)
    if any([args.model, args.backend, args.endpoint, args.api_key_env, args.llama_server,
            args.llama_parallel is not None, args.openai_api and traffic is None, args.port != PORT, args.host]):
        registry = make_registry(args.model, args.backend, args.endpoint, args.api_key_env, args.llama_server,
                                 args.llama_parallel)
        traffic, api_config = (serve_the_endpoint(registry, args.port, host) if openai_api_wanted(args.openai_api)
                               else (None, None))
        demo, room = make_app(registry, traffic, api_config,
                              remote_servers(registry, args.endpoint, args.llama_server), host)
    print(cache_location().log_line(), flush=True)
    print(reach_line(host, args.port), flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)   # like Ctrl-C: atexit hooks run (llama-server's stop)
    load_in_background(registry)
    demo.launch(server_name=host, server_port=args.port, **launch_kwargs(registry, traffic, api_config, room))
