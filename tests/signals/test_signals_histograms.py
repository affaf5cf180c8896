"""Percentiles from cumulative-bucket histograms: PromQL's histogram_quantile over window increases."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from signals_fixtures import BOUNDS, hist, obs, sample

from llmscale.metrics.names import TGI, VLLM, VLLM_OLD
from llmscale.signals.histograms import (
    bucket_increase,
    counter_increase,
    histogram_quantile,
    latency_signals,
    window_histogram,
)
from llmscale.signals.window import ITL, TTFT, FleetWindow
from llmscale.types import Phase

INF = math.inf


@pytest.mark.parametrize(
    ("q", "bounds", "cumulative", "expected"),
    [
        # (0.1, 0.5, 1, +Inf) holding (10, 90, 99, 100): rank 99 is the top of (0.5, 1] -> 1.0
        pytest.param(0.99, BOUNDS, (10, 90, 99, 100), 1.0, id="p99-top-of-bucket"),
        # rank 95: 0.5 + 0.5 x (95 - 90) / 9 = 0.7778
        pytest.param(0.95, BOUNDS, (10, 90, 99, 100), 0.5 + 0.5 * 5 / 9, id="p95-interpolated"),
        # rank 50 in (0.1, 0.5] holding 80: 0.1 + 0.4 x 40/80 = 0.3
        pytest.param(0.5, BOUNDS, (10, 90, 99, 100), 0.3, id="median"),
        # rank 5 in the first bucket [0, 0.1]: 0.1 x 5/10 = 0.05 (first bucket starts at 0)
        pytest.param(0.05, BOUNDS, (10, 90, 99, 100), 0.05, id="first-bucket-from-zero"),
        # rank 99.5 is beyond the last finite bucket: the last finite bound, a lower bound of the truth
        pytest.param(0.995, BOUNDS, (10, 90, 99, 100), 1.0, id="inf-bucket-returns-last-finite"),
        pytest.param(0.99, BOUNDS, (0, 0, 0, 5), 1.0, id="all-in-inf-bucket"),
        # q = 0: the lower edge of the first non-empty bucket
        pytest.param(0.0, BOUNDS, (0, 4, 8, 8), 0.1, id="q0-first-nonempty"),
        # a torn scrape (99 < 100 before it) is raised to the running max, as ensureMonotonic
        pytest.param(0.5, BOUNDS, (10, 100, 99, 100), 0.1 + 0.4 * 40 / 90, id="non-monotone-fixed"),
        pytest.param(0.99, BOUNDS, (0, 0, 0, 0), None, id="no-observation"),
        pytest.param(0.99, (0.1, 0.5), (1, 2), None, id="no-inf-bucket"),
        pytest.param(0.99, (INF,), (3,), None, id="only-inf-bucket"),
        # a bound <= 0 holding the rank is returned as is
        pytest.param(0.5, (0.0, 1.0, INF), (5, 10, 10), 0.0, id="nonpositive-first-bound"),
    ],
)
def test_histogram_quantile(q, bounds, cumulative, expected):
    got = histogram_quantile(q, bounds, cumulative)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_histogram_quantile_rejects_q_outside_0_1():
    with pytest.raises(ValueError, match=r"q = 1\.5"):
        histogram_quantile(1.5, BOUNDS, (1, 2, 3, 4))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param((10, 30), 20, id="plain"),
        pytest.param((10, 30, 5, 25), 45, id="reset-counts-new-value"),
        pytest.param((7,), 0, id="one-sample"),
        pytest.param((), 0, id="empty"),
        pytest.param((5, 5, 5), 0, id="flat"),
    ],
)
def test_counter_increase(values, expected):
    assert counter_increase(values) == expected


@pytest.mark.parametrize(
    ("snapshots", "expected"),
    [
        pytest.param([(1, 2, 3, 4), (2, 5, 6, 8)], [1, 3, 3, 4], id="plain"),
        # restart between 2nd and 3rd: (3, 4, 4, 5) is itself the step's increase
        pytest.param([(1, 2, 3, 4), (2, 5, 6, 8), (3, 4, 4, 5)], [4, 7, 7, 9], id="reset"),
    ],
)
def test_bucket_increase(snapshots, expected):
    assert bucket_increase(snapshots) == expected


def _ttft(cum):
    return {VLLM.ttft: hist(cum)}


def test_window_histogram_sums_increases_over_replicas():
    # a: 10 fast then 10 slow requests -> increase (0, 10, 10, 10) over the window;
    # b: +(10, 10, 10, 10) -> sum (10, 20, 20, 20): P50 = rank 10, the top of [0, 0.1] = 0.1.
    window = [
        obs(
            0.0, sample("a", histograms=_ttft((10, 10, 10, 10))), sample("b", histograms=_ttft((0, 0, 0, 0)))
        ),
        obs(
            15.0,
            sample("a", histograms=_ttft((10, 20, 20, 20))),
            sample("b", histograms=_ttft((10, 10, 10, 10))),
        ),
    ]
    h = window_histogram(FleetWindow.build(window), TTFT)
    assert h is not None
    assert h.cumulative == [10, 20, 20, 20]
    assert h.count == 20
    assert h.replicas == 2
    assert h.quantile(0.5) == pytest.approx(0.1)
    # P99: rank 19.8 in (0.1, 0.5] holding 10: 0.1 + 0.4 x 9.8/10 = 0.492
    assert h.quantile(0.99) == pytest.approx(0.492)


@pytest.mark.parametrize(
    ("times", "series", "expected_count", "expected_replicas"),
    [
        # appears mid-window: its two samples count (5 -> 9 = 4)
        pytest.param((0, 20, 40), {"new": [None, 5, 9]}, 4, 1, id="appears"),
        # disappears after 20 s: its increase up to its last sample still counts (2 -> 6)
        pytest.param((0, 20, 40), {"gone": [2, 6, None]}, 4, 1, id="disappears"),
        # failed scrape in the middle: newest - oldest (1 -> 11)
        pytest.param((0, 20, 40), {"gap": [1, "fail", 11]}, 10, 1, id="failed-scrape-in-between"),
        # process restart: 50 -> 60 -> 4: increase 10 + 4 = 14
        pytest.param((0, 20, 40), {"restart": [50, 60, 4]}, 14, 1, id="counter-reset"),
        # seen once: no increase to take, no contribution
        pytest.param((0, 20, 40), {"once": [None, None, 7]}, None, 0, id="seen-once"),
        # window 60 s ending at 80: t = 0 is outside, only 100 -> 130 counts
        pytest.param((0, 20, 80), {"old": [0, 100, 130]}, 30, 1, id="window-edge"),
        # exactly 60 s back is inside (ticks at 0, 30, 60)
        pytest.param((0, 30, 60), {"edge": [0, 100, 130]}, 130, 1, id="window-edge-inclusive"),
        # two samples but only one inside the window: nothing
        pytest.param((0, 20, 80), {"stale": [2, 6, None]}, None, 0, id="stale-outside-window"),
    ],
)
def test_window_histogram_replica_lifecycles(times, series, expected_count, expected_replicas):
    observations = []
    for k, t in enumerate(times):
        samples = []
        for name, counts in series.items():
            c = counts[k]
            if c is None:
                continue
            if c == "fail":
                samples.append(sample(name, ok=False))
            else:
                samples.append(sample(name, histograms=_ttft((0, c, c, c))))
        observations.append(obs(float(t), *samples))
    h = window_histogram(FleetWindow.build(observations), TTFT, 60.0)
    if expected_count is None:
        assert h is None
    else:
        assert h is not None
        assert h.count == expected_count
        assert h.replicas == expected_replicas


def test_window_histogram_reads_old_and_new_vllm_names_without_double_counting():
    # "new" exports both names (as the simulator does); "old" only the V0 name.
    both = {VLLM.itl: hist((0, 0, 0, 0)), VLLM_OLD.itl: hist((0, 0, 0, 0))}
    both2 = {VLLM.itl: hist((0, 5, 5, 5)), VLLM_OLD.itl: hist((0, 5, 5, 5))}
    window = [
        obs(
            0.0, sample("new", histograms=both), sample("old", histograms={VLLM_OLD.itl: hist((0, 0, 0, 0))})
        ),
        obs(
            15.0,
            sample("new", histograms=both2),
            sample("old", histograms={VLLM_OLD.itl: hist((2, 2, 2, 2))}),
        ),
    ]
    h = window_histogram(FleetWindow.build(window), ITL)
    assert h is not None
    assert h.cumulative == [2, 7, 7, 7]


def test_window_histogram_skips_replicas_with_other_buckets():
    other = (0.2, 2.0, INF)
    window = [
        obs(
            0.0,
            sample("a", histograms=_ttft((0, 0, 0, 0))),
            sample("b", histograms={VLLM.ttft: hist((0, 0, 0), other)}),
        ),
        obs(
            15.0,
            sample("a", histograms=_ttft((1, 2, 3, 4))),
            sample("b", histograms={VLLM.ttft: hist((5, 5, 5), other)}),
        ),
    ]
    h = window_histogram(FleetWindow.build(window), TTFT)
    assert h is not None
    assert (h.count, h.replicas, h.mismatched) == (4, 1, 1)


def test_per_step_increases_match_the_total():
    counts = [0, 3, 3, 10, 12]  # steps: +3, +0 (skipped), +7, +2
    window = [obs(15.0 * k, sample("a", histograms=_ttft((0, c, c, c)))) for k, c in enumerate(counts)]
    h = window_histogram(FleetWindow.build(window), TTFT, per_step=True)
    assert h is not None
    assert {k: v[-1] for k, v in h.steps.items()} == {1: 3, 3: 7, 4: 2}
    assert h.count == 12


def test_latency_signals_are_invalid_without_requests():
    window = [
        obs(0.0, sample("a", histograms=_ttft((0, 0, 0, 0)))),
        obs(15.0, sample("a", histograms=_ttft((0, 0, 0, 0)))),
    ]
    values, _ = latency_signals(FleetWindow.build(window))
    assert values["ttft_p99_s"].value is None
    assert "no TTFT observation" in values["ttft_p99_s"].note
    assert values["e2e_p99_s"].value is None  # no E2E histogram at all
    assert values["e2e_p99_s"].note


def test_tgi_names_are_read():
    window = [
        obs(0.0, sample("t", histograms={TGI.e2e: hist((0, 0, 0, 0))})),
        obs(15.0, sample("t", histograms={TGI.e2e: hist((0, 10, 10, 10))})),
    ]
    values, _ = latency_signals(FleetWindow.build(window))
    # rank 9.9 of 10 in (0.1, 0.5]: 0.1 + 0.4 x 0.99 = 0.496
    assert values["e2e_p99_s"].value == pytest.approx(0.496)


@st.composite
def histograms(draw):
    n = draw(st.integers(min_value=1, max_value=8))
    bounds = sorted(set(draw(st.lists(st.floats(0.001, 100.0), min_size=n, max_size=n))))
    counts = draw(st.lists(st.integers(0, 1000), min_size=len(bounds) + 1, max_size=len(bounds) + 1))
    cum = []
    run = 0
    for c in counts:
        run += c
        cum.append(float(run))
    return (*bounds, INF), tuple(cum)


@given(histograms(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_quantile_is_monotone_in_q_and_within_the_finite_bounds(h, q1, q2):
    bounds, cum = h
    lo, hi = sorted((q1, q2))
    a = histogram_quantile(lo, bounds, cum)
    b = histogram_quantile(hi, bounds, cum)
    if cum[-1] == 0:
        assert a is None and b is None
        return
    assert a is not None and b is not None
    assert a <= b + 1e-9
    assert a >= 0.0 and b <= bounds[-2] + 1e-9


def test_phase_does_not_matter_for_latency():
    # a draining replica's finished requests are real observations
    window = [
        obs(0.0, sample("d", histograms=_ttft((0, 0, 0, 0)), phase=Phase.DRAINING)),
        obs(15.0, sample("d", histograms=_ttft((0, 4, 4, 4)), phase=Phase.DRAINING)),
    ]
    h = window_histogram(FleetWindow.build(window), TTFT)
    assert h is not None and h.count == 4
