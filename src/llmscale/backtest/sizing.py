"""How many requests/s one replica sustains within the SLO, measured with the simulator itself.

Used for sensible defaults (the warm starting fleet, a static fleet sized for
the peak) and by capacity-planning policies. The probe replays a steady
Poisson stream with the workload's own request lengths (bootstrapped) against
one replica and bisects on the rate until 99% of requests meet the SLO.

Feed it feasible requests only (:func:`llmscale.backtest.feasibility.infeasible_mask`): a
request whose prefill alone on an idle replica exceeds its TTFT target misses at any rate, and
if more than 1% of them were infeasible the bisection would find no rate at all and size the
fleet from them (``tests/backtest/test_feasibility.py``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from llmscale.backtest.feasibility import ttft_target_s
from llmscale.backtest.results import slo_met
from llmscale.sim.fleet import Fleet, SimConfig
from llmscale.sim.request import Status

__all__ = ["replica_capacity_rps", "replicas_for_rate"]

_PROBE_S = 240.0
_WARM_S = 30.0


def _attainment(
    perf: Any,
    sim: SimConfig,
    rate: float,
    inp: np.ndarray,
    out: np.ndarray,
    slo: tuple[float, float, float],
    seed: int,
) -> float:
    rng = np.random.default_rng(seed)
    n = max(50, int(rate * _PROBE_S))
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    pick = rng.integers(0, inp.size, n)
    fleet = Fleet(perf, sim, arrivals, inp[pick], out[pick], initial_replicas=1, gpus_per_replica=1)
    fleet.run_until(float(arrivals[-1]) + 120.0)
    fleet.finish(fleet.now)
    status = np.frombuffer(bytes(fleet.status), dtype=np.uint8)
    target = ttft_target_s(inp[pick], slo[0], slo[2])
    met = slo_met(status, np.asarray(fleet.ttft_s), np.asarray(fleet.tpot_s), target, slo[1])
    # Judge the steady state, not the empty start, and only requests the replica admitted: one
    # rejected on arrival (longer than the context: HTTP 400) says nothing about its capacity, and
    # counted as a miss it would cap attainment below the target at any rate (the Mooncake
    # trace on Llama-3-8B, 53% too long, measured ~0 req/s).
    admitted = status != Status.REJECTED
    keep = (arrivals >= _WARM_S) & admitted
    if not keep.any():
        keep = admitted
    # Every request rejected: nothing reached the replica, so no rate is too much for it.
    return float(met[keep].mean()) if keep.any() else 1.0


def replica_capacity_rps(
    perf: Any,
    sim: SimConfig,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    slo_ttft_s: float,
    slo_tpot_s: float,
    *,
    target: float = 0.99,
    seed: int = 0,
    slo_ttft_per_1k_tokens_s: float = 0.0,
) -> float:
    """Highest Poisson rate (req/s) at which one replica keeps ``target`` of requests within the SLO.

    ``slo_ttft_per_1k_tokens_s``: the length-aware part of the TTFT target (module
    :mod:`llmscale.backtest.feasibility`).
    """
    sim = replace(sim, step_noise=0.0, max_queue=None)
    inp = np.asarray(input_tokens, dtype=np.int64)
    out = np.asarray(output_tokens, dtype=np.int64)
    slo = (slo_ttft_s, slo_tpot_s, slo_ttft_per_1k_tokens_s)
    lo, hi = 0.0, 1.0
    while _attainment(perf, sim, hi, inp, out, slo, seed) >= target:
        lo, hi = hi, hi * 2.0
        if hi > 1e4:
            return hi
    for _ in range(7):
        mid = 0.5 * (lo + hi)
        if _attainment(perf, sim, mid, inp, out, slo, seed) >= target:
            lo = mid
        else:
            hi = mid
    return max(lo, 1e-3)


def replicas_for_rate(rate_rps: float, capacity_rps: float) -> int:
    """Replicas to carry ``rate_rps`` at ``capacity_rps`` each (at least one)."""
    return max(1, math.ceil(rate_rps / capacity_rps))
