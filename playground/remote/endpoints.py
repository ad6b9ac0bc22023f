"""Endpoints given by whoever runs the app (--endpoint, PLAYGROUND_ENDPOINTS), offered beside the local backends.

    urls = endpoint_urls(["http://127.0.0.1:8080/v1"], os.environ.get("PLAYGROUND_ENDPOINTS"))
    add_endpoints(registry, urls, api_key_env="MY_SERVER_KEY")   # dropdown entries "server @ 127.0.0.1:8080"

    >>> endpoint_urls(["http://127.0.0.1:8080/v1"], "http://gpu:8000/v1, http://127.0.0.1:8080/v1/")
    ['http://127.0.0.1:8080/v1', 'http://gpu:8000/v1']
    >>> endpoint_name("http://127.0.0.1:8080/v1")
    'server @ 127.0.0.1:8080'

Each endpoint is connected on first use (its models, kind and tokenizer asked then), so a server that is
down never delays the app's start; a failure is shown in the dropdown's status like a backend's. The key
is read once from the named environment variable and handed to that endpoint's client only: it is never
part of a name, label, trace, export or log line.

Left out: endpoints typed into the page (a visitor-supplied URL would let anyone make the server fetch
arbitrary addresses) and one key per endpoint (one --api-key-env serves every endpoint given).
"""
from __future__ import annotations

import os

from .client import split_endpoint

LABEL = "OpenAI-compatible server (its kind and model are asked on first use)"


def endpoint_urls(given: list[str] | None = None, env: str | None = None) -> list[str]:
    """The endpoints from the command line, then from the comma-separated env value, each once."""
    urls, seen = [], set()
    for url in [*(given or []), *(env or "").split(",")]:
        url = url.strip()
        if not url:
            continue
        root, _ = split_endpoint(url)   # ValueError for a URL that cannot be an endpoint
        if root not in seen:
            seen.add(root)
            urls.append(url)
    return urls


def endpoint_name(url: str) -> str:
    return f"server @ {split_endpoint(url)[1]}"


def read_key(api_key_env: str | None) -> str | None:
    """The key from the environment variable named `api_key_env` (None: no key); ValueError if it is unset."""
    if not api_key_env:
        return None
    key = os.environ.get(api_key_env)
    if not key:
        raise ValueError(f"--api-key-env {api_key_env}: that environment variable is not set")
    return key


def add_endpoints(registry, urls: list[str], api_key_env: str | None = None, **source_options) -> list[str]:
    """Register each endpoint as a source created on first use; returns the names added."""
    from .source import RemoteSource

    key = read_key(api_key_env) if urls else None
    names = []
    for url in urls:
        def factory(name, progress, url=url):
            progress(0.5, f"asking {split_endpoint(url)[1]} which model it serves")
            return RemoteSource(url, api_key=key, **source_options)
        name = endpoint_name(url)
        registry.add(name, factory, label=f"{name} · {LABEL}")
        names.append(name)
    return names
