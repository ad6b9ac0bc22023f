"""Pure functions that turn Traces and experiment results into Plotly figures (no gradio)."""
from .compare import plot_compare
from .tokens import plot_token_comparison
