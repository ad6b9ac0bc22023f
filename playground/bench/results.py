"""`make bench`'s JSON lines as a dated results page: docs/results/<date>-<commit>.md, never copied by hand.

    python scripts/bench_results.py stamp [--command CMD] > bench.jsonl    # commit, machine, date, load
    python -m playground.bench ... >> bench.jsonl                          # the rows, as the bench prints them
    python scripts/bench_results.py markdown bench.jsonl --out docs/results   # the page (prints its path)

The stamp is one JSON line (`"row": "stamp"`) taken just before the bench starts: the commit (and whether
the tree had uncommitted changes), the machine (CPU model, cores, memory, OS, Python), the UTC date and the
load average. Rows that carry their own `commit`, `machine` or `date` keep them. The page lists every row
as printed, grouped by kind (consecutive rows of one kind share a table: one column a row), with nested
figures flattened to dotted names; a figure a row lacks is blank, a figure given as null is "missing".
Left out: any judgement of the figures (targets are in docs/benchmarks.md); charts.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAMP = "stamp"


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine() -> dict:
    """The machine the bench ran on, as far as this platform says."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gb = None
    try:
        memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "memory_gb": memory_gb, "os": platform.platform(), "python": platform.python_version()}


def stamp_row(command: str | None = None) -> dict:
    return {"row": STAMP, "commit": git("rev-parse", "--short=12", "HEAD") or None,
            "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no")),
            "machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load_average": [round(x, 2) for x in os.getloadavg()], "command": command}


def read_rows(lines) -> list[dict]:
    """The JSON objects among the lines (the bench prints only those on stdout; anything else is skipped)."""
    rows = []
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def kind(row: dict) -> str:
    """What a row is: its `row` or `bench` name, else its tool, else "backend"."""
    return str(row.get("row") or row.get("bench") or row.get("tool") or
               ("summary" if "ceilings" in row else "fidelity" if "top1_agreement_with_fp32" in row
                else "prefill" if "prefill_tokens" in row and "engine_decode_tps" not in row else "backend"))


def flatten(row: dict, prefix: str = "") -> dict:
    """Nested figures as dotted names.

    >>> flatten({"a": 1, "b": {"c": None, "d": [1, 2]}})
    {'a': 1, 'b.c': None, 'b.d': [1, 2]}
    """
    out = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def cell(value, present: bool = True) -> str:
    if not present:
        return ""
    if value is None:
        return "missing"
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def stamp_of(rows: list[dict]) -> dict:
    """The run's commit, machine and date: the stamp row's, else the first row's that carries them."""
    stamp = next((r for r in rows if r.get("row") == STAMP), {})
    for key in ("commit", "machine", "date"):
        if stamp.get(key) is None:
            stamp[key] = next((r[key] for r in rows if r.get(key) is not None), None)
    missing = [k for k in ("commit", "machine", "date") if stamp.get(k) is None]
    if missing:
        raise ValueError(f"the rows carry no {', '.join(missing)}: start the file with "
                         "`python scripts/bench_results.py stamp` (make bench-results does)")
    return stamp


def groups(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """Consecutive rows of one kind, together."""
    out: list[tuple[str, list[dict]]] = []
    for row in rows:
        if row.get("row") == STAMP:
            continue
        name = kind(row)
        if out and out[-1][0] == name:
            out[-1][1].append(row)
        else:
            out.append((name, [row]))
    return out


def markdown(rows: list[dict]) -> str:
    """The results page: the stamp, then one table per group of rows (one column a row)."""
    stamp = stamp_of(rows)
    m = stamp["machine"]
    machine_line = (", ".join(f"{k} {v}" for k, v in m.items()) if isinstance(m, dict) else str(m))
    lines = [f"# `make bench` results: {stamp['date']}, commit {stamp['commit']}", "",
             "Generated by `scripts/bench_results.py` from the bench's JSON lines; not edited by hand. Figures,",
             "not tests: they depend on the machine and its load. Method, rows and targets:",
             "[benchmarks.md](../benchmarks.md).", "",
             f"- commit: `{stamp['commit']}`" + (" (with uncommitted changes)" if stamp.get("uncommitted_changes") else ""),
             f"- machine: {machine_line}",
             f"- date: {stamp['date']}"]
    if stamp.get("load_average") is not None:
        lines.append(f"- load average at the start (1, 5, 15 min): {cell(stamp['load_average'])}")
    if stamp.get("command"):
        lines.append(f"- command: `{stamp['command']}`")
    bench_rows = [r for r in rows if r.get("row") != STAMP]
    lines += [f"- rows: {len(bench_rows)}" + (f", {sum('error' in r for r in bench_rows)} with an error"
                                               if any("error" in r for r in bench_rows) else ""), ""]
    for name, members in groups(rows):
        flat = [flatten(r) for r in members]
        keys = list(dict.fromkeys(k for f in flat for k in f))
        heads = [cell(f.get("backend", f"#{i + 1}")) for i, f in enumerate(flat)]
        lines += [f"## {name}", "", "| figure | " + " | ".join(heads) + " |",
                  "|---|" + "---|" * len(flat)]
        lines += ["| " + k + " | " + " | ".join(cell(f.get(k), k in f) for f in flat) + " |" for k in keys]
        lines.append("")
    return "\n".join(lines)


def page_name(rows: list[dict]) -> str:
    stamp = stamp_of(rows)
    return f"{str(stamp['date'])[:10]}-{stamp['commit']}.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/bench_results.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("stamp", help="print the stamp row (commit, machine, date, load)")
    s.add_argument("--command", default=None, help="the bench command the rows will come from")
    m = sub.add_parser("markdown", help="write the results page of a JSON-lines file")
    m.add_argument("rows", type=Path, help="the JSON lines: the stamp, then the bench's rows")
    m.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="the folder for the page")
    args = p.parse_args(argv)
    if args.action == "stamp":
        print(json.dumps(stamp_row(args.command)), flush=True)
        return 0
    rows = read_rows(args.rows.read_text().splitlines())
    try:
        page = markdown(rows)
    except ValueError as exc:
        print(f"bench_results: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / page_name(rows)
    path.write_text(page + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
