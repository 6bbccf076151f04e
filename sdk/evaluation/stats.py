"""Confidence intervals for success rates (small samples are the norm here, so Wilson, not Wald)."""

from __future__ import annotations

import math

__all__ = ["wilson_interval", "rate_entry"]


def wilson_interval(successes: int, n: int, *, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` out of ``n`` (95% by default).

    Unlike the normal approximation it stays inside [0, 1] and is not degenerate at 0/n or n/n,
    which matters for 3-episode tasks. ``n == 0`` gives the uninformative ``(0.0, 1.0)``.

    Raises:
        ValueError: counts are negative or ``successes > n``.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4))


def rate_entry(successes: int, n: int) -> dict[str, object]:
    """One metric entry of the results JSON: value, n, successes and the 95% Wilson interval."""
    value = round(successes / n, 4) if n else None
    return {"value": value, "n": n, "successes": successes, "ci95": list(wilson_interval(successes, n))}
