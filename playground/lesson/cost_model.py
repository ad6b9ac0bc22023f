"""A FLOP model of prefill, calibrated on this session's measured prefills: for lengths far past them.

    model = calibrate(config, [(128, 0.21), (512, 0.80), (1024, 1.7)])   # (prompt tokens, measured seconds)
    model.predict(50_000)        # (low, middle, high) seconds: an extrapolation, and labelled so

Prefill work for L prompt tokens: every weight matrix is applied to every token (2·P·L FLOPs for P
weights in the layers), and causal attention compares each token with those before it (about
2·layers·hidden·L² FLOPs: Q·Kᵀ and the weighted sum of V, halved by the mask). The machine's effective
rate is taken from each measured point (FLOPs / seconds); the middle estimate uses their median, the
band their slowest and fastest. Unlike a quadratic fitted to the points, the L² term's weight comes
from the model's shape, not from noise in a few short prompts.

    >>> from types import SimpleNamespace
    >>> cfg = SimpleNamespace(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
    ...                       num_key_value_heads=2)
    >>> layer_weights(cfg)                      # a layer: q, o 64x64; k, v 64x32; gate, up, down 64x128
    (2, 64, 73728)
    >>> m = calibrate(cfg, [(100, 1e-3)])
    >>> [round(x, 6) for x in m.predict(100)]  # one point: the band is that point
    [0.001, 0.001, 0.001]

Left out: memory limits (a 50,000-token cache may not fit), and batching; the KV bytes are the formula's.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass


def layer_weights(config) -> tuple[int, int, int]:
    """(layers, hidden size, weights in all layers' matmuls) of a Llama-style config."""
    h, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    kv = (getattr(config, "num_key_value_heads", None) or heads) * head_dim
    per_layer = 2 * h * heads * head_dim + 2 * h * kv + 3 * h * config.intermediate_size
    return layers, h, layers * per_layer


@dataclass(frozen=True)
class PrefillModel:
    layers: int
    hidden: int
    weights: int                      # P: weights applied to every prompt token
    rates: tuple[float, ...]          # effective FLOP/s seen at each calibration point (measured)
    points: tuple[tuple[int, float], ...]

    def flops(self, tokens: int) -> float:
        return 2 * self.weights * tokens + 2 * self.layers * self.hidden * tokens**2

    def predict(self, tokens: int) -> tuple[float, float, float]:
        """(low, middle, high) seconds for a prefill of `tokens`: fastest, median and slowest rate seen."""
        f = self.flops(tokens)
        return f / max(self.rates), f / statistics.median(self.rates), f / min(self.rates)


def calibrate(config, points: list[tuple[int, float]]) -> PrefillModel:
    """The model for `config` with the rates of the measured (tokens, seconds) points."""
    points = [(int(n), float(t)) for n, t in points if n > 0 and t > 0]
    if not points:
        raise ValueError("calibrating the prefill model needs at least one measured prefill")
    layers, hidden, weights = layer_weights(config)
    model = PrefillModel(layers, hidden, weights, (), tuple(points))
    rates = tuple(model.flops(n) / t for n, t in points)
    return PrefillModel(layers, hidden, weights, rates, tuple(points))
