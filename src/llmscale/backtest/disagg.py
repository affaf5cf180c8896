"""Backtest a disaggregated deployment: a prefill pool and a decode pool, each with its controller.

:func:`run_disaggregated` simulates one policy on a :class:`~llmscale.sim.disagg.DisaggFleet`:
each pool has its own controller core (``controller/core.py``, the one the live loop and the
aggregated backtest tick), its own guards and one instance of the policy built for its role,
and reads only its own pool's signals. The policy names:

* ``slo-disagg`` -- llmscale's pool-aware policy (:mod:`llmscale.policies.disagg`);
* ``dynamo-disagg`` -- NVIDIA Dynamo's disaggregated planner (:mod:`llmscale.policies.dynamo.disagg`);
* ``static`` -- both pools held at their initial sizes (``DisaggConfig``);
* any other registered policy -- one instance per pool, each sized on its pool's signals as if
  that pool were the whole fleet ("pool-wise").

Parameters come from ``settings.policy_params[name]``; a ``prefill:`` or ``decode:`` mapping in
them applies to that pool only. The result is one row with the whole path's SLO attainment
(the same test as every backtest, :func:`llmscale.slo.slo_met`) and, per pool, GPU-hours,
replicas and scale events (:data:`DISAGG_KEYS`, ``pools``).

:func:`run_disaggregated_oracle` extends the oracle to two pools: knowing the future, the
cheapest pair of constant pool sizes that meets the target, every candidate judged by a full
simulation (module ``oracle_pairs`` in docs/disaggregation.md).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import IO, Any

import numpy as np

from llmscale.backtest.feasibility import infeasible_mask
from llmscale.backtest.results import OUTCOME_KEYS, outcome_counts
from llmscale.backtest.runner import BacktestSettings
from llmscale.clock import ManualClock
from llmscale.cluster.sim import SimCluster
from llmscale.controller.core import Controller, ControllerState, initial_state, tick
from llmscale.deployment import Deployment, guard_config
from llmscale.errors import ConfigError
from llmscale.perf.interconnect import POOLS
from llmscale.policies.base import Policy, create_policy
from llmscale.policies.static import StaticPolicy
from llmscale.sim.disagg import DisaggConfig, DisaggFleet
from llmscale.sim.exporter import SimMetricSource
from llmscale.slo import slo_met, ttft_target_s
from llmscale.types import Phase
from llmscale.workloads.model import Workload

__all__ = [
    "DISAGG_KEYS",
    "DISAGG_POLICIES",
    "DisaggResult",
    "build_disagg_fleet",
    "initial_pools",
    "judged_attainment",
    "pool_policy",
    "run_disaggregated",
    "run_disaggregated_oracle",
]

#: the policies built for two pools here; any other registered name runs pool-wise
DISAGG_POLICIES = ("slo-disagg", "dynamo-disagg", "static")

#: the keys of one result row, in order (a contract for scripts, as ``results.SUMMARY_KEYS``)
DISAGG_KEYS = (
    "policy",
    "mode",
    "interconnect",
    *OUTCOME_KEYS,
    "infeasible",
    "slo_attainment_feasible",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p99_s",
    "transfer_p50_s",
    "transfer_p99_s",
    "gpu_hours",
    "pools",
    "wall_s",
)


@dataclass
class DisaggResult:
    summary: dict[str, Any]
    #: per pool: t_s, replicas (alive: pending to draining), desired
    series: dict[str, dict[str, list[Any]]] = field(default_factory=dict)

    @property
    def policy(self) -> str:
        return str(self.summary["policy"])

    def as_json(self, *, with_series: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.summary)
        if with_series:
            out["series"] = self.series
        return out


def _config(settings: BacktestSettings) -> DisaggConfig:
    return settings.disaggregated or DisaggConfig()


def _pool_deployment(settings: BacktestSettings, pool: str) -> Deployment:
    cfg = _config(settings)
    top = cfg.prefill_max_replicas if pool == "prefill" else cfg.decode_max_replicas
    initial = cfg.prefill_initial_replicas if pool == "prefill" else cfg.decode_initial_replicas
    top = settings.max_replicas if top is None else top
    lo = max(1, settings.min_replicas)
    if not lo <= initial <= top:
        raise ConfigError(
            f"disaggregated.{pool}_initial_replicas = {initial}, must be within [{lo}, {top}] "
            f"(min_replicas, {pool}_max_replicas)"
        )
    return replace(settings.deployment(), min_replicas=lo, max_replicas=top, initial_replicas=initial)


def _pool_params(params: Mapping[str, Any], pool: str) -> dict[str, Any]:
    own = dict(params)
    mine = own.pop(pool, None) or {}
    for other in POOLS:
        own.pop(other, None)
    own.update(mine)
    return own


def pool_policy(name: str, pool: str, settings: BacktestSettings) -> tuple[Policy[Any], Deployment, Any]:
    """(policy, the pool's deployment, its guard settings) for ``pool`` under policy ``name``."""
    params = _pool_params(settings.policy_params.get(name) or {}, pool)
    guard_params = params.pop("guards", None) or {}
    dep = _pool_deployment(settings, pool)
    policy: Policy[Any]
    if name == "slo-disagg":
        from llmscale.policies.disagg import make_slo_disagg

        policy = make_slo_disagg(pool, dep, params, _config(settings).link)
    elif name == "dynamo-disagg":
        from llmscale.policies.dynamo.disagg import make_dynamo_disagg

        policy = make_dynamo_disagg(pool, dep, params)
    elif name == "static":
        policy = StaticPolicy(replicas=dep.initial_replicas)
    else:
        policy = create_policy(name, dep, params)
    guards = guard_config(dep, policy, guard_params)
    if isinstance(policy, StaticPolicy):
        guards = replace(guards, min_replicas=0, max_replicas=max(policy.replicas, dep.max_replicas))
    return policy, dep, guards


def build_disagg_fleet(
    workload: Workload, settings: BacktestSettings, prefill: int, decode: int
) -> DisaggFleet:
    from llmscale.perf import get_perf_model

    if ":" in settings.gpu:
        raise ConfigError(f"gpu = {settings.gpu!r}: MIG slices are not modelled with disaggregated pools")
    perf = get_perf_model(settings.model, settings.gpu, settings.tp, calibration=settings.calibration)
    return DisaggFleet(
        perf,
        settings.sim,
        workload.arrival_s,
        workload.input_tokens,
        workload.output_tokens,
        prefill_replicas=prefill,
        decode_replicas=decode,
        gpus_per_replica=float(settings.tp),
        link=_config(settings).link,
    )


def _alive(fleet: Any) -> int:
    live = (Phase.NODE_PENDING, Phase.PENDING, Phase.LOADING, Phase.WARMUP, Phase.READY, Phase.DRAINING)
    return sum(1 for r in fleet.replicas if r.phase in live)


def _pct(values: np.ndarray, q: float) -> float | None:
    v = values[~np.isnan(values)]
    return round(float(np.percentile(v, q)), 6) if v.size else None


def _summarize(
    name: str,
    workload: Workload,
    fleet: DisaggFleet,
    settings: BacktestSettings,
    series: dict[str, dict[str, list[Any]]],
    end_s: float,
    wall_s: float,
    mode: str,
) -> DisaggResult:
    out = fleet.outcomes()
    status = out["status"]
    target = ttft_target_s(workload.input_tokens, settings.slo_ttft_s, settings.slo_ttft_per_1k_tokens_s)
    met = slo_met(status, out["ttft_s"], out["tpot_s"], target, settings.slo_tpot_s)
    # Requests no pool size can serve (longer than the context, or a prefill past the TTFT target
    # on an idle replica of the engine both pools run) are counted apart, as on one pool: the
    # two-pool oracle and reference are judged on the others, else a long-context trace leaves no
    # pair that meets the target and the oracle returns the largest.
    infeasible = infeasible_mask(workload, settings)
    feasible_n = int(status.size) - int(infeasible.sum())
    gpu_s = fleet.gpu_seconds(end_s)
    handed = fleet.decode_idx >= 0
    transfer = fleet.transfer_s[handed] if handed.any() else np.array([math.nan])
    pools: dict[str, dict[str, Any]] = {}
    for pool in POOLS:
        sub = fleet.prefill if pool == "prefill" else fleet.decode
        alive = series.get(pool, {}).get("replicas", [])
        pools[pool] = {
            "gpu_hours": round(gpu_s[pool] / 3600.0, 5),
            "replicas_mean": round(sum(alive) / len(alive), 3) if alive else None,
            "replicas_max": max(alive) if alive else None,
            "scale_events": sub.scale_events,
            "requests": sub.num_requests,
        }
    summary: dict[str, Any] = {
        "policy": name,
        "mode": mode,
        "interconnect": fleet.link.name,
        **outcome_counts(status, met),
        "infeasible": int(status.size) - feasible_n,
        "slo_attainment_feasible": (
            round(float(met[~infeasible].sum()) / feasible_n, 6) if feasible_n else None
        ),
        "ttft_p50_s": _pct(out["ttft_s"], 50),
        "ttft_p99_s": _pct(out["ttft_s"], 99),
        "tpot_p50_s": _pct(out["tpot_s"], 50),
        "tpot_p99_s": _pct(out["tpot_s"], 99),
        "e2e_p99_s": _pct(out["e2e_s"], 99),
        "transfer_p50_s": _pct(np.asarray(transfer, dtype=np.float64), 50),
        "transfer_p99_s": _pct(np.asarray(transfer, dtype=np.float64), 99),
        "gpu_hours": round((gpu_s["prefill"] + gpu_s["decode"]) / 3600.0, 5),
        "pools": pools,
        "wall_s": round(wall_s, 3),
    }
    return DisaggResult(summary=summary, series=series)


def run_disaggregated(
    workload: Workload,
    policy_name: str,
    settings: BacktestSettings,
    *,
    decisions_out: IO[str] | None = None,
    progress: Callable[[float], None] | None = None,
) -> DisaggResult:
    """Simulate ``policy_name`` sizing both pools of a disaggregated fleet on ``workload``.

    Each pool's controller ticks at its policy's cadence; the decision log (when asked) has
    one JSON line per pool and tick, the aggregated log's line plus ``"pool"``.
    """
    wall0 = time.perf_counter()
    built = {pool: pool_policy(policy_name, pool, settings) for pool in POOLS}
    initial = {
        pool: (p.replicas if isinstance(p, StaticPolicy) else dep.initial_replicas)
        for pool, (p, dep, _) in built.items()
    }
    fleet = build_disagg_fleet(workload, settings, initial["prefill"], initial["decode"])
    pools = {"prefill": fleet.prefill, "decode": fleet.decode}
    sources = {pool: SimMetricSource(f) for pool, f in pools.items()}
    clusters = {pool: SimCluster(f) for pool, f in pools.items()}
    controllers = {
        pool: Controller(p, g, dep, assess=decisions_out is not None, clock_epoch_s=settings.start_unix_s)
        for pool, (p, dep, g) in built.items()
    }
    states: dict[str, ControllerState] = {
        pool: initial_state(c, first_tick_s=c.cadence_s) for pool, c in controllers.items()
    }
    step_s = max(10.0, math.ceil(workload.duration_s / 1500.0 / 10.0) * 10.0)
    series: dict[str, dict[str, list[Any]]] = {p: {"t_s": [], "replicas": [], "desired": []} for p in POOLS}
    clock = ManualClock()
    next_sample = step_s
    last_arrival = float(workload.arrival_s[-1]) if workload.num_requests else 0.0
    horizon = last_arrival + settings.drain_horizon_s
    while True:
        t = min(next_sample, *(s.next_tick_s for s in states.values()))
        fleet.run_until(t)
        clock.advance_to(t)
        if t >= next_sample:
            for pool, f in pools.items():
                f.sync_all(t)
                series[pool]["t_s"].append(round(t, 3))
                series[pool]["replicas"].append(_alive(f))
                series[pool]["desired"].append(f.spec_replicas)
            next_sample += step_s
        for pool in POOLS:
            state = states[pool]
            if t < state.next_tick_s:
                continue
            now_s = clock.now_s()
            controller = controllers[pool]
            record, state, _ = tick(controller, state, sources[pool].observe(now_s))
            states[pool] = state
            cluster = clusters[pool]
            if record.final != cluster.spec_replicas:
                cluster.scale_to(record.final, now_s, drain_until_idle=controller.guards.drain_aware)
                record = replace(record, applied=True)
            if decisions_out is not None:
                line = record.as_json()
                line["pool"] = pool
                decisions_out.write(json.dumps(line) + "\n")
        if progress is not None:
            progress(t)
        if (fleet.arrivals_done and fleet.unresolved == 0) or t > horizon:
            break
    fleet.finish(clock.now_s())
    end_s = max(fleet.last_resolved_s, last_arrival)
    return _summarize(
        policy_name, workload, fleet, settings, series, end_s, time.perf_counter() - wall0, "disaggregated"
    )


# ------------------------------------------------------------------ the oracle, two pools


def _static_run(workload: Workload, settings: BacktestSettings, p: int, d: int) -> DisaggResult:
    cfg = replace(_config(settings), prefill_initial_replicas=p, decode_initial_replicas=d)
    wide = replace(settings, disaggregated=cfg, max_replicas=max(settings.max_replicas, p, d))
    return run_disaggregated(workload, "static", wide)


def judged_attainment(summary: Mapping[str, Any]) -> float | None:
    """The attainment a two-pool oracle or reference is held to: over the feasible requests."""
    att = summary.get("slo_attainment_feasible")
    return None if att is None else float(att)


def run_disaggregated_oracle(
    workload: Workload,
    settings: BacktestSettings,
    *,
    target: float = 0.99,
    max_per_pool: int | None = None,
    runs: dict[tuple[int, int], DisaggResult] | None = None,
) -> DisaggResult:
    """The cheapest pair of constant pool sizes that meets ``target`` attainment, knowing the future.

    Each pool is warm from the start (no cold start is ever paid), so the pair's cost is
    ``(p + d) x TP x duration``. The search: with the decode pool ample, the fewest
    prefill replicas that meet the target (a bisection, each candidate a full run); then, with
    that prefill pool, the fewest decode replicas; then the prefill count again under that
    decode pool (a smaller decode pool can only slow hand-offs, never speed prefill, so it
    only moves up). When no pair up to ``max_per_pool`` meets the target, the target is what
    the largest pair reaches, and the search finds the fewest pair reaching that
    (``oracle_pair.target`` says which). Every reported pair ran in
    full: attainment and GPU-hours are the simulator's. It searches constant fleets only, so
    a policy that follows a load that varies a lot can spend less; on steady load it is
    a lower bound (tests/backtest/test_disagg_backtest.py). ``runs`` keeps the full runs by
    pair across calls (the oracle at several targets on one workload and settings).
    """
    wall0 = time.perf_counter()
    top = max_per_pool or settings.max_replicas
    memo: dict[tuple[int, int], DisaggResult] = {} if runs is None else runs

    def run(p: int, d: int) -> DisaggResult:
        if (p, d) not in memo:
            memo[(p, d)] = _static_run(workload, settings, p, d)
        return memo[(p, d)]

    def meets(p: int, d: int) -> bool:
        att = judged_attainment(run(p, d).summary)
        return att is not None and att >= target

    def fewest(meets_at: Callable[[int], bool]) -> int:
        if not meets_at(top):
            return top
        lo, hi = 1, top
        while lo < hi:
            mid = (lo + hi) // 2
            if meets_at(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    if not meets(top, top):
        # No pair meets the target (requests that miss however large the pools: a long prompt's
        # decode steps past the TPOT target, say): hold the search to what the largest pair
        # reaches instead, as the one-pool oracle holds its descent to the fewest misses found,
        # so that it trades no attainment for GPU-hours. Returning the largest pair itself made
        # a "lower bound" no policy could fail to undercut.
        reached = judged_attainment(run(top, top).summary)
        target = 0.0 if reached is None else reached
    p = fewest(lambda k: meets(k, top))
    d = fewest(lambda k: meets(p, k))
    p = fewest(lambda k: k >= p and meets(k, d)) if not meets(p, d) else p
    best = run(p, d)
    summary = dict(best.summary)
    summary["policy"] = "oracle"
    summary["mode"] = "disaggregated"
    summary["oracle_pair"] = {"prefill": p, "decode": d, "target": target}
    summary["wall_s"] = round(time.perf_counter() - wall0, 3)
    return DisaggResult(summary=summary, series=best.series)


#: the stretch of the workload :func:`initial_pools` sizes the pools for: the one-pool backtest's
#: initial fleet is sized for the same first five minutes (``backtest/setup.py``)
FIRST_WINDOW_S = 300.0


def initial_pools(workload: Workload, settings: BacktestSettings, *, target: float = 0.99) -> tuple[int, int]:
    """(prefill, decode): each pool's first size when the user sets none.

    The cheapest constant pair, both pools warm, that meets ``target`` on the workload's first
    five minutes (:func:`run_disaggregated_oracle` on that window), within each pool's bounds.
    Where no pair up to ``max_replicas`` meets it (requests that miss however large the pools),
    the fewest pair reaching what the largest reaches.

    A fixed pair would start a policy short on a workload whose first minutes need more (a
    decode pool of 2 under load for 3 held a 5-minute window at 59% while its third replica
    loaded), where the oracle and the causal reference start warm at their own first counts:
    that gap would be the start's, not the policy's. The one-pool backtest sizes its initial
    fleet for the same window, from one replica's measured capacity.
    """
    from llmscale.workloads.transform import window

    cfg = _config(settings)
    first = window(workload, 0.0, min(FIRST_WINDOW_S, workload.duration_s + 1.0))
    pair = run_disaggregated_oracle(first, settings, target=target).summary["oracle_pair"]
    lo = max(1, settings.min_replicas)

    def bounded(n: int, top: int | None) -> int:
        return max(lo, min(int(n), settings.max_replicas if top is None else top))

    return bounded(pair["prefill"], cfg.prefill_max_replicas), bounded(
        pair["decode"], cfg.decode_max_replicas
    )
