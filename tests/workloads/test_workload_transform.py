"""rate_scale and window: counts, spans, determinism, shape, and Hypothesis properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.errors import ConfigError
from llmscale.workloads import Workload, diurnal, poisson, rate_scale, window


@pytest.fixture(scope="module")
def base() -> Workload:
    # Bursty (cv 2) and diurnal (2 -> 12 -> 2 req/s over 20 min): 8,400 requests
    # expected, with minute-scale structure for rate_scale to preserve.
    return diurnal(2.0, 12.0, 1200.0, 1200.0, cv=2.0, seed=42)


@pytest.mark.parametrize(
    "k",
    [pytest.param(k, id=f"k={k}") for k in (0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 7.3, 20.0)],
)
def test_rate_scale_count_and_duration(base: Workload, k: float) -> None:
    scaled = rate_scale(base, k, seed=1)
    assert scaled.num_requests == round(k * base.num_requests)
    assert scaled.duration_s == base.duration_s
    assert scaled.arrival_s[0] == 0.0
    assert np.all(np.diff(scaled.arrival_s) >= 0)
    assert scaled.meta["rate_scale"] == pytest.approx(k)
    transforms = scaled.meta["transforms"]
    assert isinstance(transforms, list)
    assert transforms[-1]["op"] == "rate_scale"


@pytest.mark.parametrize("k", [pytest.param(0.5, id="thin"), pytest.param(3.5, id="superpose")])
def test_rate_scale_is_deterministic(base: Workload, k: float) -> None:
    a, b, c = rate_scale(base, k, seed=5), rate_scale(base, k, seed=5), rate_scale(base, k, seed=6)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.input_tokens, b.input_tokens)
    assert not np.array_equal(a.arrival_s, c.arrival_s)


@pytest.mark.parametrize("k", [pytest.param(0.3, id="thin"), pytest.param(5.0, id="superpose")])
def test_rate_scale_keeps_the_shape_over_time(base: Workload, k: float) -> None:
    scaled = rate_scale(base, k, seed=2)
    original = np.bincount((base.arrival_s // 60).astype(int), minlength=20)[:20]
    after = np.bincount((scaled.arrival_s // 60).astype(int), minlength=20)[:20]
    assert np.corrcoef(original, after)[0, 1] > 0.95
    # Peak-to-mean survives (k copies move together; thinning keeps ~k of each minute).
    ratio_before = original.max() / original.mean()
    ratio_after = after.max() / after.mean()
    assert ratio_after == pytest.approx(ratio_before, rel=0.15)


def test_rate_scale_added_lengths_come_from_the_trace(base: Workload) -> None:
    scaled = rate_scale(base, 3.0, seed=3)
    originals = set(zip(base.input_tokens.tolist(), base.output_tokens.tolist(), strict=True))
    pairs = set(zip(scaled.input_tokens.tolist(), scaled.output_tokens.tolist(), strict=True))
    assert pairs <= originals


def test_thinning_keeps_first_and_last(base: Workload) -> None:
    thin = rate_scale(base, 0.01, seed=4)
    assert thin.duration_s == base.duration_s
    assert thin.input_tokens[0] == base.input_tokens[0]
    assert thin.input_tokens[-1] == base.input_tokens[-1]


def test_rate_scale_composes(base: Workload) -> None:
    twice = rate_scale(rate_scale(base, 2.0, seed=1), 3.0, seed=2)
    assert twice.meta["rate_scale"] == pytest.approx(6.0)
    assert len(twice.meta["transforms"]) == 2  # type: ignore[arg-type]
    assert twice.num_requests == 6 * base.num_requests


def test_rate_scale_jitter_zero_duplicates_times() -> None:
    w = Workload.from_arrays("w", [0.0, 1.0, 3.0], [1, 2, 3], [1, 2, 3])
    doubled = rate_scale(w, 2.0, seed=0, jitter_scale=0.0)
    np.testing.assert_allclose(doubled.arrival_s, [0, 0, 1, 1, 3, 3])


@pytest.mark.parametrize(
    ("k", "kwargs", "fragment"),
    [
        pytest.param(0.0, {}, "k = 0.0", id="zero"),
        pytest.param(-2.0, {}, "k = -2.0", id="negative"),
        pytest.param(math.inf, {}, "k = inf", id="infinite"),
        pytest.param(1e-6, {}, "leaves no requests", id="too-small"),
        pytest.param(2.0, {"jitter_scale": -1.0}, "jitter_scale", id="negative-jitter"),
        pytest.param(2.0, {"seed": -1}, "seed = -1", id="negative-seed"),
    ],
)
def test_rate_scale_errors(base: Workload, k: float, kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        rate_scale(base, k, **kwargs)  # type: ignore[arg-type]


def test_window_cuts_and_rebases() -> None:
    w = Workload.from_arrays("w", [0.0, 1.0, 2.5, 4.0, 6.0], [1, 2, 3, 4, 5], [1, 1, 1, 1, 1])
    cut = window(w, 2.0, 2.0)  # [2, 4): only 2.5
    np.testing.assert_allclose(cut.arrival_s, [0.0])
    assert cut.input_tokens.tolist() == [3]
    cut = window(w, 1.0, 5.0)  # [1, 6): 1, 2.5, 4
    np.testing.assert_allclose(cut.arrival_s, [0.0, 1.5, 3.0])
    assert cut.meta["window"] == {"start_s": 1.0, "duration_s": 5.0, "first_arrival_offset_s": 0.0}
    tail = window(w, 3.0, math.inf)
    np.testing.assert_allclose(tail.arrival_s, [0.0, 2.0])
    assert tail.meta["window"]["first_arrival_offset_s"] == 1.0  # type: ignore[index]


def test_window_on_a_generated_workload() -> None:
    w = poisson(10.0, 600.0, seed=0)
    cut = window(w, 120.0, 60.0)
    original = w.arrival_s[(w.arrival_s >= 120) & (w.arrival_s < 180)]
    offset = float(cut.meta["window"]["first_arrival_offset_s"])  # type: ignore[index]
    np.testing.assert_allclose(cut.arrival_s + 120.0 + offset, original)


@pytest.mark.parametrize(
    ("start_s", "duration_s", "fragment"),
    [
        pytest.param(100.0, 10.0, "contains no requests", id="empty"),
        pytest.param(-1.0, 10.0, "start_s = -1.0", id="negative-start"),
        pytest.param(0.0, 0.0, "duration_s = 0.0", id="zero-duration"),
        pytest.param(math.nan, 1.0, "start_s = nan", id="nan-start"),
    ],
)
def test_window_errors(start_s: float, duration_s: float, fragment: str) -> None:
    w = Workload.from_arrays("w", [0.0, 1.0], [1, 1], [1, 1])
    with pytest.raises(ConfigError, match=fragment):
        window(w, start_s, duration_s)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    n = draw(st.integers(min_value=1, max_value=150))
    times = draw(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=n, max_size=n))
    tokens = st.lists(st.integers(1, 100_000), min_size=n, max_size=n)
    return Workload.from_arrays("h", times, draw(tokens), draw(tokens))


@settings(max_examples=200, deadline=None)
@given(w=workloads(), k=st.floats(0.05, 12.0), seed=st.integers(0, 2**32))
def test_rate_scale_properties(w: Workload, k: float, seed: int) -> None:
    target = round(k * w.num_requests)
    if target < 1:
        with pytest.raises(ConfigError):
            rate_scale(w, k, seed=seed)
        return
    scaled = rate_scale(w, k, seed=seed)
    assert scaled.num_requests == target
    assert abs(scaled.num_requests - k * w.num_requests) <= 0.5 + 1e-9
    assert np.all(np.diff(scaled.arrival_s) >= 0)
    assert scaled.arrival_s[0] == 0.0
    assert scaled.input_tokens.min() >= 1
    assert scaled.output_tokens.min() >= 1
    if target >= 2 or k >= 1:
        assert scaled.duration_s == pytest.approx(w.duration_s)
    else:
        assert scaled.duration_s == 0.0


@settings(max_examples=100, deadline=None)
@given(w=workloads(), start=st.floats(0, 1e4), duration=st.floats(1e-3, 2e4))
def test_window_properties(w: Workload, start: float, duration: float) -> None:
    inside = np.count_nonzero((w.arrival_s >= start) & (w.arrival_s < start + duration))
    if inside == 0:
        with pytest.raises(ConfigError):
            window(w, start, duration)
        return
    cut = window(w, start, duration)
    assert cut.num_requests == inside
    assert cut.arrival_s[0] == 0.0
    assert cut.duration_s <= duration
