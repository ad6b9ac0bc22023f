"""`make bench`'s JSON lines as a dated results page: docs/results/<date>-<commit>.md, never copied by hand.

    python -m playground.bench ... > bench.jsonl                                # the stamp, then the rows
    python -m playground.bench results markdown bench.jsonl --out docs/results  # the page (prints its path)

The stamp is the bench's first JSON line (`"row": "stamp"`, rows.Stamp), taken as it starts: the commit
(and whether the tree had uncommitted changes), the machine (CPU model, cores, memory, OS, Python), the UTC
date, the load average and the command line. Rows that carry their own `commit`, `machine` or `date` keep
them. The page lists every row
as printed, grouped by kind (consecutive rows of one kind share a table: one column a row), with nested
figures flattened to dotted names; a figure a row lacks is blank, a figure given as null is "missing".
Left out: any judgement of the figures (targets are in docs/benchmarks.md); charts.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .rows import PREFILL, STAMP

ROOT = Path(__file__).resolve().parents[2]


def read_rows(lines) -> list[dict]:
    """The JSON objects among the lines (the bench prints only those on stdout; anything else is skipped)."""
    rows = []
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def kind(row: dict) -> str:
    """What a row is: its `row` or `bench` name, "kld" for the kld rows, "interleaved" for interleaved.py's rounds
    and medians, else its tool, else "backend".

    >>> kind({"kld": "llama-perplexity --kl-divergence", "backend": "llama.cpp"}), kind({"backend": "onnx"})
    ('kld', 'backend')
    >>> kind({"round": 1, "llama.cpp": {"decode_tps": 50.0}}), kind({"summary": "medians", "valid_rounds": 3})
    ('interleaved', 'interleaved')
    """
    interleaved = "round" in row or "valid_rounds" in row
    return str(row.get("row") or row.get("bench") or ("kld" if "kld" in row else None) or
               ("interleaved" if interleaved else None) or row.get("tool") or
               ("summary" if "ceilings" in row else "fidelity" if "top1_agreement_with_fp32" in row
                else PREFILL if "prefill_tokens" in row and "engine_decode_tps" not in row else "backend"))


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
        raise ValueError(f"the rows carry no {', '.join(missing)}: write the file from "
                         "`python -m playground.bench ...`, whose first line is the stamp")
    return stamp


def groups(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """Consecutive rows of one kind, together (a stamp between two rows of a kind parts them)."""
    return [(name, members) for _, name, members in stamped_groups(rows)]


def stamped_groups(rows: list[dict]) -> list[tuple[dict | None, str, list[dict]]]:
    """groups(rows), each with the stamp of the command that printed it where that is not the page's first stamp
    (a file of several commands' lines: `cpu_view` and the command say what the rows below were measured as).

    >>> rows = [{"row": "stamp", "command": "a"}, {"bench": "x"}, {"bench": "x"},
    ...         {"row": "stamp", "command": "b", "cpu_view": "v"}, {"bench": "x"}]
    >>> [(s and s["command"], name, len(m)) for s, name, m in stamped_groups(rows)]
    [(None, 'x', 2), ('b', 'x', 1)]
    """
    out: list[tuple[dict | None, str, list[dict]]] = []
    first = current = None
    parted = False
    for row in rows:
        if row.get("row") == STAMP:
            if first is None:
                first = row
            else:
                current = row
            parted = True
            continue
        name = kind(row)
        if out and out[-1][1] == name and not parted:
            out[-1][2].append(row)
        else:
            out.append((current, name, [row]))
        parted = False
    return out


def markdown(rows: list[dict]) -> str:
    """The results page: the stamp, then one table per group of rows (one column a row)."""
    stamp = stamp_of(rows)
    m = stamp["machine"]
    machine_line = (", ".join(f"{k} {v}" for k, v in m.items()) if isinstance(m, dict) else str(m))
    lines = [f"# `make bench` results: {stamp['date']}, commit {stamp['commit']}", "",
             "Generated by `python -m playground.bench results` from the bench's JSON lines; not edited by hand. Figures,",
             "not tests: they depend on the machine and its load. Method, rows and targets:",
             "[benchmarks.md](../benchmarks.md).", "",
             f"- commit: `{stamp['commit']}`" + (" (with uncommitted changes)" if stamp.get("uncommitted_changes") else ""),
             f"- machine: {machine_line}",
             f"- date: {stamp['date']}"]
    if stamp.get("llama_cpu_variant") is not None:
        lines.append(f"- llama.cpp's CPU variant loaded here: {stamp['llama_cpu_variant']}")
    if stamp.get("cpu_view"):
        lines.append(f"- **CPU view** (not this CPU kind: its kernels, on this machine): {stamp['cpu_view']}")
    if stamp.get("load_average") is not None:
        lines.append(f"- load average at the start (1, 5, 15 min): {cell(stamp['load_average'])}")
    if stamp.get("command"):
        lines.append(f"- command: `{stamp['command']}`")
    bench_rows = [r for r in rows if r.get("row") != STAMP]
    lines += [f"- rows: {len(bench_rows)}" + (f", {sum('error' in r for r in bench_rows)} with an error"
                                               if any("error" in r for r in bench_rows) else ""), ""]
    shown = None
    for stamp_here, name, members in stamped_groups(rows):
        if stamp_here is not None and stamp_here is not shown:
            shown = stamp_here
            lines += [f"### The rows below: `{stamp_here.get('command')}` ({stamp_here.get('date')})", ""]
            if stamp_here.get("cpu_view"):
                lines += [f"**CPU view** (not this CPU kind: its kernels, on this machine): {stamp_here['cpu_view']}; "
                          f"llama.cpp's variant: {stamp_here.get('llama_cpu_variant')}", ""]
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
    p = argparse.ArgumentParser(prog="python -m playground.bench results", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    m = sub.add_parser("markdown", help="write the results page of a JSON-lines file")
    m.add_argument("rows", type=Path, help="the JSON lines: the stamp, then the bench's rows")
    m.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="the folder for the page")
    args = p.parse_args(argv)
    rows = read_rows(args.rows.read_text().splitlines())
    try:
        page = markdown(rows)
    except ValueError as exc:
        print(f"bench results: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / page_name(rows)
    path.write_text(page + "\n")
    print(path)
    return 0
