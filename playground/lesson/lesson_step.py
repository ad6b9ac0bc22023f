"""What a lesson step is and gives back (StepResult), and the seed sentence the steps share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


SEED_SENTENCE = "Serving LLMs is not like serving web apps."
RULE_OF_THUMB = 1.3   # the common rule of thumb: about 1.3 tokens a word (English text, GPT-style tokenizers)


@dataclass
class StepResult:
    number: int
    title: str
    takeaway: str                                  # the step's lesson, in its own measured numbers (~35 words)
    numbers: dict = field(default_factory=dict)    # every figure the takeaway uses (the handout's table)
    figures: dict = field(default_factory=dict)    # name -> plotly Figure
    html: str = ""                                 # chips and tables (escaped)
    notes: list[str] = field(default_factory=list)  # what is missing or estimated, in words
    cancelled: bool = False
    elapsed: float = 0.0
    drawn_from: str = ""                           # a record the step was drawn from instead of measuring ("": measured)


@dataclass(frozen=True)
class LessonStep:
    number: int
    title: str
    run: Callable[..., StepResult]   # run(lesson, report: Progress) -> the step's result


def part_of(report, k: int, parts: int, name: str) -> Callable[[float, str], None]:
    """The progress of the k-th (from 0) of a step's `parts` runs, named: its 0..1 is the step's share k..k+1 of the
    whole, so one run's "done" is never the step's 100 % while another is still to run.

    >>> seen = []
    >>> part_of(lambda f, m: seen.append((f, m)), 0, 2, "one at a time")(1.0, "done")
    >>> seen
    [(0.5, 'one at a time (1 of 2): done')]
    """
    return lambda fraction, message: report((k + fraction) / parts, f"{name} ({k + 1} of {parts}): {message}")
