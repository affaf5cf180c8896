"""``hpa-gpu-util``: the Kubernetes HPA (autoscaling/v2) on a per-pod GPU-utilisation metric.

The common production set-up: DCGM's ``DCGM_FI_DEV_GPU_UTIL`` exposed per pod
(dcgm-exporter, prometheus-adapter) as a Pods metric with an AverageValue
target of 70 (percent). It reads that field exactly as such a set-up does,
with DCGM's meaning: NVML's "percent of time over the past sample period
during which one or more kernels was executing". A vLLM replica runs an
engine iteration whenever a request is in flight, so the field reads ~100 %
on a replica serving one request as on one at its batch limit, and 0 on an
idle one; the fleet mean is the share of replicas with work. Its failure on
LLM serving is therefore over-provisioning, not starvation: a light but
steady load spread by the router keeps every replica "busy", above the 70 %
target, and HPA adds replicas until about 30 % of them sit idle -- or until
max_replicas (``tests/backtest/test_hpa_gpu_util_failure.py``).

Re-implemented from the algorithm in kubernetes/kubernetes
``pkg/controller/podautoscaler`` (``replica_calculator.go``, ``horizontal.go``):

- sync period 15 s; tolerance 0.1 (no change while |ratio - 1| <= 0.1);
- ratio = mean over pods with a sample / target; Pending pods are ignored; pods
  that are running but have no sample are "missing": counted at the target
  on a scale-down and at 0 on a scale-up, then the ratio is recomputed and
  the change dropped if it flips direction or falls within tolerance;
  desired = ceil(ratio x number of pods counted);
- default behaviour: scale-up stabilisation 0 s with rate policies
  "4 pods or 100% per 15 s, whichever is more"; scale-down stabilisation
  300 s (the highest recommendation of the window wins) and 100% per 15 s
  (:func:`llmscale.policies._hpa_behavior.apply_hpa_behavior`, shared with ``keda-queue``);
- min/max replicas bound the result.

Unready pods are only discounted by HPA for CPU; for a Pods metric a pod that
is still loading its model reports a GPU utilisation near 0 and is averaged
in, as it is on a real cluster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.metrics.names import DCGM
from llmscale.policies._hpa_behavior import HpaBehavior, HpaState, apply_hpa_behavior
from llmscale.policies.base import register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    DURATION_RANGE,
    TICK_RANGE,
    PolicyParamError,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = ["HpaConfig", "HpaPolicy", "hpa_replicas_for_metric"]


@dataclass(frozen=True)
class HpaConfig:
    metric: str = param(DCGM.GPU_UTIL, help="per-pod metric averaged against the target")
    #: The usage ratio divides by the target.
    target: float = param(70.0, AMOUNT_RANGE, help="AverageValue target of the metric")
    tolerance: float = param(0.1, "[0, 1)", help="no change while |1 - ratio| is within this")
    sync_s: float = param(15.0, TICK_RANGE, unit="s", help="HPA sync period")
    up_stabilization_s: float = 0.0
    down_stabilization_s: float = param(300.0, DURATION_RANGE, unit="s")
    up_pods_per_period: int = 4
    up_percent_per_period: float = 100.0
    down_percent_per_period: float = 100.0
    period_s: float = 15.0
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas

    @classmethod
    def check_params(cls, p: Mapping[str, Any]) -> None:
        """The metric is one the fleet reports per pod (registered, run before the policy is
        built): a misspelt name would read as "no pod has a sample" at every tick, forever."""
        from llmscale.signals.fleet import PER_POD_METRICS

        metric = p["metric"]
        if metric not in PER_POD_METRICS:
            raise PolicyParamError(
                f"hpa-gpu-util.metric = {metric!r}: must be a per-pod metric: {', '.join(PER_POD_METRICS)}",
                "metric",
            )


def hpa_replicas_for_metric(
    values: Mapping[str, float | None], target: float, tolerance: float, current: int
) -> tuple[int, float | None, str]:
    """HPA's replica count for a Pods metric with an AverageValue target.

    ``values`` maps every counted pod (Pending pods excluded) to its sample, or
    None when the pod has no sample. Returns (replicas, usage ratio, rule).
    Worked example: pods at 90 and 80 with target 70 -> ratio 85/70 = 1.214,
    outside tolerance, desired = ceil(1.214 x 2) = 3.
    """
    present = [v for v in values.values() if v is not None]
    missing = len(values) - len(present)
    if not present:
        return current, None, "no-metrics"
    ratio = sum(present) / len(present) / target
    if missing == 0:
        if abs(1.0 - ratio) <= tolerance:
            return current, ratio, "within-tolerance"
        return math.ceil(ratio * len(present)), ratio, "scale"
    # Missing pods: assume the conservative value for the direction of change.
    fill = target if ratio < 1.0 else 0.0
    new_ratio = (sum(present) + fill * missing) / (len(present) + missing) / target
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0) != (new_ratio < 1.0):
        return current, new_ratio, "within-tolerance"
    desired = math.ceil(new_ratio * (len(present) + missing))
    if (new_ratio > 1.0 and desired < current) or (new_ratio < 1.0 and desired > current):
        return current, new_ratio, "direction-flip"
    return desired, new_ratio, "scale"


@dataclass(frozen=True)
class HpaPolicy:
    config: HpaConfig
    name: str = "hpa-gpu-util"

    @property
    def tick_s(self) -> float:
        return self.config.sync_s

    def initial_state(self) -> HpaState:
        return HpaState()

    def decide(self, signals: Signals, state: HpaState, now_s: float) -> tuple[Decision, HpaState]:
        cfg = self.config
        current = signals.fleet.spec_replicas
        values: dict[str, float | None] = {}
        for pod, metrics in signals.per_replica.items():
            values[pod] = metrics.get(cfg.metric)
        raw, ratio, rule = hpa_replicas_for_metric(values, cfg.target, cfg.tolerance, current)
        mean = None
        present = [v for v in values.values() if v is not None]
        if present:
            mean = sum(present) / len(present)

        behavior = HpaBehavior(
            up_stabilization_s=cfg.up_stabilization_s,
            down_stabilization_s=cfg.down_stabilization_s,
            up_pods_per_period=cfg.up_pods_per_period,
            up_percent_per_period=cfg.up_percent_per_period,
            down_percent_per_period=cfg.down_percent_per_period,
            period_s=cfg.period_s,
        )
        desired, rule, next_state = apply_hpa_behavior(
            raw, current, rule, behavior, cfg.min_replicas, cfg.max_replicas, state, now_s
        )
        decision = Decision(
            desired,
            rule,
            {
                "metric_mean": mean,
                "target": cfg.target,
                "usage_ratio": ratio,
                "raw_recommendation": float(raw),
                "pods_counted": float(len(values)),
            },
            # no pod reported the metric: the HPA holds its scale (``no-metrics``), and the
            # controller's guard never lets a stabilised recommendation shrink the fleet on it
            no_data=None if present else NoData((cfg.metric,)),
        )
        return decision, next_state


_PARAMS = params_of(HpaConfig)


@register(
    "hpa-gpu-util",
    "Kubernetes HPA v2 on per-pod GPU utilisation, target 70%",
    _PARAMS,
    check=HpaConfig.check_params,
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> HpaPolicy:
    return HpaPolicy(
        config_from(
            HpaConfig,
            params,
            min_replicas=ctx.min_replicas,
            max_replicas=ctx.max_replicas,
        )
    )
