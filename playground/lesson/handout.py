"""The handout: the eight steps with this machine's numbers in one standalone HTML file (works offline).

    path = write_handout(lesson, Path("out"))     # out/lesson.html, plotly.js inlined once

Each step shows its title, its takeaway sentence, what is missing or estimated, a table of every number
the takeaway used (as measured, before rounding), its chips and its charts. Text is escaped.
Left out: the slow-motion replay (a page feature) and anything not run (a step not run is listed so).
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from . import STEPS
from ..source import Origin

CSS = """body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; font-size: 18px; color: #111; }
h2 { border-top: 3px solid #2563eb; padding-top: .6em; } .takeaway { font-size: 1.25rem; font-weight: 600; }
.note { color: #92400e; } table { border-collapse: collapse; } td { border: 1px solid #d1d5db; padding: .2em .6em; }
.tok { display: inline-block; padding: 0 .25em; margin: 0 1px 3px 0; border-radius: 4px; background: #dbeafe;
 white-space: pre; font-family: monospace; } .tok-special { background: #1f2937; color: #fff; }"""


def number_cell(value) -> str:
    """A table cell's text: numbers as measured (6 significant digits), lists as JSON, None as missing.

    >>> number_cell(0.123456789), number_cell(None), number_cell([(128, 0.2)])
    ('0.123457', 'missing', '[[128, 0.2]]')
    """
    if value is None:
        return "missing"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


def render_handout(lesson) -> str:
    info = lesson.source.info
    parts = [f"<h1>The serving lesson, measured</h1><p>{html.escape(info.model)} on {html.escape(info.describe())}"
             f"{' (a server)' if info.origin == Origin.REMOTE else ''}. Every number below was measured in this run; "
             "estimates say so.</p>"]
    plotly_js = True
    for n, step in STEPS.items():
        r = lesson.results.get(n)
        parts.append(f"<h2>{n}. {html.escape(step.title)}</h2>")
        if r is None:
            parts.append("<p class='note'>not run</p>")
            continue
        parts.append(f"<p class='takeaway'>{html.escape(r.takeaway)}</p>")
        parts += [f"<p class='note'>{html.escape(note)}</p>" for note in r.notes]
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(number_cell(v))}</td></tr>"
                       for k, v in r.numbers.items())
        parts.append(f"<table>{rows}</table>{r.html}")
        for fig in r.figures.values():
            parts.append(fig.to_html(full_html=False, include_plotlyjs=plotly_js))
            plotly_js = False
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>The serving lesson</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>")


def write_handout(lesson, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "lesson.html"
    path.write_text(render_handout(lesson), encoding="utf-8")
    return path
