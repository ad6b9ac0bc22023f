"""Pure plotting functions: results in, plotly Figure out (one module per topic)."""
from .experiments import plot_cache_comparison, plot_depth_sweep, plot_prefill_sweep, plot_short_vs_long
