"""Headless runs: `python -m playground.experiments <name> --out DIR [options]`.

    python -m playground.experiments all --out results/
    python -m playground.experiments prefill --out results/ --min-length 16 --max-length 2048 --repeats 5
    python -m playground.experiments cache --out results/ --backend onnx --cache-prompt 256

Writes DIR/<name>.json (the result's to_dict(): raw keys, for programs) and DIR/<name>.html (the chart,
plotly.js inlined so it opens offline) per experiment; prints the result in words with units (its
findings) on stdout, and one progress line per update on stderr.

On a machine shared with other busy processes, `--threads 1` gives far steadier timings with torch on
CPU: with 2 threads each parallel region waits for a thread the OS has put aside, and a 100 ms
prefill was seen to take 1-8 s. Each result records the thread count it ran with.

Left out: running several backends in one call (run the command once per backend), and workloads of many
requests: `python -m playground.serve` runs those (asked for here, it says so and exits with status 2).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .registry import EXPERIMENTS


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from ..backends import BACKENDS
    p = argparse.ArgumentParser(prog="python -m playground.experiments", description=__doc__.split("\n")[0])
    p.add_argument("name", choices=list(EXPERIMENTS) + ["all"])
    p.add_argument("--out", type=Path, required=True, help="folder for <name>.json and <name>.html")
    p.add_argument("--backend", default=None, help=f"{' | '.join(BACKENDS)} (default: as the app picks)")
    p.add_argument("--model", default=None, help="model spec (default: the bundled SmolLM2; 'tiny' for a test model)")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None)
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's choice); 1 is steadier on a busy machine")
    for spec in EXPERIMENTS.values():
        group = p.add_argument_group(spec.title)
        for param in spec.params:
            group.add_argument(param.flag, dest=f"{spec.name}.{param.name}", type=int, default=param.default,
                               help=f"{param.label} ({param.low}-{param.high})")
    return p.parse_args(argv)


def options_of(args: argparse.Namespace, name: str) -> dict:
    """The parsed values of experiment `name`'s parameters."""
    return {k.partition(".")[2]: v for k, v in vars(args).items() if k.startswith(f"{name}.")}


SERVE_ELSEWHERE = ("serve is not an experiment: a workload of many requests has its own command, "
                   "python -m playground.serve (see python -m playground.serve --help)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        print(f"python -m playground.experiments: {SERVE_ELSEWHERE}", file=sys.stderr)
        return 2
    args = parse_args(argv)
    from ..backends import create_backend
    from ..config import AppConfig
    from ..engine import Engine
    from ..run_view import format_seconds

    def say(fraction, message, name="load"):
        print(f"[{name}] {fraction:4.0%} {message}", file=sys.stderr, flush=True)

    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    config = AppConfig.from_args(args)   # PLAYGROUND_MODEL / PLAYGROUND_BACKEND / ... when not given here
    source = Engine(create_backend(config.backend, config.model, config.device, config.dtype, progress=say))
    args.out.mkdir(parents=True, exist_ok=True)
    for name in EXPERIMENTS if args.name == "all" else (args.name,):
        spec = EXPERIMENTS[name]
        result = spec.run(source, options_of(args, name), lambda f, m, n=name: say(f, m, n))
        stem = args.out / name
        stem.with_suffix(".json").write_text(json.dumps(result.to_dict(), indent=1, ensure_ascii=False))
        spec.plot(result).write_html(str(stem.with_suffix(".html")), include_plotlyjs=True)
        print(f"{name}: {format_seconds(result.elapsed)} -> {stem}.json, {stem}.html", flush=True)
        for line in result.findings() or ["(too little measured for a summary)"]:
            print(f"  - {line}", flush=True)
    return 0
