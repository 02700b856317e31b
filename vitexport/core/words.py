"""Small words said the same way everywhere: a duration in milliseconds that never turns into
scientific notation, a count with its noun in the right number."""

from __future__ import annotations


def milliseconds(value: float) -> str:
    """3 significant digits below a second (4.05 ms, 56.1 ms, 184 ms), whole milliseconds above
    (1,060 ms, not 1.06e+03 ms)."""
    return f"{value:,.0f} ms" if abs(value) >= 1000 else f"{value:.3g} ms"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`1 row`, `2 rows`, `0 rows`."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
