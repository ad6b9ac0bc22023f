"""Pure functions that turn Traces and experiment results into Plotly figures (no gradio)."""
from .compare import plot_compare
from .experiments import plot_cache_comparison, plot_depth_sweep, plot_prefill_sweep, plot_short_vs_long
from .tokens import plot_token_comparison
from .run import plot_kv_cache, plot_step_latency, plot_timeline, plot_top_k
