"""Pure functions that turn Traces and experiment results into Plotly figures (no gradio)."""
try:  # plotly imports pandas lazily, on the first figure; two server threads drawing their first
    import pandas  # noqa: F401  figures at once can then see a half-imported module. Import it once, here.
except ImportError:  # plotly works without pandas
    pass

from .compare import plot_compare
from .experiments import (plot_cache_comparison, plot_depth_sweep, plot_prefill_sweep, plot_short_vs_long,
                          plot_speculative)
from .roofline import plot_roofline, plot_roofline_sweep
from .run import plot_kv_cache, plot_step_latency, plot_timeline, plot_top_k
from .tokens import plot_token_comparison
