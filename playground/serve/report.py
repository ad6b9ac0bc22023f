"""A standalone HTML report of one or more workload runs (and sweeps): opens offline, plotly.js inlined once.

    Path("serve.html").write_text(html_report([result_a, result_b], sweeps=[batch_sweep]))

Per run: the lesson sentence, p50/p95 per class, throughput, the KV pool as sized, then the Gantt,
throughput, KV-in-use and forward-pass charts. Two runs of the same workload get one comparing sentence.
Every piece of text is escaped (prompts are user input).

Left out: styling beyond a few lines of CSS.
"""
from __future__ import annotations

import html

from .summary import class_stats, compare, lesson, pool_text, throughput

CSS = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
       "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}"
       "th{background:#f1f5f9}.lesson{font-size:1.15em;background:#fef3c7;padding:.6em;border-radius:6px}")


def _fmt(v) -> str:
    if v is None:
        return "—"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def class_table(result) -> str:
    stats = class_stats(result)
    cols = ["requests", "served", "prompt_tokens", "output_tokens", "waiting_p50", "ttft_p50", "ttft_p95", "tpot_p50",
            "tpot_p95", "e2e_p50", "e2e_p95"]
    head = "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in ["class", *cols])
    rows = "".join("<tr>" + f"<td>{html.escape(cls)}</td>" + "".join(f"<td>{_fmt(row[c])}</td>" for c in cols) + "</tr>"
                   for cls, row in stats.items())
    return f"<table><tr>{head}</tr>{rows}</table><p>times in seconds; p50/p95 over the requests that produced a token</p>"


def pool_line(result) -> str:
    text = pool_text(result)
    return f"<p>{html.escape(text)}</p>" if text else ""


def run_section(result, figures, include_js: list[bool]) -> str:
    tp = throughput(result)
    parts = [f"<h2>{html.escape(result.scheduler_label)}</h2><p>{html.escape(result.source)} · "
             f"{len(result.records)} requests · {result.elapsed:.1f} s"
             f"{' · <b>cancelled: partial</b>' if result.cancelled else ''}</p>",
             f"<p class='lesson'>{html.escape(lesson(result))}</p>", class_table(result),
             f"<p>Throughput: {_fmt(tp['output_tps'])} output tokens/s, {_fmt(tp['requests_per_s'])} requests/s "
             f"({tp['output_tokens']} tokens, {tp['completed']} requests completed, wall {_fmt(tp['wall_s'])} s). "
             f"Admitted means: {html.escape(result.admitted_means)}.</p>", pool_line(result)]
    parts += [f"<p>{html.escape(n)}</p>" for n in result.notes]
    for fig in figures:
        parts.append(fig.to_html(full_html=False, include_plotlyjs="inline" if not include_js[0] else False))
        include_js[0] = True
    return "\n".join(parts)


def html_report(results, sweeps=(), title: str = "Serving a workload", expect=None) -> str:
    """`expect`: what B should do against A (a preset's `Expectation`; default: summary.expectation_for)."""
    from ..charts.serve import plot_batches, plot_gantt, plot_kv_in_use, plot_kv_map, plot_throughput
    from ..charts.serve_sweeps import TITLES, plot_sweep
    js = [False]
    body = [f"<h1>{html.escape(title)}</h1>"]
    if len(results) == 2 and results[0].workload == results[1].workload:
        body.append(f"<p class='lesson'>{html.escape(compare(*results, expect=expect))}</p>")
    for result in results:
        body.append(run_section(result, [plot_gantt(result), plot_throughput(result), plot_kv_in_use(result),
                                         plot_kv_map(result), plot_batches(result)], js))
    for sweep in sweeps:
        fig = plot_sweep(sweep)
        body.append(f"<h2>{TITLES[sweep.kind]}</h2>")
        body.append(fig.to_html(full_html=False, include_plotlyjs="inline" if not js[0] else False))
        js[0] = True
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>")
