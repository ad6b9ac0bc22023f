"""The bench's arithmetic on figures: a missing figure stays missing (None), never becomes a zero.

    rounded(0.0123456, 3), rounded(0.0123456, 3, scale=1e3)    # 0.012, 12.346
    median([1.0, None, 3.0], 3)                                # 2.0: the median of what was measured
    ratio(3.0, 2.0)                                            # 1.5; None when either side is missing or zero
    targets_met(row, {"total_x_8_vs_1": (">=", 3.0)})          # {key: True | False | None (missing)}
    targets_text({"total_x_8_vs_1": (">=", 3.0)})              # {"total_x_8_vs_1": ">= 3"}

Every bench row takes its rounding, medians, ratios and targets from here, each with the digits its
fields have always carried. Left out: percentiles (each row states its own rank rule).
"""
from __future__ import annotations

import statistics
from typing import Iterable


def rounded(value: float | None, digits: int = 3, scale: float = 1.0) -> float | None:
    """`value` × `scale`, rounded to `digits`; None stays None.

    >>> rounded(0.0123456), rounded(0.0123456, 2), rounded(0.0123456, scale=1e3), rounded(None)
    (0.012, 0.01, 12.346, None)
    """
    return None if value is None else round(value * scale, digits)


def median(values: Iterable[float | None], digits: int = 3) -> float | None:
    """The median of the figures that were measured, rounded to `digits`; None when none was.

    >>> median([1.0, None, 3.0]), median([None, None]), median(iter([0.123456, 0.2]), 4)
    (2.0, None, 0.1617)
    """
    measured = [v for v in values if v is not None]
    return round(statistics.median(measured), digits) if measured else None


def ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    """a / b rounded, None when either is missing or zero.

    >>> ratio(3.0, 2.0), ratio(None, 2.0), ratio(1.0, 0), ratio(1.0, 3.0, 3)
    (1.5, None, None, 0.333)
    """
    return round(a / b, digits) if a and b else None


def targets_met(row: dict, targets: dict) -> dict[str, bool | None]:
    """{key: whether row[key] meets its target (op, bound)}; None where the figure is missing.

    >>> targets_met({"a": 3.2, "b": 2.6, "c": None}, {"a": (">=", 3.0), "b": ("<=", 2.5), "c": (">=", 1.0)})
    {'a': True, 'b': False, 'c': None}
    """
    return {key: None if row.get(key) is None else (row[key] >= target if op == ">=" else row[key] <= target)
            for key, (op, target) in targets.items()}


def targets_text(targets: dict) -> dict[str, str]:
    """The targets as a row prints them.

    >>> targets_text({"a": (">=", 3.0), "b": ("<=", 0.25)})
    {'a': '>= 3', 'b': '<= 0.25'}
    """
    return {key: f"{op} {target:g}" for key, (op, target) in targets.items()}
