"""What each kind of OpenAI-compatible server offers beyond the common API, one registry entry per kind.

    kind = detect_kind(client, entry)          # from /v1/models' "owned_by", else a probe only that kind answers
    kind.context_window(client, entry)         # llama.cpp /props n_ctx (per slot); vLLM max_model_len
    kind.tokenize_chat(client, model, messages)   # (the text the model reads, its ids) from the server itself
    kind.figures(client, model)                # its live figures now, e.g. {"running": 1, "kv_pool_used_share": …}

    >>> [k.name for k in KINDS]
    ['llama.cpp', 'vllm', 'playground', 'ollama', 'openai-compatible']
    >>> KINDS[0].sampling(GenerationSettings(temperature=0.7, top_p=0.9, seed=3))
    {'temperature': 0.7, 'top_p': 0.9, 'seed': 3, 'top_k': 0, 'min_p': 0.0}

Sampling: each request names every setting, with the server's own extra samplers switched off (llama.cpp
defaults to top_k 40, top_p 0.95, min_p 0.05), so a server samples as the local engine does.

The playground's own endpoint (playground/api/, `app.py --openai-api`) is a kind too, so the playground
can watch itself; its /metrics uses vLLM's names, so its figures are read as vLLM's are, and each request
asks it for vLLM's per-request `metrics` beside llama.cpp's `timings` (api/timings.py).

Left out: TGI's and SGLang's own endpoints (they are served as plain OpenAI-compatible servers).
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Callable

from ..config import GenerationSettings
from .client import ServerClient
from .errors import RemoteBadRequest, RemoteError, RemoteMalformed, RemoteServerError
from .server_metrics import LLAMA_FIGURES, VLLM_FIGURES, read_metrics, summarize_slots


def _common(s: GenerationSettings) -> dict:
    return {"temperature": s.temperature, "top_p": s.top_p, **({"seed": s.seed} if s.seed is not None else {})}


def _none(*args, **kwargs):
    return None


# --- llama.cpp's llama-server

def _llama_tokenize(client: ServerClient, model: str, text: str, special: bool) -> list[int]:
    tokens = client.post_json("/tokenize", {"content": text, "add_special": special, "parse_special": special})
    return [t if isinstance(t, int) else t["id"] for t in tokens["tokens"]]


def _llama_chat(client: ServerClient, model: str, messages: list[dict]) -> tuple[str, list[int]]:
    text = client.post_json("/apply-template", {"messages": messages})["prompt"]
    return text, _llama_tokenize(client, model, text, True)


def _llama_context(client: ServerClient, entry: dict) -> int | None:
    props = client.get_json("/props", timeout=5)
    n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx") or props.get("n_ctx")
    return int(n_ctx) if n_ctx else (entry.get("meta") or {}).get("n_ctx")


def _llama_figures(client: ServerClient, model: str) -> dict:
    out = {}
    try:
        out.update(read_metrics(client.request("GET", "/metrics", timeout=5, as_json=False), LLAMA_FIGURES, model))
    except RemoteError:
        pass   # started without --metrics
    try:
        out["slots"] = summarize_slots(client.get_json("/slots", timeout=5))
    except RemoteError:
        pass   # started without --slots
    return out


# --- this project's own endpoint (playground/api/): llama.cpp's /tokenize and /apply-template shapes

def _playground_chat(client: ServerClient, model: str, messages: list[dict]) -> tuple[str, list[int]]:
    text = client.post_json("/apply-template", {"messages": messages})["prompt"]
    return text, _llama_tokenize(client, model, text, False)   # the template's text, read as the engine reads it


# --- vLLM

def _vllm_tokenize(client: ServerClient, model: str, text: str, special: bool) -> list[int]:
    return client.post_json("/tokenize", {"model": model, "prompt": text, "add_special_tokens": special})["tokens"]


def _vllm_chat(client: ServerClient, model: str, messages: list[dict]) -> tuple[str, list[int]]:
    ids = client.post_json("/tokenize", {"model": model, "messages": messages, "add_generation_prompt": True})["tokens"]
    return client.post_json("/detokenize", {"model": model, "tokens": ids})["prompt"], ids


def _vllm_figures(client: ServerClient, model: str) -> dict:
    """Its /metrics read by server_metrics' rule: requests summed over engines, the KV share per engine."""
    return read_metrics(client.request("GET", "/metrics", timeout=5, as_json=False), VLLM_FIGURES, model)


@dataclass(frozen=True)
class ServerKind:
    name: str
    owned_by: tuple[str, ...]      # what its /v1/models says in "owned_by"
    probe: str | None              # a GET path that only this kind answers with JSON (when owned_by says nothing)
    prob_meaning: str              # what its logprobs are
    not_exposed: str               # what it does not tell a client
    exact_ids: bool = False        # /v1/completions takes a token-id list (and ignore_eos)
    tokenize_text: Callable | None = None   # (client, model, text, special) -> ids
    tokenize_chat: Callable | None = None   # (client, model, messages) -> (text, ids)
    context_window: Callable = _none        # (client, /v1/models entry) -> int | None
    figures: Callable = lambda client, model: {}   # (client, served model) -> its live figures
    extra_sampling: Callable = lambda s: {}  # its names for what _common leaves out
    extras: dict = field(default_factory=dict)       # fields added to every streamed request
    fresh_prefill: Callable = lambda: {}    # fields that keep a run from reusing a cached prompt prefix

    def sampling(self, s: GenerationSettings) -> dict:
        return {**_common(s), **self.extra_sampling(s)}


KINDS = [
    ServerKind("llama.cpp", ("llamacpp",), "/props",
               "the model's probabilities before sampling (softmax of the raw logits; post_sampling_probs off)",
               "KV-cache bytes (its /metrics has no KV gauges; /slots gives each slot's context size, not bytes)",
               exact_ids=True, tokenize_text=_llama_tokenize, tokenize_chat=_llama_chat,
               context_window=_llama_context, figures=_llama_figures,
               extra_sampling=lambda s: {"top_k": s.top_k, "min_p": 0.0},
               fresh_prefill=lambda: {"cache_prompt": False}),
    ServerKind("vllm", ("vllm",), None,
               "raw model log-probabilities, before temperature and penalties (vLLM's default logprobs mode)",
               "per-request server timings (unless it runs with --enable-per-request-metrics: only aggregate "
               "histograms in /metrics) and KV bytes per request (only the whole pool's share in use)",
               exact_ids=True, tokenize_text=_vllm_tokenize, tokenize_chat=_vllm_chat,
               context_window=lambda client, entry: entry.get("max_model_len"), figures=_vllm_figures,
               extra_sampling=lambda s: {"top_k": s.top_k} if s.top_k else {},
               extras={"return_tokens_as_token_ids": True},
               fresh_prefill=lambda: {"cache_salt": secrets.token_hex(8)}),
    ServerKind("playground", ("playground",), None,
               "the model's probabilities before sampling (softmax at temperature 1, before any warper), from "
               "the engine's own Steps",
               "KV-cache bytes and the batch each token was made in (the playground's Serve tab shows them)",
               exact_ids=True, tokenize_text=_llama_tokenize, tokenize_chat=_playground_chat,
               context_window=lambda client, entry: entry.get("max_model_len"),
               figures=_vllm_figures,   # its /metrics uses vLLM's names (playground/api/prometheus.py)
               extra_sampling=lambda s: {"top_k": s.top_k},
               extras={"per_request_metrics": True}),   # vLLM's `metrics` beside llama.cpp's `timings`
    ServerKind("ollama", ("library", "ollama"), "/api/version",
               "log-probabilities as Ollama reports them (only recent versions send any)",
               "token ids, a tokenizer endpoint, per-request server timings and KV figures in its OpenAI API"),
    ServerKind("openai-compatible", (), None,
               "log-probabilities as the server reports them (their meaning is not documented here)",
               "whatever it does not put in the OpenAI API: token ids, tokenizer, server timings, KV figures"),
]


def detect_kind(client: ServerClient, entry: dict) -> ServerKind:
    """The kind of server behind `client`, from its /v1/models entry for the model, else by probing."""
    owner = str(entry.get("owned_by", "")).lower()
    for kind in KINDS:
        if owner in kind.owned_by:
            return kind
    for kind in KINDS:
        if kind.probe:
            try:
                if isinstance(client.get_json(kind.probe, timeout=5), dict):
                    return kind
            except RemoteError:
                continue
    return KINDS[-1]


def logprobs_work(client: ServerClient, model: str, kind: ServerKind) -> tuple[bool, str | None]:
    """(works, what the probe saw when it could not tell): a one-token request asking for logprobs.

    llama.cpp and vLLM always give them. A server whose probe reply is refused, fails or is not the JSON
    asked for (some stream whatever they are asked) is taken as giving none: top-k is off, and the second
    value says what the probe got, for the page to show.
    """
    if kind.name in ("llama.cpp", "vllm", "playground"):
        return True, None
    try:
        reply = client.post_json("/v1/chat/completions", {"model": model, "max_tokens": 1, "logprobs": True,
                                 "top_logprobs": 1, "messages": [{"role": "user", "content": "Hi"}]})
    except (RemoteMalformed, RemoteBadRequest, RemoteServerError) as exc:
        return False, f"unknown, off (the logprobs probe got: {exc})"
    choice = ((reply.get("choices") if isinstance(reply, dict) else None) or [{}])[0]
    return bool(((choice.get("logprobs") if isinstance(choice, dict) else None) or {}).get("content")), None
