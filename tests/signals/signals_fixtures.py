"""Builders of observations for the signal tests: small hand-made ones and a synthetic fleet.

Imported by plain module name (pytest puts this directory on sys.path).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from itertools import accumulate

from llmscale.metrics.names import DCGM, HISTOGRAM_BOUNDS, SIM, VLLM, VLLM_OLD
from llmscale.types import FleetView, Histogram, Observation, Phase, ReplicaSample

INF = math.inf
BOUNDS = (0.1, 0.5, 1.0, INF)


def hist(cumulative: Sequence[float], bounds: Sequence[float] = BOUNDS) -> Histogram:
    """A histogram from cumulative counts (the last one is the total)."""
    return Histogram(
        bounds=tuple(bounds),
        cumulative=tuple(float(c) for c in cumulative),
        sum=0.0,
        count=float(cumulative[-1]),
    )


def sample(
    name: str,
    values: Mapping[str, float] | None = None,
    histograms: Mapping[str, Histogram] | None = None,
    *,
    phase: Phase = Phase.READY,
    ok: bool = True,
) -> ReplicaSample:
    if not ok:
        return ReplicaSample(name, phase, ok=False)
    return ReplicaSample(name, phase, ok=True, values=dict(values or {}), histograms=dict(histograms or {}))


def obs(time_s: float, *replicas: ReplicaSample, gateway: int | None = None) -> Observation:
    ready = sum(1 for r in replicas if r.phase == Phase.READY)
    view = FleetView(spec_replicas=len(replicas), ready=ready)
    return Observation(time_s=time_s, fleet=view, replicas=tuple(replicas), gateway_queue=gateway)


def vllm_values(
    *,
    running: float = 10.0,
    waiting: float = 0.0,
    kv: float = 0.5,
    preemptions: float = 0.0,
    prompt_tokens: float = 0.0,
    gen_tokens: float = 0.0,
    gpu_util: float = 30.0,
    sm_active: float | None = 0.3,
    mem_copy: float = 40.0,
    fb_used_mib: float = 72_000.0,
    fb_free_mib: float = 8_000.0,
    dram_active: float | None = 0.4,
    l2_miss: float | None = 0.3,
) -> dict[str, float]:
    v = {
        VLLM.running: running,
        VLLM.waiting: waiting,
        VLLM.kv_usage: kv,
        VLLM.preemptions: preemptions,
        VLLM.prompt_tokens: prompt_tokens,
        VLLM.generation_tokens: gen_tokens,
        DCGM.GPU_UTIL: gpu_util,
        DCGM.MEM_COPY_UTIL: mem_copy,
        DCGM.FB_USED: fb_used_mib,
        DCGM.FB_FREE: fb_free_mib,
    }
    if sm_active is not None:
        v[DCGM.SM_ACTIVE] = sm_active
    if dram_active is not None:
        v[DCGM.DRAM_ACTIVE] = dram_active
    if l2_miss is not None:
        v[SIM.L2_MISS] = l2_miss
    return v  # type: ignore[return-value]


def synthetic_fleet(
    replicas: int = 500, observations: int = 20, tick_s: float = 15.0, seed: int = 0
) -> list[Observation]:
    """A busy vLLM fleet with every metric the simulator exports, counters growing tick by tick."""
    rng = random.Random(seed)
    fams = {
        VLLM.ttft: HISTOGRAM_BOUNDS["ttft"],
        VLLM.e2e: HISTOGRAM_BOUNDS["e2e"],
        VLLM.itl: HISTOGRAM_BOUNDS["itl"],
        VLLM.tpot: HISTOGRAM_BOUNDS["itl"],
        VLLM.queue_time: HISTOGRAM_BOUNDS["ttft"],
    }
    state = []
    for _ in range(replicas):
        state.append({f: [0.0] * (len(b) + 1) for f, b in fams.items()} | {"c": [0.0, 0.0, 0.0]})
    out = []
    for k in range(observations):
        samples = []
        for i in range(replicas):
            st = state[i]
            hists = {}
            for f, b in fams.items():
                counts = st[f]
                counts[rng.randrange(len(counts))] += rng.randint(1, 60)
                cum = tuple(accumulate(counts))
                hists[f] = Histogram(bounds=(*b, INF), cumulative=cum, sum=cum[-1] * 0.5, count=cum[-1])
            hists[VLLM_OLD.itl] = hists[VLLM.itl]
            c = st["c"]
            c[0] += rng.randint(10_000, 20_000)
            c[1] += rng.randint(2_000, 4_000)
            c[2] += rng.randint(0, 2)
            values = vllm_values(
                running=float(rng.randint(0, 60)),
                waiting=float(rng.randint(0, 10)),
                kv=rng.random(),
                preemptions=c[2],
                prompt_tokens=c[0],
                gen_tokens=c[1],
                gpu_util=rng.uniform(0, 100),
                sm_active=rng.uniform(0, 1),
                mem_copy=rng.uniform(0, 100),
            )
            values[VLLM_OLD.kv_usage] = values[VLLM.kv_usage]
            values[DCGM.GR_ENGINE_ACTIVE] = 0.9
            values[SIM.KV_BLOCKS] = 28_000.0
            samples.append(ReplicaSample(f"replica-{i}", Phase.READY, True, values, hists))
        out.append(
            Observation(
                time_s=k * tick_s,
                fleet=FleetView(spec_replicas=replicas, ready=replicas),
                replicas=tuple(samples),
                gateway_queue=0,
            )
        )
    return out
