"""``wva-saturation``: the llm-d Workload Variant Autoscaler's saturation analyzer (V1, one variant).

Re-implemented from llm-d-incubation/workload-variant-autoscaler
``internal/saturation/analyzer.go`` (``AnalyzeModelSaturation``,
``isScaleDownSafe``, ``CalculateSaturationTargets``) and
``docs/saturation-analyzer.md``, with the ``capacity-scaling-config`` defaults:

- inputs per pod: ``max_over_time(...[1m])`` of ``vllm:kv_cache_usage_perc`` and
  ``vllm:num_requests_waiting`` -- the peak of the last minute. llmscale
  observes every 15 s (a Prometheus scrape interval, ``tick_s``) and keeps
  each pod's samples of the last 60 s in the state; the analysis runs every
  ``GLOBAL_OPT_INTERVAL`` 60 s;
- a replica is saturated when ``kv >= kvCacheThreshold`` (0.80) or
  ``queue >= queueLengthThreshold`` (5); each non-saturated replica has spare
  ``0.80 - kv`` and ``5 - queue``, averaged over the non-saturated replicas (0
  when every replica is saturated);
- scale up (ready + 1) when the average spare KV < ``kvSpareTrigger`` 0.1 or the
  average spare queue < ``queueSpareTrigger`` 3 (E.g. KV 0.75 and 0.72: spare
  0.065 < 0.1, scale up);
- scale down (ready - 1, never below 1) only when it is safe: at least 2
  non-saturated replicas, and their average load redistributed over N - 1
  (x N/(N-1)) still leaves spare >= both triggers (E.g. 3 replicas at KV 0.40:
  0.40 x 3/2 = 0.60, spare 0.20 >= 0.1, safe; at 0.50: 0.75, spare 0.05, not).
  As in WVA, N counts the non-saturated replicas only: a saturated replica's
  load is not part of the redistribution;
- no decision while the model is in transition: replicas still starting,
  or fewer pods reporting metrics than the deployment's replicas;
- min/max replicas bound the result.

Missing per-replica data: WVA reads a pod whose KV or queue metric is
absent in a cycle as 0 (llm-d/llm-d-autoscaling issue #360, "Fix silent
failure in metrics collection"), which makes an unscraped pod look empty
and can approve an unsafe scale-down. This policy does not reproduce that
bug: a serving pod without both metrics, or a failed scrape, gives a
``no-data`` decision that holds the current replicas.

Deviations: one variant (one accelerator/model pair), so the cheapest /
most expensive variant choice is moot; the WVA's output goes straight to the
replica count rather than through the HPA/KEDA actuator a cluster pairs it with.

Guards: ``guard_overrides`` =
:data:`~llmscale.policies._hpa_behavior.PEER_GUARD_OVERRIDES`: WVA's 60 s
interval, transition block and +-1 steps run inside ``decide``; llmscale's
pending-aware cap and KV-headroom check, which the real project does not have,
are off. Hold-on-missing-data, drain-aware scale-down and the bounds stay on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.metrics.names import VllmMetric
from llmscale.policies._hpa_behavior import PEER_GUARD_OVERRIDES, clamp
from llmscale.policies.base import register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    Param,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = [
    "SaturationAnalysis",
    "WvaConfig",
    "WvaPolicy",
    "WvaState",
    "analyze_saturation",
    "saturation_target",
]

KV_METRIC: str = VllmMetric.KV_USAGE
WAITING_METRIC: str = VllmMetric.WAITING

#: ``MinNonSaturatedReplicasForScaleDown``
MIN_NON_SATURATED_FOR_SCALE_DOWN = 2


@dataclass(frozen=True)
class WvaConfig:
    kv_cache_threshold: float = param(0.80, "(0, 1]")
    queue_length_threshold: float = param(5.0, AMOUNT_RANGE)
    kv_spare_trigger: float = param(0.1, "(0, 1]")
    queue_spare_trigger: float = param(3.0, AMOUNT_RANGE)
    interval_s: float = param(60.0, WINDOW_RANGE, unit="s")
    #: The controller ticks at scrape_s.
    scrape_s: float = param(15.0, TICK_RANGE, unit="s")
    peak_window_s: float = param(60.0, WINDOW_RANGE, unit="s")
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas


@dataclass(frozen=True)
class WvaState:
    #: (time_s, pod, kv usage, waiting) within the peak window, oldest first
    samples: tuple[tuple[float, str, float, float], ...] = ()
    last_analysis_s: float | None = None


@dataclass(frozen=True)
class SaturationAnalysis:
    replicas: int
    non_saturated: int
    avg_spare_kv: float
    avg_spare_queue: float
    scale_up: bool
    scale_down_safe: bool


def analyze_saturation(peaks: Mapping[str, tuple[float, float]], cfg: WvaConfig) -> SaturationAnalysis:
    """``AnalyzeModelSaturation`` for one variant; ``peaks`` maps pod -> (KV usage, waiting).

    With no replica metrics at all nothing is recommended (the Go code returns early).
    """
    if not peaks:
        return SaturationAnalysis(0, 0, 0.0, 0.0, scale_up=False, scale_down_safe=False)
    spare_kv = 0.0
    spare_queue = 0.0
    non_sat = 0
    for kv, queue in peaks.values():
        if kv >= cfg.kv_cache_threshold or queue >= cfg.queue_length_threshold:
            continue
        spare_kv += cfg.kv_cache_threshold - kv
        spare_queue += cfg.queue_length_threshold - queue
        non_sat += 1
    avg_kv = spare_kv / non_sat if non_sat else 0.0
    avg_queue = spare_queue / non_sat if non_sat else 0.0
    scale_up = avg_kv < cfg.kv_spare_trigger or avg_queue < cfg.queue_spare_trigger
    safe = False
    if non_sat >= MIN_NON_SATURATED_FOR_SCALE_DOWN:
        factor = non_sat / (non_sat - 1)
        kv_after = (cfg.kv_cache_threshold - avg_kv) * factor
        queue_after = (cfg.queue_length_threshold - avg_queue) * factor
        safe = (
            cfg.kv_cache_threshold - kv_after >= cfg.kv_spare_trigger
            and cfg.queue_length_threshold - queue_after >= cfg.queue_spare_trigger
        )
    return SaturationAnalysis(len(peaks), non_sat, avg_kv, avg_queue, scale_up, safe)


def saturation_target(a: SaturationAnalysis, spec_replicas: int, starting: int = 0) -> tuple[int, str]:
    """``CalculateSaturationTargets`` for one variant, before the min/max bounds: (replicas, rule).

    A model in transition -- pods starting, or fewer pods with metrics than ``spec_replicas`` --
    keeps ``spec_replicas``; otherwise the pods with metrics +1 on a scale-up, -1 when a scale-down
    is safe (never below 1), else unchanged. E.g. 3 pods at KV 0.40: safe, 2.
    """
    if starting > 0 or a.replicas != spec_replicas:
        return spec_replicas, "model-in-transition"
    if a.scale_up:
        return a.replicas + 1, "scale-up-spare-low"
    if a.scale_down_safe and a.replicas > 1:
        return a.replicas - 1, "scale-down-safe"
    return a.replicas, "no-change"


@dataclass(frozen=True)
class WvaPolicy:
    config: WvaConfig
    name: str = "wva-saturation"
    guard_overrides: ClassVar[Mapping[str, Any]] = PEER_GUARD_OVERRIDES

    @property
    def tick_s(self) -> float:
        return self.config.scrape_s

    def initial_state(self) -> WvaState:
        return WvaState()

    def decide(self, signals: Signals, state: WvaState, now_s: float) -> tuple[Decision, WvaState]:
        cfg = self.config
        fleet = signals.fleet
        spec = fleet.spec_replicas
        held = clamp(spec, cfg.min_replicas, cfg.max_replicas)
        missing: list[str] = []
        fresh: list[tuple[float, str, float, float]] = []
        for pod, m in sorted(signals.per_replica.items()):
            kv, waiting = m.get(KV_METRIC), m.get(WAITING_METRIC)
            if kv is None or waiting is None:
                missing.append(pod)
            else:
                fresh.append((now_s, pod, kv, waiting))
        samples = (*(s for s in state.samples if now_s - s[0] < cfg.peak_window_s), *fresh)

        if state.last_analysis_s is not None and now_s - state.last_analysis_s < cfg.interval_s - 1e-6:
            return Decision(held, "between-intervals", {}), WvaState(samples, state.last_analysis_s)
        next_state = WvaState(samples, now_s)
        if fleet.starting > 0:
            note = f"{fleet.starting} replica(s) starting: scaling blocked"
            return Decision(
                held, "model-in-transition", {"starting": float(fleet.starting)}, note
            ), next_state
        if signals.unknown_replicas > 0 or missing:
            note = (
                f"{signals.unknown_replicas} unscraped replica(s); pods without KV/queue metrics: "
                f"{', '.join(missing) or '-'} (WVA would read them as 0)"
            )
            return Decision(
                held, "no-data", {"missing_pods": float(len(missing))}, note, no_data=NoData()
            ), next_state
        pods_now = {p for _, p, _, _ in fresh}
        if len(pods_now) != spec:
            note = f"{len(pods_now)} pods report metrics, {spec} desired: scaling blocked"
            return Decision(
                held, "model-in-transition", {"pods_with_metrics": float(len(pods_now))}, note
            ), next_state

        peaks: dict[str, tuple[float, float]] = {}
        for _, pod, kv, waiting in samples:
            if pod in pods_now:
                old = peaks.get(pod, (kv, waiting))
                peaks[pod] = (max(old[0], kv), max(old[1], waiting))
        a = analyze_saturation(peaks, cfg)
        count = a.replicas
        # the transitions returned above, every pod with metrics is in peaks: count == spec
        desired, rule = saturation_target(a, count)
        inputs: dict[str, float | None] = {
            "replicas_with_metrics": float(count),
            "non_saturated": float(a.non_saturated),
            "avg_spare_kv": a.avg_spare_kv,
            "avg_spare_queue": a.avg_spare_queue,
            "kv_spare_trigger": cfg.kv_spare_trigger,
            "queue_spare_trigger": cfg.queue_spare_trigger,
            "peak_kv_max": max(kv for kv, _ in peaks.values()) if peaks else None,
            "peak_queue_max": max(q for _, q in peaks.values()) if peaks else None,
        }
        return Decision(clamp(desired, cfg.min_replicas, cfg.max_replicas), rule, inputs), next_state


_PARAMS: dict[str, Param] = params_of(WvaConfig)


@register(
    "wva-saturation",
    "llm-d WVA saturation analyzer: KV >= 0.8 or queue >= 5 saturates; +1 on low spare, -1 if N-1 fits",
    _PARAMS,
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> WvaPolicy:
    cfg = config_from(
        WvaConfig,
        params,
        min_replicas=ctx.min_replicas,
        max_replicas=ctx.max_replicas,
    )
    return WvaPolicy(cfg)
