"""HTML for a run: output tokens as chips, the metrics panel and the status line, read from the Trace.

The Generate page draws its chips and live metrics in the browser (ui/live/format.js mirrors `chip_title`
and `metrics_html` there, from the step stream); the server sends `metrics_html` and `status_line` at
the end of a run, and `chip_html` serves anything that renders a finished trace as HTML. Chips reuse the token-view style of `tokens/chips.py` (whitespace visible, colour by position); each
chip's hover title holds what the Step recorded: token id, the model's probability (softmax at T=1) and
the one it was sampled with, step latency, KV bytes; what the source did not give is named missing.
All text goes through `html.escape(..., quote=True)` because gr.HTML inserts markup as is.

Example:
    >>> from playground.trace import Phase, Step
    >>> chip_html(Step(index=1, token_id=42, text=" <b>", special=False, phase=Phase.DECODE, time=0.1, latency=0.02,
    ...                prob=0.5, sample_prob=1.0, top=(), seq_len=10, kv_bytes=1024))
    '<span class="tok tok-c1" title="id 42 · model p=0.500 · sampled p=1.000 · 20.0 ms · KV 1.0 KiB">·&lt;b&gt;</span>'
    >>> chip_html(Step(index=0, token_id=None, text="Hi", special=False, phase=Phase.PREFILL, time=0.1, latency=0.1,
    ...                prob=None, sample_prob=None, top=None, seq_len=None, kv_bytes=None))
    '<span class="tok tok-c0" title="id ? · model p missing · 100.0 ms · KV not measured">Hi</span>'

Left out: the charts (charts/run.py) and anything gradio: this module returns strings.
"""
from __future__ import annotations

import html

from .metrics import estimate_cost
from .tokens.chips import PALETTE_SIZE, visible
from .trace import StopReason
from .units import format_seconds
from .wait_parts import first_token_words

STOP_REASONS = {StopReason.EOS: "finished (end-of-sequence token)",
                StopReason.LENGTH: "finished (max new tokens reached)",
                StopReason.CONTEXT: "finished (context window full)", StopReason.CANCELLED: "stopped by you",
                StopReason.ERROR: "failed"}


def format_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"


# --- chips

def chip_title(step) -> str:
    """What a chip's hover shows; a figure the source did not give says so."""
    parts = [f"id {'?' if step.token_id is None else step.token_id}",
             "model p missing" if step.prob is None else f"model p={step.prob:.3f}"]
    if step.sample_prob is not None:
        parts.append(f"sampled p={step.sample_prob:.3f}")
    if step.tokens != 1:
        parts.append(f"{step.tokens} tokens in this event")
    if step.draft:
        parts.append(f"draft {step.draft} (forward pass {step.forward_pass})")
    if step.thinking:
        parts.append("thinking (not the answer)")
    parts += [f"{step.latency * 1e3:.1f} ms",
              "KV not measured" if step.kv_bytes is None else f"KV {format_bytes(step.kv_bytes)}"]
    return " · ".join(parts)


def chip_html(step) -> str:
    classes = f"tok tok-c{step.index % PALETTE_SIZE}" + " tok-special" * step.special + (
        f" tok-{step.draft}" if step.draft else "") + " tok-thinking" * step.thinking
    title = chip_title(step)
    text = visible(step.text.encode()) or "∅"   # ∅: a token ending inside a multi-byte character
    return f'<span class="{classes}" title="{html.escape(title, quote=True)}">{html.escape(text, quote=True)}</span>'


def chips_html(chips: list[str], running: bool = False) -> str:
    """Wrap chips made by `chip_html` (kept by the caller, so each step adds one, not all)."""
    if not chips:
        return '<div class="tok-view out-chips"><p class="tok-note">Output tokens appear here.</p></div>'
    cursor = '<span class="cursor">▌</span>' if running else ""
    return f'<div class="tok-view out-chips">{"".join(chips)}{cursor}</div>'


# --- metrics

def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:,.0f} ms"


def metrics_html(trace, usd_per_m_input: float | None = 0.0, usd_per_m_output: float | None = 0.0,
                 element_id: str | None = None) -> str:
    """Cards of measured metrics, then a cost estimate from the prices (labelled estimate).

    `element_id` names the panel, for a page that redraws it live (the Generate page's ui/live/metrics.js)."""
    div = '<div class="metrics"' + (f' id="{html.escape(element_id, quote=True)}"' if element_id else "") + ">"
    if trace is None:
        return f'{div}<p>Metrics appear here while the model generates.</p></div>'
    m = trace.metrics()
    cost = estimate_cost(m, usd_per_m_input or 0.0, usd_per_m_output or 0.0)
    queued = getattr(trace, "queued", None)
    wait = 0.0 if queued is None else queued   # from the request's arrival: its wait for a slot counts
    ttft, e2e = (None if x is None else wait + x for x in (m.ttft, m.e2e))
    cards = [("prompt tokens", f"{m.prompt_tokens:,}"), ("output tokens", f"{m.output_tokens:,}"),
             ("TTFT" if queued is None else "TTFT, wait included", _ms(ttft)), ("TPOT", _ms(m.tpot)),
             ("decode speed", "–" if m.decode_tps is None else f"{m.decode_tps:.1f} tok/s"),
             ("E2E" if queued is None else "E2E, wait included", "–" if e2e is None else f"{e2e:.2f} s"),
             ("KV cache now (measured)", "not measured by this source" if m.kv_bytes is None
              else format_bytes(m.kv_bytes)),
             ("cost (estimate)", f"${cost:.6f}")]
    cards[3:3] = thinking_cards(trace, m, usd_per_m_output or 0.0)
    body = "".join(f'<div class="card"><div class="label">{html.escape(k)}</div>'
                   f'<div class="value">{html.escape(v)}</div></div>' for k, v in cards)
    wait_words = wait_line(trace)
    # data-ttft: the server's TTFT from the request's arrival, beside which the page writes its own (live/stream.js)
    parts = getattr(trace, "waits", None)
    server_ttft = parts.total if parts is not None else trace.queued + trace.steps[0].time if wait_words else None
    words = (f'<p class="wait-words" id="pg-wait" data-ttft="{server_ttft:.4f}">'
             f'{html.escape(wait_words)}</p>' if wait_words else "")
    return f'{div}{body}</div>' + words + server_html(trace)


def wait_line(trace) -> str:
    """Where the time to the first token went and who shared the run's forward passes, in words ('' when the
    run measured no wait: `trace.queued` is None). A run in the engine loop names every part of it, measured on the
    server (`trace.waits`, wait_parts.py); the page adds its own part, derived, when its first token shows
    (ui/live/metrics.js).

    >>> from types import SimpleNamespace as NS
    >>> from playground.wait_parts import WaitParts
    >>> first, second = NS(time=0.3, rows=1), NS(time=0.35, rows=6)
    >>> parts = WaitParts((("the iteration in progress", 0.05), ("no free slot", 0.75)), copied=0.002,
    ...                   copied_tokens=128, computed=0.1, computed_tokens=284, chunks=3, chunk=128, others=0.198)
    >>> print(wait_line(NS(queued=0.8, steps=[first, second], prompt_ids=[0] * 412, cached_tokens=128, waits=parts)))
    Your first token: 1.1 s on the server: 50 ms waiting for the iteration in progress (it came after the batcher had planned the iteration running), 750 ms waiting for a KV slot (every slot was held), 2 ms copying 128 cached prompt tokens from the prefix cache, 100 ms computing its 284 prompt tokens (3 chunks of up to 128), 198 ms for other requests' steps run between its chunks. 1 of its 2 steps shared a forward pass, with up to 5 other requests. The batching engine's graphs ran it: at a near-tie their greedy pick can differ from the one-stream engine's.
    >>> print(wait_line(NS(queued=0.0, steps=[first], prompt_ids=[0] * 9, cached_tokens=0, waits=None)))
    Your first token: 300 ms from your request, no wait for a turn, 300 ms reading 9 prompt tokens. No other request shared its forward passes. The batching engine's graphs ran it: at a near-tie their greedy pick can differ from the one-stream engine's.
    >>> wait_line(NS(queued=None, steps=[first], prompt_ids=[0], cached_tokens=0))
    ''
    """
    queued = getattr(trace, "queued", None)
    if queued is None or not trace.steps:
        return ""
    parts = getattr(trace, "waits", None)
    if parts is not None:
        line = f"Your first token: {first_token_words(parts)}."
    else:   # a run that waited for a CPU slot of its own, then read its prompt in one pass
        first = trace.steps[0].time
        waited = f"{format_seconds(queued)} of it waiting for a turn" if queued >= 0.0005 else "no wait for a turn"
        cached = trace.cached_tokens
        reading = f"{format_seconds(first)} reading {len(trace.prompt_ids):,} prompt tokens" + (
            f" ({cached:,} of them copied from the prefix cache, not computed)" if cached else "")
        line = f"Your first token: {format_seconds(queued + first)} from your request, {waited}, {reading}."
    rows = [s.rows for s in trace.steps if getattr(s, "rows", None) is not None]
    if rows:
        shared = sum(r > 1 for r in rows)
        line += (f" {shared:,} of its {len(rows):,} steps shared a forward pass, with up to {max(rows) - 1:,} other "
                 f"request{'s' * (max(rows) != 2)}." if shared else " No other request shared its forward passes.")
        line += (" The batching engine's graphs ran it: at a near-tie their greedy pick can differ from the one-stream "
                 "engine's.")
    return line


def thinking_cards(trace, m, usd_per_m_output: float) -> list[tuple[str, str]]:
    """A reasoning server's run: the time to the first answer token (beside TTFT, the first thought) and the
    thinking tokens with their cost; none for a run that did not think. The server's own count
    (usage.completion_tokens_details.reasoning_tokens) is named where it differs from the client's.

    >>> from types import SimpleNamespace as NS
    >>> thinking_cards(NS(server={}), NS(thinking_tokens=0, ttft_answer=0.1), 2.0)
    []
    >>> thinking_cards(NS(server={"usage": {"completion_tokens_details": {"reasoning_tokens": 40}}}),
    ...                NS(thinking_tokens=38, ttft_answer=0.25), 2.0)
    [('time to first answer token', '250 ms'), ('thinking tokens', '38 (the server counts 40) · $0.000080 (estimate)')]
    """
    from .remote.report import reported_thinking
    reported = reported_thinking(trace)
    counted = m.thinking_tokens
    if not counted and not reported:
        return []
    n = reported if reported is not None else counted
    said = f"{counted:,}" + (f" (the server counts {reported:,})" if reported is not None and reported != counted
                             else "")
    return [("time to first answer token", _ms(m.ttft_answer)),
            ("thinking tokens", f"{said} · ${n * usd_per_m_output / 1e6:.6f} (estimate)")]


def server_html(trace) -> str:
    """What a remote server reported about the run, labelled server-reported ('' for a local run)."""
    from .remote.report import server_lines
    lines = server_lines(trace)
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line, quote=True)}</li>" for line in lines)
    return (f'<div class="server-says"><b>Server-reported</b> by {html.escape(trace.backend, quote=True)} '
            f"(the cards above are measured at this client)<ul>{items}</ul></div>")


def speculation_html(trace, earlier=()) -> str:
    """Speculative decoding's figures for the latest run `trace` ('' when neither it nor a comparable earlier run
    of the session was speculative): tokens per forward pass, acceptance, and the speedup against a plain run of
    the same prompt on the same backend, measured in this session, labelled with which run it is; missing
    (with how to measure it) when there is none.

    >>> from types import SimpleNamespace as NS
    >>> speculation_html(NS(speculation={}, prompt_ids=[1], backend="x"))
    ''
    """
    from .speculative import plain_baseline, speculation_report
    spec, plain, first = plain_baseline(trace, earlier)
    report = None if spec is None else speculation_report(spec, plain)
    if report is None:
        return ""
    def pct(x):
        return "none proposed" if x is None else f"{x:.0%}"
    against = {"plain": "against the plain run before it", "speculative": "the speculative run before, against "
               "this plain run"}.get(first, "")
    speedup = "missing" if report.speedup is None else f"{report.speedup:.2f}×"
    cards = [("tokens per forward pass", "–" if report.tokens_per_pass is None else f"{report.tokens_per_pass:.2f}"),
             ("acceptance (accepted / proposed)", f"{pct(report.acceptance)} ({report.accepted} / {report.proposed})"),
             ("rejected and replaced", f"{report.replaced}"), ("speedup, decode tok/s (measured)", speedup)]
    if report.same_tokens is not None:
        cards.append(("same tokens as plain decoding", "yes" if report.same_tokens else "no (a near-tie flipped, "
                      "or sampling without a seed)"))
    speed = ("Speedup missing: run the same prompt with speculative decoding off (same backend and settings) to "
             "measure it." if report.speedup is None else f"Speedup {report.speedup:.2f}× {against}: "
             f"{report.decode_tps:.1f} against {report.plain_decode_tps:.1f} decode tok/s.")
    words = f'<p class="speculation-words">{html.escape(counts_words(report))} {html.escape(speed)}</p>'
    body = "".join(f'<div class="card"><div class="label">{html.escape(k)}</div>'
                   f'<div class="value">{html.escape(v)}</div></div>' for k, v in cards)
    title = (f"Speculative decoding (prompt lookup, k = {report.k}, n-gram {report.ngram}): "
             f"{report.output_tokens} tokens in {report.passes} forward passes")
    return (f'<div class="speculation" id="pg-speculation"><b>{html.escape(title)}</b> — chips: '
            '<span class="tok tok-accepted">accepted</span> <span class="tok tok-replaced">rejected and replaced'
            f'</span> <span class="tok">ordinary</span><div class="metrics">{body}</div>{words}</div>')


def counts_words(report) -> str:
    """What the counts mean, in words: proposed = accepted + replaced + dropped.

    >>> from types import SimpleNamespace as NS
    >>> print(counts_words(NS(proposed=3, accepted=0, replaced=2)))
    Of 3 draft tokens proposed, 0 matched the model's own choice and were kept (green). 2 times a draft did not match: the model's own token took its place (red), and the 1 draft token after it in the same pass was dropped.
    """
    p, a, r = report.proposed, report.accepted, report.replaced
    if not p:
        return ("No draft token was proposed: the last tokens never appeared earlier in the text, so every token "
                "came from an ordinary decode step.")
    dropped = p - a - r
    line = (f"Of {_plural(p, 'draft token')} proposed, {a} matched the model's own choice and "
            f"{'was' if a == 1 else 'were'} kept (green).")
    if r:
        line += (f" {r} time{'s' * (r != 1)} a draft did not match: the model's own token took its place (red)"
                 + (f", and the {_plural(dropped, 'draft token')} after it in the same pass "
                    f"{'was' if dropped == 1 else 'were'} dropped." if dropped else "."))
    return line


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


def status_line(trace) -> str:
    """One line of Markdown: what the run is doing or how it ended."""
    if trace is None:
        return ""
    n = len(trace.steps)
    if not trace.finished:
        return f"⏳ generating… {n} token{'s' * (n != 1)} so far"
    line = f"**{STOP_REASONS.get(trace.stop_reason, trace.stop_reason)}** after {n} token{'s' * (n != 1)}"
    return line + (f" — {html.escape(trace.error, quote=True)}" if trace.error else "")
