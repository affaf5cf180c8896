"""The load's "breathing rhythm" (seed 003 2.5): sliding-window DFT features and an EWMA z-score.

The load is the number of requests in the system at each observation:
running + waiting on serving replicas (extrapolated over unknown replicas)
plus the gateway queue (:meth:`ObsTotals.load`). Arrivals drive it, and unlike
the finished-request rate it keeps rising when the fleet saturates. Samples
are one per observation and assumed evenly spaced (the controller's tick).

Seed 003 2.5 names three features of a sliding-window FFT — dominant
amplitude ratio (0..1), decay (-1..1), phase (rad) — without formulas; the
definitions chosen, for a window of M samples with its mean removed and DFT X:

* ``rhythm_amplitude_ratio`` = |X_k*| / sum_{k=1..M/2} |X_k|, with k* the
  strongest non-zero frequency: 1 for a pure sinusoid, ~1/(M/2) for noise.
  The mean (k = 0) is left out: it is the load's level, not its rhythm;
* ``rhythm_decay`` = (A_prev - A_now) / (A_prev + A_now), the amplitudes of
  bin k* in the window one step earlier and now: > 0 the rhythm is fading,
  < 0 it is growing, in [-1, 1];
* ``rhythm_phase`` = the phase of bin k* *at the newest sample*,
  angle(X_k*) + 2 pi k* (M-1)/M wrapped to (-pi, pi]: 0 at the rhythm's peak,
  -pi/2 while rising a quarter period before it, +pi/2 while falling.

The window is the controller's (20 observations: M = 19, both windows fit).
A flat load has no rhythm: ratio 0, decay and phase undefined (None).

``load_zscore`` is seed 003 2.5's online normaliser with alpha = 0.05,
replayed over the window because a signal is a pure function of it: mu and
the variance start at the oldest sample (mu = x_0, var = 0, rather than the
seed's zero start, which would make the first 20 samples read as huge
deviations from 0), then ``mu = a x + (1-a) mu``, ``var = a (x - mu)^2 + (1-a) var``
(the seed updates mu first, and so do we), and the z-score of the newest
sample is ``(x - mu) / sqrt(var + 1e-8)``. With alpha 0.05 the EWMA's memory
is ~20 samples, about the window, so the replay is close to the online state.
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmscale.signals.window import FleetWindow
from llmscale.types import SignalValue

__all__ = [
    "MIN_RHYTHM_SAMPLES",
    "ZSCORE_ALPHA",
    "Rhythm",
    "dft_bin",
    "dominant_rhythm",
    "dominant_rhythm_signals",
    "ewma_zscore",
    "load_series",
    "rhythm_signals",
    "zscore_signals",
]

#: seed 003 2.5: "alpha 0.05 for high-load scenarios, to react quickly to abrupt changes"
ZSCORE_ALPHA = 0.05
#: two windows of 4 samples (2 frequencies each) need 5 samples
MIN_RHYTHM_SAMPLES = 5
_VAR_EPS = 1e-8  # seed 003 2.5's sqrt(sigma + 1e-8)


@dataclass(frozen=True, slots=True)
class Rhythm:
    """Dominant-frequency features of a series; None where undefined (flat series)."""

    amplitude_ratio: float
    decay: float | None
    phase_rad: float | None
    #: k*: cycles per window of M samples (0 when flat)
    bin: int
    window: int


def dft_bin(xs: Sequence[float], k: int) -> complex:
    """X_k = sum_n x_n exp(-2 pi i k n / N); plain Python, N is ~20."""
    n = len(xs)
    w = -2j * math.pi * k / n
    return sum((x * cmath.exp(w * i) for i, x in enumerate(xs)), 0j)


def _centred(xs: Sequence[float]) -> list[float]:
    m = sum(xs) / len(xs)
    return [x - m for x in xs]


def _wrap(a: float) -> float:
    """Angle in (-pi, pi]."""
    a = math.fmod(a, 2.0 * math.pi)
    if a <= -math.pi:
        a += 2.0 * math.pi
    elif a > math.pi:
        a -= 2.0 * math.pi
    return a


def dominant_rhythm(series: Sequence[float]) -> Rhythm | None:
    """Features of the last ``len - 1`` samples vs the window one step earlier; None below 5 samples.

    Worked: x_n = 10 + 3 cos(2 pi 2 (n - 19) / 19) for n = 0..19 (two cycles per
    19-sample window, peaking at the newest sample): ratio 1.0, phase 0.0,
    decay ~0 (same amplitude one step earlier).
    """
    if len(series) < MIN_RHYTHM_SAMPLES:
        return None
    m = len(series) - 1
    now = _centred(series[1:])
    prev = _centred(series[:-1])
    half = m // 2
    amps = []
    best_k, best_x = 0, 0j
    for k in range(1, half + 1):
        x = dft_bin(now, k)
        a = abs(x)
        amps.append(a)
        if a > abs(best_x) + 1e-12:
            best_k, best_x = k, x
    total = sum(amps)
    scale = max(abs(v) for v in series) or 1.0
    if best_k == 0 or total <= 1e-9 * scale * m:
        return Rhythm(0.0, None, None, 0, m)
    a_now = abs(best_x)
    a_prev = abs(dft_bin(prev, best_k))
    decay = (a_prev - a_now) / (a_prev + a_now)
    phase = _wrap(cmath.phase(best_x) + 2.0 * math.pi * best_k * (m - 1) / m)
    return Rhythm(a_now / total, decay, phase, best_k, m)


def ewma_zscore(series: Sequence[float], alpha: float = ZSCORE_ALPHA) -> float | None:
    """Seed 003 2.5's online z-score replayed over ``series``; z of the newest sample.

    Worked: 19 samples at 10 then one at 12, alpha 0.05: mu = 10.1,
    var = 0.05 x 1.9^2 = 0.1805, z = 1.9 / 0.4249 = 4.47 (a step of any size
    reads 1/sqrt(alpha) = 4.47 the first time). None below 2 samples.
    """
    if len(series) < 2:
        return None
    mu = series[0]
    var = 0.0
    z = 0.0
    for x in series[1:]:
        mu = alpha * x + (1.0 - alpha) * mu
        var = alpha * (x - mu) ** 2 + (1.0 - alpha) * var
        z = (x - mu) / math.sqrt(var + _VAR_EPS)
    return z


def rhythm_signals(fw: FleetWindow) -> dict[str, SignalValue]:
    """rhythm_amplitude_ratio, rhythm_decay, rhythm_phase and load_zscore from the window's load series."""
    series = load_series(fw)
    return {**zscore_signals(series), **dominant_rhythm_signals(series)}


def load_series(fw: FleetWindow) -> list[float]:
    """The load at each observation of the window that has one (:meth:`ObsTotals.load`), oldest first."""
    return [v for t in fw.totals if (v := t.load()) is not None]


def zscore_signals(series: Sequence[float]) -> dict[str, SignalValue]:
    """load_zscore of the load series (:func:`ewma_zscore`)."""
    z = ewma_zscore(series)
    return {
        "load_zscore": SignalValue(z, f"EWMA over {len(series)} load samples")
        if z is not None
        else SignalValue(None, "needs 2 load samples"),
    }


def dominant_rhythm_signals(series: Sequence[float]) -> dict[str, SignalValue]:
    """rhythm_amplitude_ratio, rhythm_decay and rhythm_phase of the load series (:func:`dominant_rhythm`)."""
    r = dominant_rhythm(series)
    if r is None:
        short = SignalValue(None, f"needs {MIN_RHYTHM_SAMPLES} load samples, has {len(series)}")
        return {"rhythm_amplitude_ratio": short, "rhythm_decay": short, "rhythm_phase": short}
    flat = SignalValue(None, "flat load: no rhythm")
    note = f"{r.bin} cycle(s) per {r.window} samples"
    return {
        "rhythm_amplitude_ratio": SignalValue(r.amplitude_ratio, note if r.bin else "flat load: no rhythm"),
        "rhythm_decay": flat if r.decay is None else SignalValue(r.decay, note),
        "rhythm_phase": flat if r.phase_rad is None else SignalValue(r.phase_rad, note),
    }
