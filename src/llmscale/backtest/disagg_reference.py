"""Schedules for two pools: the two-pool oracle shaped to the load, and its causal reference.

:func:`~llmscale.backtest.disagg.run_disaggregated_oracle` finds the cheapest pair of *constant*
pool sizes meeting the target. On a load that varies, a schedule that follows it can cost less,
and a policy that follows it would then beat the oracle: the oracle would not be a lower bound.
So the two-pool oracle here goes on from that pair, knowing the future:

1. **Shaped.** Each pool's count per interval (60 s) follows its own load: the prefill pool the
   prompt tokens arriving, the decode pool the output tokens arriving, each the largest of the
   interval and its two neighbours (a backlog builds before and drains after), as a share ``r``
   of the peak interval's. The pool's count is ``ceil(C x r x (1 + h))`` clipped to ``[1, C]``
   (``C``: the pair's count), one ``h`` for both pools, bisected between -1 (one replica each)
   and the ``h`` at which the shape is the constant pair, from 0 (:func:`shaped_pair_schedules`;
   six runs at most). Each candidate is a full run (:class:`PairRun`, the oracle's
   accounting: a started replica serves at its interval's start and is charged a cold start,
   a removed one drains until idle).
2. The oracle is the cheapest run, the constant pair's included, that meets the target.

The causal reference has the one-pool reference's definition
(:mod:`~llmscale.backtest.causal_reference`, steps 1, 3 and 4), per pool:

1. **Delay.** Each pool's oracle count is learnt ``detection_s`` late and a rise serves one cold
   start after it is learnt (:func:`~llmscale.backtest.causal_reference.delayed_schedule`, on the
   reference's 6 s grid).
2. **Uniform headroom** when that misses: ``ceil(n x (1 + h))`` in both pools, ``h`` doubling from
   1/8 up to ``max_headroom`` until a run meets the target, then bisected.
3. **The constant pair** (holding it needs no foresight of *when*).

The answer is the cheapest run that met the target (the oracle's target, or what the largest
headroom reached). The targeted per-minute headroom of the one-pool reference (its step 2) is
not searched here: it is a refinement with hindsight, and leaving it out can only make this
reference dearer, never cheaper than what a causal controller could do.

Attainment is over every request, as every two-pool row (``backtest/disagg.py``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from llmscale.backtest.causal_reference import REFERENCE, ReferenceSettings, delayed_schedule
from llmscale.backtest.disagg import DisaggResult, _alive, _summarize, build_disagg_fleet
from llmscale.backtest.oracle_schedule import Grid, scale
from llmscale.backtest.runner import BacktestSettings
from llmscale.errors import ConfigError
from llmscale.perf.interconnect import POOLS
from llmscale.workloads.model import Workload

__all__ = [
    "PairRun",
    "PairSchedule",
    "run_disaggregated_reference",
    "run_pair_schedule",
    "run_shaped_oracle",
    "shaped_pair_schedules",
]

#: the shaped oracle's control interval (s), as the one-pool oracle's
ORACLE_INTERVAL_S = 60.0
#: bisection runs of the shaped oracle's headroom
SHAPED_BISECT_STEPS = 6


@dataclass(frozen=True)
class PairSchedule:
    """One count per grid step (and one after the last) for each pool."""

    prefill: tuple[int, ...]
    decode: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.prefill) != len(self.decode) or not self.prefill:
            raise ConfigError(
                f"PairSchedule: prefill has {len(self.prefill)} entries, decode {len(self.decode)}; "
                "need the same number, at least one"
            )
        if min(self.prefill) < 1 or min(self.decode) < 1:
            raise ConfigError("PairSchedule: a pool of 0 replicas serves nothing; counts must be >= 1")

    @classmethod
    def constant(cls, prefill: int, decode: int, steps: int) -> PairSchedule:
        return cls((prefill,) * steps, (decode,) * steps)


def _settings(settings: BacktestSettings) -> BacktestSettings:
    # The oracle's: a removed replica drains until idle, it never kills a generation.
    return replace(settings, sim=replace(settings.sim, grace_s=math.inf))


def _cold_start_s(settings: BacktestSettings) -> float:
    return settings.sim.pending_s + settings.sim.loading_s + settings.sim.warmup_s


class PairRun:
    """A run of a :class:`PairSchedule` on the two-pool fleet, with the oracle's accounting."""

    def __init__(self, workload: Workload, settings: BacktestSettings, grid: Grid) -> None:
        self.workload, self.grid = workload, grid
        self.settings = _settings(settings)
        self.cold_start_s = _cold_start_s(settings)
        self.wall0 = time.perf_counter()

    def run(self, schedule: PairSchedule, name: str) -> DisaggResult:
        w, grid, settings = self.workload, self.grid, self.settings
        if len(schedule.prefill) != grid.num_intervals + 1:
            raise ConfigError(
                f"PairRun: the schedule has {len(schedule.prefill)} entries, the grid needs "
                f"{grid.num_intervals + 1}"
            )
        fleet = build_disagg_fleet(w, settings, schedule.prefill[0], schedule.decode[0])
        pools = {"prefill": fleet.prefill, "decode": fleet.decode}
        series: dict[str, dict[str, list[Any]]] = {
            p: {"t_s": [], "replicas": [], "desired": []} for p in POOLS
        }
        step_s = max(10.0, math.ceil(w.duration_s / 1500.0 / 10.0) * 10.0)
        next_sample = step_s
        last_arrival = float(w.arrival_s[-1]) if w.num_requests else 0.0
        horizon = last_arrival + settings.drain_horizon_s

        def sample_until(t_end: float) -> None:
            nonlocal next_sample
            while next_sample <= t_end:
                fleet.run_until(next_sample)
                for pool, f in pools.items():
                    f.sync_all(next_sample)
                    series[pool]["t_s"].append(round(next_sample, 3))
                    series[pool]["replicas"].append(_alive(f))
                    series[pool]["desired"].append(f.spec_replicas)
                next_sample += step_s

        for k in range(grid.num_intervals + 1):
            t0 = grid.start_s(k)
            scale(fleet.prefill, schedule.prefill[k], t0, self.cold_start_s)
            scale(fleet.decode, schedule.decode[k], t0, self.cold_start_s)
            if k < grid.num_intervals:
                sample_until(grid.start_s(k + 1))
                fleet.run_until(grid.start_s(k + 1))
        while not (fleet.arrivals_done and fleet.unresolved == 0) and next_sample <= horizon:
            sample_until(next_sample)
        fleet.finish(fleet.now)
        end_s = max(fleet.last_resolved_s, last_arrival)
        wall_s = time.perf_counter() - self.wall0
        return _summarize(name, w, fleet, settings, series, end_s, wall_s, "disaggregated")


def run_pair_schedule(
    workload: Workload, settings: BacktestSettings, grid: Grid, schedule: PairSchedule, name: str
) -> DisaggResult:
    """The full run of ``schedule`` on ``grid`` (:class:`PairRun`)."""
    return PairRun(workload, settings, grid).run(schedule, name)


def _load_shares(workload: Workload, grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """Each pool's load per interval as a share of its peak interval's (module docstring, step 1)."""
    k = np.minimum((workload.arrival_s // grid.interval_s).astype(np.int64), grid.num_intervals - 1)
    out = []
    for tokens in (workload.input_tokens, workload.output_tokens):
        load = np.bincount(k, weights=tokens.astype(np.float64), minlength=grid.num_intervals)
        padded = np.concatenate([[0.0], load, [0.0]])
        wide = np.maximum(np.maximum(padded[:-2], padded[1:-1]), padded[2:])
        peak = float(wide.max()) if wide.size else 0.0
        out.append(wide / peak if peak > 0.0 else np.ones_like(wide))
    return out[0], out[1]


def shaped_pair_schedules(
    workload: Workload, grid: Grid, prefill: int, decode: int, headroom: float
) -> PairSchedule:
    """Each pool's count shaped to its load (module docstring, step 1) at ``headroom``.

    E.g. a pool of 6 at the peak, an interval at 40% of it, headroom 0.25: ceil(6 x 0.4 x 1.25) = 3.
    The entry after the last interval keeps the last interval's count.
    """
    shares = _load_shares(workload, grid)
    pools = []
    for top, share in zip((prefill, decode), shares, strict=True):
        counts = [min(top, max(1, math.ceil(top * float(r) * (1.0 + headroom) - 1e-9))) for r in share]
        counts.append(counts[-1])
        pools.append(tuple(counts))
    return PairSchedule(pools[0], pools[1])


def _meets(r: DisaggResult, target: float) -> bool:
    att = r.summary["slo_attainment"]
    return att is not None and float(att) >= target


def run_shaped_oracle(
    workload: Workload, settings: BacktestSettings, pair_oracle: DisaggResult
) -> DisaggResult:
    """The two-pool oracle (module docstring): the cheapest of ``pair_oracle`` (the constant pair
    of :func:`~llmscale.backtest.disagg.run_disaggregated_oracle`) and the shaped schedules that
    meet its target. The row carries both pools' schedules (``oracle_schedule``)."""
    wall0 = time.perf_counter()
    pair = pair_oracle.summary.get("oracle_pair")
    if not isinstance(pair, dict):
        raise ConfigError("run_shaped_oracle: the pair oracle's row carries no oracle_pair")
    p, d, target = int(pair["prefill"]), int(pair["decode"]), float(pair["target"])
    grid = Grid.of(workload, ORACLE_INTERVAL_S)
    steps = grid.num_intervals + 1
    best, best_schedule = pair_oracle, PairSchedule.constant(p, d, steps)
    tried: list[list[Any]] = [["constant", round(float(pair_oracle.summary["gpu_hours"]), 5), True]]
    if _meets(pair_oracle, target):
        run = PairRun(workload, settings, grid)
        # The headroom at which the shaped schedule is the constant pair (no need to run beyond
        # it), and -1, where every count is 1 (taken to miss, not run): the bisection's ends.
        shares = _load_shares(workload, grid)
        low = min(float(s.min()) for s in shares)
        hi_h = (1.0 / low - 1.0) if low > 0.0 else 0.0
        lo_h = -1.0
        h = 0.0
        for _ in range(SHAPED_BISECT_STEPS):
            schedule = shaped_pair_schedules(workload, grid, p, d, h)
            if schedule == best_schedule:
                ok = True
            else:
                result = run.run(schedule, "oracle")
                ok = _meets(result, target)
                tried.append([f"h={h:.4g}", round(float(result.summary["gpu_hours"]), 5), ok])
                if ok and float(result.summary["gpu_hours"]) < float(best.summary["gpu_hours"]):
                    best, best_schedule = result, schedule
            if ok:
                hi_h = h
            else:
                lo_h = h
            h = (lo_h + hi_h) / 2.0
    summary = dict(best.summary)
    summary["policy"] = "oracle"
    summary["oracle_pair"] = dict(pair)
    summary["oracle_target"] = target
    summary["oracle_interval_s"] = grid.interval_s
    summary["oracle_schedule"] = {
        "interval_s": grid.interval_s,
        "prefill": list(best_schedule.prefill),
        "decode": list(best_schedule.decode),
        # (what was run, GPU-hours, met the target) of each candidate, in order
        "tried": tried,
    }
    summary["wall_s"] = round(float(pair_oracle.summary["wall_s"]) + time.perf_counter() - wall0, 3)
    return DisaggResult(summary=summary, series=best.series)


def run_disaggregated_reference(
    workload: Workload,
    settings: BacktestSettings,
    oracle: DisaggResult,
    reference: ReferenceSettings | None = None,
) -> DisaggResult:
    """The two-pool causal reference (module docstring) derived from ``oracle`` (a result of
    :func:`run_shaped_oracle`). Its row has the two-pool row's fields plus ``reference_*`` as the
    one-pool reference's, and ``price_of_foresight`` (its GPU-hours / the oracle's)."""
    reference = reference or ReferenceSettings()
    wall0 = time.perf_counter()
    plan = oracle.summary.get("oracle_schedule")
    pair = oracle.summary.get("oracle_pair")
    if not isinstance(plan, dict) or not isinstance(pair, dict):
        raise ConfigError("run_disaggregated_reference: the oracle's row carries no oracle_schedule")
    target = float(oracle.summary["oracle_target"])
    interval_s = float(plan["interval_s"])
    cold_start_s = _cold_start_s(settings)
    grid = Grid.of(workload, reference.step_s)
    lo = max(1, settings.min_replicas)
    hi = max(lo, settings.max_replicas, int(pair["prefill"]), int(pair["decode"]))
    run = PairRun(workload, settings, grid)
    runs: dict[PairSchedule, DisaggResult] = {}
    tried: list[list[Any]] = []

    def delayed(h: float) -> PairSchedule:
        return PairSchedule(
            *(
                delayed_schedule(
                    [int(n) for n in plan[pool]],
                    interval_s,
                    reference.detection_s,
                    cold_start_s,
                    grid,
                    h,
                    lo,
                    hi,
                )
                for pool in POOLS
            )
        )

    def attempt(label: str, schedule: PairSchedule) -> DisaggResult:
        if schedule not in runs:
            runs[schedule] = run.run(schedule, REFERENCE)
        r = runs[schedule]
        tried.append([label, r.summary["slo_attainment"], round(float(r.summary["gpu_hours"]), 5)])
        return r

    # 1. The oracle's schedule learnt late; 2. uniform headroom doubling from 1/8, then bisected.
    headroom: dict[PairSchedule, float] = {}
    first = delayed(0.0)
    headroom[first] = 0.0
    if not _meets(attempt("h=0", first), target):
        miss_h, hit_h, h = 0.0, None, 0.125
        while True:
            h = min(h, reference.max_headroom)
            s = delayed(h)
            headroom.setdefault(s, h)
            if _meets(attempt(f"h={h:g}", s), target):
                hit_h = h
                break
            miss_h = h
            if h >= reference.max_headroom:
                break
            h *= 2.0
        if hit_h is None:
            # Not even the largest headroom meets the target: the reachable attainment is.
            target = max(float(r.summary["slo_attainment"] or 0.0) for r in runs.values())
        else:
            for _ in range(reference.bisect_steps):
                mid = (miss_h + hit_h) / 2.0
                s = delayed(mid)
                headroom.setdefault(s, mid)
                if _meets(attempt(f"h={mid:g}", s), target):
                    hit_h = mid
                else:
                    miss_h = mid
    # 3. The constant pair: holding it needs no foresight of when.
    constant = PairSchedule.constant(int(pair["prefill"]), int(pair["decode"]), grid.num_intervals + 1)
    attempt("constant", constant)
    meeting = {s: r for s, r in runs.items() if _meets(r, target)}
    pick = min(meeting, key=lambda s: float(meeting[s].summary["gpu_hours"]))
    best = meeting[pick]
    summary = dict(best.summary)
    summary["policy"] = REFERENCE
    summary["wall_s"] = round(time.perf_counter() - wall0, 3)
    summary["reference_detection_s"] = reference.detection_s
    summary["reference_delay_s"] = round(reference.detection_s + cold_start_s, 3)
    summary["reference_target"] = target
    summary["reference_search"] = {
        "runs": len(runs),
        # (what was run, attainment, GPU-hours) of each attempt, in order
        "tried": tried,
        "step_s": reference.step_s,
        "headroom": headroom.get(pick),
        "prefill": list(pick.prefill),
        "decode": list(pick.decode),
    }
    o_gpu = float(oracle.summary["gpu_hours"])
    if o_gpu > 0.0:
        summary["price_of_foresight"] = round(float(summary["gpu_hours"]) / o_gpu, 4)
    return DisaggResult(summary=summary, series=best.series)
