"""The knee of a curve against load, by the second derivative (seed 003 2.3).

Seed 003 2.3 finds the knee of a GPU-memory trace as the first point whose second derivative
(``np.gradient`` twice) exceeds 0.8 of its maximum. Here the same rule runs on a metric against
load, with two steps the seed's clean trace did not need and a decision log does:

1. **bin** the ticks by load (``num_bins`` equal-width bins) and take each bin's *median*: ticks
   arrive at uneven loads and a P99 over a window is noisy, so the curve is the median per bin;
2. **smooth** the (load, median) points with a centred moving average of ``smooth_bins`` (3) bins, then take
   ``np.gradient`` twice against the bins' load (their centres need not be evenly spaced once
   empty bins are dropped).

P99 latency bends *up* at the knee (its second derivative peaks); throughput bends *down* (it
stops following the load), so its knee is where ``-y''`` peaks. Worked, on a soft hockey stick
``y = b + k w ln(1 + e^((x - x0)/w))``: ``y'' = (k/w) s (1 - s)`` with ``s`` the logistic of
``(x - x0)/w``, peak ``k/(4w)`` at x0; 0.8 of it is first reached where ``s (1 - s) = 0.2``,
``s = (1 - sqrt(0.2))/2 = 0.2764``, ``x = x0 + w ln(0.2764/0.7236) = x0 - 0.962 w``: x0 = 30 req/s,
w = 3 puts the knee at 27.1 req/s (``tests/analyze/test_knee.py``).

The seed's rule has a known edge: on a curve whose curvature keeps growing to the end of the
observed loads (``a / (c - x)``, a queue approaching saturation) the knee is the last bin or two,
the first load where ``y''`` reaches 0.8 of the largest seen; and the moving average, whose
window shrinks at the ends, blunts the last bins' curvature, so there the smoothed knee sits a
bin or two lower (1 / (10 - x) on [0, 9] in 18 bins: 8.74 unsmoothed, 7.76 smoothed;
``smooth_bins=1`` is the seed's rule exactly). Both are pinned by ``tests/analyze/test_knee.py``.

:func:`latency_cliff_rps_per_replica` is the number a capacity-model policy can plan against:
the load per serving replica where the P99 knee sits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SEED_THRESHOLD", "Knee", "find_knee", "latency_cliff_rps_per_replica"]

#: seed 003 2.3: the first point whose second derivative exceeds 0.8 of the maximum
SEED_THRESHOLD = 0.8


@dataclass(frozen=True)
class Knee:
    """Where a curve bends: ``load`` (x at the knee), ``value`` (the smoothed y there).

    ``x``, ``y_median``, ``y_smooth``, ``d2`` are the binned curve the rule ran on (for plots);
    ``d2`` is signed so that the knee is its peak (``-y''`` for a concave knee).
    """

    load: float
    value: float
    index: int
    x: np.ndarray
    y_median: np.ndarray
    y_smooth: np.ndarray
    d2: np.ndarray


def _binned(x: np.ndarray, y: np.ndarray, num_bins: int, min_per_bin: int) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size == 0 or not x.max() > x.min():
        return np.empty(0), np.empty(0)
    edges = np.linspace(x.min(), x.max(), num_bins + 1)
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, num_bins - 1)
    xs, ys = [], []
    for b in range(num_bins):
        sel = idx == b
        if int(sel.sum()) >= min_per_bin:
            xs.append(float(np.median(x[sel])))
            ys.append(float(np.median(y[sel])))
    return np.array(xs), np.array(ys)


def _moving_average(y: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average; the window shrinks at the edges (no padding invents values)."""
    if width <= 1:
        return y.copy()
    half = width // 2
    out = np.empty_like(y)
    for i in range(y.size):
        lo, hi = max(0, i - half), min(y.size, i + half + 1)
        out[i] = y[lo:hi].mean()
    return out


def find_knee(
    load: np.ndarray,
    values: np.ndarray,
    *,
    concave: bool = False,
    num_bins: int = 20,
    smooth_bins: int = 3,
    min_per_bin: int = 1,
    threshold: float = SEED_THRESHOLD,
) -> Knee | None:
    """The knee of ``values`` against ``load``; None with fewer than 5 bins or no bend.

    ``concave``: the curve flattens at its knee (throughput) rather than turning up (latency).
    """
    x, y = _binned(np.asarray(load, float), np.asarray(values, float), num_bins, min_per_bin)
    if x.size < 5:
        return None
    # Smooth the points, not only their values: averaging y alone over a window that shrinks at the
    # ends would bend a straight line there (its last point would sit half a bin below the line).
    xs, ys = _moving_average(x, smooth_bins), _moving_average(y, smooth_bins)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # 1e308 loads: inf, nan
        d2 = np.gradient(np.gradient(ys, xs, edge_order=2), xs, edge_order=2)
    if concave:
        d2 = -d2
    peak = float(d2.max())
    # A straight line's y'' is rounding noise (1e-15 of its scale), not a bend: ask for a peak of
    # at least 1e-6 of the curve's mean slope change over its range, (y range) / (x range)^2.
    # In numpy, so loads of 1e-306 (a range squared to 0) or 1e308 (one squared to inf) give a
    # scale of inf or nan and no knee, not a ZeroDivisionError or a knee at rounding noise.
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        scale = np.float64(np.ptp(ys)) / np.float64(np.ptp(x)) ** 2
    if not (np.isfinite(scale) and np.isfinite(peak) and peak > 1e-6 * scale):
        return None
    i = int(np.argmax(d2 > threshold * peak))
    return Knee(load=float(xs[i]), value=float(ys[i]), index=i, x=xs, y_median=y, y_smooth=ys, d2=d2)


def latency_cliff_rps_per_replica(
    load_rps: np.ndarray, serving_replicas: np.ndarray, p99_s: np.ndarray, **kwargs: int | float
) -> float | None:
    """Load per serving replica (req/s) at the knee of P99 latency: the fleet's cliff, or None.

    Pre: the three arrays are per tick, aligned. Ticks with no serving replica are left out.
    """
    load = np.asarray(load_rps, float)
    serving = np.asarray(serving_replicas, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_replica = np.where(serving > 0, load / serving, np.nan)
    knee = find_knee(per_replica, np.asarray(p99_s, float), **kwargs)  # type: ignore[arg-type]
    return None if knee is None else knee.load
