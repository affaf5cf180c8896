"""The throughput planner's adjustment interval, shared by ``dynamo-sla`` and ``dynamo-disagg``.

Dynamo's planner observes every ``observe_s`` (60 s) and adjusts every
``adjustment_interval_s`` (180 s): the observations of one interval become one
point of each load predictor's history (the request count, the mean ISL, the
mean OSL), and the next interval is planned on their forecasts. Between two
adjustments the target set at the last one is proposed again (``planned``).
What each planner then does with the forecasts (one aggregated engine, or one
pool of a disaggregated pair) stays in its own module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from llmscale.policies._hpa_behavior import clamp
from llmscale.policies.dynamo.predictors import add_point, constant_forecast, kalman_forecast
from llmscale.types import Decision, NoData, Signals

__all__ = [
    "ClosedInterval",
    "PlannerSettings",
    "PlannerState",
    "advance_interval",
    "forecast",
]


@dataclass(frozen=True)
class PlannerState:
    #: start of the adjustment interval being observed (None before the first tick)
    interval_start_s: float | None = None
    #: (request rate, mean ISL, mean OSL) per observation of the interval
    observed: tuple[tuple[float, float | None, float | None], ...] = ()
    #: predictor histories, one point per interval
    num_req: tuple[float, ...] = ()
    isl: tuple[float, ...] = ()
    osl: tuple[float, ...] = ()
    #: the replica count the last adjustment set (None before the first): Dynamo sets a target
    #: once per interval and leaves it, so it is proposed again at every tick until the next one
    #: (a proposal held for one tick only would never outlast the drain guard's eviction window)
    planned: int | None = None


@dataclass(frozen=True)
class ClosedInterval:
    """An interval that just closed: its mean request rate and the state holding its new points."""

    mean_rate_rps: float
    #: what the planner proposes until it sets a new target: its last one (before the first: the spec)
    held: int
    state: PlannerState


class PlannerSettings(Protocol):
    """What the interval reads of a planner's config: its cadence, bounds and load predictor."""

    @property
    def observe_s(self) -> float: ...
    @property
    def adjustment_interval_s(self) -> float: ...
    @property
    def min_replicas(self) -> int: ...
    @property
    def max_replicas(self) -> int: ...
    @property
    def load_predictor(self) -> str: ...
    @property
    def kalman_q_level(self) -> float: ...
    @property
    def kalman_q_trend(self) -> float: ...
    @property
    def kalman_r(self) -> float: ...


def forecast(cfg: PlannerSettings, history: Sequence[float]) -> float | None:
    """The next value of ``history`` by the config's load predictor (``kalman`` or ``constant``)."""
    if cfg.load_predictor == "kalman":
        return kalman_forecast(history, cfg.kalman_q_level, cfg.kalman_q_trend, cfg.kalman_r)
    return constant_forecast(history)


def _mean(pairs: Sequence[tuple[float, float | None]], weight_by_rate: bool) -> float | None:
    """Mean of the values, by rate when ``weight_by_rate`` (plain when every rate is 0); None without any."""
    vals = [(w if weight_by_rate else 1.0, v) for w, v in pairs if v is not None and math.isfinite(v)]
    if not vals:
        return None
    wsum = sum(w for w, _ in vals)
    if wsum > 0:
        return sum(w * v for w, v in vals) / wsum
    return sum(v for _, v in vals) / len(vals)


def advance_interval(
    cfg: PlannerSettings,
    state: PlannerState,
    signals: Signals,
    now_s: float,
    *,
    record_osl: bool,
    weight_by_rate: bool,
    no_data_note: str,
) -> ClosedInterval | tuple[Decision, PlannerState]:
    """Record this tick's observation: a decision that holds the planner's target, or the closed interval.

    The rate is the offered load (``arrival_rate_rps``; ai-dynamo 1.6.1 counts the requests the
    frontend started), with the completed count (``request_rate_rps``) when the arrivals series
    is missing, as 1.6.1 falls back: a saturated fleet completes
    only what it can serve, so planning on completions holds it saturated. ``record_osl``
    False keeps no OSL (a prefill pool's planner does not read it); ``weight_by_rate``
    weights the interval's mean ISL and OSL by each observation's rate (``dynamo-sla``),
    otherwise each observation counts once (``dynamo-disagg``). The first observation
    covers the tick before it: at 60 s ticks and a 180 s interval, the interval started
    at t = 0 closes at the third tick, t = 180 s.
    """
    held = clamp(
        signals.fleet.spec_replicas if state.planned is None else state.planned,
        cfg.min_replicas,
        cfg.max_replicas,
    )
    rate = signals.get("arrival_rate_rps")
    if rate is None:
        rate = signals.get("request_rate_rps")
    observed = state.observed
    if rate is not None and math.isfinite(rate):
        osl = signals.get("decode_steps_mean") if record_osl else None
        observed = (*observed, (rate, signals.get("prompt_len_mean_tokens"), osl))
    start = now_s - cfg.observe_s if state.interval_start_s is None else state.interval_start_s
    if now_s - start < cfg.adjustment_interval_s - 1e-6:
        return (
            Decision(held, "observing", {"observations": float(len(observed))}),
            PlannerState(start, observed, state.num_req, state.isl, state.osl, state.planned),
        )
    # The interval closes: one data point per predictor.
    interval_s = now_s - start
    if not observed:
        decision = Decision(held, "no-data", {}, no_data_note, no_data=NoData())
        return decision, PlannerState(now_s, (), state.num_req, state.isl, state.osl, state.planned)
    mean_rate = sum(r for r, _, _ in observed) / len(observed)
    num_req = add_point(state.num_req, mean_rate * interval_s)
    isl = add_point(state.isl, _mean([(r, i) for r, i, _ in observed], weight_by_rate))
    osl_h = add_point(state.osl, _mean([(r, o) for r, _, o in observed], weight_by_rate))
    return ClosedInterval(mean_rate, held, PlannerState(now_s, (), num_req, isl, osl_h, state.planned))
