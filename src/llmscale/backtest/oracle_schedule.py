"""Whole-trace replica schedules: run one on the simulator; descend to a cheaper one meeting the target.

A *schedule* is one replica count per control interval ``[k I, (k+1) I)``
of the trace, plus one for the time after the last arrival's interval
(until every request is resolved). :class:`ScheduleRun` runs it with the real
simulator as the oracle does everything: replicas it adds are Ready at the
interval's start because it launched them a cold start earlier, and it pays
``cold_start_s x GPUs`` for each (none at t = 0, where every policy's fleet
starts warm too); replicas it removes drain until idle (knowing the
future, it never kills a generation) and are billed until they are gone; a
draining replica it needs again is put back in service (no cold start).

:func:`descend` improves a schedule that meets the target, with the
simulator as the judge. Each of its full runs is exact, and it also
*surveys*: at the intervals to look at, it forks trials (:mod:`oracle_trials`)
of lower counts. A trial knows its past exactly (the run so far), runs the
changed interval and the following ones on the schedule until the requests
that arrived by the changed interval's end are resolved, at least
``window_intervals`` more have passed and its open requests are (but for 2%)
those open at that time in a reference run of a close schedule; the requests
still open then take their outcome in that reference. That is the trial's
estimate of the run's misses: an *offer* (the misses, the replica-seconds
saved). Offers are bought cheapest first, by misses added per replica-second
saved, while the budget's slack lasts, and the purchase is the next full
run. It is kept only if it meets the target *and* spends fewer GPU-seconds;
when it overshoots (lowerings next to each other add up to more than each
alone: a backlog outlasting a trial's window), the dearer half of the
purchase is dropped and the rest runs again.

A lower count is offered only where it saves GPU-time by the schedule's own
arithmetic: one replica less for an interval saves ``I`` replica-seconds but
costs a cold start if the next interval needs it again. E.g. the default
preset (I = 60 s, cold start 108 s): a one-interval dip between equal
neighbours costs 48 s more than it saves and is never tried; cutting the
first interval of a rise (or the last of a fall) saves 60 s.

Cost, bounded: at most ``max_runs`` full runs (4), the first re-running the
start to survey every interval, the next ones surveying only the intervals
within two of a lowered one, the last none. A survey tries count - 1, - 2,
- 4, ... per interval while an offer adds less than half the slack, each
trial at most ``max_window_intervals + 1`` intervals long. On the default
preset (61 intervals): ~70 trials and four full runs, about as long as the
interval-greedy step before it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from llmscale.backtest.oracle_judge import Judge
from llmscale.backtest.oracle_trials import Outcome, Trials, reap
from llmscale.backtest.results import PolicyResult, summarize
from llmscale.backtest.runner import BacktestSettings, SeriesRecorder, build_fleet, series_step_for
from llmscale.sim.fleet import Fleet
from llmscale.sim.request import Status
from llmscale.types import Phase
from llmscale.workloads.model import Workload

__all__ = ["Grid", "ScheduleRun", "Scored", "descend", "run_schedule", "scale"]

#: sweeps run again with a reserve after overshooting the budget (see the module docstring)
MAX_RETRIES = 2


@dataclass(frozen=True)
class Grid:
    """The oracle's control intervals over a workload."""

    interval_s: float
    #: intervals holding arrivals; a schedule has one more entry (after the last one)
    num_intervals: int

    @classmethod
    def of(cls, workload: Workload, interval_s: float) -> Grid:
        arrivals = workload.arrival_s
        last_arrival = float(arrivals[-1]) if arrivals.size else 0.0
        return cls(interval_s, int(last_arrival // interval_s) + 1)

    def start_s(self, k: int) -> float:
        return k * self.interval_s


def scale(fleet: Fleet, n: int, now_s: float, cold_start_s: float) -> int:
    """Scale ``fleet`` to ``n`` at ``now_s`` as the oracle does; returns the replicas started.

    Each started replica is Ready at once and charged ``cold_start_s`` per GPU
    (launched a cold start earlier) unless ``now_s`` is 0. Removed replicas
    drain until idle; a draining one is put back in service before a new one starts.
    """
    before = len(fleet.replicas)
    active = sum(1 for r in fleet.replicas if r.phase < Phase.DRAINING)
    fleet.scale_to(n, now_s, warm=True, drain_until_idle=True)
    # Growing never removes a replica, so the new ones are the difference.
    started = len(fleet.replicas) - before if n > active else 0
    if started and now_s > 0.0:
        fleet.prepaid_gpu_s += started * cold_start_s * fleet.gpus_per_replica
    return started


class ScheduleRun:
    """One run of a schedule, interval by interval, sampled for the report as a policy's run is."""

    def __init__(
        self, workload: Workload, settings: BacktestSettings, grid: Grid, cold_start_s: float
    ) -> None:
        self.workload, self.settings, self.grid = workload, settings, grid
        self.cold_start_s = cold_start_s
        self.fleet = build_fleet(workload, settings, 0)
        self.step_s = series_step_for(workload.duration_s)
        self.recorder = SeriesRecorder(self.fleet, self.step_s)
        self.next_sample = self.step_s
        arrivals = workload.arrival_s
        self.last_arrival_s = float(arrivals[-1]) if arrivals.size else 0.0
        self.wall0 = time.perf_counter()

    def step(self, k: int, n: int) -> None:
        """Scale to ``n`` at interval ``k``'s start and run to its end (the last: until all is done)."""
        fleet, grid = self.fleet, self.grid
        scale(fleet, n, grid.start_s(k), self.cold_start_s)
        if k < grid.num_intervals:
            t1 = grid.start_s(k + 1)
            while self.next_sample <= t1:
                fleet.run_until(self.next_sample)
                self.recorder.sample(self.next_sample)
                self.next_sample += self.step_s
            fleet.run_until(t1)
            return
        horizon = self.last_arrival_s + self.settings.drain_horizon_s
        t = fleet.now
        while fleet.unresolved > 0 and t <= horizon:
            t = self.next_sample
            fleet.run_until(t)
            self.recorder.sample(t)
            self.next_sample += self.step_s

    def result(self, judge: Judge, schedule: Sequence[int]) -> Scored:
        """Close the books (after the last step) and score the run."""
        fleet = self.fleet
        fleet.finish(fleet.now)
        end_s = max(fleet.last_resolved_s, self.last_arrival_s)
        result = summarize(
            "oracle",
            self.workload,
            fleet,
            self.recorder.cols,
            self.settings,
            end_s=end_s,
            wall_s=time.perf_counter() - self.wall0,
        )
        _, met = judge.outcomes(fleet)
        misses = int(np.count_nonzero(~met & judge.feasible))
        resolved_at = _resolved_at_s(fleet, self.workload.arrival_s)
        return Scored(tuple(schedule), result, met, resolved_at, misses, fleet.gpu_seconds(end_s))


def _resolved_at_s(fleet: Fleet, arrival_s: np.ndarray) -> np.ndarray:
    """When each request of a finished run was resolved (inf: never): completed at its finish,
    timed out at its client's time-out, rejected on arrival."""
    status = np.frombuffer(bytes(fleet.status), dtype=np.uint8)
    arrival = np.asarray(arrival_s, dtype=np.float64)
    at = np.full(status.size, math.inf)
    done = status == Status.COMPLETED
    at[done] = np.asarray(fleet.finish_at_s, dtype=np.float64)[done]
    timed_out = status == Status.TIMED_OUT
    at[timed_out] = arrival[timed_out] + fleet.config.timeout_s
    other = ~done & ~timed_out & (status != Status.IN_FLIGHT)
    at[other] = arrival[other]
    return at


@dataclass(frozen=True)
class Scored:
    """A schedule and its full run: the result, each request's outcome, its misses and GPU-seconds."""

    schedule: tuple[int, ...]
    result: PolicyResult
    met: np.ndarray
    #: when each request was resolved (s; inf: never)
    resolved_at_s: np.ndarray
    #: feasible requests that missed the SLO
    misses: int
    gpu_s: float


def run_schedule(
    workload: Workload,
    settings: BacktestSettings,
    grid: Grid,
    cold_start_s: float,
    schedule: Sequence[int],
    judge: Judge,
    *,
    give_up_over: int | None = None,
) -> Scored | None:
    """The full run of ``schedule``; None once more than ``give_up_over`` misses are certain."""
    run = ScheduleRun(workload, settings, grid, cold_start_s)
    for k, n in enumerate(schedule):
        run.step(k, n)
        if (
            give_up_over is not None
            and k < grid.num_intervals
            and judge.sure_misses(run.fleet, run.fleet.now) > give_up_over
        ):
            return None
    return run.result(judge, schedule)


def cost_change_s(schedule: Sequence[int], k: int, m: int, interval_s: float, cold_start_s: float) -> float:
    """Replica-seconds saved (negative) or added by setting interval ``k`` to ``m`` replicas.

    The schedule's own arithmetic: ``interval_s`` per replica of the interval,
    ``cold_start_s`` per replica started at an interval's start (none at t = 0).
    A replica drained is billed until it is idle, which this leaves out: the
    sweep's full run settles the true cost.
    """
    cur = schedule[k]
    change = (m - cur) * interval_s
    if k > 0:
        prev = schedule[k - 1]
        change += cold_start_s * (max(0, m - prev) - max(0, cur - prev))
    if k + 1 < len(schedule):
        nxt = schedule[k + 1]
        change += cold_start_s * (max(0, nxt - m) - max(0, nxt - cur))
    return change


@dataclass(frozen=True)
class DescentSettings:
    #: intervals a trial follows after the changed one, at least
    window_intervals: int = 2
    #: intervals a trial follows after the changed one, at most
    max_window_intervals: int = 4
    #: full runs of the descent at most (the first re-runs the start to survey it)
    max_runs: int = 4


@dataclass
class DescentStats:
    runs: int = 0
    kept: int = 0
    trials: int = 0
    lowered: int = 0


@dataclass(frozen=True)
class Offer:
    """Interval ``k`` at ``m`` replicas: the run's misses then (estimated) and the replica-seconds
    it saves (by the schedule's arithmetic, :func:`cost_change_s`)."""

    k: int
    m: int
    misses: float
    saved_s: float


def descend(
    start: Scored,
    workload: Workload,
    settings: BacktestSettings,
    grid: Grid,
    cold_start_s: float,
    judge: Judge,
    allowed_misses: int,
    lo: int,
    *,
    descent: DescentSettings | None = None,
    progress: Callable[[float], None] | None = None,
    spare_workers: Callable[[], int] | None = None,
) -> tuple[Scored, DescentStats]:
    """The cheapest schedule the descent finds from ``start`` (which meets ``allowed_misses``).

    Each full run of a schedule (:func:`_survey_run`) is exact, and it also
    surveys: at the intervals near the last change it forks trials of lower
    counts, each an offer (the misses the run would then have, estimated, and
    the replica-seconds saved). When the run meets the budget and costs fewer
    GPU-seconds than the best so far it becomes the best, and its offers are
    bought cheapest first, by misses added per replica-second saved, while
    the budget's slack lasts (:func:`_choose`); the next run is that purchase.
    When a run overshoots (lowerings next to each other add up to more than
    each alone), the dearer half of its purchase is dropped and the rest runs.
    The first run re-runs ``start`` to survey every interval; at most
    ``max_runs`` runs, the last without trials.
    """
    descent = descent or DescentSettings()
    stats = DescentStats()
    best = start
    plan = start.schedule
    purchase: list[Offer] = []
    tryable = set(range(grid.num_intervals + 1))
    for run_no in range(descent.max_runs):
        stats.runs += 1
        survey = run_no + 1 < descent.max_runs

        def report(f: float, run_no: int = run_no) -> None:
            if progress is not None:
                progress((run_no + f) / descent.max_runs)

        scored, offers = _survey_run(
            plan,
            best,
            workload,
            settings,
            grid,
            cold_start_s,
            judge,
            allowed_misses,
            lo,
            tryable if survey else set(),
            descent,
            stats,
            report,
            spare_workers,
        )
        if run_no > 0:
            if scored.misses > allowed_misses:
                if len(purchase) <= 1:
                    break
                purchase = purchase[: len(purchase) // 2]
                plan = _apply(best.schedule, purchase)
                tryable = _near(purchase, grid)
                continue
            if scored.gpu_s >= best.gpu_s:
                break
            stats.kept += 1
            stats.lowered += len(purchase)
            best = scored
        purchase = _choose(offers, scored.misses, allowed_misses)
        if not purchase:
            break
        plan = _apply(best.schedule, purchase)
        tryable = _near(purchase, grid)
    if progress is not None:
        progress(1.0)
    return best, stats


def _apply(schedule: Sequence[int], purchase: Sequence[Offer]) -> tuple[int, ...]:
    plan = list(schedule)
    for offer in purchase:
        plan[offer.k] = offer.m
    return tuple(plan)


def _near(purchase: Sequence[Offer], grid: Grid) -> set[int]:
    """The intervals worth surveying after ``purchase``: within two of a lowered one."""
    return {j for o in purchase for j in range(o.k - 2, o.k + 3) if 0 <= j <= grid.num_intervals}


def _choose(offers: Sequence[Offer], misses: int, allowed_misses: int) -> list[Offer]:
    """Offers bought cheapest first (one count per interval) while the misses they add fit.

    ``misses``: the run's own, which each offer's estimate adds to. A lower count of an
    interval already bought replaces it when the difference fits. Returns the purchase,
    cheapest first.
    """

    def price(o: Offer) -> float:
        return (o.misses - misses) / o.saved_s

    slack = float(allowed_misses - misses)
    bought: dict[int, Offer] = {}
    spent = 0.0
    for offer in sorted(offers, key=lambda o: (price(o), o.k, o.m)):
        held = bought.get(offer.k)
        if held is not None and offer.m >= held.m:
            continue
        change = offer.misses - (held.misses if held is not None else float(misses))
        if spent + change <= slack:
            bought[offer.k] = offer
            spent += change
    return sorted(bought.values(), key=lambda o: (price(o), o.k))


def _survey_run(
    plan: Sequence[int],
    ref: Scored,
    workload: Workload,
    settings: BacktestSettings,
    grid: Grid,
    cold_start_s: float,
    judge: Judge,
    allowed_misses: int,
    lo: int,
    tryable: set[int],
    descent: DescentSettings,
    stats: DescentStats,
    progress: Callable[[float], None],
    spare_workers: Callable[[], int] | None,
) -> tuple[Scored, list[Offer]]:
    """The full run of ``plan``; at each interval in ``tryable``, trials of count - 1, - 2, - 4, ...
    (while they save GPU-time and stay within the budget), whose requests still open at a
    trial's end take their outcome in ``ref`` (a run of a schedule close to ``plan``)."""
    run = ScheduleRun(workload, settings, grid, cold_start_s)
    offers: list[Offer] = []
    arrivals = workload.arrival_s
    exiting: list[int] = []
    last = grid.num_intervals
    try:
        for k in range(last + 1):
            if k in tryable and plan[k] > lo:
                settle = int(np.searchsorted(arrivals, grid.start_s(k + 1), side="left"))

                def trial(fleet: Fleet, m: int, k: int = k, settle: int = settle) -> Outcome:
                    return _window_trial(
                        fleet,
                        k,
                        m,
                        plan,
                        ref,
                        arrivals,
                        judge,
                        allowed_misses,
                        settle,
                        grid,
                        cold_start_s,
                        descent,
                    )

                trials = Trials(run.fleet, trial, exiting)
                try:
                    step = 1
                    while plan[k] - step >= lo:
                        m = plan[k] - step
                        saved = -cost_change_s(plan, k, m, grid.interval_s, cold_start_s)
                        if saved <= 0.0:
                            break
                        if spare_workers is not None and spare_workers() > 0 and plan[k] - 2 * step >= lo:
                            trials.start(m)
                            trials.start(plan[k] - 2 * step)  # the next one if this one passes
                        misses, _ = trials.outcome(m)
                        if misses > allowed_misses:
                            break
                        offers.append(Offer(k, m, misses, saved))
                        # An offer adding half the slack or more will not combine with others;
                        # a lower count would add more still.
                        if misses - ref.misses >= 0.5 * (allowed_misses - ref.misses):
                            break
                        step *= 2
                finally:
                    stats.trials += len(trials.done)
                    trials.cancel()
            run.step(k, plan[k])
            progress(float(k + 1) / (last + 1))
    finally:
        reap(exiting, block=True)
    return run.result(judge, plan), offers


def _window_trial(
    fleet: Fleet,
    k: int,
    m: int,
    plan: Sequence[int],
    base: Scored,
    arrivals: np.ndarray,
    judge: Judge,
    budget: int,
    settle: int,
    grid: Grid,
    cold_start_s: float,
    descent: DescentSettings,
) -> Outcome:
    """In a forked trial at interval ``k``'s start: ``m`` replicas, then ``plan``; (estimated misses, 0).

    The trial follows the plan interval by interval until the requests that
    arrived by interval ``k``'s end (``settle`` of them) are resolved, at least
    ``window_intervals`` more have passed, and the fleet has caught up with
    ``base``'s run: the requests open (arrived, unresolved) in the trial are
    those open in ``base`` at the same time, but for 2% (at least 2). A
    backlog left by too few replicas on a fleet near its capacity drains
    slowly (``tests/backtest/test_oracle_lower_bound.py``: minutes on long
    outputs), and until it has drained the rest of the run is not ``base``'s.
    Then the requests still open take their outcome in ``base``. Returns
    (inf, -1) as soon as more than ``budget`` misses are certain.
    """
    scale(fleet, m, grid.start_s(k), cold_start_s)
    last = grid.num_intervals
    interval = grid.interval_s
    t_min = grid.start_s(k + 1 + descent.window_intervals)
    t_cap = grid.start_s(k + 1 + descent.max_window_intervals)
    j = k
    t = grid.start_s(k)
    while True:
        t += interval
        fleet.run_until(t)
        if judge.sure_misses(fleet, t) > budget:
            return math.inf, -1
        if fleet.arrivals_done and fleet.unresolved == 0:
            break
        if t >= t_min:
            arrived = int(np.searchsorted(arrivals, t, side="right"))
            status = np.frombuffer(bytes(fleet.status[:arrived]), dtype=np.uint8)
            open_here = status == Status.IN_FLIGHT
            settled = not bool(open_here[:settle].any())
            open_there = base.resolved_at_s[:arrived] > t
            apart = int(np.count_nonzero(open_here != open_there))
            if (settled and apart <= max(2, int(0.02 * np.count_nonzero(open_there)))) or t >= t_cap:
                break
        j += 1
        if j <= last:
            scale(fleet, plan[j], t, cold_start_s)
    resolved, met = judge.outcomes(fleet)
    feasible = judge.feasible
    exact = np.count_nonzero(resolved & ~met & feasible)
    rest = np.count_nonzero(~resolved & ~base.met & feasible)
    return float(exact + rest), 0
