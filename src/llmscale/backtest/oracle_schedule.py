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
simulator as the judge. A *sweep* runs the schedule forward; at each
interval it tries lower counts in forked trials (:mod:`oracle_trials`) and
commits the lowest whose estimated misses over the whole run stay within
the budget (:class:`~llmscale.backtest.oracle_judge.Judge`). A trial knows
its past exactly (the sweep's run so far, with every earlier commit), runs
the changed interval and the following ones on the schedule until the
requests that arrived by the changed interval's end are resolved and at
least ``window_intervals`` more have passed, and takes the requests still
unresolved then at their outcome in the schedule's last full run. That rest
is the estimate; the sweep's own run is exact, so a sweep is kept only if its
run meets the target *and* spends fewer GPU-seconds than the schedule it
started from. A sweep that missed the target is run again with a reserve of
the budget held back (twice the overshoot), at most :data:`MAX_RETRIES` times.

A lower count is tried only where it saves GPU-time by the schedule's own
arithmetic: one replica less for an interval saves ``I`` replica-seconds but
costs a cold start if the next interval needs it again. E.g. the default
preset (I = 60 s, cold start 108 s): a one-interval dip between equal
neighbours costs 48 s more than it saves and is never tried; cutting the
first interval of a rise (or the last of a fall) saves 60 s.

Cost: a sweep is one full run plus, per interval, the trials of its gallop
(count - 1, - 2, - 4, ..., then bisect: 1-4 on the default preset), each a
few intervals long. Sweeps after the first try only the intervals within
two of a commit of the previous sweep; at most ``max_sweeps`` run. So the
number of simulated intervals is bounded by
``max_sweeps x (1 + MAX_RETRIES) x (K + 1) x (1 + tries x window)``.
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
    max_window_intervals: int = 6
    #: rounds of survey, choice and full run at most
    max_sweeps: int = 3


@dataclass
class DescentStats:
    sweeps: int = 0
    sweeps_kept: int = 0
    trials: int = 0
    full_runs: int = 0
    commits: int = 0


@dataclass(frozen=True)
class Offer:
    """Interval ``k`` at ``m`` replicas: the misses it adds to the run (estimated) and the
    replica-seconds it saves (by the schedule's arithmetic, :func:`cost_change_s`)."""

    k: int
    m: int
    extra_misses: float
    saved_s: float

    @property
    def price(self) -> float:
        """Misses per replica-second saved: the lower, the better a buy."""
        return self.extra_misses / self.saved_s


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
) -> tuple[Scored, DescentStats]:
    """The cheapest schedule the rounds find from ``start`` (which meets ``allowed_misses``).

    A round surveys every interval (:func:`_survey`: the misses each lower count
    would add, estimated by a trial), buys the cheapest offers by misses per
    replica-second saved until the budget's slack is spent (:func:`_choose`),
    and runs the result in full. It is kept when it meets the budget and costs
    fewer GPU-seconds; when it overshoots (lowerings next to each other add up
    to more than each alone), the dearer half of the purchase is dropped and
    the rest run again, at most :data:`MAX_RETRIES` times.
    """
    descent = descent or DescentSettings()
    stats = DescentStats()
    best = start
    tryable = set(range(grid.num_intervals + 1))
    share = 1.0 / max(1, descent.max_sweeps)
    for round_no in range(descent.max_sweeps):
        if not tryable or best.misses >= allowed_misses:
            break
        stats.sweeps += 1

        def report(f: float, done: float = round_no * share) -> None:
            if progress is not None:
                progress(done + share * f)

        offers = _survey(
            best,
            workload,
            settings,
            grid,
            cold_start_s,
            judge,
            allowed_misses,
            lo,
            tryable,
            descent,
            stats,
            lambda f: report(0.8 * f),
        )
        chosen = _choose(offers, allowed_misses - best.misses)
        kept: Scored | None = None
        for _ in range(MAX_RETRIES + 1):
            if not chosen:
                break
            plan = list(best.schedule)
            for offer in chosen:
                plan[offer.k] = offer.m
            stats.full_runs += 1
            run = run_schedule(
                workload, settings, grid, cold_start_s, plan, judge, give_up_over=allowed_misses
            )
            if run is not None and run.misses <= allowed_misses:
                kept = run if run.gpu_s < best.gpu_s else None
                break
            chosen = chosen[: len(chosen) // 2]
        report(1.0)
        if kept is None:
            break
        stats.sweeps_kept += 1
        stats.commits += len(chosen)
        best = kept
        tryable = {j for o in chosen for j in range(o.k - 2, o.k + 3) if 0 <= j <= grid.num_intervals}
    return best, stats


def _choose(offers: Sequence[Offer], slack: float) -> list[Offer]:
    """Offers bought cheapest first (one count per interval) while their misses fit ``slack``.

    A lower count of an interval already bought replaces it when the difference fits.
    Returns the purchase, cheapest first.
    """
    bought: dict[int, Offer] = {}
    spent = 0.0
    for offer in sorted(offers, key=lambda o: (o.price, o.k, o.m)):
        held = bought.get(offer.k)
        if held is not None and offer.m >= held.m:
            continue
        change = offer.extra_misses - (held.extra_misses if held is not None else 0.0)
        if spent + change <= slack:
            bought[offer.k] = offer
            spent += change
    return sorted(bought.values(), key=lambda o: (o.price, o.k))


def _survey(
    base: Scored,
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
) -> list[Offer]:
    """Run ``base`` forward; at each interval in ``tryable``, trials of count - 1, - 2, - 4, ...
    (while they save GPU-time and stay within the budget): the offers they make."""
    run = ScheduleRun(workload, settings, grid, cold_start_s)
    plan = base.schedule
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
                        base,
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
                        misses, _ = trials.outcome(m)
                        if misses > allowed_misses:
                            break
                        offers.append(Offer(k, m, misses - base.misses, saved))
                        step *= 2
                finally:
                    stats.trials += len(trials.done)
                    trials.cancel()
            run.step(k, plan[k])
            progress(float(k + 1) / (last + 1))
    finally:
        reap(exiting, block=True)
    return offers


def _window_trial(
    fleet: Fleet,
    k: int,
    m: int,
    plan: tuple[int, ...],
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
