"""Durations, fits and prices in words with units, for a room to read (results keep their raw keys).

    >>> precise_duration(3.415e-06), precise_duration(0.000452), precise_duration(0.0123)
    ('3.42 µs', '452 µs', '12.3 ms')
    >>> formula([0.0123, 0.000452, -3.415e-06], "L")
    '12.3 ms + 452 µs × L − 3.42 µs × L²'
    >>> usd(0.000135), usd(0.0)
    ('$0.00014', '$0')

Durations a person compares (a median, a total) go through `format_seconds` ("498 ms",
"2.4 s"); a fit's coefficients are small and signed, so they keep three significant digits in the
unit that fits them (s, ms, µs, ns).
"""
from __future__ import annotations

import math

UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
POWERS = ("", " × {x}", " × {x}²", " × {x}³")


def format_seconds(seconds: float) -> str:
    """A duration in the unit a person reads: ms under a second, s under two minutes, then minutes.

    >>> format_seconds(0.0424), format_seconds(2.381), format_seconds(1100)
    ('42 ms', '2.4 s', 'about 18 min')
    """
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"about {seconds / 60:.0f} min"


def precise_duration(seconds: float) -> str:
    """Three significant digits in the largest unit under the value; the sign kept ('−1.5 ms')."""
    size = abs(seconds)
    scale, unit = next(((s, u) for s, u in UNITS if size >= s), UNITS[-1])
    text = f"{size / scale:.3g} {unit}"
    return f"−{text}" if seconds < 0 else text


def formula(coefficients, x: str) -> str:
    """A polynomial in seconds, lowest power first, as 'a + b × x − c × x²' with each term in its unit."""
    out = ""
    for power, c in enumerate(coefficients):
        term = precise_duration(abs(c)) + POWERS[power].format(x=x)
        out += ("−" if c < 0 else "") + term if not out else (" − " if c < 0 else " + ") + term
    return out


def usd(amount: float) -> str:
    """Two significant digits, never in exponent notation: a request's cost is a small fraction of a cent."""
    if amount <= 0:
        return "$0"
    if amount >= 1:
        return f"${amount:,.2f}"
    return f"${amount:.{1 - math.floor(math.log10(amount))}f}"


def times(ratio: float) -> str:
    """12.04 -> '12×', 1.234 -> '1.2×'."""
    return f"{ratio:.0f}×" if ratio >= 10 else f"{ratio:.1f}×"


def tokens(n: int) -> str:
    """1 -> '1 token', 1024 -> '1,024 tokens'."""
    return f"{n:,} token" + ("" if n == 1 else "s")
