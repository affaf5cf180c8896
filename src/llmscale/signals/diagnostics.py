"""Diagnostics: ghost replicas (seed 000 chapter 1) and tenant drift (seed 000 2.5).

**Ghost replicas.** Seed 000's incident: processes with VRAM resident but
idle ("14820 MiB / 24576 MiB; Gpu-Util 4 % -> high residency, low compute")
kept an HPA scaling 3 -> 47. A serving replica is a ghost when, in every
sample of the last ``min_serving_s`` (60 s), it was READY with a successful
scrape and

* framebuffer used >= 50 % of total (resident: the seed's 14820/24576 = 60 %),
* DCGM_FI_DEV_GPU_UTIL < 2 % (no kernel ran: NVML's "percent of time ... one
  or more kernels was executing", which reads near 0 only on a GPU that ran
  nothing -- the seed's nvidia-smi "Gpu-Util: 4 %"),
* no running and no waiting request;

and it has been READY for at least ``min_serving_s`` (its oldest READY sample
is that old; a replica that just became ready is idle for a good reason). In
vLLM the KV pool is preallocated, so every idle replica is resident: in a
fleet with no traffic every replica counts. The signal counts GPUs held for
nothing, whatever the cause (a router that skips a replica, or surplus).

**Tenant drift.** Seed 000 2.5 reproduces metrics drifting apart between
tenants sharing GPUs under contention (P99 42 -> 187 ms, throughput 210 -> 68
req/s) without a formula. Replicas behind one router share the load, so
their utilisation *per unit of load* should agree; the drift is the
coefficient of variation (population std / mean) over serving replicas of
``composite util % / running requests``, the composite of seed 000 chapter 1
(:func:`llmscale.signals.gpu.seed_composite_util`: SM activity or memory
traffic, whichever is higher). Not GPU_UTIL: it reads 100 % on every replica
with a request in flight, so per request it would only compare batch sizes. Worked: utils (40, 40, 80) % with
(10, 10, 10) running -> per request (4, 4, 8): mean 5.33, std 1.886, drift
0.354; the same fleet with the third replica at 20 running -> (4, 4, 4): 0.
Replicas with no running request are left out (no load share to compare).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from llmscale.metrics.names import DCGM
from llmscale.signals.gpu import fb_used_ratio, seed_composite_util
from llmscale.signals.window import RUNNING, WAITING, FleetWindow, first_value
from llmscale.types import Phase, SignalValue

__all__ = [
    "GHOST_FB_USED_MIN",
    "GHOST_GPU_UTIL_MAX_PCT",
    "GHOST_MIN_SERVING_S",
    "coefficient_of_variation",
    "diagnostic_signals",
    "ghost_replicas",
    "is_ghost_sample",
    "tenant_drift",
]

GHOST_MIN_SERVING_S = 60.0
GHOST_GPU_UTIL_MAX_PCT = 2.0
GHOST_FB_USED_MIN = 0.5


def is_ghost_sample(values: Mapping[str, float]) -> bool | None:
    """Resident, computing nothing, no request. None when a needed metric is missing."""
    util = values.get(DCGM.GPU_UTIL)
    fb = fb_used_ratio(values)
    running = first_value(values, RUNNING)
    waiting = first_value(values, WAITING)
    if util is None or fb is None or running is None or waiting is None:
        return None
    return fb >= GHOST_FB_USED_MIN and util < GHOST_GPU_UTIL_MAX_PCT and running == 0 and waiting == 0


def ghost_replicas(fw: FleetWindow, min_serving_s: float = GHOST_MIN_SERVING_S) -> SignalValue:
    """Serving replicas that were ghosts in every sample of the last ``min_serving_s``."""
    if not fw.serving:
        return SignalValue(0.0, "no serving replica")
    now = fw.now_s
    times = fw.observations
    ready = Phase.READY
    ghosts = judged = 0
    for s_now in fw.known:
        verdict = is_ghost_sample(s_now.values)
        if verdict is None:
            continue
        judged += 1
        if not verdict:
            continue
        ser = fw.series[s_now.replica]
        base = fw.base
        oldest_ready = now
        ghost = True
        for q, s in zip(reversed(ser.seqs), reversed(ser.samples), strict=True):
            t = times[q - base].time_s
            if s.phase != ready:
                break
            oldest_ready = t
            if now - t <= min_serving_s + 1e-6 and not is_ghost_sample(s.values):
                ghost = False
                break
        if ghost and now - oldest_ready >= min_serving_s - 1e-6:
            ghosts += 1
    if judged == 0:
        return SignalValue(None, "no serving replica reports GPU util, framebuffer and requests")
    return SignalValue(float(ghosts), f"{judged} replica(s) judged over {min_serving_s:.0f} s")


def coefficient_of_variation(xs: Sequence[float]) -> float | None:
    """Population std / mean; None for fewer than 2 values or a zero mean."""
    n = len(xs)
    if n < 2:
        return None
    mean = sum(xs) / n
    if mean <= 0.0:
        return None
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / n) / mean


def tenant_drift(fw: FleetWindow) -> SignalValue:
    """CV over serving replicas of composite utilisation per running request (module docstring)."""
    per_load: list[float] = []
    for s in fw.known:
        vals = s.values
        running = first_value(vals, RUNNING)
        util = seed_composite_util(vals)
        if running is None or util is None or running <= 0.0:
            continue
        per_load.append(util / running)
    cv = coefficient_of_variation(per_load)
    if cv is None:
        return SignalValue(None, f"needs 2 loaded replicas with utilisation, has {len(per_load)}")
    return SignalValue(cv, f"CV over {len(per_load)} replica(s)")


def diagnostic_signals(fw: FleetWindow) -> dict[str, SignalValue]:
    return {"ghost_replicas": ghost_replicas(fw), "tenant_drift": tenant_drift(fw)}
