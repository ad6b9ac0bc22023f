"""Lesson mode: the serving lesson as eight live steps, each backed by numbers measured on the spot.

    lesson = Lesson(source)                      # any step source: a local Engine or a server
    result = lesson.run(3, progress, cancel)     # a StepResult: title, takeaway, numbers, figures, html
    lesson.results[3]                            # kept, so going back shows it again
    python -m playground.lesson --out DIR        # all eight into one standalone HTML handout
    lesson = Lesson(source, room=room)           # the app's room (serve/room.py), whose traffic record …
    lesson.from_room = True                      # … step 6 draws its requests: "you are the workload" (you_are_the_workload.py)

| step | title                          | what runs (budgets sized for a 2-core machine)            |
| 1    | It works in tokens             | the seed sentence in two tokenizers                        |
| 2    | One token at a time            | a short greedy answer at full speed (its Steps replayable) |
| 3    | Prefill, then decode           | that run's timeline: TTFT against the mean decode step,    |
|      |                                | and its Steps on the roofline (why decode is slow)         |
| 4    | The KV cache                   | its growth; cache vs none; a shared prefix reused          |
| 5    | Cost and latency scale with tokens | short vs long; a 100-page contract extrapolated         |
| 6    | No two requests are the same   | a long and a short request through one engine; or the      |
|      |                                | room's own requests, as the app's engine loop recorded them|
| 7    | Reuse the cache, make room     | a shared system prompt without and with the prefix cache;  |
|      |                                | chats under a KV budget smaller than they need (preemption)|
| 8    | A conversation reuses its past, | four turns of a chat: each prompt's tokens found in the    |
|      | until something rewrites it    | cache, computed again, or new; then the same turns with a  |
|      |                                | template that rewrites each answer, and the miss named     |

Steps 3 and 4 read the run step 2 made (running it first if needed), so the lesson tells one story.
Every takeaway is built from that step's own numbers, one finding a sentence, in about 35 words at most,
durations in a person's units (run_view.format_seconds); estimates say so, and a term a newcomer would
not know (cl100k_base, TTFT, KV cache) is explained where a step first uses it.
Left out: gradio (ui/lesson_tab.py lays this out) and any step that is not measured here.
"""
from __future__ import annotations

import threading
from typing import Any

from ..measure import Progress
from .lesson_step import RULE_OF_THUMB, SEED_SENTENCE, LessonStep, StepResult
from .steps_chat import CHAT_TITLE, step_chat
from .steps_run import step_decode, step_prefill, step_tokens
from .steps_scale import MEMORY_TITLE, step_kv_cache, step_memory, step_mixed, step_scale
from ..trace import StopReason

__all__ = ["RULE_OF_THUMB", "SEED_SENTENCE", "STEPS", "Lesson", "LessonStep", "StepResult"]

class Lesson:
    """One presenter's walk through the eight steps on one source; results are kept per step."""

    def __init__(self, source, room=None):
        self.source = source
        self.results: dict[int, StepResult] = {}
        self.shared: dict[str, Any] = {}   # what later steps reuse (step 2's trace)
        self.room = room                   # the app's Room (serve/room.py): its traffic records the room's requests
        self.from_room = False             # step 6 draws the room's requests (you_are_the_workload.py), not its own

    def run(self, number: int, progress=None, cancel: threading.Event | None = None) -> StepResult:
        if number not in STEPS:
            raise ValueError(f"the lesson has steps 1-{len(STEPS)}, got {number!r}")
        report = Progress(progress, cancel)
        result = STEPS[number].run(self, report)
        result.cancelled = report.cancelled
        result.elapsed = report.elapsed()
        if not result.cancelled:
            self.results[number] = result
        report(1.0, StopReason.CANCELLED if result.cancelled else "done")
        return result

    def run_all(self, progress=None, cancel: threading.Event | None = None) -> list[StepResult]:
        out = []
        for n in STEPS:
            if cancel is not None and cancel.is_set():
                break
            out.append(self.run(n, None if progress is None else
                                (lambda f, m, n=n: progress((n - 1 + f) / len(STEPS), f"step {n}: {m}")), cancel))
        return out


STEPS: dict[int, LessonStep] = {s.number: s for s in (
    LessonStep(1, "It works in tokens", step_tokens),
    LessonStep(2, "One token at a time", step_decode),
    LessonStep(3, "Prefill, then decode", step_prefill),
    LessonStep(4, "The KV cache", step_kv_cache),
    LessonStep(5, "Cost and latency scale with tokens", step_scale),
    LessonStep(6, "No two requests are the same", step_mixed),
    LessonStep(7, MEMORY_TITLE, step_memory),
    LessonStep(8, CHAT_TITLE, step_chat),
)}
