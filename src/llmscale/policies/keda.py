"""``keda-queue``: KEDA's Prometheus scaler on the fleet's waiting queue and the HPA that KEDA creates.

The set-up of seed 002 section 4 (a ScaledObject with a ``prometheus``
trigger on the queue depth, ``threshold: 20``), re-implemented from
kedacore/keda v2.x (``pkg/scalers/prometheus_scaler.go``,
``pkg/scaling/executor/scale_scaledobjects.go``, the ScaledObject spec
reference) and the Kubernetes HPA it drives (``replica_calculator.go``,
``GetExternalPerPodMetricReplicas``; ``horizontal.go``):

- the query is ``sum(vllm:num_requests_waiting)``: llmscale's ``queue_waiting``
  signal (requests waiting on the serving replicas plus the gateway queue);
- ``metricType`` AverageValue (KEDA's default) with ``threshold`` 20, so the HPA
  sees an External metric with an average-value target of 20 per pod:
  ``usageRatio = value / (20 x statusReplicas)``; within the tolerance 0.1 the
  replicas stay, otherwise ``desired = ceil(value / 20)`` (E.g. 51 waiting on
  2 replicas: ratio 1.275, desired ceil(2.55) = 3; 21 on 1 replica: ratio 1.05,
  kept. ``tests/policies/test_peer_keda.py`` pins both);
- ``statusReplicas`` is the Deployment's non-terminating pods: llmscale's
  active replicas (pending + loading + warmup + ready; draining excluded);
- the HPA's default behaviour (:mod:`llmscale.policies._hpa_behavior`): scale-up
  4 pods or 100 % per 15 s, scale-down stabilised over 300 s and 100 % per 15 s;
  HPA bounds are ``[max(minReplicaCount, 1), maxReplicaCount]``;
- ``pollingInterval`` 30 s (``tick_s``); activation: the trigger is active while
  ``value > activationThreshold`` (default 0); from 0 replicas an active trigger
  scales to ``max(minReplicaCount, 1)``; with ``minReplicaCount`` 0 an inactive
  trigger scales to 0 once ``cooldownPeriod`` (300 s) has passed since it was
  last active (at once if it was never active, KEDA's nil ``LastActiveTime``);
  ``cooldownPeriod`` applies only to scaling to zero.

KEDA's ``ignoreNullValues`` defaults to true: an empty result, NaN or Inf
is read as 0 with no error. This policy reproduces that (a missing
``queue_waiting`` is treated as 0, so the proposal is what KEDA would do)
but names the rule ``no-data-null-as-zero``: llmscale's hold-on-missing-data
guard then refuses the scale-down that a failed scrape would otherwise
cause on a real KEDA install. The guard, not the policy, protects users here.

Deviations: only the AverageValue metric type is modelled; KEDA's
``fallback`` (replicas on scaler errors) and ``idleReplicaCount`` are off, as
by default; the HPA's 15 s sync runs at KEDA's 30 s polling tick.

Guards: ``guard_overrides`` =
:data:`~llmscale.policies._hpa_behavior.PEER_GUARD_OVERRIDES`: the HPA's own
stabilisation and rate policies run inside ``decide``; llmscale's pending-
aware cap and KV-headroom check, which the real project does not have, are
off. Hold-on-missing-data, drain-aware scale-down and the bounds stay on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.policies._hpa_behavior import (
    PEER_GUARD_OVERRIDES,
    HpaBehavior,
    HpaState,
    apply_hpa_behavior,
    clamp,
)
from llmscale.policies.base import register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    DURATION_RANGE,
    NONNEG_RANGE,
    TICK_RANGE,
    Param,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = ["KedaConfig", "KedaPolicy", "KedaState", "external_average_value_replicas"]


@dataclass(frozen=True)
class KedaConfig:
    signal: str = param("queue_waiting", help="the fleet signal the trigger reads")
    #: trigger ``threshold``: the AverageValue target per pod
    threshold: float = param(20.0, AMOUNT_RANGE, help="AverageValue target per pod")
    activation_threshold: float = param(0.0, NONNEG_RANGE, help="above this the ScaledObject is active")
    polling_interval_s: float = param(30.0, TICK_RANGE, unit="s")
    cooldown_period_s: float = param(
        300.0, DURATION_RANGE, unit="s", help="inactive this long -> min replicas"
    )
    tolerance: float = param(0.1, NONNEG_RANGE)
    behavior: HpaBehavior = field(default_factory=HpaBehavior)
    #: ScaledObject ``minReplicaCount`` / ``maxReplicaCount``
    min_replicas: int = 0
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas


@dataclass(frozen=True)
class KedaState:
    hpa: HpaState = field(default_factory=HpaState)
    #: ScaledObject ``status.lastActiveTime`` (None: never active)
    last_active_s: float | None = None


def external_average_value_replicas(
    value: float, target: float, status_replicas: int, tolerance: float
) -> tuple[int, float, str]:
    """The HPA's External metric, AverageValue target. Returns (replicas, usage ratio, rule).

    ``usageRatio = value / (target x statusReplicas)``; within tolerance the
    status replicas stay, otherwise ``ceil(value / target)``. With no pods the
    ratio is infinite (Go float division): ``ceil(value / target)``, or 0 for a
    zero value. E.g. (51, 20, 2, 0.1) -> (3, 1.275, "scale").
    """
    if status_replicas <= 0:
        if value <= 0:
            return 0, math.nan, "within-tolerance"
        return math.ceil(value / target), math.inf, "scale"
    ratio = value / (target * status_replicas)
    if abs(1.0 - ratio) <= tolerance:
        return status_replicas, ratio, "within-tolerance"
    return math.ceil(value / target), ratio, "scale"


@dataclass(frozen=True)
class KedaPolicy:
    config: KedaConfig
    name: str = "keda-queue"
    guard_overrides: ClassVar[Mapping[str, Any]] = PEER_GUARD_OVERRIDES

    @property
    def tick_s(self) -> float:
        return self.config.polling_interval_s

    def initial_state(self) -> KedaState:
        return KedaState()

    def decide(self, signals: Signals, state: KedaState, now_s: float) -> tuple[Decision, KedaState]:
        cfg = self.config
        spec = signals.fleet.spec_replicas
        raw_value = signals.get(cfg.signal)
        null = raw_value is None or not math.isfinite(raw_value)
        value = 0.0 if raw_value is None or null else raw_value  # ignoreNullValues: true
        active = value > cfg.activation_threshold
        last_active = now_s if active else state.last_active_s
        status = signals.fleet.active
        hpa_min = max(1, cfg.min_replicas)
        inputs: dict[str, float | None] = {
            "value": value,
            "threshold": cfg.threshold,
            "activation_threshold": cfg.activation_threshold,
            "active": 1.0 if active else 0.0,
            "status_replicas": float(status),
        }
        hpa_state = state.hpa
        if spec == 0:
            # The HPA is disabled at 0 replicas; only KEDA's activation scales from zero.
            desired, rule = (hpa_min, "activate-from-zero") if active else (0, "idle-at-zero")
        else:
            if spec > cfg.max_replicas:
                desired, rule = cfg.max_replicas, "above-max"
            elif spec < hpa_min:
                desired, rule = hpa_min, "below-min"
            else:
                raw, ratio, rule = external_average_value_replicas(
                    value, cfg.threshold, status, cfg.tolerance
                )
                inputs["usage_ratio"] = ratio if math.isfinite(ratio) else None
                inputs["raw_recommendation"] = float(raw)
                desired, rule, hpa_state = apply_hpa_behavior(
                    raw, spec, rule, cfg.behavior, hpa_min, cfg.max_replicas, hpa_state, now_s
                )
            if not active and cfg.min_replicas == 0:
                idle_s = math.inf if state.last_active_s is None else now_s - state.last_active_s
                inputs["idle_s"] = None if math.isinf(idle_s) else idle_s
                if idle_s > cfg.cooldown_period_s:
                    desired, rule = 0, "scale-to-zero"
        note = ""
        if null:
            note = f"{cfg.signal} is null: read as 0 (ignoreNullValues); the KEDA rule was {rule!r}"
            rule = "no-data-null-as-zero"
        desired = clamp(desired, cfg.min_replicas, cfg.max_replicas)
        # KEDA reads the null as 0 and proposes on it; the decision still rests on missing data,
        # so the controller's guard holds the scale-down it would make.
        no_data = NoData((cfg.signal,)) if null else None
        decision = Decision(desired, rule, inputs, note, no_data=no_data)
        return decision, KedaState(hpa=hpa_state, last_active_s=last_active)


_PARAMS: dict[str, Param] = {
    **params_of(KedaConfig),
    **params_of(HpaBehavior),
}


@register(
    "keda-queue",
    "KEDA Prometheus scaler on sum(vllm:num_requests_waiting), AverageValue 20, HPA default behaviour",
    _PARAMS,
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> KedaPolicy:
    cfg = config_from(
        KedaConfig,
        params,
        behavior=config_from(HpaBehavior, params),
        min_replicas=ctx.min_replicas,
        max_replicas=ctx.max_replicas,
    )
    return KedaPolicy(cfg)
