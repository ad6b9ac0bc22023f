"""Pure plotting functions: results in, plotly Figure out (one module per topic)."""
from .tokens import plot_token_comparison
