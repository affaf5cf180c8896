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
2. **Trimmed.** The 60 s grid and the neighbours' share round a step early: each rise of a pool
   is tried an interval later and each fall an interval earlier, one at a time, kept when the
   run still meets the target for less, until none is kept (at most 24 runs). On a step of load
   a policy that added its second prefill replica 30 s after the step beat the untrimmed shape,
   which added it a minute before (``tests/backtest/test_pool_references.py``).
3. The oracle is the cheapest run, the constant pair's included, that meets the target; with its
   reference (:func:`run_two_pool_yardsticks`), the reference's answer too when that is cheaper
   (its 6 s grid can place a rise between the oracle's minutes).

The causal reference has the one-pool reference's definition
(:mod:`~llmscale.backtest.causal_reference`), per pool:

1. **Delay.** Each pool's oracle count is learnt ``detection_s`` late and a rise serves one cold
   start after it is learnt (:func:`~llmscale.backtest.causal_reference.delayed_schedule`, on the
   reference's 6 s grid).
2. **Headroom where it misses**, per pool: while the late schedule misses the target, the minutes
   holding the most missed requests (and the minute before each) get a headroom level of
   max(1, 10%) replicas, then doubled, in the prefill pool for requests that reached the decode
   pool too late for their TTFT (or never) and in the decode pool for the others; the last doubling
   is bisected back, and then each raised minute alone is halved where the target still holds
   (one run each: with one-replica pools a level is a whole replica, and a minute raised only as
   "the one before" often needs none).
3. **Uniform headroom** when that does not meet the target: ``ceil(n x (1 + h))`` in both pools,
   ``h`` doubling from 1/8 up to ``max_headroom`` until a run meets it, then bisected.
4. **The constant pair** (holding it needs no foresight of *when*).

The answer is the cheapest run that met the target (the oracle's target, or what the largest
headroom reached). As the one-pool reference's, the minutes its headroom lands on are chosen
with hindsight (step 2): a yardstick, not a policy.

Attainment is over every request, as every two-pool row (``backtest/disagg.py``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from llmscale.backtest.causal_reference import (
    REFERENCE,
    ReferenceSettings,
    _middle,
    _raise_levels,
    delayed_schedule,
    uniform_headroom,
    with_levels,
)
from llmscale.backtest.disagg import DisaggResult, _alive, _summarize, build_disagg_fleet, judged_attainment
from llmscale.backtest.feasibility import infeasible_mask
from llmscale.backtest.oracle_schedule import Grid, scale
from llmscale.backtest.runner import BacktestSettings
from llmscale.errors import ConfigError
from llmscale.perf.interconnect import POOLS
from llmscale.slo import slo_met, ttft_target_s, ttft_within
from llmscale.workloads.model import Workload

__all__ = [
    "PairRun",
    "PairSchedule",
    "run_disaggregated_reference",
    "run_pair_schedule",
    "run_shaped_oracle",
    "run_two_pool_yardsticks",
    "shaped_pair_schedules",
]

#: the shaped oracle's control interval (s), as the one-pool oracle's
ORACLE_INTERVAL_S = 60.0
#: bisection runs of the shaped oracle's headroom
SHAPED_BISECT_STEPS = 6
#: most full runs of the shaped oracle's trim (step 3)
SHAPED_TRIM_RUNS = 24


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
        #: per request of the last run: met the SLO; reached the decode pool within its TTFT target
        self.met = np.zeros(0, dtype=bool)
        self.ttft_ok = np.zeros(0, dtype=bool)

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
        result = _summarize(name, w, fleet, settings, series, end_s, wall_s, "disaggregated")
        out = fleet.outcomes()
        target_s = ttft_target_s(w.input_tokens, settings.slo_ttft_s, settings.slo_ttft_per_1k_tokens_s)
        self.met = slo_met(out["status"], out["ttft_s"], out["tpot_s"], target_s, settings.slo_tpot_s)
        # A request reached the decode pool in time when its prefill queue, prefill and transfer
        # fit its TTFT target: a miss among those is the decode pool's (its queue, its first
        # step or its tokens), any other the prefill pool's (it never reached the decode pool,
        # or reached it late). Reading the TTFT alone blamed the prefill pool for a decode queue.
        self.ttft_ok = ttft_within(fleet.handoff_s - w.arrival_s, target_s)
        return result


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
    att = judged_attainment(r.summary)
    return att is not None and att >= target


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
        # 3. Trimmed: each step of a pool moved one interval later (a rise) or earlier (a fall)
        #    while the run still meets the target and costs less.
        budget = SHAPED_TRIM_RUNS
        seen: set[PairSchedule] = set()
        changed = True
        while changed and budget > 0:
            changed = False
            for pool in POOLS:
                for k in range(1, steps):
                    counts = list(getattr(best_schedule, pool))
                    if counts[k] == counts[k - 1] or budget <= 0:
                        continue
                    if counts[k] > counts[k - 1]:
                        counts[k] = counts[k - 1]  # the rise an interval later
                    else:
                        counts[k - 1] = counts[k]  # the fall an interval earlier
                    schedule = replace(best_schedule, **{pool: tuple(counts)})
                    if schedule in seen:
                        continue
                    seen.add(schedule)
                    result = run.run(schedule, "oracle")
                    budget -= 1
                    ok = _meets(result, target)
                    tried.append([f"{pool}@{k}", round(float(result.summary["gpu_hours"]), 5), ok])
                    if ok and float(result.summary["gpu_hours"]) < float(best.summary["gpu_hours"]):
                        best, best_schedule, changed = result, schedule, True
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

    verdicts: dict[PairSchedule, tuple[np.ndarray, np.ndarray]] = {}

    def attempt(label: str, schedule: PairSchedule) -> DisaggResult:
        if schedule not in runs:
            runs[schedule] = run.run(schedule, REFERENCE)
            verdicts[schedule] = (run.met, run.ttft_ok)
        r = runs[schedule]
        tried.append([label, r.summary["slo_attainment"], round(float(r.summary["gpu_hours"]), 5)])
        return r

    # The miss budget is over the feasible requests, as the rows' judged attainment is: an
    # infeasible request misses whatever the schedule, and no headroom is raised for it.
    feasible = ~infeasible_mask(workload, run.settings)
    n = int(feasible.sum())
    allowed = n - math.ceil(target * n - 1e-9)
    segment_steps = max(1, round(reference.segment_s / reference.step_s))
    base = delayed(0.0)
    #: the uniform headroom, or the per-segment levels, each run schedule was made with
    headroom: dict[PairSchedule, float] = {base: 0.0}
    level_of: dict[PairSchedule, dict[str, list[int]]] = {}

    def leveled(levels: dict[str, list[int]]) -> PairSchedule:
        return PairSchedule(
            *(with_levels(getattr(base, pool), levels[pool], segment_steps, lo, hi) for pool in POOLS)
        )

    # 1. The oracle's schedule learnt late, run in full; 2. headroom where it misses, per pool:
    #    the segments holding the most misses (and the one before each) a level up, the prefill
    #    pool's for requests whose first token was late, the decode pool's for the others
    #    (their tokens came too slowly), up to ``rounds`` runs, the last doubling trimmed.
    levels = {pool: [0] * (len(base.prefill) // segment_steps + 1) for pool in POOLS}
    previous = {pool: list(v) for pool, v in levels.items()}
    found = False
    for r_round in range(reference.rounds + 1):
        schedule = leveled(levels)
        level_of.setdefault(schedule, {pool: list(v) for pool, v in levels.items()})
        attempt(f"levels#{r_round}", schedule)
        met, ttft_ok = verdicts[schedule]
        met = met | ~feasible
        misses = int(np.count_nonzero(~met))
        if misses <= allowed:
            found = True
            break
        previous = {pool: list(v) for pool, v in levels.items()}
        raised = False
        for pool, late in (("prefill", ~met & ~ttft_ok), ("decode", ~met & ttft_ok)):
            if late.any():
                raised |= _raise_levels(
                    levels[pool],
                    workload.arrival_s[late],
                    misses - allowed,
                    reference.segment_s,
                    reference.max_level,
                )
        if not raised:
            break
    if found and levels != previous:
        for _ in range(2):
            middle = {pool: _middle(previous[pool], levels[pool]) for pool in POOLS}
            if middle in (levels, previous):
                break
            schedule = leveled(middle)
            level_of.setdefault(schedule, middle)
            if _meets(attempt("levels-trim", schedule), target):
                levels = middle
            else:
                previous = middle
    if found:
        # Pruned: each raised segment alone halved (a segment raised only as "the one before" a
        # missing minute often needs nothing once its neighbour holds), kept when the run still
        # meets the target. At most one run per raised segment.
        for pool in POOLS:
            for j in range(len(levels[pool])):
                if levels[pool][j] == 0:
                    continue
                fewer = {p: list(v) for p, v in levels.items()}
                fewer[pool][j] //= 2
                schedule = leveled(fewer)
                level_of.setdefault(schedule, fewer)
                if _meets(attempt("levels-prune", schedule), target):
                    levels = fewer
    # 3. Otherwise the same headroom everywhere: doubling from 1/8, then bisected.
    if not found:

        def meets_at(h: float) -> bool:
            s = delayed(h)
            headroom.setdefault(s, h)
            return _meets(attempt(f"h={h:g}", s), target)

        if uniform_headroom(meets_at, reference) is None:
            # Not even the largest headroom meets the target: the reachable attainment is.
            target = max(judged_attainment(r.summary) or 0.0 for r in runs.values())
    # 4. The constant pair: holding it needs no foresight of when.
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
        # the uniform headroom of the answer (0: none), or None for levels or the constant pair
        "headroom": None if pick in level_of and pick != base else headroom.get(pick),
        # each pool's headroom level per segment of segment_s (None: not a levelled schedule)
        "levels": None if pick == base else level_of.get(pick),
        "segment_s": reference.segment_s,
        "prefill": list(pick.prefill),
        "decode": list(pick.decode),
    }
    o_gpu = float(oracle.summary["gpu_hours"])
    if o_gpu > 0.0:
        summary["price_of_foresight"] = round(float(summary["gpu_hours"]) / o_gpu, 4)
    return DisaggResult(summary=summary, series=best.series)


def run_two_pool_yardsticks(
    workload: Workload,
    settings: BacktestSettings,
    reference: ReferenceSettings | None = None,
    *,
    max_per_pool: int | None = None,
) -> tuple[DisaggResult, DisaggResult]:
    """(oracle, causal reference) of a two-pool fleet: the constant pair, the shaped oracle
    (:func:`run_shaped_oracle`) and its reference (:func:`run_disaggregated_reference`).

    Every schedule the reference ran is one the oracle could hold too, on a finer grid (6 s
    against its 60 s): when the reference's answer meets the oracle's target for fewer GPU-hours,
    the oracle takes that run (``oracle_schedule.source = "reference"``), so the oracle stays
    the cheaper of the two. On 4 minutes of the matrix's code / ramp cell the reference's 6 s
    rise saved 0.3% on the oracle's 60 s one (``tests/backtest/test_matrix_fleets.py``).
    """
    from llmscale.backtest.disagg import run_disaggregated_oracle

    pair = run_disaggregated_oracle(workload, settings, max_per_pool=max_per_pool)
    oracle = run_shaped_oracle(workload, settings, pair)
    ref = run_disaggregated_reference(workload, settings, oracle, reference)
    o, r = oracle.summary, ref.summary
    if _meets(ref, float(o["oracle_target"])) and float(r["gpu_hours"]) < float(o["gpu_hours"]):
        search = r["reference_search"]
        summary = {k: v for k, v in r.items() if not k.startswith("reference_") and k != "price_of_foresight"}
        summary.update(
            policy="oracle",
            oracle_pair=o["oracle_pair"],
            oracle_target=o["oracle_target"],
            oracle_interval_s=search["step_s"],
            oracle_schedule={
                "interval_s": search["step_s"],
                "prefill": search["prefill"],
                "decode": search["decode"],
                "tried": o["oracle_schedule"]["tried"],
                "source": "reference",
            },
        )
        oracle = DisaggResult(summary=summary, series=ref.series)
        r["price_of_foresight"] = 1.0
    return oracle, ref
