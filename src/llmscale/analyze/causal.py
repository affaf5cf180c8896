"""Did scaling help? The average effect of a scale action on P99 latency (seed 000 4.4).

Seed 000 4.4 estimates the effect of a scale action (the treatment) on tail latency (the
outcome) controlling for the common causes of both (load, ...): a controller scales up *because*
latency and load are high, so comparing the P99 after scale-ups with the P99 after the other
ticks mostly measures that the fleet was busier, not what scaling did.

Here, per tick ``t``: treatment ``T = 1`` when the controller decided to grow the fleet
(``final > spec``; a scale-down is the other action, analysed alike), control the ticks that
kept it; outcome the P99 at the first tick at least ``horizon_s`` later (a new replica takes its
cold start to serve, ~110 s for Llama-3-8B on an H100, so the default looks 180 s ahead);
covariates the load and the P99 *at t*. The estimate is regression adjustment with
treatment-by-covariate interactions (Lin, 2013, "Agnostic notes on regression adjustments to
experimental data"): OLS of ``Y`` on ``T``, the centred covariates ``X - mean(X)`` and ``T x (X -
mean(X))``; the coefficient of ``T`` is then the average treatment effect over all ticks, and its
95% interval uses heteroskedasticity-robust (HC2) standard errors. It assumes that load and
P99 now are all the confounding there is (no unmeasured cause of both) and that every
tick could have been treated (overlap): the report says how many of each it had.
Imports statsmodels when called.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ScaleEffect", "outcome_after", "scale_action_effect"]


@dataclass(frozen=True)
class ScaleEffect:
    """ATE of ``action`` on P99 ``horizon_s`` later, in seconds (< 0: the action lowered it)."""

    action: str
    ate_s: float
    ci_low_s: float
    ci_high_s: float
    naive_diff_s: float
    num_treated: int
    num_control: int
    horizon_s: float
    #: the covariates adjusted for (those that varied over the ticks used)
    covariates: tuple[str, ...]

    @property
    def helped(self) -> bool | None:
        """True when the whole interval is below 0, False when above, None when it spans 0."""
        if self.ci_high_s < 0.0:
            return True
        if self.ci_low_s > 0.0:
            return False
        return None


def outcome_after(time_s: np.ndarray, values: np.ndarray, horizon_s: float) -> np.ndarray:
    """Per tick, ``values`` at the first tick at least ``horizon_s`` later (NaN past the end).

    Pre: ``time_s`` ascending.
    """
    j = np.searchsorted(time_s, time_s + horizon_s - 1e-9, side="left")
    out = np.full(time_s.shape, np.nan)
    ok = j < time_s.size
    out[ok] = values[j[ok]]
    return out


def scale_action_effect(
    treated: np.ndarray,
    control: np.ndarray,
    outcome: np.ndarray,
    covariates: dict[str, np.ndarray],
    *,
    action: str,
    horizon_s: float,
    min_per_arm: int = 5,
) -> ScaleEffect | None:
    """Regression-adjusted ATE of ``treated`` ticks against ``control`` ones; None when an arm is
    smaller than ``min_per_arm`` after dropping ticks with a missing number."""
    import statsmodels.api as sm

    names = tuple(covariates)
    x = (
        np.column_stack([np.asarray(covariates[n], float) for n in names])
        if names
        else np.empty((len(outcome), 0))
    )
    keep = (treated | control) & np.isfinite(outcome) & np.all(np.isfinite(x), axis=1)
    t = treated[keep].astype(float)
    y = np.asarray(outcome, float)[keep]
    x = x[keep]
    n_t, n_c = int(t.sum()), int((1 - t).sum())
    if n_t < min_per_arm or n_c < min_per_arm:
        return None
    # A covariate constant over the kept ticks carries nothing and makes the design singular.
    varies = np.ptp(x, axis=0) > 0 if x.size else np.zeros(0, dtype=bool)
    x = x[:, varies]
    names = tuple(n for n, v in zip(names, varies, strict=True) if v)
    xc = x - x.mean(axis=0)
    design = np.column_stack([np.ones_like(t), t, xc, t[:, None] * xc])
    fit = sm.OLS(y, design).fit(cov_type="HC2")
    ate = float(fit.params[1])
    lo, hi = (float(v) for v in fit.conf_int(alpha=0.05)[1])
    naive = float(y[t == 1].mean() - y[t == 0].mean())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return ScaleEffect(action, ate, lo, hi, naive, n_t, n_c, horizon_s, names)
