"""`python -m playground.lesson --out DIR [--backend NAME] [--model SPEC]`: the eight steps, run here, as a handout."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from ..backends import BACKENDS, create_backend
    from ..config import AppConfig
    from ..engine import Engine
    from . import Lesson
    from .handout import write_handout

    p = argparse.ArgumentParser(prog="python -m playground.lesson", description=__doc__)
    p.add_argument("--out", type=Path, required=True, help="folder for lesson.html")
    p.add_argument("--backend", default=None, help=f"{' | '.join(BACKENDS)} (default: as the app picks)")
    p.add_argument("--model", default=None, help="model spec (default: the bundled SmolLM2; 'tiny' for tests)")
    args = p.parse_args(argv)

    def say(fraction, message):
        print(f"{fraction:4.0%} {message}", file=sys.stderr, flush=True)

    config = AppConfig.from_args(args)   # PLAYGROUND_MODEL / PLAYGROUND_BACKEND when not given here
    lesson = Lesson(Engine(create_backend(config.backend, config.model, config.device, config.dtype, progress=say)))
    for result in lesson.run_all(say):
        print(f"{result.number}. {result.title}: {result.takeaway}", flush=True)
    print(f"handout: {write_handout(lesson, args.out)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
