"""Synthetic generators and the rate-curve building block."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from llmscale.errors import ConfigError
from llmscale.workloads import (
    LognormalLengths,
    Workload,
    arrivals_from_rate_curve,
    bursty,
    diurnal,
    flash_crowd,
    on_off,
    poisson,
    with_spike,
    workload_from_rate_curve,
)

Gen = Callable[[int], Workload]

GENERATORS: list[tuple[str, Gen, float]] = [
    ("poisson", lambda seed: poisson(50.0, 1000.0, seed=seed), 50.0),
    ("bursty", lambda seed: bursty(50.0, 1000.0, cv=2.0, seed=seed), 50.0),
    ("diurnal", lambda seed: diurnal(10.0, 90.0, 500.0, 1000.0, seed=seed), 50.0),
    # 40 req/s, x3.5 for 100 of 1000 s: 40 * (1 + 2.5 * 0.1) = 50 req/s.
    (
        "flash_crowd",
        lambda seed: flash_crowd(
            40.0, 1000.0, spike_start_s=200.0, spike_duration_s=100.0, multiplier=3.5, seed=seed
        ),
        50.0,
    ),
    ("on_off", lambda seed: on_off(100.0, 50.0, 50.0, 1000.0, seed=seed), 50.0),
]
GEN_PARAMS = [pytest.param(gen, rate, id=name) for name, gen, rate in GENERATORS]


@pytest.mark.parametrize(("gen", "rate_rps"), GEN_PARAMS)
def test_mean_rate(gen: Gen, rate_rps: float) -> None:
    w = gen(0)
    span_s = float(w.meta["curve_span_s"])  # type: ignore[arg-type]
    # 50,000 expected; Poisson sd 224 (bursty cv 2: ~450). 3% is > 6 sd.
    assert w.num_requests / span_s == pytest.approx(rate_rps, rel=0.03)
    assert w.meta["expected_requests"] == pytest.approx(rate_rps * span_s)


@pytest.mark.parametrize(("gen", "rate_rps"), GEN_PARAMS)
def test_seeded_determinism(gen: Gen, rate_rps: float) -> None:
    a, b, c = gen(11), gen(11), gen(12)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.input_tokens, b.input_tokens)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)
    assert not np.array_equal(a.arrival_s[:100], c.arrival_s[:100])
    assert a.meta["seed"] == 11


@pytest.mark.parametrize(("gen", "rate_rps"), GEN_PARAMS)
def test_invariants(gen: Gen, rate_rps: float) -> None:
    w = gen(3)
    assert w.arrival_s[0] == 0.0
    assert np.all(np.diff(w.arrival_s) >= 0)
    assert w.input_tokens.min() >= 1
    assert w.output_tokens.min() >= 1
    assert w.meta["format"] == "synthetic"


def _gap_cv(w: Workload) -> float:
    gaps = np.diff(w.arrival_s)
    return float(gaps.std() / gaps.mean())


@pytest.mark.parametrize(
    ("cv", "tolerance"),
    [
        pytest.param(0.5, 0.05, id="regular"),
        pytest.param(1.0, 0.05, id="poisson"),
        pytest.param(3.0, 0.3, id="bursty"),
    ],
)
def test_bursty_inter_arrival_cv(cv: float, tolerance: float) -> None:
    w = bursty(20.0, 2000.0, cv=cv, seed=5)
    assert _gap_cv(w) == pytest.approx(cv, abs=tolerance)


def test_flash_crowd_spike_is_where_it_should_be() -> None:
    w = flash_crowd(20.0, 600.0, spike_start_s=300.0, spike_duration_s=60.0, multiplier=4.0, seed=1)
    t = w.arrival_s + float(w.meta["t0_offset_s"])  # type: ignore[arg-type]
    in_spike = np.count_nonzero((t >= 300) & (t < 360))
    before = np.count_nonzero((t >= 200) & (t < 260))
    assert in_spike == pytest.approx(4 * 20 * 60, rel=0.1)
    assert before == pytest.approx(20 * 60, rel=0.15)


def test_on_off_has_silent_off_periods() -> None:
    w = on_off(30.0, 10.0, 20.0, 300.0, seed=2)
    t = w.arrival_s + float(w.meta["t0_offset_s"])  # type: ignore[arg-type]
    phase = t % 30.0
    assert np.all(phase < 10.0 + 1e-9)


def test_on_off_with_partial_last_cycle_and_off_rate() -> None:
    w = on_off(30.0, 10.0, 20.0, 45.0, off_rate_rps=3.0, seed=2)
    # 2 on periods (10 s + 10 s at 30) + off 20 s + 5 s at 3 req/s = 675 expected.
    assert w.meta["expected_requests"] == pytest.approx(675.0)


def test_diurnal_peaks_half_a_period_in() -> None:
    w = diurnal(5.0, 95.0, 600.0, 600.0, seed=4)
    t = w.arrival_s + float(w.meta["t0_offset_s"])  # type: ignore[arg-type]
    counts = np.bincount((t // 60).astype(int), minlength=10)
    assert counts.argmax() in (4, 5)
    assert counts[0] < counts[5] / 4


def test_rate_curve_linear_ramp_density() -> None:
    rng = np.random.default_rng(0)
    t = arrivals_from_rate_curve([0.0, 100.0], [0.0, 100.0], rng)
    # Area 0-50 s is 1250, 50-100 s is 3750.
    assert t.size == pytest.approx(5000, rel=0.05)
    assert np.count_nonzero(t < 50) == pytest.approx(1250, rel=0.1)
    assert np.all((t >= 0) & (t <= 100))
    assert np.all(np.diff(t) >= 0)


def test_rate_curve_steps_and_zero_segments() -> None:
    rng = np.random.default_rng(1)
    times = [0.0, 10.0, 10.0, 20.0, 20.0, 30.0]
    rates = [50.0, 50.0, 0.0, 0.0, 200.0, 200.0]
    t = arrivals_from_rate_curve(times, rates, rng)
    assert not np.any((t > 10.0) & (t < 20.0))
    assert np.count_nonzero(t >= 20) == pytest.approx(2000, rel=0.1)


def test_rate_curve_renewal_keeps_the_curve() -> None:
    rng = np.random.default_rng(2)
    t = arrivals_from_rate_curve([0.0, 100.0, 100.0, 200.0], [10.0, 10.0, 40.0, 40.0], rng, cv=2.0)
    assert np.count_nonzero(t < 100) == pytest.approx(1000, rel=0.2)
    assert np.count_nonzero(t >= 100) == pytest.approx(4000, rel=0.15)


def test_rate_curve_all_zero_is_empty() -> None:
    assert arrivals_from_rate_curve([0.0, 10.0], [0.0, 0.0], np.random.default_rng(0)).size == 0


@pytest.mark.parametrize(
    ("times", "rates", "cv", "fragment"),
    [
        pytest.param([0.0], [1.0], 1.0, ">= 2", id="one-point"),
        pytest.param([0.0, 1.0], [1.0], 1.0, "equal length", id="mismatched"),
        pytest.param([0.0, 2.0, 1.0], [1.0, 1.0, 1.0], 1.0, "non-decreasing", id="decreasing-times"),
        pytest.param([0.0, 1.0], [1.0, -1.0], 1.0, "negative rate", id="negative-rate"),
        pytest.param([0.0, np.nan], [1.0, 1.0], 1.0, "non-finite", id="nan-time"),
        pytest.param([0.0, 1.0], [1.0, 1.0], 0.0, "cv = 0.0", id="zero-cv"),
    ],
)
def test_rate_curve_errors(times: list[float], rates: list[float], cv: float, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        arrivals_from_rate_curve(times, rates, np.random.default_rng(0), cv=cv)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda: poisson(-1.0, 10.0), id="negative-rate"),
        pytest.param(lambda: poisson(1.0, 0.0), id="zero-duration"),
        pytest.param(lambda: poisson(1.0, float("inf")), id="infinite-duration"),
        pytest.param(lambda: bursty(1.0, 10.0, cv=-1.0), id="negative-cv"),
        pytest.param(lambda: diurnal(10.0, 5.0, 60.0, 60.0), id="max-below-min"),
        pytest.param(lambda: diurnal(1.0, 5.0, 0.0, 60.0), id="zero-period"),
        pytest.param(
            lambda: flash_crowd(1.0, 60.0, spike_start_s=10.0, spike_duration_s=0.0), id="zero-spike"
        ),
        pytest.param(lambda: on_off(1.0, 0.0, 5.0, 60.0), id="zero-on"),
        pytest.param(lambda: poisson(1.0, 10.0, seed=-3), id="negative-seed"),
        pytest.param(lambda: poisson(0.001, 1.0), id="no-requests-generated"),
    ],
)
def test_generator_parameter_errors(call: Callable[[], Workload]) -> None:
    with pytest.raises(ConfigError):
        call()


def test_with_spike_on_a_ramp() -> None:
    t, r = with_spike((np.array([0.0, 100.0]), np.array([0.0, 100.0])), 40.0, 20.0, 3.0)
    np.testing.assert_allclose(t, [0, 40, 40, 60, 60, 100])
    np.testing.assert_allclose(r, [0, 40, 120, 180, 60, 100])


def test_lengths_stream_is_independent_of_arrivals() -> None:
    a = poisson(5.0, 100.0, seed=9)
    b = poisson(5.0, 100.0, seed=9, lengths=LognormalLengths(3.0, 0.1, 3.0, 0.1))
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    assert b.input_tokens.max() < 40


def test_stream_names_separate_draws() -> None:
    t, r = np.array([0.0, 100.0]), np.array([5.0, 5.0])
    a = workload_from_rate_curve(t, r, seed=1, stream="a")
    b = workload_from_rate_curve(t, r, seed=1, stream="b")
    assert not np.array_equal(a.arrival_s[:20], b.arrival_s[:20])
