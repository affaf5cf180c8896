"""The least-squares trend of a rate over the last ticks, and how sure it is.

``slo`` and ``slo-disagg`` both plan one cold start ahead: a rising rate is extrapolated by its
slope over the last few ticks, less the slope's own standard error carried over the cold start,
so that a slope no surer than its noise buys no replica.
"""

from __future__ import annotations

import math

__all__ = ["slope", "slope_se"]


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t, y) points, per second (0 for fewer than two distinct times)."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var <= 0.0:
        return 0.0
    return sum((t - mt) * (y - my) for t, y in points) / var


def slope_se(points: list[tuple[float, float]], slope: float) -> float:
    """Standard error of the least-squares slope of (t, y) points, per second (0 below three points).

    Worked: levels 10, 12, 10, 12 at 0, 15, 30, 45 s fit a slope of 0.027/s with residuals
    +-0.7 to 1.0: se = sqrt(3.2 / 2 / 1,125) = 0.038/s, more than the slope itself.
    """
    n = len(points)
    if n < 3:
        return 0.0
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var <= 0.0:
        return 0.0
    rss = sum((y - my - slope * (t - mt)) ** 2 for t, y in points)
    return math.sqrt(rss / (n - 2) / var)
