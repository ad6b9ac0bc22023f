"""The lessons as live experiments: each one measures the real backend and returns a result record.

    from playground.experiments import EXPERIMENTS, run_prefill_sweep
    sweep = run_prefill_sweep(source, progress=lambda f, msg: print(f"{f:4.0%} {msg}"))
    sweep.to_dict()                  # JSON-ready; sweep.info says source/device/dtype/model
    EXPERIMENTS["cache"].run(source, {"new_tokens": 8})   # the registry the CLI and the UI read

Every experiment measures through the step-source seam (playground/source.py): Runs from exact
token ids (EOS ignored, with or without the KV cache), timed by the one step loop of the source, so
each runs on a local backend and on any other source that offers what it needs (a clear ValueError
says what is missing otherwise).

| experiment           | question it answers                                    | defaults                           | seen* |
| run_prefill_sweep    | how does TTFT grow with prompt length? (a + bL + cL^2) | lengths 16..1024 (8) x 3 repeats   | 35 s  |
| run_cache_comparison | what does the KV cache save?                           | 128-token prompt, 32 tokens, twice | 20 s  |
| run_depth_sweep      | does each decode step get slower as the context grows? | 256-token prompt, 256 decode steps | 26 s  |
| run_short_vs_long    | what does a long input cost compared with a short one? | two Engine runs of up to 48 tokens | 11 s  |
| run_roofline         | why is decode slow? (steps against peak and bandwidth) | prompts 32..512 (4), batch 1..8    |       |
* SmolLM2-135M, torch fp32, 1 thread, on a 2-core machine shared with other busy processes.

All take `progress(fraction, message)` and a `threading.Event` to cancel; a cancelled experiment
returns its partial result with `cancelled=True` (see common.py). `python -m playground.experiments`
runs them headless and writes JSON and standalone HTML charts (see cli.py).

Left out: anything not measured. Fits and cost figures are derived from measurements and named so.
"""
from .cache import CacheComparison, run_cache_comparison
from .common import Fit, RunInfo, fit_polynomial
from .depth import DepthSweep, run_depth_sweep
from .prefill import PrefillPoint, PrefillSweep, geometric_lengths, run_prefill_sweep
from .short_long import (DEFAULT_USD_PER_M_INPUT, DEFAULT_USD_PER_M_OUTPUT, RequestMeasure,
                         ShortLongComparison, run_short_vs_long)
from .roofline import RooflineSweep, run_roofline
from .registry import EXPERIMENTS, ExperimentSpec, Param
