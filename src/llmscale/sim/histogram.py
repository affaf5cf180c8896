"""Bucket histograms for simulated Prometheus metrics.

Counts are kept per bucket (not cumulative) so one observation touches one
slot; :meth:`BucketHistogram.snapshot` returns what a Prometheus exporter would
expose at that moment, a :class:`HistogramSnapshot`: a copy of the counts, made
cumulative only when read. :meth:`observe_arithmetic` adds a whole decode jump in
closed form: k steps whose durations grow linearly (a, a+b, a+2b, ...) each
observed ``weight`` times, touching only the buckets the run spans.

Bounds and counts are ``librt.vecs.vec[float]``: once compiled with mypyc
(setup.py) they are plain C arrays of doubles, so an observation allocates
nothing (a ``list[float]`` boxes every count it updates), and the bucket is
found by a compiled binary search instead of a call into ``bisect``.
"""

from __future__ import annotations

import math
from typing import final

from librt.vecs import vec
from mypy_extensions import i64

__all__ = ["BucketHistogram", "HistogramSnapshot"]


@final
class HistogramSnapshot:
    """One histogram as scraped: the bucket counts at that moment, cumulative when first read.

    A :class:`llmscale.types.HistogramView`. Taking it copies one C array of
    doubles; the cumulative tuple (a Python float per bucket) is built on the
    first read of :attr:`cumulative` and kept. A controller tick scrapes every
    latency family of every replica, and a policy reads one or two of them:
    the others are never made cumulative. Treat it as read-only.
    """

    __slots__ = ("_counts", "_cumulative", "bounds", "count", "sum")

    def __init__(self, bounds: tuple[float, ...], counts: vec[float], total: float, count: float) -> None:
        self.bounds = bounds
        self._counts = counts
        self._cumulative: tuple[float, ...] | None = None
        self.sum = total
        self.count = count

    @property
    def cumulative(self) -> tuple[float, ...]:
        """Observations at or below each upper bound (the last is the count)."""
        cached = self._cumulative
        if cached is not None:
            return cached
        out = []
        running = 0.0
        for c in self._counts:
            running += c
            out.append(running)
        made = tuple(out)
        self._cumulative = made
        return made

    def __repr__(self) -> str:
        return (
            f"HistogramSnapshot(bounds={self.bounds!r}, cumulative={self.cumulative!r},"
            f" sum={self.sum!r}, count={self.count!r})"
        )


@final
class BucketHistogram:
    __slots__ = ("_bounds", "_counts", "_upper", "count", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        if list(bounds) != sorted(bounds) or len(set(bounds)) != len(bounds):
            raise ValueError(f"histogram bounds must be strictly ascending: {bounds}")
        # The last bucket is +Inf, as in Prometheus exposition.
        self._bounds = (*bounds, math.inf)
        self._upper = vec[float](self._bounds)
        self._counts = vec[float]([0.0] * len(self._upper))
        self.sum = 0.0
        self.count = 0.0

    @property
    def bounds(self) -> tuple[float, ...]:
        """Upper bounds of the buckets, the last one +Inf."""
        return self._bounds

    @property
    def counts(self) -> list[float]:
        """Observations per bucket (not cumulative), a copy."""
        return list(self._counts)

    def _bucket(self, value: float) -> i64:
        # bisect_left: the first bucket whose upper bound is >= value (Prometheus buckets
        # are "less than or equal", so a value equal to a bound lands in that bucket).
        upper = self._upper
        lo: i64 = 0
        hi: i64 = len(upper)
        while lo < hi:
            mid = (lo + hi) >> 1
            if upper[mid] < value:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def observe(self, value: float, weight: float = 1.0) -> None:
        self._counts[self._bucket(value)] += weight
        self.sum += value * weight
        self.count += weight

    def observe_arithmetic(self, first: float, step: float, n: i64, weight: float) -> None:
        """Observe ``first + j*step`` for j in 0..n-1, each ``weight`` times (step >= 0).

        Worked example: first=0.010, step=0.001, n=5 gives 0.010..0.014; with
        bounds (0.01, 0.0125, 0.015) bucket 0 gets 1, bucket 1 gets 2, bucket 2 gets 2.
        """
        if n <= 0:
            return
        # Counts enter the float formulas as exact doubles (whole numbers below 2**53).
        fn = float(n)
        if n == 1 or step <= 0.0:
            self.observe(first, weight * fn)
            return
        upper = self._upper
        counts = self._counts
        last = first + step * float(n - 1)
        i = self._bucket(first)
        i_last = self._bucket(last)
        done: i64 = 0  # how many of the n values are <= upper[i-1]
        while i < i_last:
            # values <= upper[i]: j <= (upper[i] - first) / step
            below: i64 = math.floor((upper[i] - first) / step) + 1
            if below > n:
                below = n
            counts[i] += float(below - done) * weight
            done = below
            i += 1
        counts[i_last] += float(n - done) * weight
        self.sum += weight * (fn * first + step * fn * (fn - 1.0) / 2.0)
        self.count += weight * fn

    def snapshot(self) -> HistogramSnapshot:
        """The histogram as an exporter would expose it now (later observations do not change it)."""
        return HistogramSnapshot(self._bounds, self._counts[0 : len(self._counts)], self.sum, self.count)
