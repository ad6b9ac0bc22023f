"""`python -m playground.experiments <name> --out DIR`: see cli.py."""
from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
