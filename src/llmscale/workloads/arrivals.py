"""Arrival-time generators: renewal processes and rate curves, vectorised.

The one building block is :func:`arrivals_from_rate_curve`. It uses the
*time-rescaling* theorem: if ``Lambda(t)`` is the cumulative rate (expected
arrivals by time t), a unit-rate process in "operational time" ``u`` mapped
through ``t = Lambda^-1(u)`` has rate ``lambda(t)`` in real time. So we draw
a unit-rate process once, in one numpy call, and invert ``Lambda`` exactly
(it is piecewise quadratic for a piecewise-linear rate), with no rejection
loop and no per-arrival Python.

* ``cv == 1``: Poisson. ``N ~ Poisson(Lambda_total)`` and ``N`` sorted
  uniforms on ``[0, Lambda_total)`` (order statistics), exact.
* ``cv != 1``: a gamma renewal process with unit mean and shape ``1/cv^2``
  in operational time. Where the rate changes slowly relative to the
  inter-arrival time (a 60 req/s trace whose rate moves over minutes), the
  real-time inter-arrival CV is ``cv`` as well.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from llmscale.errors import ConfigError

__all__ = ["arrivals_from_rate_curve", "check_seed", "renewal_arrivals", "unit_iat_sampler"]

FloatArray = npt.NDArray[np.float64]
UnitIatSampler = Callable[[np.random.Generator, int], FloatArray]


def check_seed(seed: int) -> int:
    """``seed`` if it is a non-negative int (what numpy's SeedSequence accepts), else ConfigError."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"seed = {seed!r}, must be an integer >= 0")
    return int(seed)


def unit_iat_sampler(family: str, shape: float) -> UnitIatSampler:
    """Inter-arrival draws with mean 1 for a family and its shape parameter.

    ``"exponential"`` ignores ``shape``; ``"gamma"`` has CV ``1/sqrt(shape)``;
    ``"weibull"`` (numpy's unit-scale ``rng.weibull(shape)``) is divided by its
    mean ``Gamma(1 + 1/shape)`` - for shape 0.37, as in ServeGen's bursty
    clients, that mean is ``Gamma(3.70) = 4.17``.
    """
    kind = family.lower()
    if kind == "exponential":
        return lambda rng, n: rng.exponential(1.0, size=n)
    if not (math.isfinite(shape) and shape > 0):
        raise ConfigError(f"{family} shape parameter = {shape}, must be a finite number > 0")
    if kind == "gamma":
        scale = 1.0 / shape
        return lambda rng, n: rng.gamma(shape, scale, size=n)
    if kind == "weibull":
        inv_mean = 1.0 / math.gamma(1.0 + 1.0 / shape)
        if inv_mean == 0.0 or not math.isfinite(inv_mean):
            raise ConfigError(f"weibull shape parameter = {shape} is too small to normalise")
        return lambda rng, n: rng.weibull(shape, size=n) * inv_mean
    raise ConfigError(f"unknown inter-arrival family {family!r}; known: exponential, gamma, weibull")


def renewal_arrivals(
    length: float,
    sampler: UnitIatSampler,
    rng: np.random.Generator,
    *,
    cv_hint: float = 1.0,
) -> FloatArray:
    """Points of a unit-rate renewal process on ``[0, length)``.

    Inter-arrival times come from ``sampler`` (mean 1). The first point is
    ``U * X`` with ``U ~ Uniform(0, 1)`` and ``X`` one inter-arrival draw: an
    approximation of the stationary start (exact for Poisson) that avoids a
    spurious arrival at exactly 0 in every window. Draws are made in batches
    sized ``length + 6 * cv_hint * sqrt(length) + 16`` (a 6-sigma margin for
    the count), so one batch almost always suffices; heavier tails loop.
    """
    if length <= 0:
        return np.empty(0, dtype=np.float64)
    batch = int(length + 6.0 * max(cv_hint, 1.0) * math.sqrt(length) + 16)
    first = sampler(rng, batch)
    first[0] *= rng.random()
    pieces = [np.cumsum(first)]
    total = float(pieces[-1][-1])
    while total < length:
        more = np.cumsum(sampler(rng, batch)) + total
        pieces.append(more)
        total = float(more[-1])
    points = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
    return points[: int(np.searchsorted(points, length, side="left"))]


def _validate_curve(times_s: npt.ArrayLike, rates_rps: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    t = np.asarray(times_s, dtype=np.float64)
    r = np.asarray(rates_rps, dtype=np.float64)
    if t.ndim != 1 or r.shape != t.shape or t.size < 2:
        raise ConfigError(
            f"rate curve needs >= 2 (time, rate) points of equal length, got {t.shape} and {r.shape}"
        )
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(r))):
        raise ConfigError("rate curve has non-finite times or rates")
    if np.any(np.diff(t) < 0):
        raise ConfigError("rate curve times must be non-decreasing (repeat a time for a step)")
    if np.any(r < 0):
        raise ConfigError(f"rate curve has a negative rate ({float(r.min())} req/s)")
    return t, r


def cumulative_rate(times_s: FloatArray, rates_rps: FloatArray) -> FloatArray:
    """Expected arrivals by each curve point (trapezoids of the piecewise-linear rate)."""
    areas = 0.5 * (rates_rps[1:] + rates_rps[:-1]) * np.diff(times_s)
    return np.concatenate(([0.0], np.cumsum(areas)))


def _invert_cumulative(u: FloatArray, t: FloatArray, r: FloatArray, cum: FloatArray) -> FloatArray:
    """Real times at operational times ``u`` (each in ``[0, cum[-1])``)."""
    # side="right" - 1 picks the last point with cum <= u: zero-area segments
    # (steps, or rate 0 stretches) are skipped, so the chosen segment has dt > 0.
    seg = np.clip(np.searchsorted(cum, u, side="right") - 1, 0, t.size - 2)
    dt = t[seg + 1] - t[seg]
    r0 = r[seg]
    slope = np.divide(r[seg + 1] - r0, dt, out=np.zeros_like(dt), where=dt > 0)
    delta = u - cum[seg]
    # Solve r0*x + slope*x^2/2 = delta. The form 2*delta / (r0 + sqrt(r0^2 + 2*slope*delta))
    # is the textbook root without the cancellation at slope ~ 0 (where it tends to delta/r0).
    root = np.sqrt(np.maximum(r0 * r0 + 2.0 * slope * delta, 0.0))
    denom = r0 + root
    x = np.divide(2.0 * delta, denom, out=np.zeros_like(delta), where=denom > 0)
    return t[seg] + np.minimum(x, dt)


def arrivals_from_rate_curve(
    times_s: npt.ArrayLike,
    rates_rps: npt.ArrayLike,
    rng: np.random.Generator,
    *,
    cv: float = 1.0,
) -> FloatArray:
    """Sorted arrival times whose rate follows a piecewise-linear curve.

    Args:
        times_s: Curve points (seconds), non-decreasing; the process runs on
            ``[times_s[0], times_s[-1])``. Repeat a time to make a step, e.g.
            ``[0, 600, 600, 720, 720, 1800]`` with rates ``[r, r, 3r, 3r, r, r]``
            is a x3 flash crowd from 600 s to 720 s.
        rates_rps: Rate (requests/s) at each point, >= 0, linear in between.
        rng: Source of randomness (``np.random.default_rng(seed)``).
        cv: Coefficient of variation of inter-arrival times in operational
            time: 1 is Poisson, > 1 burstier, < 1 more regular.

    Returns:
        float64 arrival times in seconds, sorted ascending. The expected count
        is the area under the curve: 60 req/s for an hour is 216,000.
    """
    t, r = _validate_curve(times_s, rates_rps)
    if not (math.isfinite(cv) and cv > 0):
        raise ConfigError(f"cv = {cv}, must be a finite number > 0")
    cum = cumulative_rate(t, r)
    total = float(cum[-1])
    if total <= 0:
        return np.empty(0, dtype=np.float64)
    if cv == 1.0:
        u = np.sort(rng.uniform(0.0, total, size=int(rng.poisson(total))))
    else:
        shape = 1.0 / (cv * cv)
        u = renewal_arrivals(total, unit_iat_sampler("gamma", shape), rng, cv_hint=cv)
    return _invert_cumulative(u, t, r, cum)
