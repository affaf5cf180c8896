from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmscale.sim.histogram import BucketHistogram

BOUNDS = (0.01, 0.0125, 0.015, 0.05, 0.1)


def _naive(first: float, step: float, n: int, weight: float) -> BucketHistogram:
    h = BucketHistogram(BOUNDS)
    for j in range(n):
        h.observe(first + j * step, weight)
    return h


@pytest.mark.parametrize(
    ("first", "step", "n", "expected_counts"),
    [
        pytest.param(0.010, 0.001, 5, [1, 2, 2, 0, 0, 0], id="docstring-example"),
        pytest.param(0.2, 0.0, 3, [0, 0, 0, 0, 0, 3], id="all-above-last-bound"),
        pytest.param(0.001, 0.0, 4, [4, 0, 0, 0, 0, 0], id="constant-below-first-bound"),
        pytest.param(0.01, 0.01, 11, [1, 0, 0, 4, 5, 1], id="spans-several-buckets"),
    ],
)
def test_arithmetic_run_lands_in_the_right_buckets(first, step, n, expected_counts):
    h = BucketHistogram(BOUNDS)
    h.observe_arithmetic(first, step, n, 1.0)
    assert h.counts == pytest.approx(expected_counts)
    assert h.count == n
    assert h.sum == pytest.approx(sum(first + j * step for j in range(n)))


@given(
    first=st.floats(0.0, 0.2),
    step=st.floats(0.0, 0.02),
    n=st.integers(0, 200),
    weight=st.integers(1, 64),
)
def test_closed_form_matches_one_by_one(first, step, n, weight):
    fast = BucketHistogram(BOUNDS)
    fast.observe_arithmetic(first, step, n, weight)
    slow = _naive(first, step, n, weight)
    # A value within float rounding of a bound may land on either side; allow one value's weight.
    assert sum(fast.counts) == pytest.approx(sum(slow.counts))
    assert all(abs(a - b) <= weight for a, b in zip(fast.counts, slow.counts, strict=True))
    assert math.isclose(fast.sum, slow.sum, rel_tol=1e-9, abs_tol=1e-9)


def test_snapshot_is_cumulative_with_inf_bucket():
    h = BucketHistogram((1.0, 2.0))
    for v in (0.5, 1.0, 1.5, 3.0):
        h.observe(v)
    snap = h.snapshot()
    assert snap.bounds == (1.0, 2.0, math.inf)
    assert snap.cumulative == (2.0, 3.0, 4.0)
    assert snap.count == 4


def test_snapshot_is_the_histogram_when_taken_whenever_it_is_read():
    # The snapshot copies the counts and makes them cumulative on first read: observations made
    # after it was taken must not show, whether it is read before them or after.
    h = BucketHistogram((1.0, 2.0))
    h.observe(0.5)
    read_late = h.snapshot()
    read_early = h.snapshot()
    assert read_early.cumulative == (1.0, 1.0, 1.0)
    h.observe(1.5)
    h.observe_arithmetic(0.2, 0.5, 4, 2.0)
    assert read_late.cumulative == (1.0, 1.0, 1.0)
    assert (read_late.sum, read_late.count) == (0.5, 1.0)
    assert read_early.cumulative == (1.0, 1.0, 1.0)
    assert h.snapshot().cumulative == (5.0, 10.0, 10.0)  # 0.2, 0.7 (x2) <= 1; 1.2, 1.7 (x2) <= 2
