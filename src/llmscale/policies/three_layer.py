"""``three-layer``: seed 003 3.1's request / instance / resource layers, each with its own role.

Seed 003, section 3.1 "a layered scaling framework: request, instance and
resource layers in concert". The layers observe at different grains
(request < 1 s: QPS, error rate, latency distribution; instance 1-5 s:
instance count, readiness; resource 5-30 s: memory pressure, CPU
throttling), and the flow is: (1) the request layer raises a scale-out
signal and asks the instance layer to pre-warm instances; (2) the instance
layer checks that new instances are ready and reports their cold start;
(3) the resource layer keeps checking the node's margins and *blocks*
scaling that would exceed them (``canScaleUp``: free memory > 2 GB, CPU
throttling < 10 %, disk IO < 70 %).

In llmscale's terms:

* **Request layer** (the trigger). Up when TTFT P95 > the TTFT SLO
  (``ctx.slo_ttft_s``) or the waiting queue per serving replica > 5 (seed
  003 chapter 1's HPA target, ``queue_length`` averageValue 5); the size is
  HPA's on that queue, ``max(current + 1, ceil(current x queue / 5))``. Down
  (-1) when TTFT P95 < half the SLO and less than one request waits per
  serving replica (``queue_per_replica_down``): on a large fleet the queue
  flickers between 0 and a few requests that are scheduled within an engine
  step, and "exactly 0" would break the run of scale-in proposals that the
  drain guard needs to see for its eviction window. QPS and the latency
  distribution go into the decision's inputs; there is no error-rate signal
  (a vLLM fleet queues rather than fails), so errors are not used. With no
  request in the window and nothing running or waiting the latency reads 0.
  With no replica at all, any waiting request asks for one (``scale-from-zero``).
* **Instance layer** (readiness). While replicas are starting, a scale-out
  asks only for what they do not already cover (``instances-warming``; the
  guard's pending-aware check does the same, here it is explained); no
  scale-in while any replica is starting or draining, or a serving replica
  is unscraped (the fleet is in transition: its signals describe a fleet
  that is about to change).
* **Resource layer** (admission). Scale-out: the GPU budget
  (the ``gpu_budget`` parameter, GPUs for the
  whole target, ``ctx.tp`` per replica) caps the replicas (``resource-gpu-budget``);
  the budget is also handed to the guard (``guard_overrides``). Scale-in:
  the survivors' KV headroom, KV usage x N / (N - 1) < 0.8 (seed 002 5.4's
  margin, ``kv_headroom_max``; memory pressure) and no preemptions in the
  window (``preemptions_per_s`` == 0: work being evicted and recomputed is
  the serving analogue of CPU throttling).

The tick is 5 s (``tick_s``), the instance layer's upper grain; the
request layer's "< 1 s" is finer than any scrape.

``canScaleUp``'s node checks read the node, not the fleet's signals, so they are
not this policy's: they run as the admission of a scale-up on a shared pool
(:mod:`llmscale.tenancy.node_checks`, ``llmscale tenants``), whatever the policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.errors import ConfigError
from llmscale.policies.base import register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    COUNT_MAX,
    NONNEG_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    Param,
    PolicyParamError,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = ["ThreeLayerConfig", "ThreeLayerPolicy"]


@dataclass(frozen=True)
class ThreeLayerConfig:
    ttft_slo_s: float = DEFAULT_DEPLOYMENT.slo_ttft_s
    queue_per_replica_up: float = param(5.0, AMOUNT_RANGE)
    queue_per_replica_down: float = param(1.0, NONNEG_RANGE)
    down_latency_fraction: float = param(0.5, "(0, 1)")
    kv_headroom_max: float = param(0.8, "(0, 1]")
    gpu_budget: int | None = None
    gpus_per_replica: int = 1
    tick_s: float = param(5.0, TICK_RANGE, unit="s")

    @classmethod
    def check_params(cls, p: Mapping[str, Any]) -> None:
        """The rule across the parameters (registered, run before the policy is built): the
        queue that lets the fleet shrink is at most the one that grows it (down 6 over up 5: a
        queue of 5.5 per replica would ask for both)."""
        down, up = p["queue_per_replica_down"], p["queue_per_replica_up"]
        if not down <= up:
            raise PolicyParamError(
                f"three-layer.queue_per_replica_down = {down}: must be in [0, queue_per_replica_up ({up})]",
                "queue_per_replica_down",
            )


@dataclass(frozen=True)
class ThreeLayerPolicy:
    config: ThreeLayerConfig
    name: str = "three-layer"

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    @property
    def guard_overrides(self) -> Mapping[str, Any]:
        if self.config.gpu_budget is None:
            return {}
        return {"gpu_budget": self.config.gpu_budget, "gpus_per_replica": self.config.gpus_per_replica}

    def initial_state(self) -> None:
        return None

    def decide(self, signals: Signals, state: None, now_s: float) -> tuple[Decision, None]:
        cfg = self.config
        fleet = signals.fleet
        current = fleet.spec_replicas
        ttft = signals.get("ttft_p95_s")
        qpr = signals.get("queue_per_replica")
        queue = signals.get("queue_waiting")
        running = signals.get("running")
        idle = queue == 0.0 and running == 0.0
        if ttft is None and idle:
            ttft = 0.0
        if qpr is None and queue is not None:
            # No serving replica: the gateway queue shared by the replicas on the way (scale from zero).
            qpr = queue / max(1, fleet.active)
        inputs: dict[str, float | None] = {
            "ttft_p95_s": ttft,
            "ttft_slo_s": cfg.ttft_slo_s,
            "queue_per_replica": qpr,
            "queue_waiting": queue,
            "qps": signals.get("request_rate_rps"),
            "ttft_p99_s": signals.get("ttft_p99_s"),
            "starting": float(fleet.starting),
        }
        if queue is None or qpr is None:
            return Decision(
                current, "no-data", inputs, "request layer: no queue or latency signal", no_data=NoData()
            ), None

        # 1. Request layer: the trigger.
        if fleet.active == 0 and queue > 0.0:
            return Decision(1, "scale-from-zero", inputs, f"{queue:.0f} waiting, no replica"), None
        lat_high = ttft is not None and ttft > cfg.ttft_slo_s
        queue_high = qpr is not None and qpr > cfg.queue_per_replica_up
        if lat_high or queue_high:
            want = current + 1
            if queue_high and qpr is not None:
                want = max(want, math.ceil(current * qpr / cfg.queue_per_replica_up))
            why = (
                f"TTFT P95 {ttft:.2f}s > SLO {cfg.ttft_slo_s:g}s"
                if lat_high and ttft is not None
                else f"queue {qpr:.1f}/replica > {cfg.queue_per_replica_up:g}"
            )
            inputs["request_layer_replicas"] = float(want)
            # 2. Instance layer: replicas on the way cover part of it.
            if fleet.starting > 0:
                covered = current + fleet.starting
                if want <= covered:
                    note = f"{why}; {fleet.starting} instance(s) warming cover it"
                    return Decision(current, "instances-warming", inputs, note), None
            # 3. Resource layer: the GPU budget admits the scale-out.
            if cfg.gpu_budget is not None:
                fits = cfg.gpu_budget // max(1, cfg.gpus_per_replica)
                inputs["gpu_budget"] = float(cfg.gpu_budget)
                if want > fits:
                    note = f"{why}; GPU budget {cfg.gpu_budget} fits {fits} replica(s)"
                    return Decision(max(current, fits), "resource-gpu-budget", inputs, note), None
            return Decision(want, "request-layer-up", inputs, why, relative=True), None

        lat_low = ttft is not None and ttft < cfg.down_latency_fraction * cfg.ttft_slo_s
        if not (lat_low and qpr < cfg.queue_per_replica_down and current > 0):
            return Decision(current, "hold", inputs), None
        # 2. Instance layer: no scale-in while the fleet is changing.
        if fleet.starting > 0 or fleet.draining > 0 or signals.unknown_replicas > 0:
            note = (
                f"{fleet.starting} starting, {fleet.draining} draining, "
                f"{signals.unknown_replicas} unscraped: fleet in transition"
            )
            return Decision(current, "instance-layer-hold", inputs, note), None
        # 3. Resource layer: the survivors' KV headroom and no eviction of work.
        kv = signals.get("kv_usage_mean")
        preempt = signals.get("preemptions_per_s")
        inputs.update({"kv_usage_mean": kv, "preemptions_per_s": preempt})
        serving = fleet.ready
        if kv is not None and serving > 1:
            after = kv * serving / (serving - 1)
            inputs["kv_after_scale_in"] = after
            if after >= cfg.kv_headroom_max:
                note = f"KV {kv:.2f} x {serving}/{serving - 1} = {after:.2f} >= {cfg.kv_headroom_max:g}"
                return Decision(current, "resource-kv-headroom", inputs, note), None
        if preempt is not None and preempt > 0.0:
            note = f"{preempt:.3f} preemptions/s: memory is already short"
            return Decision(current, "resource-preempting", inputs, note), None
        note = (
            f"TTFT P95 {ttft:.2f}s < {cfg.down_latency_fraction:g} x SLO, "
            f"queue {qpr:.2f}/replica < {cfg.queue_per_replica_down:g}"
        )
        return Decision(current - 1, "request-layer-down", inputs, note), None


_PARAMS: dict[str, Param] = {
    **params_of(ThreeLayerConfig),
    "ttft_slo_s": Param(None, WINDOW_RANGE, kind=float, unit="s", help="default: the TTFT SLO"),
    "gpu_budget": Param(None, f"[1, {COUNT_MAX}]", kind=int, help="GPUs (default: no budget)"),
}


@register(
    "three-layer",
    "three layers: the request layer (TTFT SLO, queue 5/replica) triggers, instance layer checks readiness, "
    "resource layer admits (GPU budget, KV headroom)",
    _PARAMS,
    check=ThreeLayerConfig.check_params,
    reads=(
        "queue_waiting",
        "queue_per_replica",
        "running",
        "ttft_p95_s",
        "ttft_p99_s",
        "kv_usage_mean",
        "preemptions_per_s",
        "request_rate_rps",
    ),
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> ThreeLayerPolicy:
    budget = params["gpu_budget"]
    slo = params["ttft_slo_s"]
    cfg = config_from(
        ThreeLayerConfig,
        params,
        ttft_slo_s=ctx.slo_ttft_s if slo is None else float(slo),
        gpu_budget=None if budget is None else int(budget),
        gpus_per_replica=max(1, ctx.tp),
    )
    if not cfg.ttft_slo_s > 0:  # from the deployment when not given
        raise ConfigError(f"three-layer ttft_slo_s = {cfg.ttft_slo_s}, must be > 0")
    if cfg.gpu_budget is not None and cfg.gpu_budget < 0:
        raise ConfigError(f"three-layer gpu_budget = {cfg.gpu_budget}, must be >= 0")
    return ThreeLayerPolicy(cfg)
