"""`python -m playground.serve --out DIR [...]`: a workload of many requests through a scheduler (cli.py)."""
from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
