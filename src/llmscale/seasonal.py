"""Seasonal forecast of the request rate: the same hour of past days, blended with the recent trend.

A policy that plans a cold start ahead (``slo`` looks ``cold_start_s`` ahead) extrapolates the
recent trend today. When the same hour of past days is known (:class:`~llmscale.history.RateHistory`)
the rate at the target time is better told by those days, at today's level:

    level    = recent rate / (same-hour statistic of the past days at *now*)   today vs. usual
    seasonal = (same-hour statistic of the past days at *now + horizon*) x level
    trend    = recent rate + slope x horizon
    forecast = w x seasonal + (1 - w) x trend,  w = seasonal_weight x min(1, days found / days)

Worked example (tests/test_seasonal.py pins it): past 7 days averaged 40 req/s at 08:00 and
100 req/s at 09:00; at 08:50 today the rate is 48 req/s (level 1.2) and flat. Ten minutes ahead
(09:00) the seasonal part says 100 x 1.2 = 120 req/s, the trend 48; with all 7 days and weight
0.75 the forecast is 0.75 x 120 + 0.25 x 48 = 102 req/s, where the trend alone would say 48.

``statistic`` is the days' mean, or a quantile for a cautious planner (0.9: the rate of a busier
than usual day). The level is clipped to [0.25, 4] so that one odd minute does not multiply a
history into nonsense. Pure function; no I/O. ``None`` when the history has fewer than
:data:`~llmscale.history.MIN_HISTORY_DAYS` days at either end: the caller keeps its own forecast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from llmscale.errors import ConfigError
from llmscale.history import HISTORY_DAYS, MIN_HISTORY_DAYS, RateHistory

__all__ = [
    "LEVEL_CLIP",
    "PEAK_STEPS",
    "SeasonalForecast",
    "SeasonalRise",
    "seasonal_forecast",
    "seasonal_rise",
]

#: today's level against the past days' same hour is clipped to this range
LEVEL_CLIP: Final = (0.25, 4.0)
#: points of the horizon :func:`seasonal_rise` reads each past day at (its highest counts)
PEAK_STEPS: Final = 6


@dataclass(frozen=True, slots=True)
class SeasonalForecast:
    """The forecast rate and its parts, for a decision's reason."""

    rate_rps: float
    seasonal_rps: float
    trend_rps: float
    #: today's rate over the past days' same-hour statistic now (clipped)
    level: float
    #: days of history found at the target hour
    days: int
    #: weight of the seasonal part
    weight: float

    def reason(self) -> str:
        return (
            f"forecast {self.rate_rps:.1f} req/s = {self.weight:.2f} x seasonal {self.seasonal_rps:.1f} "
            f"(same hour of {self.days} past days x level {self.level:.2f}) + trend {self.trend_rps:.1f}"
        )


def _statistic(rates: tuple[float, ...], quantile: float | None) -> float:
    a = np.asarray(rates, dtype=np.float64)
    return float(a.mean() if quantile is None else np.quantile(a, quantile))


def seasonal_forecast(
    history: RateHistory,
    now_unix_s: float,
    horizon_s: float,
    recent_rate_rps: float,
    *,
    slope_rps_per_s: float = 0.0,
    days: int = HISTORY_DAYS,
    quantile: float | None = None,
    seasonal_weight: float = 0.75,
) -> SeasonalForecast | None:
    """Forecast the request rate at ``now_unix_s + horizon_s`` (see the module docstring).

    ``recent_rate_rps``: the rate now (e.g. the ``arrival_rate_rps`` signal); ``slope_rps_per_s``:
    its recent trend (0: flat). Pre: ``horizon_s >= 0``, ``0 <= seasonal_weight <= 1``,
    ``quantile`` None or in [0, 1]. Post: ``rate_rps >= 0``.
    """
    if not (horizon_s >= 0 and math.isfinite(horizon_s)):
        raise ConfigError(f"horizon_s = {horizon_s}, must be >= 0 and finite")
    if not 0.0 <= seasonal_weight <= 1.0:
        raise ConfigError(f"seasonal_weight = {seasonal_weight}, must be in [0, 1]")
    if quantile is not None and not 0.0 <= quantile <= 1.0:
        raise ConfigError(f"quantile = {quantile}, must be in [0, 1]")
    at_now = history.same_hour(now_unix_s, days)
    at_target = history.same_hour(now_unix_s + horizon_s, days)
    if len(at_now) < MIN_HISTORY_DAYS or len(at_target) < MIN_HISTORY_DAYS:
        return None
    usual_now = _statistic(at_now, quantile)
    target = _statistic(at_target, quantile)
    recent = max(0.0, recent_rate_rps)
    level = recent / usual_now if usual_now > 0 else 1.0
    level = min(LEVEL_CLIP[1], max(LEVEL_CLIP[0], level))
    seasonal = target * level
    trend = max(0.0, recent + slope_rps_per_s * horizon_s)
    weight = seasonal_weight * min(1.0, len(at_target) / days)
    rate = weight * seasonal + (1.0 - weight) * trend
    return SeasonalForecast(rate, seasonal, trend, level, len(at_target), weight)


@dataclass(frozen=True, slots=True)
class SeasonalRise:
    """How high the rate went over the next ``horizon_s`` on past days, and how far the days agree.

    ``ratios`` are, for each past day with the whole window filed (newest first), the highest
    rate over ``(now, now + horizon]`` over the rate at ``now`` (read at :data:`PEAK_STEPS`
    points, between bin centres: :meth:`~llmscale.history.RateHistory.rate_on_day`). The
    highest, not the end point: a replica given up now cannot be back before a cold start, so
    the fleet must carry the whole window; a peak 60 s ahead that is gone 90 s ahead still
    needs its replicas (ServeGen's hour 11 is 1.106 of the mean, hour 12 0.971). Today's rate
    times the ratio is today's forecast if today moves as those days did; how much today may
    stray is their spread, so the ratio planned with is the low edge of a one-sigma prediction
    interval for one more day, ``planned = mean - sd x sqrt(1 + 1/n)``: a rise the days agree on
    counts almost in full, one they disagree on counts little or not at all.

    Worked (``tests/history/test_seasonal_rise.py``): ratios 1.30, 1.25, 1.35 over three days
    (mean 1.30, sd 0.05) plan 1.30 - 0.05 x 1.155 = 1.242; 1.6, 1.0, 1.3 (sd 0.3) plan 0.954,
    no rise at all.
    """

    ratios: tuple[float, ...]
    mean: float
    #: sample standard deviation of the ratios (n - 1)
    sd: float
    planned: float
    horizon_s: float

    @property
    def days(self) -> int:
        return len(self.ratios)

    def reason(self) -> str:
        return (
            f"same time of {self.days} past days: up to x{self.mean:.3f} within the next "
            f"{self.horizon_s:.0f}s (sd {self.sd:.3f}); planned x{self.planned:.3f}"
        )


def seasonal_rise(
    history: RateHistory, now_unix_s: float, horizon_s: float, days: int = HISTORY_DAYS
) -> SeasonalRise | None:
    """The past days' move over ``[now, now + horizon_s]`` (see :class:`SeasonalRise`); None below
    :data:`~llmscale.history.MIN_HISTORY_DAYS` days with both ends filed and a rate above 0 now.

    Pre: ``horizon_s >= 0`` and finite. Only the ratios are read, never the days' levels: a busy
    Monday and a quiet Sunday that both rise 30% at 09:00 agree.
    """
    if not (horizon_s >= 0 and math.isfinite(horizon_s)):
        raise ConfigError(f"horizon_s = {horizon_s}, must be >= 0 and finite")
    ratios = []
    offsets = [horizon_s * j / PEAK_STEPS for j in range(1, PEAK_STEPS + 1)]
    for k in range(1, days + 1):
        now = history.rate_on_day(now_unix_s, k)
        later = [history.rate_on_day(now_unix_s + dt, k) for dt in offsets]
        if now is not None and now > 0.0 and all(x is not None for x in later):
            ratios.append(max(x for x in later if x is not None) / now)
    n = len(ratios)
    if n < MIN_HISTORY_DAYS:
        return None
    a = np.asarray(ratios, dtype=np.float64)
    mean = float(a.mean())
    sd = float(a.std(ddof=1))
    planned = mean - sd * math.sqrt(1.0 + 1.0 / n)
    return SeasonalRise(tuple(ratios), mean, sd, planned, horizon_s)
