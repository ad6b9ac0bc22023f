"""Pure plotting functions: results in, plotly Figure out (one module per topic)."""
from .compare import plot_compare
