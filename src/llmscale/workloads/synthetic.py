"""Seeded synthetic workloads built from rate curves.

Each generator is a *rate curve* (piecewise-linear ``times_s``/``rates_rps``
arrays, see :func:`~llmscale.workloads.arrivals.arrivals_from_rate_curve`)
plus a length model, so shapes compose: the ``default`` preset is a diurnal
ramp with :func:`with_spike` applied. All take ``seed`` and are deterministic:
the arrival stream and the length stream come from two independent children
of ``SeedSequence(seed)``, so changing the length model never moves an arrival.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from llmscale.errors import ConfigError
from llmscale.workloads.arrivals import arrivals_from_rate_curve, check_seed, cumulative_rate
from llmscale.workloads.lengths import DEFAULT_LENGTHS, LengthModel
from llmscale.workloads.model import Workload

__all__ = [
    "bursty",
    "diurnal",
    "diurnal_curve",
    "flash_crowd",
    "on_off",
    "on_off_curve",
    "poisson",
    "with_spike",
    "workload_from_rate_curve",
]

FloatArray = npt.NDArray[np.float64]
Curve = tuple[FloatArray, FloatArray]

# A sinusoid drawn with a point per degree: piecewise-linear error is at most
# (2*pi/360)^2 / 8 = 3.8e-5 of the amplitude, far below Poisson noise.
_POINTS_PER_PERIOD = 360


def _positive(label: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{label} = {value}, must be a finite number > 0")
    return float(value)


def _non_negative(label: str, value: float) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{label} = {value}, must be a finite number >= 0")
    return float(value)


def workload_from_rate_curve(
    times_s: npt.ArrayLike,
    rates_rps: npt.ArrayLike,
    *,
    seed: int = 0,
    cv: float = 1.0,
    lengths: LengthModel | None = None,
    name: str = "rate-curve",
    meta: Mapping[str, object] | None = None,
    stream: str = "",
) -> Workload:
    """A Workload whose arrivals follow a rate curve and whose lengths come from ``lengths``.

    ``stream`` (optional) names an independent random stream for the same
    seed: presets pass their name, so ``default`` and ``on-off`` at seed 0 do
    not share draws (both have 216,000 expected requests, and time-rescaling
    would otherwise give them the same count and the same lengths).

    ``meta`` gains ``format='synthetic'``, ``seed``, ``cv``,
    ``expected_requests`` (area under the curve) and ``lengths``.
    Raises ConfigError when the draw has no request at all (e.g. 0.001 req/s for 60 s).
    """
    spawn_key = (zlib.crc32(stream.encode("utf-8")),) if stream else ()
    root = np.random.SeedSequence(check_seed(seed), spawn_key=spawn_key)
    arrival_seq, length_seq = root.spawn(2)
    t = np.asarray(times_s, dtype=np.float64)
    r = np.asarray(rates_rps, dtype=np.float64)
    arrival_s = arrivals_from_rate_curve(t, r, np.random.default_rng(arrival_seq), cv=cv)
    expected = float(cumulative_rate(t, r)[-1])
    if arrival_s.size == 0:
        raise ConfigError(
            f"{name}: generated no requests (expected {expected:.3g}); raise the rate or duration"
        )
    model = lengths if lengths is not None else DEFAULT_LENGTHS
    inp, out = model.sample(arrival_s.size, np.random.default_rng(length_seq))
    full_meta: dict[str, object] = {
        "format": "synthetic",
        "seed": seed,
        "sorted": False,
        "cv": cv,
        "expected_requests": round(expected, 3),
        "curve_span_s": float(t[-1] - t[0]),
        "lengths": model.describe(),
    }
    full_meta.update(meta or {})
    return Workload.from_arrays(name, arrival_s, inp, out, full_meta)


def with_spike(curve: Curve, start_s: float, duration_s: float, multiplier: float) -> Curve:
    """The curve multiplied by ``multiplier`` on ``[start_s, start_s + duration_s)``, with step edges.

    Works on any curve (the spike rides on whatever the rate is there): a x3
    spike on a ramp at 72 req/s becomes 216 req/s for its duration. Times are
    on the curve's own axis and clipped to its span.
    """
    t, r = curve
    _non_negative("spike start_s", start_s)
    _positive("spike duration_s", duration_s)
    _non_negative("spike multiplier", multiplier)
    lo = float(np.clip(start_s, t[0], t[-1]))
    hi = float(np.clip(lo + duration_s, t[0], t[-1]))
    r_lo, r_hi = float(np.interp(lo, t, r)), float(np.interp(hi, t, r))
    before, inside, after = t < lo, (t > lo) & (t < hi), t > hi
    new_t = np.concatenate((t[before], [lo, lo], t[inside], [hi, hi], t[after]))
    new_r = np.concatenate(
        (r[before], [r_lo, r_lo * multiplier], r[inside] * multiplier, [r_hi * multiplier, r_hi], r[after])
    )
    return new_t, new_r


def diurnal_curve(
    min_rate_rps: float, max_rate_rps: float, period_s: float, duration_s: float, *, phase_s: float = 0.0
) -> Curve:
    """Raised-cosine rate: ``min`` at ``t = -phase_s`` (mod period), ``max`` half a period later."""
    _non_negative("min_rate_rps", min_rate_rps)
    _non_negative("max_rate_rps", max_rate_rps)
    if max_rate_rps < min_rate_rps:
        raise ConfigError(f"max_rate_rps = {max_rate_rps}, must be >= min_rate_rps ({min_rate_rps})")
    _positive("period_s", period_s)
    _positive("duration_s", duration_s)
    points = max(2, math.ceil(duration_s / period_s * _POINTS_PER_PERIOD) + 1)
    t = np.linspace(0.0, duration_s, points)
    swing = 0.5 * (1.0 - np.cos(2.0 * np.pi * (t + phase_s) / period_s))
    return t, min_rate_rps + (max_rate_rps - min_rate_rps) * swing


def on_off_curve(
    on_rate_rps: float, on_s: float, off_s: float, duration_s: float, *, off_rate_rps: float = 0.0
) -> Curve:
    """Square wave: ``on_rate_rps`` for ``on_s``, then ``off_rate_rps`` for ``off_s``, repeated."""
    _non_negative("on_rate_rps", on_rate_rps)
    _non_negative("off_rate_rps", off_rate_rps)
    _positive("on_s", on_s)
    _positive("off_s", off_s)
    _positive("duration_s", duration_s)
    cycle_s = on_s + off_s
    starts = np.arange(0.0, duration_s, cycle_s)
    times: list[float] = []
    rates: list[float] = []
    for c in starts.tolist():
        switch = min(c + on_s, duration_s)
        end = min(c + cycle_s, duration_s)
        times += [c, switch]
        rates += [on_rate_rps, on_rate_rps]
        if end > switch:
            times += [switch, end]
            rates += [off_rate_rps, off_rate_rps]
    return np.asarray(times), np.asarray(rates)


def _constant(rate_rps: float, duration_s: float) -> Curve:
    _non_negative("rate_rps", rate_rps)
    _positive("duration_s", duration_s)
    return np.array([0.0, duration_s]), np.array([rate_rps, rate_rps])


def poisson(
    rate_rps: float,
    duration_s: float,
    *,
    seed: int = 0,
    lengths: LengthModel | None = None,
    name: str = "poisson",
) -> Workload:
    """Homogeneous Poisson arrivals: ~``rate_rps * duration_s`` requests (3600 +- 60 for 1 req/s, 1 h)."""
    t, r = _constant(rate_rps, duration_s)
    params = {"rate_rps": rate_rps, "duration_s": duration_s}
    return workload_from_rate_curve(
        t, r, seed=seed, lengths=lengths, name=name, meta={"generator": "poisson", "params": params}
    )


def bursty(
    rate_rps: float,
    duration_s: float,
    cv: float = 2.0,
    *,
    seed: int = 0,
    lengths: LengthModel | None = None,
    name: str = "bursty",
) -> Workload:
    """Gamma renewal arrivals at ``rate_rps`` with inter-arrival CV ``cv``.

    The gamma shape is ``1/cv^2``: 0.25 for cv 2, i.e. many short gaps and a few long ones.
    """
    t, r = _constant(rate_rps, duration_s)
    params = {"rate_rps": rate_rps, "duration_s": duration_s, "cv": cv}
    return workload_from_rate_curve(
        t, r, seed=seed, cv=cv, lengths=lengths, name=name, meta={"generator": "bursty", "params": params}
    )


def diurnal(
    min_rate_rps: float,
    max_rate_rps: float,
    period_s: float,
    duration_s: float,
    *,
    phase_s: float = 0.0,
    cv: float = 1.0,
    seed: int = 0,
    lengths: LengthModel | None = None,
    name: str = "diurnal",
) -> Workload:
    """Sinusoidal rate between ``min_rate_rps`` (at t=0 unless ``phase_s``) and ``max_rate_rps``.

    Over whole periods the mean rate is ``(min + max) / 2``.
    """
    t, r = diurnal_curve(min_rate_rps, max_rate_rps, period_s, duration_s, phase_s=phase_s)
    params = {
        "min_rate_rps": min_rate_rps,
        "max_rate_rps": max_rate_rps,
        "period_s": period_s,
        "duration_s": duration_s,
        "phase_s": phase_s,
    }
    return workload_from_rate_curve(
        t, r, seed=seed, cv=cv, lengths=lengths, name=name, meta={"generator": "diurnal", "params": params}
    )


def flash_crowd(
    base_rate_rps: float,
    duration_s: float,
    *,
    spike_start_s: float,
    spike_duration_s: float,
    multiplier: float = 3.0,
    cv: float = 1.0,
    seed: int = 0,
    lengths: LengthModel | None = None,
    name: str = "flash-crowd",
) -> Workload:
    """Steady ``base_rate_rps``, ``multiplier`` x base for ``spike_duration_s`` from ``spike_start_s``.

    Mean rate is ``base * (1 + (multiplier - 1) * spike_duration_s / duration_s)``:
    60 req/s with a x4 spike for 120 s of 1800 s averages 72 req/s.
    """
    curve = with_spike(_constant(base_rate_rps, duration_s), spike_start_s, spike_duration_s, multiplier)
    params = {
        "base_rate_rps": base_rate_rps,
        "duration_s": duration_s,
        "spike_start_s": spike_start_s,
        "spike_duration_s": spike_duration_s,
        "multiplier": multiplier,
    }
    return workload_from_rate_curve(
        *curve,
        seed=seed,
        cv=cv,
        lengths=lengths,
        name=name,
        meta={"generator": "flash_crowd", "params": params},
    )


def on_off(
    on_rate_rps: float,
    on_s: float,
    off_s: float,
    duration_s: float,
    *,
    off_rate_rps: float = 0.0,
    cv: float = 1.0,
    seed: int = 0,
    lengths: LengthModel | None = None,
    name: str = "on-off",
) -> Workload:
    """Alternating periods: ``on_rate_rps`` for ``on_s`` seconds, ``off_rate_rps`` for ``off_s``, from t=0.

    Over whole cycles the mean rate is ``(on*on_s + off*off_s) / (on_s + off_s)``.
    """
    t, r = on_off_curve(on_rate_rps, on_s, off_s, duration_s, off_rate_rps=off_rate_rps)
    params = {
        "on_rate_rps": on_rate_rps,
        "on_s": on_s,
        "off_s": off_s,
        "duration_s": duration_s,
        "off_rate_rps": off_rate_rps,
    }
    return workload_from_rate_curve(
        t, r, seed=seed, cv=cv, lengths=lengths, name=name, meta={"generator": "on_off", "params": params}
    )
