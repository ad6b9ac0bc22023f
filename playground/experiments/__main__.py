"""`python -m playground.experiments <name> --out DIR`: see cli.py."""
from .cli import main

raise SystemExit(main())
