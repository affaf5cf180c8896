"""The knee by the second derivative (seed 003 2.3), on curves whose knee is computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmscale.analyze.knee import find_knee, latency_cliff_rps_per_replica


def _hockey_stick(x: np.ndarray, x0: float, w: float, k: float = 0.2, b: float = 0.3) -> np.ndarray:
    return b + k * w * np.log1p(np.exp((x - x0) / w))


def test_knee_of_a_soft_hockey_stick_with_noise():
    # y'' = (k/w) s(1-s), s the logistic of (x-x0)/w: peak k/(4w) at x0; 0.8 of it first where
    # s(1-s) = 0.2 -> s = (1 - sqrt(0.2))/2 = 0.2764 -> x = x0 + w ln(0.2764/0.7236) = x0 - 0.962 w
    # = 30 - 2.887 = 27.11 req/s. The rule returns a bin's load: 20 bins over [0, 50] are 2.5 wide.
    expected = 30.0 + 3.0 * math.log((1 - math.sqrt(0.2)) / (1 + math.sqrt(0.2)))
    assert expected == pytest.approx(27.113, abs=1e-3)
    rng = np.random.default_rng(7)
    x = rng.uniform(0.0, 50.0, 4000)
    y = _hockey_stick(x, 30.0, 3.0) * (1 + 0.02 * rng.standard_normal(x.size))
    knee = find_knee(x, y, num_bins=20)
    assert knee is not None
    assert abs(knee.load - expected) <= 2.5
    # and the knee is a real bend: well above the flat part, well below the top
    assert 0.3 < knee.value < _hockey_stick(np.array([50.0]), 30.0, 3.0)[0] / 2


def test_knee_of_a_saturating_queue_is_at_the_end_of_the_observed_loads():
    # y = a / (c - x) on [0, 9], c = 10: y'' = 2a / (c - x)^3 grows to the end. The first bin with
    # y'' >= 0.8 y''(x_last) has c - x <= (c - x_last) / 0.8^(1/3) = 1.077 (c - x_last). 18 bins of
    # 0.5: the last bin's median load x_last ~ 8.74, so the band is x >= 10 - 1.077 x 1.26 = 8.64:
    # only the last bin (the one before sits at ~8.26).
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 9.0, 4000)
    y = 1.0 / (10.0 - x) * (1 + 0.02 * rng.standard_normal(x.size))
    knee = find_knee(x, y, num_bins=18, smooth_bins=1)
    assert knee is not None
    x_last = knee.x[-1]
    band = 10.0 - (10.0 - x_last) / 0.8 ** (1 / 3)
    assert knee.x[-2] < band <= x_last
    assert knee.index == knee.x.size - 1
    # the moving average flattens the last bins: the smoothed knee sits a few bins lower
    smoothed = find_knee(x, y, num_bins=18)
    assert smoothed is not None and 6.5 < smoothed.load < x_last


def test_throughput_knee_is_where_it_stops_following_load():
    # throughput = 30 - w ln(1 + e^((30 - x)/w)): ~x below 30, flat at 30 above; -y'' is the same
    # logistic bump, so the concave knee is at 30 - 0.962 w = 27.11 as above.
    x = np.linspace(0.0, 50.0, 2000)
    y = 30.0 - 3.0 * np.log1p(np.exp((30.0 - x) / 3.0))
    knee = find_knee(x, y, concave=True, num_bins=25)
    assert knee is not None and abs(knee.load - 27.11) <= 2.0


def test_cliff_is_per_serving_replica():
    # the same hockey stick in load per replica, with fleets of 2 and 4 replicas: the cliff is per
    # replica whatever the fleet size
    rng = np.random.default_rng(11)
    per_replica = rng.uniform(0.0, 50.0, 4000)
    serving = rng.choice([2.0, 4.0], size=per_replica.size)
    p99 = _hockey_stick(per_replica, 30.0, 3.0)
    cliff = latency_cliff_rps_per_replica(per_replica * serving, serving, p99)
    assert cliff is not None and abs(cliff - 27.11) <= 2.5


def test_too_few_loads_or_a_straight_line_have_no_knee():
    assert find_knee(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 9.0])) is None
    x = np.linspace(0, 10, 200)
    assert find_knee(x, 2 * x + 1) is None  # y'' = 0 everywhere: no bend
    assert find_knee(np.full(50, 3.0), np.arange(50.0)) is None  # one load only
