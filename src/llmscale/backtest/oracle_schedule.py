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
saved, while the budget's slack lasts, and the purchase, its dips filled
(:func:`fill_dips`), is the next full run. It is kept only if it meets the
target *and* spends fewer GPU-seconds; when it overshoots (lowerings next
to each other add up to more than each alone: a backlog outlasting a
trial's window), the dearer half of the purchase is dropped and the rest
runs again.

A lower count is offered only where it saves GPU-time by the schedule's own
arithmetic: one replica less for an interval saves ``I`` replica-seconds but
costs a cold start if the next interval needs it again. E.g. the default
preset (I = 60 s, cold start 108 s): a one-interval dip between equal
neighbours costs 48 s more than it saves and is never tried; cutting the
first interval of a rise (or the last of a fall) saves 60 s. Inside a level
only a *run* of intervals lowered together saves: ``j`` intervals save
``j x 60 - 108`` s (:func:`_run_offers`, from a level's first interval).
Without runs, a constant fleet (the cheapest start on a ramp) kept its count
from the first minute on: on the workload matrix's code / ramp cells a policy
that ran one replica fewer for the first third beat the oracle by 3%.

Cost, bounded: at most ``max_runs`` full runs (4), the first re-running the
start to survey every interval, the next ones surveying only the intervals
within two of a lowered one, the last none. A survey tries count - 1, - 2,
- 4, ... per interval, and runs of 3, 6, ... intervals and the whole level
from each level's first, while an offer adds less than half the slack,
each trial at most ``max_window_intervals`` intervals longer than what it
changes. On the default preset (61 intervals): ~75 trials and four full
runs, about as long as the interval-greedy step.
"""

from __future__ import annotations

import itertools
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
from llmscale.types import Phase, Status
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


def schedule_cost_s(schedule: Sequence[int], interval_s: float, cold_start_s: float) -> float:
    """Replica-seconds of ``schedule`` by its own arithmetic (as :func:`cost_change_s`):
    ``interval_s`` per replica of each entry, ``cold_start_s`` per replica started at an entry's
    start (none at t = 0). E.g. [4, 5, 5] at 60 s / 108 s: 14 x 60 + 108 = 948 s."""
    total = interval_s * float(sum(schedule))
    for before, after in itertools.pairwise(schedule):
        total += cold_start_s * max(0, after - before)
    return total


def fill_dips(schedule: Sequence[int], interval_s: float, cold_start_s: float) -> tuple[int, ...]:
    """The cheapest schedule by :func:`schedule_cost_s` with at least ``schedule[k]`` replicas at every k.

    A count chosen interval by interval is the fewest for *that* interval, and the
    greedy step's counts zigzag where a backlog alternates (the default preset:
    5, 7, 5, 7, ...). Every rise is a cold start: a dip of ``d`` replicas for ``j``
    intervals saves ``d x j x I`` and costs ``d x cold start`` to buy back, so a
    dip shorter than a cold start (j x 60 s < 108 s: one interval) costs more
    than it saves; held, the replicas cost 48 s less per dip and serve more. More
    replicas never hurt a request here, so filling adds no misses (the full run
    that follows checks it). A shortest-path over (interval, count) finds the
    cheapest such schedule exactly; ties keep the lower count.
    """
    if len(schedule) <= 1:
        return tuple(schedule)
    floor = np.asarray(schedule, dtype=np.int64)
    top = int(floor.max())
    counts = np.arange(top + 1)
    inf = math.inf
    # cost[v]: cheapest cost of the entries so far ending at v replicas
    cost = np.where(counts >= floor[0], interval_s * counts, inf)
    # rise[u, v]: the cold starts of going from u to v replicas
    rise = cold_start_s * np.maximum(0, counts[None, :] - counts[:, None])
    back = []
    for k in range(1, floor.size):
        total = cost[:, None] + rise
        prev = np.argmin(total, axis=0)  # the first minimum: the lowest previous count on ties
        cost = total[prev, counts] + interval_s * counts
        cost[counts < floor[k]] = inf
        back.append(prev)
    v = int(np.argmin(cost))
    out = [v]
    for prev in reversed(back):
        v = int(prev[v])
        out.append(v)
    return tuple(reversed(out))


@dataclass(frozen=True)
class DescentSettings:
    #: intervals a trial follows after the changed one, at least
    window_intervals: int = 2
    #: intervals a trial follows after the changed one, at most
    max_window_intervals: int = 4
    #: full runs of the descent at most (the first re-runs the start to survey it)
    max_runs: int = 4
    #: runs of intervals lowered together (:func:`_run_offers`): the longest tried, in intervals
    max_run_intervals: int = 32


@dataclass
class DescentStats:
    runs: int = 0
    kept: int = 0
    trials: int = 0
    lowered: int = 0


@dataclass(frozen=True)
class Offer:
    """Interval ``k`` at ``m`` replicas: the run's misses then (estimated) and the replica-seconds
    it saves (by the schedule's arithmetic, :func:`cost_change_s`). With ``counts``, a run of
    intervals changed together: ``k``, ``k + 1``, ... at ``counts`` (``m`` is ``counts[0]``)."""

    k: int
    m: int
    misses: float
    saved_s: float
    counts: tuple[int, ...] = ()

    def changes(self) -> dict[int, int]:
        """Interval -> the count this offer sets."""
        return {self.k + i: c for i, c in enumerate(self.counts or (self.m,))}


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
                plan = _apply(best.schedule, purchase, grid, cold_start_s)
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
        plan = _apply(best.schedule, purchase, grid, cold_start_s)
        tryable = _near(purchase, grid)
    if progress is not None:
        progress(1.0)
    return best, stats


def _apply(
    schedule: Sequence[int], purchase: Sequence[Offer], grid: Grid, cold_start_s: float
) -> tuple[int, ...]:
    """``schedule`` with ``purchase``'s counts, where they leave a dip filled back up to
    ``schedule`` at most (:func:`fill_dips`: two lowerings a cold start apart leave a dip that
    costs more than it saves).

    Dips ``schedule`` had already stay: its full run priced them, and a dip is cheaper than the
    arithmetic says when the replica it drains is still draining at the next rise, which puts it
    back in service without a cold start (long answers: on H100 8B reasoning / ramp filling every
    dip of the greedy schedule cost 1.3% more GPU-hours than its zigzag).
    """
    plan = list(schedule)
    for offer in purchase:
        for j, c in offer.changes().items():
            plan[j] = c
    filled = fill_dips(plan, grid.interval_s, cold_start_s)
    return tuple(min(f, c) for f, c in zip(filled, schedule, strict=True))


def _near(purchase: Sequence[Offer], grid: Grid) -> set[int]:
    """The intervals worth surveying after ``purchase``: within two of a lowered one."""
    return {
        j for o in purchase for c in o.changes() for j in range(c - 2, c + 3) if 0 <= j <= grid.num_intervals
    }


def _choose(offers: Sequence[Offer], misses: int, allowed_misses: int) -> list[Offer]:
    """Offers bought cheapest first (one count per interval) while the misses they add fit.

    ``misses``: the run's own, which each offer's estimate adds to. An offer that
    sets every interval of offers already bought, none higher than they did,
    replaces them when the difference fits (a lower count of one interval, a
    run of intervals over a single one); one overlapping them otherwise is
    left. Equal prices: the larger saving first. Returns the purchase, cheapest
    first.
    """

    def price(o: Offer) -> float:
        return (o.misses - misses) / o.saved_s

    slack = float(allowed_misses - misses)
    #: interval -> the offer bought that sets it
    bought: dict[int, Offer] = {}
    spent = 0.0
    for offer in sorted(offers, key=lambda o: (price(o), -o.saved_s, o.k, o.m)):
        changes = offer.changes()
        held = {id(h): h for j in changes if (h := bought.get(j)) is not None}.values()
        held_changes = {j: c for h in held for j, c in h.changes().items()}
        covers = all(j in changes and changes[j] <= c for j, c in held_changes.items())
        if not covers or changes == held_changes:
            continue
        change = offer.misses - float(misses) - sum(h.misses - float(misses) for h in held)
        if spent + change <= slack:
            for j in changes:
                bought[j] = offer
            spent += change
    unique = {id(o): o for o in bought.values()}.values()
    return sorted(unique, key=lambda o: (price(o), o.k))


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
    (while they save GPU-time and stay within the budget) and of the runs of intervals lowered by
    one that start there (:func:`_run_offers`), whose requests still open at a trial's end take
    their outcome in ``ref`` (a run of a schedule close to ``plan``)."""
    run = ScheduleRun(workload, settings, grid, cold_start_s)
    offers: list[Offer] = []
    arrivals = workload.arrival_s
    exiting: list[int] = []
    last = grid.num_intervals

    def trial_of(k: int, counts: Sequence[int]) -> Callable[[Fleet], Outcome]:
        """A trial from interval ``k``'s start with ``counts`` for ``k``, ``k + 1``, ..., then ``plan``."""
        end = k + len(counts) - 1
        trial_plan = [*plan[:k], *counts, *plan[end + 1 :]]
        settle = int(np.searchsorted(arrivals, grid.start_s(end + 1), side="left"))

        def go(fleet: Fleet) -> Outcome:
            return _window_trial(
                fleet,
                k,
                end,
                trial_plan,
                ref,
                arrivals,
                judge,
                allowed_misses,
                settle,
                grid,
                cold_start_s,
                descent,
            )

        return go

    try:
        for k in range(last + 1):
            if k in tryable and plan[k] > lo:

                def single(fleet: Fleet, m: int, k: int = k) -> Outcome:
                    return trial_of(k, (m,))(fleet)

                trials = Trials(run.fleet, single, exiting)
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
                offers += _run_offers(
                    run.fleet,
                    k,
                    plan,
                    ref,
                    trial_of,
                    grid,
                    cold_start_s,
                    allowed_misses,
                    lo,
                    descent,
                    stats,
                    exiting,
                    spare_workers,
                )
            run.step(k, plan[k])
            progress(float(k + 1) / (last + 1))
    finally:
        reap(exiting, block=True)
    return run.result(judge, plan), offers


def _run_offers(
    fleet: Fleet,
    k: int,
    plan: Sequence[int],
    ref: Scored,
    trial_of: Callable[[int, Sequence[int]], Callable[[Fleet], Outcome]],
    grid: Grid,
    cold_start_s: float,
    allowed_misses: int,
    lo: int,
    descent: DescentSettings,
    stats: DescentStats,
    exiting: list[int],
    spare_workers: Callable[[], int] | None,
) -> list[Offer]:
    """Offers of the runs of intervals from ``k`` (a level's first: a rise, or the start) lowered by one.

    A single interval lowered inside a level of equal counts costs a cold start to
    buy the replica back (60 s saved, 108 s paid on the default preset), so the
    single-interval offers only ever move a level's edges, one interval per full
    run: a constant fleet (the cheapest start on a ramp) keeps its count from
    the first minute, where a third of the load needs one replica less. Lowered
    together, ``j`` intervals save ``j x 60 - 108`` s: the runs from a level's
    first interval of the shortest that saves an interval's worth (3 there),
    twice that, ... within it, then the whole level, while an offer adds less
    than half the slack (a longer run adds more still).
    Each is a trial over the run and its window, given up once the budget is
    spent. E.g. H100 8B code / ramp: the constant 4 with its first 8 minutes at
    3 (``tests/backtest/test_oracle_schedule.py``).
    """
    if not (k == 0 or plan[k - 1] != plan[k]) or plan[k] - 1 < lo:
        return []
    level_end = k
    while level_end + 1 < len(plan) and plan[level_end + 1] == plan[k]:
        level_end += 1
    size = min(level_end - k + 1, descent.max_run_intervals)
    # The shortest run worth a trial saves an interval's worth at least, as a single offer does:
    # j x 60 - 108 >= 60 from j = 3 on the default preset (2 would save 12 s).
    shortest = max(2, math.ceil(cold_start_s / grid.interval_s) + 1)
    lengths = []
    length = shortest
    while length < size:
        lengths.append(length)
        length *= 2
    if size >= shortest:
        lengths.append(size)
    base_cost = schedule_cost_s(plan, grid.interval_s, cold_start_s)
    candidates = []
    for length in lengths:
        counts = tuple(plan[j] - 1 for j in range(k, k + length))
        changed = [*plan[:k], *counts, *plan[k + length :]]
        saved = base_cost - schedule_cost_s(changed, grid.interval_s, cold_start_s)
        if saved > 0.0:
            candidates.append((length, counts, saved))
    by_length = {length: counts for length, counts, _ in candidates}
    trials = Trials(fleet, lambda f, length: trial_of(k, by_length[length])(f), exiting)
    offers: list[Offer] = []
    try:
        for i, (length, counts, saved) in enumerate(candidates):
            if spare_workers is not None and spare_workers() > 0 and i + 1 < len(candidates):
                trials.start(length)
                trials.start(candidates[i + 1][0])  # the next one if this one passes
            misses, _ = trials.outcome(length)
            if misses > allowed_misses:
                break
            offers.append(Offer(k, counts[0], misses, saved, counts))
            if misses - ref.misses >= 0.5 * (allowed_misses - ref.misses):
                break
    finally:
        stats.trials += len(trials.done)
        trials.cancel()
    return offers


def _window_trial(
    fleet: Fleet,
    k: int,
    end: int,
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
    """In a forked trial at interval ``k``'s start: ``plan``, changed at ``k`` .. ``end``; (misses, 0).

    The trial follows the plan interval by interval until the requests that
    arrived by interval ``end``'s end (``settle`` of them) are resolved, at least
    ``window_intervals`` more have passed, and the fleet has caught up with
    ``base``'s run: the requests open (arrived, unresolved) in the trial are
    those open in ``base`` at the same time, but for 2% (at least 2). A
    backlog left by too few replicas on a fleet near its capacity drains
    slowly (``tests/backtest/test_oracle_lower_bound.py``: minutes on long
    outputs), and until it has drained the rest of the run is not ``base``'s.
    Then the requests still open take their outcome in ``base``. Returns
    (inf, -1) as soon as more than ``budget`` misses are certain.
    """
    scale(fleet, plan[k], grid.start_s(k), cold_start_s)
    last = grid.num_intervals
    interval = grid.interval_s
    t_min = grid.start_s(end + 1 + descent.window_intervals)
    t_cap = grid.start_s(end + 1 + descent.max_window_intervals)
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
