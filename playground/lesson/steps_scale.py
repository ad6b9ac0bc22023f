"""Lesson steps 4-7: the KV cache, cost and latency against tokens, two different requests at once, and what a
server does with KV memory (a prefix cache, preemption under a budget).

Each step is `step_x(lesson, report) -> StepResult`; see the package docstring for the table. A part a
source cannot do (no cache-less runs on a server, no prefix cache the playground can drive) is named
in the step's notes instead of being faked.
Left out: layout (ui/lesson_tab.py).
"""
from __future__ import annotations

import html

from ..charts import plot_cache_comparison, plot_kv_cache, plot_short_vs_long
from ..charts.experiments import without_cache
from ..charts.run import side_by_side
from ..config import GenerationSettings
from ..engine import common_prefix
from ..experiments import EXPERIMENTS
from ..measure import exact_length_ids
from ..prompts import SHORT_QUESTION, long_document, long_prompt
from ..run_view import format_bytes, format_seconds
from .lesson_step import StepResult, part_of
from .cost_model import calibrate
from .you_are_the_workload import NO_ROOM_YET, NO_TRAFFIC, room_step, room_traffic
from .steps_run import answer_run
from ..serve.batching import BatchConfig
from ..trace import COMPLETED, StopReason
from ..units import times

CONTRACT_PAGES, TOKENS_PER_PAGE = 100, 500   # an assumption, stated: a dense page of English is ~500 tokens
CALIBRATION_LENGTHS = (64, 128, 256, 512)    # measured prefills that calibrate the FLOP model (~1 s in all)
SHARED_PROMPT_TOKENS = 240                   # the system prompt two requests share (prefix caching)
KV_CACHE_TERM = ('<p class="lesson-term"><b>KV cache</b>: the keys and values of every token read so far, kept '
                 'so that each decode step reads them instead of recomputing them.</p>')


# --- 4: the KV cache

def step_kv_cache(lesson, report) -> StepResult:
    """The cache's growth and the run without it, one figure whose panels show every figure the takeaway quotes
    (each panel's label and the takeaway's sentence are made from the same words); the prefix reuse, which no
    panel draws, is said under the chart."""
    source, notes, numbers = lesson.source, [], {}
    trace = answer_run(lesson, report)
    figures = {"kv": plot_kv_cache(trace)}   # one figure at the end: the takeaway names both charts
    kv = [s.kv_bytes for s in trace.steps if s.kv_bytes is not None]
    parts, labels, found = [], ["Its size per step"], []
    if len(kv) > 1:
        numbers["kv_per_token"] = (kv[-1] - kv[0]) / (len(kv) - 1)
        per_token = f"{format_bytes(round(numbers['kv_per_token']))} per token"
        parts.append(f"Measured KV cache: {per_token}.")
        labels[0] += f": {per_token}"
    else:
        notes.append(f"{trace.backend} does not report its KV cache: only the formula can be drawn")
    if source.capabilities.no_cache and not report.cancelled:
        report(0.3, "the same answer with and without the cache")
        cmp = EXPERIMENTS["cache"].run(source, {"prompt_tokens": 48, "new_tokens": 12}, cancel=report.event)
        figures["cache"] = plot_cache_comparison(cmp)
        s = cmp.summary()
        numbers.update(cache_ratio=s["ratio"], identical=s["identical"])
        said = without_cache(s["ratio"]).replace("cache", "it")   # the panel's words, and the takeaway's
        labels.append(f"Step latency: {said}")
        if s["ratio"]:
            parts.append(f"{cmp.new_tokens} tokens ran {said.removesuffix(' without it')} without it."
                         f"{'' if s['identical'] else ' Their tokens differed.'}")
    else:
        notes.append(f"{source.info.name} cannot run without its cache: that comparison is missing")
    if hasattr(source, "cache_prefix") and not report.cancelled:
        report(0.7, "a shared system prompt, reused")
        numbers.update(_prefix_reuse(source))
        found.append(reuse_sentence(numbers["shared_tokens"], numbers["ttft_cold_s"], numbers["ttft_cached_s"]))
    else:
        notes.append(f"{source.info.name}: no prefix cache the playground can drive here")
    kv_fig = figures["kv"]
    if "cache" in figures:   # each panel's y axis in its unit alone: a longer title, turned, ran past a short panel
        cache = figures.pop("cache")
        title = f"The KV cache on {cache.layout.title.subtitle.text}"
        panels = (kv_fig.update_layout(title=None, yaxis_title="MiB"), cache.update_layout(title=None, yaxis_title="ms"))
        figures["kv"] = side_by_side(list(zip(labels, panels)), title)
    else:
        kv_fig.update_layout(title_text=labels[0].replace("Its size", "KV-cache size"))
    body = KV_CACHE_TERM + "".join(f"<p>{html.escape(line)}</p>" for line in found)
    return StepResult(4, "The KV cache", " ".join(parts), numbers, figures, body, notes)


def reuse_sentence(shared_tokens: int, cold: float, warm: float) -> str:
    """Step 4's prefix-cache finding: the TTFT read whole (`cold`) against read from the cached prefix (`warm`),
    its verb computed from the two.

    >>> reuse_sentence(284, 0.013, 0.004)
    'Reusing a 284-token shared prompt cut TTFT from 13 ms to 4 ms.'
    >>> reuse_sentence(812, 0.004, 0.013)
    'Reusing an 812-token shared prompt saved nothing (4 ms whole, 13 ms cached).'
    """
    shared = f"{_a(shared_tokens)} {shared_tokens}-token shared prompt"
    if warm < cold:
        return f"Reusing {shared} cut TTFT from {format_seconds(cold)} to {format_seconds(warm)}."
    return f"Reusing {shared} saved nothing ({format_seconds(cold)} whole, {format_seconds(warm)} cached)."


def _a(n: int) -> str:
    """The article before a number read aloud: 'an' for 8, 11, 18, 80-89, 800-899, 11,000…

    >>> [_a(n) for n in (845, 240, 11, 18_000, 1_100, 8)]
    ['an', 'a', 'an', 'an', 'a', 'an']
    """
    digits = str(abs(int(n)))
    lead = digits[:len(digits) % 3 or 3]   # the group read first: "eleven" thousand, "eight" hundred
    return "an" if lead.startswith("8") or lead in ("11", "18") else "a"


def _prefix_reuse(source) -> dict:
    """The second of two requests sharing a system prompt: TTFT read whole, then from the cached prefix."""
    excerpt = source.tokenizer.decode(exact_length_ids(source, SHARED_PROMPT_TOKENS))
    settings = GenerationSettings(max_new_tokens=4, system_prompt="Answer questions about this report.\n\n" + excerpt)
    questions = ("What is the report about?", "Who should read it?")
    ids = [source.prompt_ids(q, settings)[1] for q in questions]
    prefix = source.cache_prefix(common_prefix(*ids))
    cold = source.run(questions[1], settings).wait()
    cached = source.run(questions[1], settings, prefix=prefix).wait()
    return {"shared_tokens": cached.cached_tokens, "ttft_cold_s": cold.metrics().ttft,
            "ttft_cached_s": cached.metrics().ttft, "same_answer": cold.output_ids == cached.output_ids}


# --- 5: cost and latency scale with tokens

RATIO_NAMES = {"ttft": "the TTFT ratio", "est_cost_usd": "the cost ratio"}


def scale_sentence(ratios: dict) -> str:
    """Step 5's first sentences from the long ÷ short ratios, one finding each, each ratio rounded as its chart's
    title rounds it (units.times); a ratio the source could not give is left out, never written as 0.

    >>> scale_sentence({"input_tokens": 22.8, "ttft": 0.94, "est_cost_usd": 5.7})
    "The document had 23× the question's tokens. Its TTFT was 0.9× the question's. Its estimated cost was 5.7×."
    >>> scale_sentence({"input_tokens": 17.9, "est_cost_usd": 5.7})
    "The document had 18× the question's tokens. Its estimated cost was 5.7×."
    """
    sentences = [f"The document had {times(ratios['input_tokens'])} the question's tokens."]
    if "ttft" in ratios:
        sentences.append(f"Its TTFT was {times(ratios['ttft'])} the question's.")
    if "est_cost_usd" in ratios:
        sentences.append(f"Its estimated cost was {times(ratios['est_cost_usd'])}.")
    return " ".join(sentences)


def step_scale(lesson, report) -> StepResult:
    source, notes = lesson.source, []
    cmp = EXPERIMENTS["short-long"].run(source, {"max_new_tokens": 16}, cancel=report.event,
                                        progress=lambda f, m: report(0.6 * f, m))
    if cmp.short is None or cmp.long is None:
        return StepResult(5, "Cost and latency scale with tokens", "cancelled before both requests ran")
    r = cmp.summary()["ratios"]
    numbers = {"input_ratio": r["input_tokens"], "ttft_ratio": r.get("ttft"), "cost_ratio": r.get("est_cost_usd")}
    takeaway = scale_sentence(r)
    notes += [f"{what}: missing (the source did not give it)" for key, what in RATIO_NAMES.items() if key not in r]
    tokens = CONTRACT_PAGES * TOKENS_PER_PAGE
    shape, config = source.info.kv_shape, getattr(getattr(source, "backend", None), "config", None)
    needs = []   # what a 100-page contract would need: KV cache (formula), prefill time (extrapolated)
    if shape:
        numbers["contract_kv_bytes_formula"] = shape.formula_bytes(tokens)
        needs.append(f"{format_bytes(numbers['contract_kv_bytes_formula'])} of KV cache")
        notes.append(f"the contract's tokens assume {TOKENS_PER_PAGE} a page; its KV cache is the formula's, "
                     "not measured")
    if config is not None and source.capabilities.exact_ids and not report.cancelled:
        model = calibrate(config, _calibration_points(source, report))
        low, mid, high = model.predict(tokens)
        numbers.update(contract_prefill_s=(low, mid, high), calibration=list(model.points))
        window = source.info.context_window
        needs.append(f"{format_seconds(mid)} of prefill (extrapolated)")
        notes.append(f"the prefill time is an extrapolation: a FLOP model calibrated on this session's "
                     f"{len(model.points)} measured prefills gives {format_seconds(low)} to {format_seconds(high)}"
                     + (f"; the contract is {tokens / window:.0f}× past this model's {window:,}-token context "
                        "window" if window else ""))
    else:
        notes.append("the 100-page prefill estimate needs the model's shape and exact-length runs: missing here")
    if needs:
        takeaway += f" A {CONTRACT_PAGES}-page contract (~{tokens:,} tokens): {', '.join(needs)}."
    return StepResult(5, "Cost and latency scale with tokens", takeaway, numbers,
                      {"short_long": plot_short_vs_long(cmp, ("input_tokens", "ttft", "est_cost_usd"))}, notes=notes)


def _calibration_points(source, report) -> list[tuple[int, float]]:
    window = source.info.context_window or 2**31
    lengths = [n for n in CALIBRATION_LENGTHS if n < window]
    ids = exact_length_ids(source, lengths[-1])
    out = []
    for i, n in enumerate(lengths):
        if report.cancelled:
            break
        report(0.6 + 0.4 * i / len(lengths), f"calibrating: prefill of {n} tokens")
        out.append((n, source.run_ids(ids[:n], GenerationSettings(max_new_tokens=1)).wait().steps[0].time))
    return out


# --- 6: no two requests are the same

MIXED_NEW_TOKENS = 16
QUESTIONS_AFTER = (0.05, 0.10, 0.15)   # seconds after the document: three short questions arrive just behind it


def batching_cost(alone, batched, numbers: dict) -> str:
    """What continuous batching cost the questions against one at a time (their TPOT and E2E p50), and the two
    runs' throughput, saying so when batching's came out lower; the figures go into `numbers` too."""
    from ..serve.summary import class_p50, throughput
    tpot, e2e = [class_p50(x, "short", "tpot") for x in (alone, batched)], [class_p50(x, "short", "e2e")
                                                                           for x in (alone, batched)]
    tps = [throughput(x)["output_tps"] for x in (alone, batched)]
    numbers.update(short_tpot_p50_s=tpot, short_e2e_p50_s=e2e, output_tps=tps)
    parts = []
    if None not in tpot and all(tpot):
        dearer = tpot[1] > tpot[0]
        parts.append(f"{'The cost' if dearer else 'No cost per token here'}: a question's tokens came every "
                     f"{format_seconds(tpot[1])} (TPOT p50) against {format_seconds(tpot[0])} alone "
                     f"({max(tpot) / min(tpot):.1f}× {'slower' if dearer else 'faster'})"
                     + (f", its whole answer in {format_seconds(e2e[1])} against {format_seconds(e2e[0])}."
                        if None not in e2e else "."))
    if None not in tps:
        parts.append(f"Throughput: {tps[1]:.1f} against {tps[0]:.1f} tokens/s" if tps[1] >= tps[0] else
                     f"Throughput came out lower batched on this run: {tps[1]:.1f} against {tps[0]:.1f} tokens/s.")
        parts[-1] += "." if tps[1] >= tps[0] else ""
    return " ".join(parts)


def step_mixed(lesson, report) -> StepResult:
    """A long document, then three short questions arriving just behind it, through one engine: one at a time
    (the Serve tab's harness, first come first served: each question waits for the whole document), then the
    same four requests with continuous batching on the same engine (the questions join the batch at once).
    With `lesson.from_room`, the room's own requests instead (you_are_the_workload.py), when the app's engine loop has recorded
    some; else the step says so above its own workload."""
    from ..charts.serve import plot_gantts, shared_range
    from ..serve import SCHEDULERS, OneAtATime, Request, Workload, lesson as serve_lesson
    from ..serve.registry import batching_for

    if lesson.from_room:   # the presenter asked for the room's own requests: drawn from the record when it has some
        room = room_step(room_traffic(lesson))
        if room is not None:
            return room
    source = lesson.source
    document, _ = long_prompt(source.tokenizer, source.info.context_window, MIXED_NEW_TOKENS, long_document())
    workload = Workload((Request(0, "long", document, MIXED_NEW_TOKENS, 0.0),
                         *(Request(i + 1, "short", SHORT_QUESTION, MIXED_NEW_TOKENS, t)
                           for i, t in enumerate(QUESTIONS_AFTER))), arrival="fixed")
    cure = batching_for(source)
    schedulers = [OneAtATime(source)] + ([SCHEDULERS[cure].create(source)] if cure else [])
    results = []
    for k, (scheduler, name) in enumerate(zip(schedulers, ("one at a time", "continuous batching"))):
        results.append(scheduler.run(workload, part_of(report, k, len(schedulers), name), report.event))
        if report.cancelled:
            return StepResult(6, "No two requests are the same", StopReason.CANCELLED)
    silent = next(((res, r) for res in results for r in res.records if not r.steps), None)
    if silent is not None:   # e.g. a server that failed: say so rather than compare nothing
        res, r = silent
        return StepResult(6, "No two requests are the same", f"Request {r.request.id} ({r.request.cls}) produced no "
                          f"token on {res.scheduler_label} ({r.error or r.stop_reason}): nothing to compare.",
                          notes=[serve_lesson(x) for x in results])
    result = results[0]
    long, shorts = result.records[0], result.records[1:]
    first = shorts[0]
    numbers = {"long_prompt_tokens": long.prompt_tokens, "long_e2e_s": long.e2e,
               "short_wait_s": first.waiting, "short_ttft_alone_s": first.prefill, "short_ttft_seen_s": first.ttft,
               "short_ttft_seen_all_s": [r.ttft for r in shorts]}
    own = first.prefill
    takeaway = (f"One at a time, a short question queued behind {_a(long.prompt_tokens)} {long.prompt_tokens}-token "
                f"document. Its first token took {format_seconds(first.ttft)}, {first.ttft / own:.0f}× its "
                f"{format_seconds(own)} alone.")
    x_range, cost = shared_range(results), ""   # both Gantt charts on one time axis
    panels, notes = [("One at a time", result, x_range)], []
    if len(results) == 2:
        batched = results[1].records[1:]
        worst = max(r.ttft for r in batched)
        numbers["batched_scheduler"] = results[1].scheduler
        numbers["short_ttft_batched_all_s"] = [r.ttft for r in batched]
        takeaway += f" With continuous batching, every question's first token came within {format_seconds(worst)}."
        cost = batching_cost(result, results[1], numbers)
        panels.append(("With continuous batching", results[1], x_range))
    else:
        notes.append(f"{source.info.name} offers no batching scheduler here: only one at a time is shown.")
    if lesson.from_room:
        notes.insert(0, (NO_TRAFFIC if room_traffic(lesson) is None else NO_ROOM_YET) + " Below: the step's own workload.")
    figures = {"gantt": plot_gantts(panels, f"Every request's timeline on {result.source}")}
    return StepResult(6, "No two requests are the same", takeaway, numbers, figures=figures, notes=notes,
                      html=(f"<p><b>{html.escape(cost)}</b></p>" if cost else "")
                      + "".join(f"<p>{html.escape(serve_lesson(x))}</p>" for x in results))


# --- 7: what a server does with KV memory

MEMORY_TITLE = "Reuse the cache, make room"
MEMORY_REQUESTS = 4          # each KV-memory preset cut down for a 2-core machine
PRESSURE_NEW_TOKENS = 48     # the memory-pressure chats' answers (EOS ignored: the demand is known)
RUN_NAMES = ("without prefix cache", "with prefix cache", "all the KV memory", "under a KV budget")
MEMORY_TERMS = ('<p class="lesson-term"><b>Prefix cache</b>: the KV of a prompt\'s beginning, kept after its request '
                'ends, so a request that begins the same way copies it instead of reading it again.</p>'
                '<p class="lesson-term"><b>Preemption</b>: when the KV memory is full, a running request\'s cache is '
                'dropped; it waits, and is read again (recomputed) when memory frees up.</p>')


def memory_sentence(n: dict) -> str:
    """Step 7's takeaway from its numbers: the prefix cache's TTFT, then preemption under the budget.

    >>> print(memory_sentence({"shared_tokens": 812, "ttft_p50_s": [1.93, 0.31], "kv_budget": 112,
    ...                        "demand_positions": 320, "preemptions": 6, "completed": 4, "requests": 4}))
    Caching a shared 812-token prompt cut TTFT p50 from 1.9 s to 310 ms. With 112 of the 320 KV positions needed, 6 preemptions; all 4 requests still finished.
    >>> print(memory_sentence({"shared_tokens": 80, "ttft_p50_s": [0.02, 0.03], "kv_budget": 112,
    ...                        "demand_positions": 96, "preemptions": 0, "completed": 3, "requests": 4}))
    Caching a shared 80-token prompt saved no TTFT here (30 ms against 20 ms). With 112 of the 96 KV positions needed, no preemption; 3 of 4 requests finished.
    """
    cold, warm = n["ttft_p50_s"]
    if warm < cold:
        first = (f"Caching a shared {n['shared_tokens']}-token prompt cut TTFT p50 from "
                 f"{format_seconds(cold)} to {format_seconds(warm)}.")
    else:
        first = (f"Caching a shared {n['shared_tokens']}-token prompt saved no TTFT here "
                 f"({format_seconds(warm)} against {format_seconds(cold)}).")
    p = n["preemptions"]
    done = (f"all {n['requests']} requests still finished" if n["completed"] == n["requests"] else
            f"{n['completed']} of {n['requests']} requests finished")
    return (f"{first} With {n['kv_budget']} of the {n['demand_positions']} KV positions needed, "
            f"{p or 'no'} preemption{'' if p == 1 else 's' if p else ''}; {done}.")


def step_memory(lesson, report) -> StepResult:
    """Two KV-memory presets (serve/presets.py) on our batching, each A against B on the same engine: a shared
    system prompt without and with the prefix cache, then chats under a KV budget smaller than they need; the chats
    whose tokens parted from the run with all the memory are replayed teacher-forced (serve/agreement.py)."""
    from dataclasses import replace
    from functools import reduce

    from ..charts.serve import plot_gantts, shared_range
    from ..serve import SCHEDULERS, Workload
    from ..serve.presets import PRESETS, changed_outputs, identical_requests
    from ..serve.registry import batching_for
    from ..serve.summary import class_p50

    source = lesson.source
    if batching_for(source) != "batching":
        return StepResult(7, MEMORY_TITLE, f"Prefix caching and preemption run on our batching, on an ONNX backend; "
                          f"{source.info.name} has none here: pick onnx-gguf4 to measure them.", html=MEMORY_TERMS,
                          notes=[f"{source.info.name}: no prefix cache or KV budget the playground can drive here"])
    count = lambda p: len(source.prompt_ids(p, GenerationSettings())[1])   # noqa: E731
    cache = PRESETS["shared system prompt"]
    shared = cache.build(source, MEMORY_REQUESTS, cache.rate, 0)
    pressure = PRESETS["memory pressure"].build(source, MEMORY_REQUESTS, None, 0)
    pressure = Workload(tuple(replace(r, max_new_tokens=PRESSURE_NEW_TOKENS) for r in pressure.requests),
                        pressure.arrival, pressure.rate, pressure.seed)
    plan = [(shared, c) for c in cache.configs(shared, count, BatchConfig())] + \
        [(pressure, c) for c in PRESETS["memory pressure"].configs(pressure, count, BatchConfig())]
    results = []   # the four runs, in order (a status line names the one running)
    for k, (workload, config) in enumerate(plan):
        scheduler = SCHEDULERS["batching"].create(source, batch=config)
        results.append(scheduler.run(workload, part_of(report, k, len(plan), RUN_NAMES[k]), report.event))
        if report.cancelled:
            return StepResult(7, MEMORY_TITLE, StopReason.CANCELLED)
    cold, warm, free, pressed = results
    report(0.98, "replaying the requests whose tokens parted, teacher-forced")
    measured = PRESETS["memory pressure"].measure(source, free, pressed, report.event)
    if report.cancelled:
        return StepResult(7, MEMORY_TITLE, StopReason.CANCELLED)
    pool = warm.pool
    ids = [source.prompt_ids(r.prompt, GenerationSettings())[1] for r in shared.requests]
    numbers = {"shared_tokens": len(reduce(common_prefix, ids)), "prompt_tokens": [len(x) for x in ids],
               "ttft_p50_s": [class_p50(cold, None, "ttft"), class_p50(warm, None, "ttft")],
               "cached_tokens": pool["cached"], "looked_up_tokens": pool["looked_up"],
               "kv_budget": pressed.pool["kv_budget"],
               "demand_positions": sum(count(r.prompt) + r.max_new_tokens for r in pressure.requests),
               "preemptions": sum(len(r.preemptions) for r in pressed.records),
               "recomputed_positions": sum(n for r in pressed.records for p in r.preemptions for *_, n in p.chunks),
               "completed": sum(r.stop_reason in COMPLETED for r in pressed.records),
               "requests": len(pressure.requests), "identical": identical_requests(free, pressed)}
    if None in numbers["ttft_p50_s"]:
        return StepResult(7, MEMORY_TITLE, "Too little was measured to compare the runs.", numbers)
    numbers["ttft_ratio"] = numbers["ttft_p50_s"][1] / numbers["ttft_p50_s"][0]
    x_range = shared_range([cold, warm])
    figures = {"runs": plot_gantts([("Without prefix cache", cold, x_range), ("With prefix cache", warm, x_range),
                                    (f"KV budget: {numbers['kv_budget']} positions", pressed, None)],
                                   f"Every request's timeline, our batching on {warm.source}")}
    detail = (f"{pool['cached']:,} of {pool['looked_up']:,} prompt tokens were copied from the cache "
              f"({numbers['ttft_ratio']:.2f}× the TTFT). Under the budget {numbers['recomputed_positions']:,} "
              f"positions were read again; {changed_outputs(free, pressed, 'the run with all the memory', **measured)}")
    return StepResult(7, MEMORY_TITLE, memory_sentence(numbers), numbers, figures,
                      MEMORY_TERMS + f"<p>{html.escape(detail)}</p>",
                      notes=["the KV budget stands for a smaller memory, as on a full GPU: the slots stay as they are"])
