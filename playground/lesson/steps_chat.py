"""Lesson step 8: a conversation reuses its past, until something rewrites it.

    result = step_chat(lesson, report)   # four turns with the model's own chat template, then the same four turns
    #                                      with the reasoning template that rewrites each answer (tokens/chat.py)

Each turn sends the whole conversation again, as a chat client does: the system prompt, every question and every
answer so far (the answers as the text the model wrote). The turns run through an engine loop of the step's own
over the source's engine (serve/engine_loop.py, one KV slot and a prefix cache), as steps 6 and 7 run their own
schedulers on it; each run starts from an empty cache, so turn 1 is all new and the two runs compare alike. Each
turn's record of its prefix-cache lookup (serve/cache_miss.py, made at its admission) gives its ribbon (found in
the cache / unchanged but computed again / new) and, for a turn that parted from what the cache held, the first
differing token and the cause.

The takeaway, every figure computed (`chat_sentence`): the share of the prompt tokens of turns 2-4 found in the
cache with the model's template, what became of it with the rewriting one, and the first miss named.

Left out: the chat page's controls (ui/) and causes the step does not stage (a volatile system prompt, reordered
tools, eviction: the chat page shows them with a switch each).
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from ..config import GenerationSettings
from ..measure import follow
from ..prompts import CHAT_QUESTIONS, CHAT_SYSTEM
from ..tokens import visible
from ..trace import StopReason
from .lesson_step import StepResult, part_of

CHAT_TITLE = "A conversation reuses its past, until something rewrites it"
CHAT_ANSWER_TOKENS = 32       # each answer's budget: a turn in about a second on the bundled model with 2 cores
CHAT_CACHE_POSITIONS = 4096   # the step's prefix cache: the four turns' blocks, and room to spare
REWRITING = "thinking"        # tokens/chat.py's reasoning-style template: every turn rewrites the answer before
TEMPLATE_NAMES = {"model": "The model's own template", REWRITING: "A reasoning template"}
SHOWN = 6   # tokens shown from a miss's first difference on, as this prompt and as the cache had them
KEPT = ("no miss", "new conversation")   # causes that are no miss of the history
TAKEAWAY_WORDS = 35
CHAT_TERMS = ('<p class="lesson-term"><b>Chat template</b>: how a conversation\'s messages are written out as the '
              'one prompt the model reads. Every turn sends the whole conversation again; the prefix cache keeps '
              'what was read before, in blocks of 16 tokens.</p>'
              '<p class="lesson-term"><b>Reasoning template</b>: one, as Qwen3\'s with thinking off, that opens each '
              'answer with an empty &lt;think&gt; block and leaves it out of the answers before: from the last answer '
              'on, each turn\'s history differs from what the cache read.</p>')


@dataclass(frozen=True)
class ChatTurn:
    """One turn as measured: its rendered chat (tokens/chat.py), its Trace and its record of the cache lookup."""
    chat: object     # RenderedChat
    trace: object    # Trace
    record: object   # CacheRecord


def converse(engine, template: str, report, k: int, parts: int) -> list[ChatTurn]:
    """The step's conversation with `template`, turn after turn, each answer sent back as its text, through an
    engine loop of its own (an empty prefix cache); stops early when `report` is cancelled."""
    from ..serve.batcher import BatchConfig
    from ..serve.conversations import Turn
    from ..serve.engine_loop import EngineLoop
    from ..tokens.chat import render_chat

    settings = GenerationSettings(max_new_tokens=CHAT_ANSWER_TOKENS)
    capacity = min(1024, int(engine.info.context_window or 1024))
    loop = EngineLoop(engine, BatchConfig(slots=1, prefix_cache=CHAT_CACHE_POSITIONS), capacity)
    messages, turns = [{"role": "system", "content": CHAT_SYSTEM}], []
    try:
        for t, question in enumerate(CHAT_QUESTIONS):
            if report.cancelled:
                break
            messages.append({"role": "user", "content": question})
            chat = render_chat(engine.tokenizer, messages, template=template)
            tell = part_of(report, k * len(CHAT_QUESTIONS) + t, parts, f"{template} template, turn {t + 1}")
            run = loop.run(chat.ids, settings, client="lesson", turn=Turn(f"lesson {template}", chat.messages,
                                                                         chat.spans, chat.tools, template))
            trace = follow(run, report, lambda step: tell(min(1.0, (step.index + 1) / CHAT_ANSWER_TOKENS),
                                                          f"token {step.index + 1}"))
            turns.append(ChatTurn(chat, trace, run.ticket.seq.conversation.record))
            messages.append({"role": "assistant", "content": trace.text})
    finally:
        loop.close()
    return turns


def share(turns: list[ChatTurn]) -> tuple[int, int]:
    """(prompt tokens found in the cache, prompt tokens) over the turns after the first: those that have a past."""
    later = turns[1:]
    return sum(t.record.cached for t in later), sum(t.record.prompt_tokens for t in later)


def first_miss(turns: list[ChatTurn]) -> dict | None:
    """The first turn whose prompt the cache's record says missed its history: its turn, cause and first
    differing token (None: a cause with no position, such as eviction); None when no turn missed."""
    for t in turns:
        r = t.record
        if r.cause.value not in KEPT:
            return {"turn": r.turn, "cause": r.cause.value, "position": r.first_difference,
                    "recomputed": r.recomputed, "prompt_tokens": r.prompt_tokens}
    return None


def run_figures(turns: list[ChatTurn], prefix: str) -> dict:
    """One run's figures for the numbers table and the takeaway, each key starting with `prefix`."""
    found, asked = share(turns)
    records = [t.record for t in turns]
    return {f"{prefix}prompt_tokens": [r.prompt_tokens for r in records],
            f"{prefix}cached_tokens": [r.cached for r in records],
            f"{prefix}recomputed_tokens": [r.ribbon["recomputed"] for r in records],
            f"{prefix}new_tokens": [r.ribbon["new"] for r in records],
            f"{prefix}ideal_tokens": [r.ideal for r in records],
            f"{prefix}causes": [r.cause.value for r in records],
            f"{prefix}first_difference": [r.first_difference for r in records],
            f"{prefix}ttft_s": [t.trace.metrics().ttft for t in turns],
            f"{prefix}answer_tokens": [len(t.trace.steps) for t in turns],
            f"{prefix}cached_share": found / asked if asked else None,
            f"{prefix}miss": first_miss(turns)}


def _missed(miss: dict) -> str:
    """A miss in words: “cause” at turn T's token P (or without a position).

    >>> _missed({"turn": 2, "cause": "template rewrite", "position": 67})
    "“template rewrite” at turn 2's token 67"
    >>> _missed({"turn": 3, "cause": "evicted", "position": None})
    'turn 3: “evicted”'
    """
    if miss["position"] is None:
        return f"turn {miss['turn']}: “{miss['cause']}”"
    return f"“{miss['cause']}” at turn {miss['turn']}'s token {miss['position']}"


def chat_sentence(n: dict) -> str:
    """Step 8's takeaway from its figures: the share of the later turns' prompt tokens found in the cache with the
    model's template (and whether each found its whole history), then with the rewriting template, its comparative
    word from the two shares, and the first miss named. At most TAKEAWAY_WORDS words: longer forms first.

    >>> print(chat_sentence({"turns": 4, "cached_share": 0.77, "miss": None, "rewritten_cached_share": 0.41,
    ...                      "rewritten_miss": {"turn": 2, "cause": "template rewrite", "position": 67}}))
    Turns 2–4 found 77% of their prompt tokens in the cache: each history to its last full block. A reasoning template, rewriting each answer, cut that to 41%: “template rewrite” at turn 2's token 67.
    >>> print(chat_sentence({"turns": 4, "cached_share": 0.5, "miss": {"turn": 3, "cause": "answer re-tokenized "
    ...                      "differently", "position": 120}, "rewritten_cached_share": 0.62, "rewritten_miss": None}))
    Turns 2–4 found 50% of their prompt tokens in the cache; “answer re-tokenized differently” at turn 3's token 120. A reasoning template, rewriting each answer, found 62%, missing nothing.
    """
    turns, own, rewritten = n["turns"], n["cached_share"], n["rewritten_cached_share"]
    miss, rewrite = n["miss"], n["rewritten_miss"]
    if own is None or rewritten is None:
        return "Too few turns ran to compare what the cache gave back."
    kept = ": each history to its last full block." if miss is None else f"; {_missed(miss)}."
    first = f"Turns 2–{turns} found {round(own * 100)}% of their prompt tokens in the cache{kept}"
    shown = round(own * 100), round(rewritten * 100)   # the word compares the shares as written
    verb = (f"cut that to {shown[1]}%" if shown[1] < shown[0] else f"kept {shown[1]}% too" if shown[1] == shown[0]
            else f"found {shown[1]}%")
    ending = f": {_missed(rewrite)}." if rewrite is not None else ", missing nothing."
    for who in ("A reasoning template, rewriting each answer,", "A reasoning template"):
        said = f"{first} {who} {verb}{ending}"
        if len(said.split()) <= TAKEAWAY_WORDS:
            break
    return said


def _chips(texts, colour: int) -> str:
    """Token texts as chips of one colour (tokens/chips.py's tok-c0..5), whitespace made visible, escaped."""
    chips = "".join(f"<span class='tok tok-c{colour}'>{html.escape(visible(t.encode()) or '∅')}</span>" for t in texts)
    return f"<span class='tok-view'>{chips}</span>"


def miss_html(turns: list[ChatTurn]) -> str:
    """The first miss of a run, as its record names it: the cause in a sentence, the tokens computed again, and
    where the prompt parts from what the cache held: the tokens before, then this prompt's and the cache's."""
    miss = next((t.record for t in turns if t.record.cause.value not in KEPT), None)
    if miss is None:
        return ""
    said = (f"Turn {miss.turn}, “{miss.cause.value}”: {miss.detail}; {miss.recomputed} of its "
            f"{miss.prompt_tokens} prompt tokens computed.")
    if miss.first_difference is None:
        return f"<p>{html.escape(said)}</p>"
    part = miss.was.part if miss.was is not None else "unknown"
    return (f"<p>{html.escape(said)} At token {miss.first_difference}, after {_chips(miss.before[-4:], 1)}, this "
            f"prompt has {_chips(miss.now[:SHOWN], 2)} where the cache held {_chips(miss.then[:SHOWN], 5)} "
            f"({html.escape(part)}).</p>")


def step_chat(lesson, report) -> StepResult:
    """Four turns with the model's own template, then the same four with the reasoning template, each on an engine
    loop of its own over the source's engine; the ribbons side by side, the first miss named."""
    from ..serve.registry import batching_for

    source = lesson.source
    if batching_for(source) != "batching" or getattr(source, "tokenizer", None) is None:
        return StepResult(8, CHAT_TITLE, f"A conversation's reuse is read from our prefix cache, on an ONNX backend; "
                          f"{source.info.name} has none here: pick onnx-gguf4 to measure it.", html=CHAT_TERMS,
                          notes=[f"{source.info.name}: no prefix cache the playground can drive here"])
    runs = {}
    for k, template in enumerate(TEMPLATE_NAMES):
        runs[template] = converse(source, template, report, k, 2 * len(CHAT_QUESTIONS))
        if report.cancelled:
            return StepResult(8, CHAT_TITLE, StopReason.CANCELLED)
    own, rewritten = runs["model"], runs[REWRITING]
    numbers = {"turns": len(own), **run_figures(own, ""), **run_figures(rewritten, "rewritten_")}
    figures = {"ribbons": chat_figure(runs, source.tokenizer.decode)}
    body = CHAT_TERMS + miss_html(own) + miss_html(rewritten)
    notes = [f"greedy answers of at most {CHAT_ANSWER_TOKENS} tokens, each sent back as its text; each run on an "
             "engine loop of the step's own, its prefix cache empty at the start"]
    return StepResult(8, CHAT_TITLE, chat_sentence(numbers), numbers, figures, body, notes)


def chat_figure(runs: dict, decode):
    """The two runs' ribbons side by side under one legend (charts/conversation.py's ribbon per run)."""
    from ..charts.conversation import plot_ribbon
    from ..charts.run import side_by_side

    panels = []
    for template, turns in runs.items():
        texts = [[decode([i]) for i in t.chat.ids] for t in turns]
        panels.append((TEMPLATE_NAMES[template], plot_ribbon([t.record for t in turns], tokens=texts)))
    fig = side_by_side(panels, "Each turn's prompt: found in the cache, computed again, or new")
    for trace in fig.data:
        if trace.type == "heatmap":
            trace.showlegend = False
    longest = max(t.record.prompt_tokens for turns in runs.values() for t in turns)
    return fig.update_xaxes(range=[-0.5, longest - 0.5])   # one scale: the panels' prompts compare by length
