"""Bucket histograms for simulated Prometheus metrics.

Counts are kept per bucket (not cumulative) so one observation touches one
slot; :meth:`BucketHistogram.snapshot` returns the cumulative form a Prometheus
exporter would expose. :meth:`observe_arithmetic` adds a whole decode jump in
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

from llmscale.types import Histogram

__all__ = ["BucketHistogram"]


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

    def snapshot(self) -> Histogram:
        cumulative = []
        running = 0.0
        for c in self._counts:
            running += c
            cumulative.append(running)
        return Histogram(self._bounds, tuple(cumulative), self.sum, self.count)
