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
- ratio = mean over pods with a sample / target; pods that are running but
  have no sample are "missing": counted at the target on a scale-down and at 0
  on a scale-up; on a scale-up Pending pods count at 0 too; then the ratio is
  recomputed and the change dropped if it flips direction or falls within
  tolerance; desired = ceil(ratio x number of pods counted);
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
    values: Mapping[str, float | None],
    target: float,
    tolerance: float,
    current: int,
    pending_pods: int = 0,
) -> tuple[int, float | None, str]:
    """HPA's replica count for a Pods metric with an AverageValue target (``calcPlainMetricReplicas``).

    ``values`` maps every running pod to its sample, or None when the pod has no sample (HPA's
    "missing"); ``pending_pods`` counts the Pending ones (waiting for a node, pulling the image).
    Returns (replicas, usage ratio, rule). The ratio is the mean sample over the target. With
    nothing missing or pending the answer is ``ceil(ratio x pods with a sample)`` unless within the
    tolerance. Otherwise the ratio is taken again with the missing pods at the target (on a
    scale-down) or at 0 (on a scale-up), and on a scale-up the Pending pods at 0 too; the current
    count stays when that ratio is within the tolerance or on the other side of 1.
    E.g. pods at 90 and 80, target 70: 85/70 = 1.214, desired ceil(1.214 x 2) = 3. With one more
    pod Pending: 170 / 3 / 70 = 0.81, the other side of 1: the pending pod covers it, 3 stays.
    Checked case by case against the HPA controller's own code (``tests/peers/test_kube_hpa_recorded.py``).
    """
    present = [v for v in values.values() if v is not None]
    missing = len(values) - len(present)
    if not present:
        return current, None, "no-metrics"
    ratio = sum(present) / len(present) / target
    rebalance_pending = pending_pods > 0 and ratio > 1.0
    if missing == 0 and not rebalance_pending:
        if abs(1.0 - ratio) <= tolerance:
            return current, ratio, "within-tolerance"
        return math.ceil(ratio * len(present)), ratio, "scale"
    # Missing pods at the conservative value for the direction of change; on a scale-up the
    # Pending pods at 0, as they will take load once ready.
    fill = target if ratio < 1.0 else 0.0
    counted = len(present) + missing + (pending_pods if rebalance_pending else 0)
    new_ratio = (sum(present) + fill * missing) / counted / target
    if abs(1.0 - new_ratio) <= tolerance:
        return current, new_ratio, "within-tolerance"
    if (ratio < 1.0 and new_ratio > 1.0) or (ratio > 1.0 and new_ratio < 1.0):
        return current, new_ratio, "direction-flip"
    return math.ceil(new_ratio * counted), new_ratio, "scale"


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
        pending = signals.fleet.pending + signals.fleet.node_pending
        raw, ratio, rule = hpa_replicas_for_metric(values, cfg.target, cfg.tolerance, current, pending)
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
