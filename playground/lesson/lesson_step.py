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
