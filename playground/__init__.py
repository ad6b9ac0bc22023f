"""LLM Serving Playground: a real model, measured one token at a time.

The public API; nothing here loads a model (that happens on the first `create_backend`).
"""
from .backends import available_backends, create_backend, default_backend_name
from .config import AppConfig, GenerationSettings, coerce_settings
from .engine import Engine, Run
from .metrics import Metrics, compute_metrics, estimate_cost
from .models import ModelLoadError, load_model, resolve_model_spec
from .trace import Candidate, KVShape, Step, Trace

__all__ = ["AppConfig", "Candidate", "Engine", "GenerationSettings", "KVShape", "Metrics", "ModelLoadError",
           "Run", "Step", "Trace", "available_backends", "coerce_settings", "compute_metrics",
           "create_backend", "default_backend_name", "estimate_cost", "load_model", "resolve_model_spec"]
