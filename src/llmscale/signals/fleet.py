"""Fleet-level signals from the latest observation: queue, running, KV, GPU utilisation.

Pure functions. Replicas whose scrape failed are counted as *unknown*, never
as zero load; a signal with no replica to average over is invalid (None).
"""

from __future__ import annotations

from collections.abc import Sequence

from llmscale.metrics.names import DCGM, VLLM
from llmscale.types import Observation, Phase, ReplicaSample, Signals, SignalValue

__all__ = ["compute_signals", "mean_of"]

#: per-replica series policies may read per pod (HPA-style)
PER_POD_METRICS = (
    DCGM.GPU_UTIL,
    DCGM.MEM_COPY_UTIL,
    DCGM.GR_ENGINE_ACTIVE,
    DCGM.DRAM_ACTIVE,
    VLLM.waiting,
    VLLM.running,
    VLLM.kv_usage,
)


def mean_of(samples: Sequence[ReplicaSample], name: str) -> SignalValue:
    vals = [s.values[name] for s in samples if s.ok and name in s.values]
    if not vals:
        return SignalValue(None, f"no replica reports {name}")
    return SignalValue(sum(vals) / len(vals))


def sum_of(samples: Sequence[ReplicaSample], name: str) -> SignalValue:
    vals = [s.values[name] for s in samples if s.ok and name in s.values]
    if not vals:
        return SignalValue(None, f"no replica reports {name}")
    return SignalValue(sum(vals))


def compute_signals(window: Sequence[Observation]) -> Signals:
    """Signals at the newest observation of ``window`` (oldest first). Pre: window non-empty."""
    obs = window[-1]
    serving = [s for s in obs.replicas if s.phase == Phase.READY]
    unknown = sum(1 for s in serving if not s.ok)
    waiting = sum_of(serving, VLLM.waiting)
    if waiting.value is not None and obs.gateway_queue is not None:
        waiting = SignalValue(waiting.value + obs.gateway_queue)
    values = {
        "queue_waiting": waiting,
        "running": sum_of(serving, VLLM.running),
        "kv_usage_mean": mean_of(serving, VLLM.kv_usage),
        "gpu_util_mean": mean_of(serving, DCGM.GPU_UTIL),
        "mem_copy_util_mean": mean_of(serving, DCGM.MEM_COPY_UTIL),
        "gateway_queue": SignalValue(None if obs.gateway_queue is None else float(obs.gateway_queue)),
    }
    # Per pod, as HPA sees pods: Pending pods are ignored, terminating pods skipped;
    # a running pod without a sample is present with no values (HPA's "missing").
    per_replica: dict[str, dict[str, float]] = {}
    for s in obs.replicas:
        if s.phase in (Phase.PENDING, Phase.DRAINING, Phase.GONE):
            continue
        per_replica[s.replica] = (
            {k: s.values[k] for k in PER_POD_METRICS if k in s.values} if s.ok else {}
        )
    return Signals(
        time_s=obs.time_s,
        fleet=obs.fleet,
        values=values,
        per_replica=per_replica,
        unknown_replicas=unknown,
    )
