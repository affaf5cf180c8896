"""Bucket histograms for simulated Prometheus metrics.

Counts are kept per bucket (not cumulative) so one observation touches one
slot; :meth:`BucketHistogram.snapshot` returns the cumulative form a Prometheus
exporter would expose. :meth:`observe_arithmetic` adds a whole decode jump in
closed form: k steps whose durations grow linearly (a, a+b, a+2b, ...) each
observed ``weight`` times, touching only the buckets the run spans.
"""

from __future__ import annotations

import math
from bisect import bisect_left

from llmscale.types import Histogram

__all__ = ["BucketHistogram"]


class BucketHistogram:
    __slots__ = ("_upper", "bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        if list(bounds) != sorted(bounds) or len(set(bounds)) != len(bounds):
            raise ValueError(f"histogram bounds must be strictly ascending: {bounds}")
        # The last bucket is +Inf, as in Prometheus exposition.
        self.bounds: tuple[float, ...] = (*bounds, math.inf)
        self._upper = self.bounds
        self.counts = [0.0] * len(self.bounds)
        self.sum = 0.0
        self.count = 0.0

    def observe(self, value: float, weight: float = 1.0) -> None:
        # Prometheus buckets are "less than or equal": a value equal to a bound lands in that bucket.
        self.counts[bisect_left(self._upper, value)] += weight
        self.sum += value * weight
        self.count += weight

    def observe_arithmetic(self, first: float, step: float, n: int, weight: float) -> None:
        """Observe ``first + j*step`` for j in 0..n-1, each ``weight`` times (step >= 0).

        Worked example: first=0.010, step=0.001, n=5 gives 0.010..0.014; with
        bounds (0.01, 0.0125, 0.015) bucket 0 gets 1, bucket 1 gets 2, bucket 2 gets 2.
        """
        if n <= 0:
            return
        if n == 1 or step <= 0.0:
            self.observe(first, weight * n)
            return
        upper = self._upper
        counts = self.counts
        last = first + step * (n - 1)
        i = bisect_left(upper, first)
        i_last = bisect_left(upper, last)
        done = 0  # how many of the n values are <= upper[i-1]
        while i < i_last:
            # values <= upper[i]: j <= (upper[i] - first) / step
            below = math.floor((upper[i] - first) / step) + 1
            if below > n:
                below = n
            counts[i] += (below - done) * weight
            done = below
            i += 1
        counts[i_last] += (n - done) * weight
        self.sum += weight * (n * first + step * n * (n - 1) / 2.0)
        self.count += weight * n

    def snapshot(self) -> Histogram:
        cumulative = []
        running = 0.0
        for c in self.counts:
            running += c
            cumulative.append(running)
        return Histogram(bounds=self.bounds, cumulative=tuple(cumulative), sum=self.sum, count=self.count)
