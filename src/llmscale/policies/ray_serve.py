"""``ray-serve``: Ray Serve's default request-based autoscaling policy.

Re-implemented from ray-project/ray (Ray 2.x, master of 2025): ``python/ray/serve/autoscaling_policy.py``
(``replica_queue_length_autoscaling_policy``, ``_apply_scaling_factors``,
``_apply_delay_logic``, ``_get_cold_start_scale_up_replicas``) and the
``AutoscalingConfig`` defaults of ``python/ray/serve/config.py`` /
``_private/constants.py``:

- ``target_ongoing_requests`` 2 (``DEFAULT_TARGET_ONGOING_REQUESTS``). For vLLM
  behind Ray a realistic target is the batch a replica serves well, e.g.
  32-64 (``ray.llm`` itself defaults to 16); Ray's general default is kept and
  exposed as a parameter;
- ongoing requests = running + waiting on the replicas plus those queued in
  front of them (llmscale's ``running`` + ``queue_waiting``), recorded every
  ``metrics_interval_s`` 10 s (``tick_s``) and averaged over
  ``look_back_period_s`` 30 s (the samples are kept in the state);
- ``error_ratio = total / (target x running replicas)``,
  ``desired = running x error_ratio``, then the smoothing factors:
  ``ceil(running + factor x (desired - running))`` with ``upscaling_factor`` /
  ``downscaling_factor`` (None -> ``smoothing_factor`` 1.0); a scale-down
  stuck at the current count by a small factor is decremented by one;
  then min/max replicas;
- delays against the current target: a scale-up is applied once the same
  direction has been decided for ``upscale_delay_s`` 30 s, a scale-down for
  ``downscale_delay_s`` 600 s (``downscale_to_zero_delay_s`` for 1 -> 0, default
  the same); a change of direction or a "no change" resets the run. Ray
  counts control loops of 0.1 s (``CONTROL_LOOP_INTERVAL_S``) and applies after
  ``> int(delay / 0.1)`` of them, i.e. once ``delay`` seconds have passed since
  the first decision of the run; here the run start is kept in the state;
- cold start: with no running replica and requests waiting, scale at once to
  ``max(ceil(1 x upscaling_factor), current target)``; with none waiting, keep
  the target (replicas still starting are left to come up).

Deviations: Ray's controller runs every 0.1 s but its metrics change only
every 10 s, so deciding at each 10 s metrics tick gives the same delays;
when this tick's request count cannot be computed the decision is
``no-data`` and holds (the delay run is left as it was).

Guards: ``guard_overrides`` =
:data:`~llmscale.policies._hpa_behavior.PEER_GUARD_OVERRIDES`: Ray's delays
and smoothing run inside ``decide``; llmscale's pending-aware cap and KV-
headroom check, which the real project does not have, are off. Hold-on-
missing-data, drain-aware scale-down and the bounds stay on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from llmscale.policies._hpa_behavior import PEER_GUARD_OVERRIDES, clamp
from llmscale.policies.base import PolicyContext, register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    DURATION_RANGE,
    FACTOR_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    Param,
)
from llmscale.types import Decision, Signals

__all__ = ["RayServeConfig", "RayServePolicy", "RayServeState", "apply_scaling_factors"]


@dataclass(frozen=True)
class RayServeConfig:
    target_ongoing_requests: float = 2.0
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    downscale_to_zero_delay_s: float | None = None
    upscaling_factor: float = 1.0
    downscaling_factor: float = 1.0
    metrics_interval_s: float = 10.0
    look_back_period_s: float = 30.0
    min_replicas: int = 1
    max_replicas: int = 100


@dataclass(frozen=True)
class RayServeState:
    #: (time_s, total ongoing requests) within the look-back period, oldest first
    samples: tuple[tuple[float, float], ...] = ()
    #: direction of the current run of decisions (+1 up, -1 down, 0 none) and when it began
    direction: int = 0
    run_since_s: float = 0.0


def apply_scaling_factors(desired: float, current: int, up_factor: float, down_factor: float) -> int:
    """Ray's ``_apply_scaling_factors``. E.g. (1.0, 4, 1, 0.1): ceil(4 - 0.3) = 4, stuck -> 3."""
    delta = desired - current
    factor = up_factor if delta > 0 else down_factor
    scaled = math.ceil(current + factor * delta)
    if math.ceil(desired) < current and scaled == current:
        scaled -= 1
    return scaled


@dataclass(frozen=True)
class RayServePolicy:
    config: RayServeConfig
    name: str = "ray-serve"
    guard_overrides: ClassVar[Mapping[str, Any]] = PEER_GUARD_OVERRIDES

    @property
    def tick_s(self) -> float:
        return self.config.metrics_interval_s

    def initial_state(self) -> RayServeState:
        return RayServeState()

    def decide(self, signals: Signals, state: RayServeState, now_s: float) -> tuple[Decision, RayServeState]:
        cfg = self.config
        target = signals.fleet.spec_replicas
        running_replicas = signals.fleet.ready
        running = signals.get("running")
        waiting = signals.get("queue_waiting")
        if running is None or waiting is None:
            held = clamp(target, cfg.min_replicas, cfg.max_replicas)
            missing = "running" if running is None else "queue_waiting"
            return Decision(held, "no-data", {}, f"{missing} unavailable"), state

        samples = (
            *(s for s in state.samples if now_s - s[0] < cfg.look_back_period_s),
            (now_s, running + waiting),
        )
        total = sum(v for _, v in samples) / len(samples)
        inputs: dict[str, float | None] = {
            "total_num_requests": total,
            "target_ongoing_requests": cfg.target_ongoing_requests,
            "running_replicas": float(running_replicas),
            "target_replicas": float(target),
        }

        if running_replicas == 0:
            # Cold-start fast path: bypasses the delays.
            if total > 0:
                desired, rule = max(math.ceil(cfg.upscaling_factor), target), "cold-start"
            else:
                desired, rule = target, "no-running-replica"
            desired = clamp(desired, cfg.min_replicas, cfg.max_replicas)
            return Decision(desired, rule, inputs), RayServeState(samples=samples)

        error_ratio = total / (cfg.target_ongoing_requests * running_replicas)
        raw = running_replicas * error_ratio
        scaled = apply_scaling_factors(raw, running_replicas, cfg.upscaling_factor, cfg.downscaling_factor)
        bounded = clamp(scaled, cfg.min_replicas, cfg.max_replicas)
        inputs.update(error_ratio=error_ratio, raw_desired=raw, bounded_desired=float(bounded))

        direction, since = state.direction, state.run_since_s
        if bounded > target:
            if direction <= 0:
                direction, since = 1, now_s
            inputs["run_s"] = now_s - since
            if now_s - since >= cfg.upscale_delay_s:
                desired, rule, direction = bounded, "scale-up", 0
            else:
                desired, rule = target, "upscale-delay"
        elif bounded < target:
            if direction >= 0:
                direction, since = -1, now_s
            inputs["run_s"] = now_s - since
            if target == 1:
                delay = cfg.downscale_to_zero_delay_s
                delay = cfg.downscale_delay_s if delay is None else delay
            else:
                delay = cfg.downscale_delay_s
                bounded = max(1, bounded)
            if now_s - since >= delay:
                desired, rule, direction = bounded, "scale-down", 0
            else:
                desired, rule = target, "downscale-delay"
        else:
            desired, rule, direction = target, "no-change", 0

        desired = clamp(desired, cfg.min_replicas, cfg.max_replicas)
        return Decision(desired, rule, inputs), RayServeState(samples, direction, since)


_PARAMS: dict[str, Param] = {
    "target_ongoing_requests": Param(2.0, AMOUNT_RANGE),
    "upscale_delay_s": Param(30.0, DURATION_RANGE, unit="s"),
    "downscale_delay_s": Param(600.0, DURATION_RANGE, unit="s"),
    "downscale_to_zero_delay_s": Param(None, DURATION_RANGE, kind=float, unit="s"),
    "upscaling_factor": Param(None, FACTOR_RANGE, kind=float, help="default: smoothing_factor"),
    "downscaling_factor": Param(None, FACTOR_RANGE, kind=float, help="default: smoothing_factor"),
    "smoothing_factor": Param(1.0, FACTOR_RANGE),
    "metrics_interval_s": Param(10.0, TICK_RANGE, unit="s"),
    "look_back_period_s": Param(30.0, WINDOW_RANGE, unit="s"),
}


@register(
    "ray-serve",
    "Ray Serve default policy: target 2 ongoing requests per replica, up after 30 s, down after 600 s",
    _PARAMS,
)
def _make(ctx: PolicyContext, params: Mapping[str, Any]) -> RayServePolicy:
    smoothing = float(params["smoothing_factor"])
    up = smoothing if params["upscaling_factor"] is None else float(params["upscaling_factor"])
    down = smoothing if params["downscaling_factor"] is None else float(params["downscaling_factor"])
    to_zero = params["downscale_to_zero_delay_s"]
    cfg = RayServeConfig(
        target_ongoing_requests=float(params["target_ongoing_requests"]),
        upscale_delay_s=float(params["upscale_delay_s"]),
        downscale_delay_s=float(params["downscale_delay_s"]),
        downscale_to_zero_delay_s=None if to_zero is None else float(to_zero),
        upscaling_factor=up,
        downscaling_factor=down,
        metrics_interval_s=float(params["metrics_interval_s"]),
        look_back_period_s=float(params["look_back_period_s"]),
        min_replicas=ctx.min_replicas,
        max_replicas=ctx.max_replicas,
    )
    return RayServePolicy(cfg)
