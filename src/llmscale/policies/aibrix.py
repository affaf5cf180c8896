"""``aibrix-apa``: the AIBrix APA (application-specific pod autoscaler) on KV-cache usage or queue per pod.

Re-implemented from vllm-project/aibrix (main branch, 2025):
``pkg/controller/podautoscaler/algorithm/apa.go`` (``computeTargetReplicas``),
``context/context.go`` (``NewBaseScalingContext``), ``metrics/client.go``
(windows) and ``podautoscaler_controller.go`` (``computeScaleDecision``,
``stabilizeRecommendation``):

- metric (parameter ``metric``): ``kv_usage_mean`` (vLLM ``kv_cache_usage_perc``,
  0..1) with target 0.5 -- the value of AIBrix's ``samples/autoscaling/apa.yaml``
  -- or ``queue_per_replica`` (``num_requests_waiting``) with target 100, the
  value of ``samples/autoscaling/multimetrics-apa.yaml`` (set ``target`` for a
  real service: a queue of 100 per replica is far past any TTFT SLO);
- each sync (``DefaultResyncInterval`` 10 s, ``tick_s``) the per-pod mean is
  recorded; the value used is its average over the stable window
  (``DefaultStableWindowDuration`` 180 s, ``spec.observeWindowSeconds``);
- ``ratio = value / target``; above ``1 + up tolerance`` (0.1):
  ``min(ceil(N x ratio), ceil(2 x N))``; below ``1 - down tolerance`` (0.1):
  ``max(ceil(N x ratio), floor(N / 2))``; otherwise N (the current replicas),
  with max scale-up / scale-down rates 2 (E.g. KV 0.56 on 4 replicas with
  target 0.5: ratio 1.12 > 1.1, ceil(4.48) = 5; KV 0.54: 1.08, kept);
- the cooldown windows (``ScaleUpCooldownWindow`` 0 s, ``ScaleDownCooldownWindow``
  300 s) filter the recommendation as ``stabilizeRecommendation`` does: every
  recommendation is recorded; a scale-up takes the *highest* of the
  scale-up window, a scale-down the *lowest* of the scale-down window.
  Note the direction: AIBrix keeps the minimum for a scale-down, so the
  300 s window does not delay a scale-down -- it can only deepen it to a
  lower recommendation seen in the last 300 s. This is reproduced as
  written (``tests/policies/test_peer_aibrix.py`` pins it); llmscale's drain
  guard still waits for the eviction window before any replica goes;
- min/max replicas bound the result; ``ScaleToZero`` is false by default.

Missing data: before PR vllm-project/aibrix#2592 a failed metric fetch was
turned into a value of 0 and APA scaled down; since that fix the reconcile
fails (``FailedComputeScale``) and nothing is scaled. This policy follows
the fixed behaviour: an invalid signal gives a ``no-data`` decision that
holds the current replicas and records nothing in the window.

Guards: ``guard_overrides`` =
:data:`~llmscale.policies._hpa_behavior.PEER_GUARD_OVERRIDES`: APA's tolerance
band, rates and cooldown filter run inside ``decide``; llmscale's pending-
aware cap and KV-headroom check, which the real project does not have, are
off. Hold-on-missing-data, drain-aware scale-down and the bounds stay on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.policies._hpa_behavior import PEER_GUARD_OVERRIDES, clamp
from llmscale.policies.base import register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    DURATION_RANGE,
    FACTOR_RANGE,
    NONNEG_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    Param,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = ["ApaConfig", "ApaPolicy", "ApaState", "apa_replicas"]

#: Default target per metric, from AIBrix's sample PodAutoscalers.
APA_DEFAULT_TARGETS: dict[str, float] = {"kv_usage_mean": 0.5, "queue_per_replica": 100.0}


@dataclass(frozen=True)
class ApaConfig:
    metric: str = param("kv_usage_mean", choices=tuple(APA_DEFAULT_TARGETS))
    target: float = 0.5
    up_tolerance: float = param(0.1, NONNEG_RANGE)
    down_tolerance: float = param(0.1, NONNEG_RANGE)
    max_scale_up_rate: float = param(2.0, FACTOR_RANGE)
    max_scale_down_rate: float = param(2.0, FACTOR_RANGE)
    scale_up_cooldown_s: float = param(0.0, DURATION_RANGE, unit="s")
    scale_down_cooldown_s: float = param(300.0, DURATION_RANGE, unit="s")
    window_s: float = param(180.0, WINDOW_RANGE, unit="s")
    sync_s: float = param(10.0, TICK_RANGE, unit="s")
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas


@dataclass(frozen=True)
class ApaState:
    #: (time_s, per-pod mean) within the stable window, oldest first
    samples: tuple[tuple[float, float], ...] = ()
    #: (time_s, recommendation) within the longest cooldown window
    recommendations: tuple[tuple[float, int], ...] = ()


def apa_replicas(
    current: int,
    value: float,
    target: float,
    up_tol: float,
    down_tol: float,
    up_rate: float,
    down_rate: float,
) -> tuple[int, str]:
    """APA's ``computeTargetReplicas``: (replicas, rule). E.g. (4, 0.56, 0.5, 0.1, 0.1, 2, 2) -> (5, ...)."""
    ratio = value / target
    n = float(current)
    if ratio > 1.0 + up_tol:
        expected = math.ceil(n * ratio)
        cap = math.ceil(up_rate * n)
        return (cap, "scale-up-rate-limited") if expected > cap else (expected, "scale-up")
    if ratio < 1.0 - down_tol:
        expected = math.ceil(n * ratio)
        floor_n = math.floor(n / down_rate)
        return (floor_n, "scale-down-rate-limited") if expected < floor_n else (expected, "scale-down")
    return current, "within-tolerance"


@dataclass(frozen=True)
class ApaPolicy:
    config: ApaConfig
    name: str = "aibrix-apa"
    guard_overrides: ClassVar[Mapping[str, Any]] = PEER_GUARD_OVERRIDES

    @property
    def tick_s(self) -> float:
        return self.config.sync_s

    def initial_state(self) -> ApaState:
        return ApaState()

    def decide(self, signals: Signals, state: ApaState, now_s: float) -> tuple[Decision, ApaState]:
        cfg = self.config
        current = signals.fleet.spec_replicas
        value_now = signals.get(cfg.metric)
        if value_now is None or not math.isfinite(value_now):
            held = clamp(current, cfg.min_replicas, cfg.max_replicas)
            return Decision(
                held, "no-data", {}, f"{cfg.metric} unavailable (FailedComputeScale)", no_data=NoData()
            ), state

        samples = (*(s for s in state.samples if now_s - s[0] < cfg.window_s), (now_s, value_now))
        value = sum(v for _, v in samples) / len(samples)
        rec, rule = apa_replicas(
            current,
            value,
            cfg.target,
            cfg.up_tolerance,
            cfg.down_tolerance,
            cfg.max_scale_up_rate,
            cfg.max_scale_down_rate,
        )

        # stabilizeRecommendation: record, then pick within the window of the direction.
        keep_s = max(cfg.scale_up_cooldown_s, cfg.scale_down_cooldown_s)
        recs = (*(r for r in state.recommendations if now_s - r[0] < keep_s), (now_s, rec))
        stabilized = current
        if rec != current:
            window_s = cfg.scale_up_cooldown_s if rec > current else cfg.scale_down_cooldown_s
            # Only recommendations strictly after now - window count (Go's ``After(cutoff)``):
            # a 0 s window holds none, and the recommendation itself is used.
            in_window = [n for t, n in recs if t > now_s - window_s] or [rec]
            stabilized = max(in_window) if rec > current else min(in_window)
            if stabilized != rec:
                rule = "scale-up-window-max" if rec > current else "scale-down-window-min"

        desired = clamp(stabilized, cfg.min_replicas, cfg.max_replicas)
        inputs: dict[str, float | None] = {
            cfg.metric: value,
            "metric_now": value_now,
            "target": cfg.target,
            "ratio": value / cfg.target,
            "recommendation": float(rec),
            "window_samples": float(len(samples)),
        }
        return Decision(desired, rule, inputs), ApaState(samples=samples, recommendations=recs)


_PARAMS: dict[str, Param] = {
    **params_of(ApaConfig),
    "target": Param(None, AMOUNT_RANGE, kind=float, help="per-pod target (default: the metric's)"),
}


@register(
    "aibrix-apa",
    "AIBrix APA on KV usage (target 0.5) or queue per pod: 10% tolerance, rates 2x, 180 s window",
    _PARAMS,
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> ApaPolicy:
    metric = str(params["metric"])
    target = APA_DEFAULT_TARGETS[metric] if params["target"] is None else float(params["target"])
    cfg = config_from(
        ApaConfig,
        params,
        target=target,
        min_replicas=ctx.min_replicas,
        max_replicas=ctx.max_replicas,
    )
    return ApaPolicy(cfg)
