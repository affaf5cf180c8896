"""ServeGen rate shapes: the smooth (continuous, count-keeping) curve and the unchanged step one."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from workload_fixtures import TOTAL_RATE_TEXT

from llmscale.errors import ConfigError
from llmscale.workloads import Workload, load_trace
from llmscale.workloads.servegen import smooth_knots

Write = Callable[[str, str], Path]

# The ServeGen ramp's steps are up to x1.85 per window; these three windows step by that much.
RAMP_TEXT = (
    "window_start_s,total_rate_rps,active_clients\n0,100.0,1\n600,185.0,1\n1200,342.0,1\n1800,185.0,1\n"
)


def _digest(w: Workload) -> str:
    h = hashlib.sha256()
    for a in (w.arrival_s, w.input_tokens, w.output_tokens):
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _file_times(w: Workload) -> np.ndarray:
    return w.arrival_s + float(w.meta["t0_offset_s"])  # type: ignore[arg-type]


# Golden digests from the loader before the smooth shape existed (main at 7e801e2, same fixtures
# and seeds): the step shape must reproduce them byte for byte.
@pytest.mark.parametrize(
    ("which", "kwargs", "digest", "count"),
    [
        pytest.param("clients", {"seed": 11}, "26d54112c1175d45", 13866, id="clients"),
        pytest.param(
            "clients", {"seed": 11, "start_s": 900, "duration_s": 1200}, "b413abe3f1e165a6", 4007, id="span"
        ),
        pytest.param("total", {"seed": 5}, "41cfb307c9e59642", 18167, id="total-poisson"),
        pytest.param("total", {"seed": 5, "cv": 2.0}, "cd59719889f864cb", 17726, id="total-cv2"),
    ],
)
def test_step_shape_is_unchanged(
    which: str, kwargs: dict[str, float], digest: str, count: int, servegen_dir: Path, write: Write
) -> None:
    path = servegen_dir if which == "clients" else write("x_total_rate_10min.csv", TOTAL_RATE_TEXT)
    w = load_trace(path, rate_shape="step", **kwargs)  # type: ignore[arg-type]
    assert w.meta["rate_shape"] == "step"
    assert (w.num_requests, _digest(w)) == (count, digest)


rates_st = st.lists(
    st.sampled_from([0.0, 0.5, 1.0, 2.0, 37.5, 100.0, 185.0, 583.0]) | st.floats(0, 1e3),
    min_size=1,
    max_size=12,
)


@given(rates=rates_st, lengths=st.lists(st.floats(60.0, 900.0), min_size=12, max_size=12))
def test_smooth_keeps_each_window_count(rates: list[float], lengths: list[float]) -> None:
    r = np.array(rates)
    length_s = np.array(lengths[: r.size])
    left, centre, right = smooth_knots(length_s, r)
    # Two trapezoids per window hold exactly L * r requests.
    np.testing.assert_allclose(
        length_s / 4 * (left + 2 * centre + right), length_s * r, rtol=1e-12, atol=1e-9
    )
    # Continuous: a boundary has one rate, seen from both sides.
    np.testing.assert_array_equal(right[:-1], left[1:])
    # Never negative, never above twice the window's own rate; an idle window stays idle.
    for knot in (left, centre, right):
        assert np.all(knot >= 0)
        assert np.all(knot <= 2 * r + 1e-9)
    assert np.all(centre[r == 0] == 0)


def test_smooth_knots_worked_number() -> None:
    """The module docstring's m-large peak: 402.3, 583.0, 201.1 req/s."""
    left, centre, right = smooth_knots(np.full(3, 600.0), np.array([402.3, 583.0, 201.1]))
    assert (left[1], centre[1], right[1]) == pytest.approx((492.65, 723.65, 392.05))


def test_smooth_generated_counts_per_window(write: Write) -> None:
    w = load_trace(write("ramp_total_rate_10min.csv", RAMP_TEXT), seed=3)
    assert w.meta["rate_shape"] == "smooth"
    counts = np.bincount((_file_times(w) // 600).astype(int), minlength=4)
    expected = np.array([100.0, 185.0, 342.0, 185.0]) * 600
    # Poisson (CV 1): a window's count has sd sqrt(mean), <= 453 here; 5 sd is a 1-in-3.5-million miss
    # per window, while the centre-interpolated curve would be off by 600/8 * 2nd difference,
    # e.g. 75 * (185 - 684 + 185) = -23,550 in the peak window.
    assert np.all(np.abs(counts - expected) <= 5 * np.sqrt(expected))


@pytest.mark.parametrize("shape", ["smooth", "step"])
def test_no_jump_at_window_boundaries_unless_step(write: Write, shape: str) -> None:
    w = load_trace(write("ramp_total_rate_10min.csv", RAMP_TEXT), seed=4, rate_shape=shape)
    t = _file_times(w)
    bin_s = 30.0
    rates = np.array([100.0, 185.0, 342.0, 185.0])
    left, centre, right = smooth_knots(np.full(4, 600.0), rates)
    for b in (1, 2, 3):
        edge_s = 600.0 * b
        before = np.count_nonzero((t >= edge_s - bin_s) & (t < edge_s))
        after = np.count_nonzero((t >= edge_s) & (t < edge_s + bin_s))
        # Smooth: the rate is continuous, so the expected counts in the 30 s either side differ only
        # by the local slopes: (slope_in + slope_out) * 30**2 / 2, 380 requests at the 185 -> 342
        # boundary. Noise: 5 sd of the difference of two Poisson counts.
        slope_in = (right[b - 1] - centre[b - 1]) / 300.0
        slope_out = (centre[b] - left[b]) / 300.0
        expected_diff = (slope_in + slope_out) * bin_s * bin_s / 2
        noise = 5 * math.sqrt(before + after)
        step_jump = abs(rates[b] - rates[b - 1]) * bin_s  # >= 85 * 30 = 2,550 requests
        if shape == "smooth":
            assert abs((after - before) - expected_diff) <= noise
        else:
            assert abs(after - before) >= step_jump - noise


def _inter_arrival_cv(t: np.ndarray) -> float:
    gaps = np.diff(np.sort(t))
    return float(gaps.std() / gaps.mean())


CLIENT_FLAT = (
    "0,20.0,{cv},{family},{shape},0\n600,20.0,{cv},{family},{shape},0\n1200,20.0,{cv},{family},{shape},0\n"
)


@pytest.mark.parametrize(
    ("family", "shape", "cv"),
    [
        pytest.param("Gamma", 0.25, 2.0, id="gamma-cv2"),
        pytest.param("Gamma", 4.0, 0.5, id="gamma-cv0.5"),
        pytest.param(
            "Weibull",
            0.8,
            math.sqrt(math.gamma(1 + 2 / 0.8) / math.gamma(1 + 1 / 0.8) ** 2 - 1),
            id="weibull-0.8",
        ),
        pytest.param("", 0.0, 1.0, id="poisson"),
    ],
)
def test_smooth_keeps_cv_on_constant_rate(write: Write, family: str, shape: float, cv: float) -> None:
    text = CLIENT_FLAT.format(cv=cv, family=family, shape=shape)
    smooth = load_trace(write("chunk-0-trace.csv", text), seed=9, rate_shape="smooth")
    step = load_trace(write("chunk-0-trace.csv", text), seed=9, rate_shape="step")
    t = _file_times(smooth)
    middle = t[(t >= 600) & (t < 1200)]
    # ~12,000 gaps: the sample CV is within 10% of the family's (its standard error is ~2-4% here).
    assert _inter_arrival_cv(middle) == pytest.approx(cv, rel=0.10)
    # On a flat rate the time rescaling is affine: the same points as the step shape.
    np.testing.assert_allclose(t, _file_times(step), rtol=0, atol=1e-9)


def test_rate_shape_is_validated(servegen_dir: Path) -> None:
    with pytest.raises(ConfigError, match="rate_shape = 'wavy', must be one of smooth, step"):
        load_trace(servegen_dir, rate_shape="wavy")
