"""``gpu-mem-copy`` and ``effective-vram``: seed 000's fixed HPA metrics, as HPA target tracking.

Both are metrics the seed puts *into an HPA* in place of plain GPU
utilisation, so both reuse HPA's replica calculation
(:func:`llmscale.policies.hpa.hpa_replicas_for_metric`: tolerance 0.1,
desired = ceil(ratio x pods), pods without a sample counted at the target on
a scale-down and at 0 on a scale-up) and HPA's default 300 s scale-down
stabilisation, expressed as ``guard_overrides`` (``stabilization_down_s``).
HPA's scale-up rate policy ("4 pods or 100 % per 15 s, whichever is more")
has no exact guard equivalent (the guard's caps take the lesser) and is left
off. HPA's own count keeps a burst from being counted twice: starting pods are
missing, at 0 on a scale-up, so the proposal is an absolute total, which the
guard's pending-aware check compares with the spec as it is.

``gpu-mem-copy`` — seed 000 chapter 1, "the fixed scaling configuration":
stop scaling on ``nvidia.com/gpu`` requests; collect DCGM's
``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_MEM_COPY_UTIL``; "in the HPA define
the composite ``max(gpu_util, mem_copy_util) > 35%`` as the scale-out
threshold". A threshold in an HPA is a target: 35 % (``target_pct``) per pod.

Which counters: the compute term is ``DCGM_FI_PROF_SM_ACTIVE`` x 100, not the
``DCGM_FI_DEV_GPU_UTIL`` the seed names. The seed describes its utilisation as
"the share of active cycles of the SM compute units in the driver's sampling
window" and reads it at 9 % on a decode-bound fleet with memory bandwidth at
92 %: that is SM activity (the ratio of cycles an SM holds a warp), while
GPU_UTIL (the time a kernel was executing) reads ~100 % on any replica with a
request in flight. On GPU_UTIL the rule would say "scale out whenever a pod
serves anything" and drive every loaded fleet to its maximum; on SM activity
and memory traffic it says what the seed means, "compute or bandwidth past
35 %". Even so it does not measure load on a decode-bound replica: the SMs
hold warps while each step streams the weights, 64 % of a batch-1 step in
the simulator (Llama-3-8B, H100), so a replica serving a single request is
already past 35 % (on the ``bandwidth-bound`` preset at 1 request/s, which
one replica serves within the SLO, ``gpu-mem-copy`` climbs to
max_replicas, 12). The seed's threshold is kept. The memory term is
``DCGM_FI_DEV_MEM_COPY_UTIL`` as the seed says (the memory interface's busy
time). Per pod the composite is the larger of the two (either alone when a
pod reports only one: without DCGM's profiling fields, which dcgm-exporter's
default counters leave out, memory alone), as
:func:`llmscale.signals.gpu.seed_composite_util` and ``gpu_composite_util``;
pods come from ``Signals.per_replica`` (Pending and Draining pods are not
there; a running pod without a scrape is "missing"). Without per-pod values
the fleet mean ``gpu_composite_util`` stands for every ready replica and
starting replicas are missing. Worked (``test_seed_gpu_threshold.py``): 4
pods at composite 92 % (SM active 0.09, copy 92 %) -> ratio 2.63 ->
ceil(2.63 x 4) = 11 replicas.

``effective-vram`` — seed 000 3.3, "Effective VRAM Utilization instead of raw
GPU utilisation": ``0.4 used/total + 0.3 bw/bw_max + 0.3 l2_miss/0.8`` (signal
``effective_vram``, a 0..1 ratio). Section 3.3 gives no threshold of its own;
its measurements put a 38-41 % throughput loss at 89 % and 94 %, and section
4.3's table scales out "above 85 % of GPU memory": the target is 0.85
(``target``). The fleet mean stands for every ready replica; starting
replicas are missing (counted at the target on the way down, so a fleet
that is still loading cannot be shrunk by them). Note vLLM preallocates its
KV pool, so ``used/total`` reads ~0.9 at any load and contributes a constant
0.36: at idle the ratio is ~0.42 / 0.85 and the fleet shrinks by about half
each stabilised step, as HPA does with any metric that has a floor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from llmscale.deployment import Deployment
from llmscale.policies.base import register
from llmscale.policies.hpa import hpa_replicas_for_metric
from llmscale.policies.params import (
    AMOUNT_RANGE,
    DURATION_RANGE,
    TICK_RANGE,
    Param,
    config_from,
    param,
    params_of,
)
from llmscale.signals.gpu import seed_composite_util
from llmscale.types import Decision, NoData, Signals

__all__ = [
    "EffectiveVramPolicy",
    "GpuMemCopyPolicy",
    "HpaTarget",
    "HpaTargetPolicy",
    "hpa_decision",
    "pod_values",
]


@dataclass(frozen=True)
class HpaTarget:
    target: float
    tolerance: float = param(0.1, "[0, 1)")
    tick_s: float = param(15.0, TICK_RANGE, unit="s")
    down_stabilization_s: float = param(300.0, DURATION_RANGE, unit="s")


def pod_values(signals: Signals, fleet_value: float | None) -> dict[str, float | None]:
    """HPA's pods for a fleet-mean metric: every ready replica at the mean, starting ones missing."""
    fleet = signals.fleet
    values: dict[str, float | None] = {f"ready-{i}": fleet_value for i in range(fleet.ready)}
    values.update({f"starting-{i}": None for i in range(fleet.loading + fleet.warmup)})
    return values


def hpa_decision(signals: Signals, values: Mapping[str, float | None], t: HpaTarget, metric: str) -> Decision:
    """HPA's replica calculation on ``values`` as a Decision (``no-data`` when no pod has a sample)."""
    current = signals.fleet.spec_replicas
    present = [v for v in values.values() if v is not None]
    mean = sum(present) / len(present) if present else None
    inputs: dict[str, float | None] = {
        "metric_mean": mean,
        "target": t.target,
        "pods_counted": float(len(values)),
        "pods_with_sample": float(len(present)),
    }
    if not present:
        return Decision(current, "no-data", inputs, f"no pod reports {metric}", no_data=NoData())
    desired, ratio, rule = hpa_replicas_for_metric(values, t.target, t.tolerance, current)
    desired = max(0, desired)  # a negative sample (a broken exporter) must not propose negative replicas
    inputs["usage_ratio"] = ratio
    if rule == "scale":
        rule = "scale-up" if desired > current else ("scale-down" if desired < current else "hold")
    note = f"{metric} mean {mean:.3g} / target {t.target:g}"
    return Decision(desired, rule, inputs, note)


@dataclass(frozen=True)
class HpaTargetPolicy:
    """HPA target tracking on one per-pod value (a subclass says which): HPA's tick, its
    scale-down stabilisation as a guard override, and :func:`hpa_decision` on the values."""

    config: HpaTarget
    #: the metric as the decision's note names it
    metric: ClassVar[str]

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    @property
    def guard_overrides(self) -> Mapping[str, Any]:
        return {"stabilization_down_s": self.config.down_stabilization_s}

    def initial_state(self) -> None:
        return None

    def values(self, signals: Signals) -> dict[str, float | None]:
        """Pod -> the metric's value (None: the pod has no sample)."""
        raise NotImplementedError

    def decide(self, signals: Signals, state: None, now_s: float) -> tuple[Decision, None]:
        return hpa_decision(signals, self.values(signals), self.config, self.metric), None


@dataclass(frozen=True)
class GpuMemCopyPolicy(HpaTargetPolicy):
    """Seed 000 chapter 1: HPA on ``max(SM_ACTIVE x 100, MEM_COPY_UTIL)`` per pod, 35 % target."""

    name: str = "gpu-mem-copy"
    metric: ClassVar[str] = "max(sm_active, mem_copy_util) %"

    def values(self, signals: Signals) -> dict[str, float | None]:
        values: dict[str, float | None] = {
            pod: seed_composite_util(m) for pod, m in signals.per_replica.items()
        }
        if not any(v is not None for v in values.values()):
            values = pod_values(signals, signals.get("gpu_composite_util"))
        return values


@dataclass(frozen=True)
class EffectiveVramPolicy(HpaTargetPolicy):
    """Seed 000 3.3: HPA on Effective VRAM Utilization with a 0.85 target."""

    name: str = "effective-vram"
    metric: ClassVar[str] = "effective_vram"

    def values(self, signals: Signals) -> dict[str, float | None]:
        return pod_values(signals, signals.get("effective_vram"))


def _target(name: str, params: Mapping[str, Any], key: str) -> HpaTarget:
    t = config_from(
        HpaTarget,
        params,
        target=float(params[key]),
    )
    return t


_HPA_COMMON: dict[str, Param] = params_of(HpaTarget)


@register(
    "gpu-mem-copy",
    "HPA on GPU compute or copy activity: max(SM_ACTIVE %, MEM_COPY_UTIL) per pod, target 35%",
    # Under 1% the usage ratio (mean / target) of a busy pod overflows for denormal targets.
    {"target_pct": Param(35.0, "[1, 100]", unit="%"), **_HPA_COMMON},
    reads=("gpu_composite_util",),
)
def _make_mem_copy(ctx: Deployment, params: Mapping[str, Any]) -> GpuMemCopyPolicy:
    return GpuMemCopyPolicy(_target("gpu-mem-copy", params, "target_pct"))


@register(
    "effective-vram",
    "HPA on effective VRAM: 0.4 used/total + 0.3 bw/bw_max + 0.3 l2_miss/0.8, target 0.85",
    {"target": Param(0.85, AMOUNT_RANGE), **_HPA_COMMON},
    reads=("effective_vram",),
)
def _make_effective_vram(ctx: Deployment, params: Mapping[str, Any]) -> EffectiveVramPolicy:
    return EffectiveVramPolicy(_target("effective-vram", params, "target"))
