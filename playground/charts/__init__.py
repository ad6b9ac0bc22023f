"""Pure plotting functions: results in, plotly Figure out (one module per topic)."""
from .tokens import plot_token_comparison
from .run import plot_kv_cache, plot_step_latency, plot_timeline, plot_top_k
