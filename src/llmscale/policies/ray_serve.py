"""``ray-serve``: Ray Serve's default request-based autoscaling policy, as Ray 2.60.0 runs it.

Re-implemented (not copied) from the ``ray==2.60.0`` wheel:
``ray/serve/autoscaling_policy.py`` (``replica_queue_length_autoscaling_policy``,
``_apply_autoscaling_config``, ``_apply_scaling_factors``, ``_apply_delay_logic``,
``_get_cold_start_scale_up_replicas``), ``ray/serve/_private/autoscaling_state.py``
(``get_total_num_requests``, ``_merge_and_aggregate_timeseries``),
``ray/serve/_private/metrics_utils.py`` (``time_weighted_average``),
``ray/serve/_private/replica.py`` (record and push tasks) and the defaults of
``ray/serve/config.py`` / ``_private/constants.py``. Each step, in Ray's order:

1. **Sampling.** Every replica records its ongoing requests (running + queued;
   llmscale's ``running`` + ``queue_waiting``, which includes the gateway queue)
   every ``record_interval_s = min(0.2 x look_back_period_s, metrics_interval_s)``
   = min(6, 10) = 6 s (``RAY_SERVE_AUTOSCALING_METRIC_RECORD_INTERVAL_FACTOR``
   0.2) and pushes the samples of the last ``look_back_period_s`` (30 s) to the
   controller every ``metrics_interval_s`` (10 s). Here one fleet-wide series
   is recorded (Ray merges the replicas' series into the same total).
2. **Averaging.** The controller's ``total_num_requests`` is the time-weighted
   mean of that step function, each sample holding until the next one and the
   newest holding until *now* (``max(now - t_last, 1e-3)`` s). E.g. samples
   4, 10, 1 at 0, 6, 12 s read at 16 s: (4 x 6 + 10 x 6 + 1 x 4) / 16 = 5.5
   (``test_time_weighted_mean_worked_example``). No pushed sample: 0.
3. **Decision.** ``desired = total / target_ongoing_requests`` (``error_ratio x
   running``), then the gain ``ceil(running + factor x (desired - running))``
   with ``upscaling_factor`` / ``downscaling_factor`` (None -> ``smoothing_factor``
   1.0); a scale-down stuck at the current count by a small factor steps one.
4. **Delays** against the current target: the first decision of a run records
   its time; it applies once ``now - start + 1e-6 >= delay`` (Ray's
   ``_DELAY_ELAPSED_EPS_S``: a 30 s delay begun at 0.1 s is due at 30.1 s even when
   the float difference reads 29.999999999999996); ``upscale_delay_s`` 30 s,
   ``downscale_delay_s`` 600 s (``downscale_to_zero_delay_s`` for 1 -> 0; other
   scale-downs stop at 1). A change of direction or "no change" resets the run.
5. **Cold start.** With no running replica and ``total > 0``, scale at once to
   ``max(ceil(1 x upscaling_factor), target)``; with ``total == 0`` the target is
   kept (replicas still starting are left to come up). Both paths leave the
   delay run as it was: a run started before the last replica went away keeps
   its start time (``test_delay_timer_survives_the_cold_start_path``).
6. **Bounds** (min/max replicas) are applied to the result, after the delays
   (``AutoscalingState.apply_bounds``), so a run towards a value outside the
   bounds still times.

Deviation: Ray's controller re-evaluates every 0.1 s (``CONTROL_LOOP_INTERVAL_S``);
this policy ticks every ``control_interval_s`` (1 s by default; 0.1 s is allowed
and reproduces Ray's cadence at ten times the controller ticks). The 1 s tick
costs about 1.4x the CPU of the former 10 s one on the default backtest
(``llmscale backtest --policy ray-serve --no-oracle``, user time). Its
samples and pushes fall on ticks, so a delay fires up to one tick later than in
Ray. When a sample is due and the ongoing requests cannot be computed the
decision is ``no-data`` and holds (the state is left as it was, so the sample
is taken at the next tick).

Guards: ``guard_overrides`` =
:data:`~llmscale.policies._hpa_behavior.PEER_GUARD_OVERRIDES`: Ray's delays
and smoothing run inside ``decide``; llmscale's pending-aware cap and KV-
headroom check, which the real project does not have, are off. Hold-on-
missing-data, drain-aware scale-down and the bounds stay on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any, ClassVar

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.policies._hpa_behavior import PEER_GUARD_OVERRIDES, clamp
from llmscale.policies.base import register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    DURATION_RANGE,
    FACTOR_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    Param,
    PolicyParamError,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = [
    "DELAY_EPS_S",
    "RayServeConfig",
    "RayServePolicy",
    "RayServeState",
    "apply_scaling_factors",
    "decide_replicas",
    "time_weighted_mean",
]

#: Ray 2.60's ``_DELAY_ELAPSED_EPS_S``: elapsed time that falls short of a delay by float error still counts
DELAY_EPS_S = 1e-6
#: Ray 2.60's ``RAY_SERVE_AUTOSCALING_METRIC_RECORD_INTERVAL_FACTOR``: samples every 0.2 x look-back
RECORD_INTERVAL_FACTOR = 0.2
#: the newest sample's minimum weight, s (Ray's guard against a zero-length last window)
_MIN_LAST_WINDOW_S = 1e-3
#: slack when a tick lands on a sampling or push time (ticks of 0.1 s accumulate float error)
_SCHEDULE_EPS_S = 1e-9


@dataclass(frozen=True)
class RayServeConfig:
    target_ongoing_requests: float = param(2.0, AMOUNT_RANGE)
    upscale_delay_s: float = param(30.0, DURATION_RANGE, unit="s")
    downscale_delay_s: float = param(600.0, DURATION_RANGE, unit="s")
    downscale_to_zero_delay_s: float | None = param(None, DURATION_RANGE, kind=float, unit="s")
    upscaling_factor: float = 1.0
    downscaling_factor: float = 1.0
    metrics_interval_s: float = param(10.0, TICK_RANGE, unit="s", help="push interval of the samples")
    look_back_period_s: float = param(30.0, WINDOW_RANGE, unit="s")
    control_interval_s: float = param(
        1.0, TICK_RANGE, unit="s", help="controller cadence (Ray re-evaluates every 0.1 s)"
    )
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas

    @property
    def record_interval_s(self) -> float:
        """How often the replicas sample their ongoing requests: min(0.2 x 30, 10) = 6 s by default."""
        return min(self.look_back_period_s * RECORD_INTERVAL_FACTOR, self.metrics_interval_s)

    @classmethod
    def check_params(cls, p: Mapping[str, Any]) -> None:
        """The rule across the parameters (registered, run before the policy is built): the
        controller ticks no slower than the replicas sample (a 10 s tick over 6 s samples would
        skip samples). The sampling interval is :attr:`record_interval_s` of these parameters."""
        cfg = config_from(cls, p)
        if cfg.control_interval_s > cfg.record_interval_s:
            raise PolicyParamError(
                f"ray-serve.control_interval_s = {cfg.control_interval_s}: must be <= the sampling "
                f"interval min(0.2 x look_back_period_s, metrics_interval_s) ({cfg.record_interval_s})",
                "control_interval_s",
            )


@dataclass(frozen=True)
class RayServeState:
    #: (time_s, ongoing requests) sampled at the replicas, not yet pruned, oldest first
    recorded: tuple[tuple[float, float], ...] = ()
    #: the samples the controller holds since the last push, oldest first
    pushed: tuple[tuple[float, float], ...] = ()
    #: when the next sample and the next push are due (None: at the first tick)
    next_record_s: float | None = None
    next_push_s: float | None = None
    #: direction of the current run of decisions (+1 up, -1 down, 0 none) and when it began
    direction: int = 0
    run_since_s: float | None = None


def apply_scaling_factors(desired: float, current: int, up_factor: float, down_factor: float) -> int:
    """Ray's gain on a change. E.g. (1.0, 4, 1, 0.1): ceil(4 - 0.3) = 4, stuck -> 3.

    From zero running replicas the gain does not apply: ceil(desired) (Ray 2.60).
    """
    if current == 0:
        return math.ceil(desired)
    delta = desired - current
    factor = up_factor if delta > 0 else down_factor
    scaled = math.ceil(current + factor * delta)
    if math.ceil(desired) < current and scaled == current:
        scaled -= 1
    return scaled


def time_weighted_mean(samples: Sequence[tuple[float, float]], now_s: float) -> float:
    """The mean of a step function of ``samples`` (time_s, value), the last holding until ``now_s``.

    Pre: ``samples`` sorted by time. 0.0 without samples (Ray's value with no data).
    """
    if not samples:
        return 0.0
    last_t, last_v = samples[-1]
    last_window_s = now_s - last_t
    if last_window_s <= 0.0:
        last_window_s = _MIN_LAST_WINDOW_S
    area = last_v * last_window_s
    for (t0, v0), (t1, _) in pairwise(samples):
        area += v0 * (t1 - t0)
    return area / (last_t - samples[0][0] + last_window_s)


def _apply_delays(
    cfg: RayServeConfig, scaled: int, target: int, direction: int, since: float | None, now_s: float
) -> tuple[int, str, int, float | None]:
    """Ray's delay logic: (desired, rule, direction, run start) for a scaled proposal against ``target``."""
    if scaled > target:
        if direction < 0 or since is None:
            direction, since = 1, now_s
        if now_s - since + DELAY_EPS_S >= cfg.upscale_delay_s:
            return scaled, "scale-up", 0, None
        return target, "upscale-delay", direction, since
    if scaled < target:
        if direction > 0 or since is None:
            direction, since = -1, now_s
        if target == 1:
            to_zero = cfg.downscale_to_zero_delay_s
            delay = cfg.downscale_delay_s if to_zero is None else to_zero
        else:
            delay = cfg.downscale_delay_s
            scaled = max(1, scaled)
        if now_s - since + DELAY_EPS_S >= delay:
            return scaled, "scale-down", 0, None
        return target, "downscale-delay", direction, since
    return target, "no-change", 0, None


def decide_replicas(
    cfg: RayServeConfig,
    total_num_requests: float,
    running_replicas: int,
    target: int,
    direction: int,
    since: float | None,
    now_s: float,
) -> tuple[int, str, int, float | None]:
    """Steps 3 to 6 on one averaged total: (bounded desired, rule, direction, run start).

    The function the optional test ``tests/peers/test_ray_serve_real.py`` runs
    beside Ray's own policy on scripted ticks.
    """
    if running_replicas == 0:
        if total_num_requests > 0:
            desired = max(math.ceil(cfg.upscaling_factor), target)
            return clamp(desired, cfg.min_replicas, cfg.max_replicas), "cold-start", direction, since
        if target > 0:
            # Ray proposes the target itself and, from zero running, skips the delays.
            return clamp(target, cfg.min_replicas, cfg.max_replicas), "no-running-replica", direction, since
        desired, rule, direction, since = _apply_delays(cfg, 0, 0, direction, since, now_s)
        return clamp(desired, cfg.min_replicas, cfg.max_replicas), "no-running-replica", direction, since
    raw = total_num_requests / cfg.target_ongoing_requests
    scaled = apply_scaling_factors(raw, running_replicas, cfg.upscaling_factor, cfg.downscaling_factor)
    desired, rule, direction, since = _apply_delays(cfg, max(0, scaled), target, direction, since, now_s)
    return clamp(desired, cfg.min_replicas, cfg.max_replicas), rule, direction, since


@dataclass(frozen=True)
class RayServePolicy:
    config: RayServeConfig
    name: str = "ray-serve"
    guard_overrides: ClassVar[Mapping[str, Any]] = PEER_GUARD_OVERRIDES

    @property
    def tick_s(self) -> float:
        return self.config.control_interval_s

    def initial_state(self) -> RayServeState:
        return RayServeState()

    def _sample(
        self, signals: Signals, state: RayServeState, now_s: float
    ) -> tuple[RayServeState, str | None]:
        """Steps 1: record and push when due. Returns the new state, or a missing signal's name."""
        cfg = self.config
        recorded, next_record = state.recorded, state.next_record_s
        if next_record is None or now_s + _SCHEDULE_EPS_S >= next_record:
            running, waiting = signals.get("running"), signals.get("queue_waiting")
            if running is None or waiting is None:
                return state, "running" if running is None else "queue_waiting"
            recorded = (*recorded, (now_s, running + waiting))
            next_record = now_s + cfg.record_interval_s
        pushed, next_push = state.pushed, state.next_push_s
        if next_push is None or now_s + _SCHEDULE_EPS_S >= next_push:
            start = now_s - cfg.look_back_period_s
            recorded = tuple(s for s in recorded if s[0] >= start)
            pushed, next_push = recorded, now_s + cfg.metrics_interval_s
        return replace(
            state, recorded=recorded, pushed=pushed, next_record_s=next_record, next_push_s=next_push
        ), None

    def decide(self, signals: Signals, state: RayServeState, now_s: float) -> tuple[Decision, RayServeState]:
        cfg = self.config
        target = signals.fleet.spec_replicas
        running_replicas = signals.fleet.ready
        sampled, missing = self._sample(signals, state, now_s)
        if missing is not None:
            held = clamp(target, cfg.min_replicas, cfg.max_replicas)
            return Decision(held, "no-data", {}, f"{missing} unavailable", no_data=NoData()), state
        total = time_weighted_mean(sampled.pushed, now_s)
        desired, rule, direction, since = decide_replicas(
            cfg, total, running_replicas, target, state.direction, state.run_since_s, now_s
        )
        inputs: dict[str, float | None] = {
            "total_num_requests": total,
            "target_ongoing_requests": cfg.target_ongoing_requests,
            "running_replicas": float(running_replicas),
            "target_replicas": float(target),
            "samples": float(len(sampled.pushed)),
        }
        if running_replicas > 0:
            inputs["raw_desired"] = total / cfg.target_ongoing_requests
        if since is not None:
            inputs["run_s"] = now_s - since
        return Decision(desired, rule, inputs), replace(sampled, direction=direction, run_since_s=since)


_PARAMS: dict[str, Param] = {
    **params_of(RayServeConfig),
    "upscaling_factor": Param(None, FACTOR_RANGE, kind=float, help="default: smoothing_factor"),
    "downscaling_factor": Param(None, FACTOR_RANGE, kind=float, help="default: smoothing_factor"),
    "smoothing_factor": Param(1.0, FACTOR_RANGE),
}


@register(
    "ray-serve",
    "Ray Serve 2.60 default policy: 30 s time-weighted mean of ongoing requests / 2 per replica, "
    "up after 30 s, down after 600 s",
    _PARAMS,
    check=RayServeConfig.check_params,
    reads=("queue_waiting", "running"),
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> RayServePolicy:
    smoothing = float(params["smoothing_factor"])
    up = smoothing if params["upscaling_factor"] is None else float(params["upscaling_factor"])
    down = smoothing if params["downscaling_factor"] is None else float(params["downscaling_factor"])
    cfg = config_from(
        RayServeConfig,
        params,
        upscaling_factor=up,
        downscaling_factor=down,
        min_replicas=ctx.min_replicas,
        max_replicas=ctx.max_replicas,
    )
    return RayServePolicy(cfg)
