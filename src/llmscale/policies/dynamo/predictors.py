"""Dynamo's load predictors (``core/load/predictors.py``): pure functions of a history of readings."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["PREDICTORS", "add_point", "constant_forecast", "kalman_forecast"]

#: predictor history kept (one point per adjustment interval: 1024 x 180 s = 2 days)
_HISTORY_LEN = 1024


def add_point(history: tuple[float, ...], value: float | None) -> tuple[float, ...]:
    """Dynamo's ``BasePredictor.add_data_point``: non-finite -> 0; leading zeros are skipped."""
    if value is None:
        return history
    v = value if math.isfinite(value) else 0.0
    if v == 0.0 and not history:
        return history
    return (*history, v)[-_HISTORY_LEN:]


def constant_forecast(history: Sequence[float]) -> float | None:
    """``ConstantPredictor``: the next value is the last one (None before any data)."""
    return history[-1] if history else None


def kalman_forecast(history: Sequence[float], q_level: float, q_trend: float, r: float) -> float | None:
    """``KalmanPredictor``: local linear trend (level, trend), one-step-ahead level.

    F = [[1, 1], [0, 1]], H = [1, 0], P0 = 1000 I, Q = diag(q_level, q_trend),
    R = r; the state starts at (first value, 0) and each later value is one
    predict + update. E.g. a steady ramp 10, 20, 30, ... converges to
    forecasting the next step of the ramp.
    """
    if not history:
        return None
    x0, x1 = history[0], 0.0
    p00, p01, p11 = 1000.0, 0.0, 1000.0  # symmetric covariance
    for z in history[1:]:
        # predict: x = F x, P = F P F' + Q
        x0 = x0 + x1
        p00, p01, p11 = p00 + 2 * p01 + p11 + q_level, p01 + p11, p11 + q_trend
        # update with z
        s = p00 + r
        k0, k1 = p00 / s, p01 / s
        y = z - x0
        x0, x1 = x0 + k0 * y, x1 + k1 * y
        p00, p01, p11 = (1 - k0) * p00, (1 - k0) * p01, p11 - k1 * p01
    return x0 + x1


PREDICTORS = ("constant", "kalman")
