"""A standby pool of sleeping replicas for flash crowds, sized from observed burstiness.

A flash crowd that rises faster than a cold start cannot be met by scaling up:
the default preset's x3 for two minutes is over before a 108 s start ends. A
replica kept in vLLM's level-1 sleep (weights in host memory, GPU held) serves
after a wake-up of ~1.6 s instead (:func:`llmscale.perf.start_tiers`), but it is
charged GPU-hours while it sleeps. Seeds 000 4.1 (a warm-up buffer scheduled
for cold starts) and 004 4.2 (stand-by replicas started during a 90 s pre-warm
period before traffic moves to them) keep such a buffer beside the serving
fleet, and seed 002 5.2 prices
what it saves: a model load of 30-60 s from local NVMe, minutes from network
storage, plus a CUDA warm-up.

Sizing (``standby_replicas: null``): the pool covers the largest burst seen,
``ceil(peak_excess_rps / (capacity x target_utilization))`` replicas, where the
excess is the raw arrival rate above the smoothed level (as it stood before
the tick: a step is not half hidden in the level it is measured against), and the peak decays
with ``exp(-age / memory_s)``: seed 004 4.2's exponentially weighted window
(weight x0.8 a sample there), stretched from minutes to the hour a flash crowd
recurs over. A tick whose excess exceeds ``BURST_SHARE`` of the level opens a
burst, unless the last burst opened within two cold starts: the arrival rate is
read as served requests plus the change of the queue, so clients timing out of
a crowd's queue make it dip and rise again (on the on-off preset a 5-minute
crowd read as two bursts 180 s apart). Bursts are counted over ``memory_s``.

Worth (kept only when the misses it prevents pay for its GPU-hours): a burst of
``E`` req/s above capacity sends about ``E x (cold_start_s - wake_s)`` requests
beyond what the fleet can serve before a reactive start lands; summed over the
bursts of the last hour (each with its own ``E``: a ripple on a ramp counts for
little) that is the misses the pool prevents an hour, against the
``k x gpus x 3600`` GPU-seconds it costs. It is kept when the misses, each worth
``gpu_s_per_miss`` GPU-seconds, are worth at least that. Worked example (a
crowd of E = 120 req/s over the level, cold start 108 s, wake 1.6 s, one burst
an hour, 7.5 req/s a replica planned at 0.95): ceil(120 / 7.125) = 17 replicas
cost 61,200 GPU-s an hour against 120 x 106.4 = 12,768 misses: kept from
``gpu_s_per_miss`` 4.8 up (``tests/policies/test_standby.py`` pins it).
``standby_replicas: k`` keeps a fixed pool of k whatever the bursts (a flash
crowd that has not happened yet cannot be observed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmscale.deployment import DEFAULT_DEPLOYMENT
from llmscale.policies.params import COUNT_MAX, NONNEG_RANGE, WINDOW_RANGE, param

__all__ = ["BURST_SHARE", "StandbyConfig", "StandbyState", "standby_pool"]

#: A tick's arrivals this far above the smoothed level open a burst. Poisson noise at the
#: default preset's 40 req/s over a 15 s tick is ~4% of the level (1/sqrt(600)): 25% is a
#: crowd, not noise.
BURST_SHARE = 0.25


@dataclass(frozen=True)
class StandbyConfig:
    #: a fixed pool; None sizes it from observed bursts (and keeps it only when worth it). The
    #: default is no pool: on the Azure conversation trace x20 the sizing kept 7 sleeping replicas
    #: for +2.39 GPU-hours (11.34 -> 13.72, +21%) and 54 fewer misses (99.889% -> 99.903%), its
    #: estimate of the misses prevented ~100x too high there (it counts a burst's excess over the
    #: smoothed rate, not over the fleet's headroom). Opt in with ``standby_replicas: null``.
    replicas: int | None = param(
        0,
        f"[0, {COUNT_MAX}]",
        kind=int,
        help="sleeping replicas kept for flash crowds (null: sized from observed bursts when worth it)",
    )
    memory_s: float = param(3600.0, WINDOW_RANGE, unit="s", help="how long an observed burst counts")
    #: what one prevented SLO miss is worth, GPU-seconds: 1.0 is ~9x the 0.114 GPU-s slo spends
    #: per request on the default hour (7.39 GPU-h for 232,624 requests), a miss valued at about
    #: ten requests' serving cost
    gpu_s_per_miss: float = param(
        1.0, NONNEG_RANGE, unit="GPU-s", help="what one prevented SLO miss is worth (standby: null)"
    )
    cold_start_s: float = DEFAULT_DEPLOYMENT.cold_start_s
    wake_s: float = DEFAULT_DEPLOYMENT.wake_s
    gpus_per_replica: int = 1
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas

    @property
    def enabled(self) -> bool:
        return self.replicas is None or self.replicas > 0


@dataclass(frozen=True)
class StandbyState:
    #: the decayed peak of arrivals above the level, req/s
    peak_excess_rps: float = 0.0
    #: (start time s, largest excess over the level req/s) of each burst within memory_s
    bursts: tuple[tuple[float, float], ...] = ()
    in_burst: bool = False
    last_t: float | None = None


def standby_pool(
    config: StandbyConfig,
    state: StandbyState,
    now_s: float,
    arrivals_rps: float,
    level_rps: float,
    planned_rps_per_replica: float,
) -> tuple[int, StandbyState, dict[str, float | None]]:
    """(sleeping replicas to keep, next state, the numbers behind it) at ``now_s``.

    ``planned_rps_per_replica`` is what the policy plans one replica to carry (capacity x
    target utilisation), > 0.
    """
    excess = max(0.0, arrivals_rps - level_rps)
    decay = 1.0 if state.last_t is None else math.exp(-max(0.0, now_s - state.last_t) / config.memory_s)
    peak = max(excess, state.peak_excess_rps * decay)
    bursting = excess > BURST_SHARE * level_rps and excess > 0.0
    bursts = tuple(b for b in state.bursts if now_s - b[0] < config.memory_s)
    if bursting:
        if bursts and (state.in_burst or now_s - bursts[-1][0] <= 2.0 * config.cold_start_s):
            start, top = bursts[-1]
            bursts = (*bursts[:-1], (start, max(top, excess)))
        else:
            bursts = (*bursts, (now_s, excess))
    new_state = StandbyState(peak_excess_rps=peak, bursts=bursts, in_burst=bursting, last_t=now_s)

    sized = min(config.max_replicas, math.ceil(peak / planned_rps_per_replica - 1e-9)) if bursts else 0
    # Each burst sends its own excess past the fleet for a cold start less a wake-up: a crowd of
    # 150 req/s counts 150 x 106.4 s, a ripple of 10 req/s on a ramp only 10 x 106.4 s.
    excess_per_hour = sum(top for _, top in bursts) * 3600.0 / config.memory_s
    prevented = excess_per_hour * max(0.0, config.cold_start_s - config.wake_s)
    cost_gpu_s = sized * config.gpus_per_replica * 3600.0
    worth = sized > 0 and prevented * config.gpu_s_per_miss >= cost_gpu_s
    # A fixed pool is kept whatever was observed; a sized one only while it is worth it.
    auto = sized if worth else 0
    pool = config.replicas if config.replicas is not None else auto
    inputs: dict[str, float | None] = {
        "standby_replicas": float(pool),
        "standby_sized": float(sized),
        "burst_peak_excess_rps": round(peak, 4),
        "bursts_in_memory": float(len(bursts)),
        "standby_prevented_misses_per_h": round(prevented, 1),
        "standby_cost_gpu_s_per_h": cost_gpu_s,
    }
    return pool, new_state, inputs
