"""The oracle: the cheapest replica schedule it can find that meets the SLO, knowing the future.

Knowing every arrival, the oracle may choose any replica schedule (one count
per control interval, replicas provisioned a cold start ahead and charged for
it, scale-downs that drain), and its GPU-hours are what the policies are
measured against. It searches for a cheap schedule with the simulator itself
as the judge, in three steps, each a search of its own:

1. **Interval by interval** (greedy): for each interval in turn, from the
   fleet as the chosen counts so far leave it, the fewest replicas under which
   the interval's feasible requests meet the target, followed ``tail_s`` (30 s)
   after the interval: completed within the SLO, or still generating on pace to
   meet it (a 1,500-token answer runs longer than that).
   This is quick and close on smooth load, but it judges an interval alone: a
   count just enough for one minute can leave a backlog the next minutes pay
   for, and on coarse replicas (a 70B TP4 replica is 4 GPUs) every interval
   rounds its 99% up.
   Its counts zigzag where a backlog alternates (5, 7, 5, 7 on the default
   preset), each rise a cold start: the same counts with their dips filled
   where holding a replica costs less than buying it back
   (:func:`~llmscale.backtest.oracle_schedule.fill_dips`, exact by the
   schedule's arithmetic; one full run) are a second candidate.
2. **Constant fleets** cheaper than those schedules: the fewest replicas that,
   held for the whole trace, meet the target (a bisection on full runs, each
   given up once its misses exceed the budget).
3. **Whole-trace descent** (:func:`~llmscale.backtest.oracle_schedule.descend`)
   from the cheapest: sweeps that lower single intervals, and runs of intervals
   from a level's first together (a single interval lowered inside a level
   costs a cold start to buy back, so a constant fleet could only be trimmed
   at its end), while the whole run's misses stay within *one* budget for the
   run (1% of the feasible requests), a lowering kept only if the sweep's full
   run meets the target and spends fewer GPU-seconds.

What it is held to (:mod:`~llmscale.backtest.oracle_judge`): the feasible
requests only (no count is bought for requests no fleet can serve), each met
or missed as the policies' results score it. Every schedule it reports was
run in full on the simulator: its attainment and GPU-hours are the
simulator's, not an estimate. It is the cheapest schedule its search found,
not a proven optimum; the property test
``tests/backtest/test_oracle_lower_bound.py`` checks that no policy (or
static fleet) reaches min(99%, its attainment) with fewer GPU-hours on
long-output, long-prompt, bursty and coarse-replica workloads.

Cost. The greedy step forks one trial per count it queries (~150 on the
default preset); a trial stops as soon as its verdict is certain
(:class:`_Verdict`), and while a core is free (``spare_workers``) the count
the search will likely query next runs alongside. Filling the dips costs
one full run. The constant step runs a few full runs (log2 of the counts
below the greedy schedule's mean), each given up once the budget is
certainly spent; the descent at most ``descent_runs`` full runs and their
trials. Each step is a share of the
progress bar (40%, 10%, 50%), and ``wall_s`` in the result is the whole search.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import IO

import numpy as np

from llmscale.backtest.oracle_judge import Judge
from llmscale.backtest.oracle_schedule import (
    DescentSettings,
    Grid,
    ScheduleRun,
    Scored,
    descend,
    fill_dips,
    run_schedule,
    scale,
)
from llmscale.backtest.oracle_trials import Outcome, Trials, reap
from llmscale.backtest.results import PolicyResult
from llmscale.backtest.runner import BacktestSettings
from llmscale.sim.fleet import Fleet
from llmscale.workloads.model import Workload

__all__ = ["OracleSettings", "run_oracle"]


@dataclass(frozen=True)
class OracleSettings:
    interval_s: float = 60.0
    #: share of the feasible requests that must meet the SLO (one budget for the whole run)
    target: float = 0.99
    #: how long after an interval's end the greedy step follows its requests: a request still
    #: generating then counts as meeting the SLO if it is on pace to (:meth:`Judge.on_track`)
    tail_s: float = 30.0
    #: full runs of the whole-trace descent at most (0: the cheaper of the greedy and constant
    #: schedules as they are)
    descent_runs: int = 4
    #: the longest run of intervals the descent lowers together (1: single intervals only, the
    #: search before runs, which cannot lower inside a level: ``oracle_schedule._run_offers``)
    run_intervals: int = 32


#: simulated seconds between two looks at a trial's verdict (:class:`_Verdict`): a look costs
#: ~0.2 ms, 2 s of a 10-replica fleet ~5 ms (shared 2-core VM)
_CHECK_S = 2.0

#: shares of the progress bar: greedy step, constant fleets, descent
_PHASES = (0.4, 0.1, 0.5)

#: kept for callers of the previous name
_scale = scale


def run_oracle(
    workload: Workload,
    settings: BacktestSettings,
    oracle: OracleSettings | None = None,
    *,
    decisions_out: IO[str] | None = None,
    progress: Callable[[float], None] | None = None,
    spare_workers: Callable[[], int] | None = None,
) -> PolicyResult:
    """The oracle's run. ``spare_workers()``: how many more processes may run now (cores left idle
    by the other jobs), for guessed trials run ahead of the greedy search; None: none.
    ``progress`` gets a simulated time that runs once over the workload for all three steps."""
    oracle = oracle or OracleSettings()
    wall0 = time.perf_counter()
    cold_start_s = settings.sim.pending_s + settings.sim.loading_s + settings.sim.warmup_s
    settings = replace(settings, sim=replace(settings.sim, grace_s=math.inf))
    grid = Grid.of(workload, oracle.interval_s)
    judge = Judge.build(workload, settings, oracle.target)
    lo = max(1, settings.min_replicas)
    hi = max(lo, settings.max_replicas)
    span_s = max(float(workload.duration_s), 1.0)

    def phase_progress(p: int) -> Callable[[float], None]:
        done = sum(_PHASES[:p])

        def report(fraction: float) -> None:
            if progress is not None:
                progress(span_s * (done + _PHASES[p] * min(max(fraction, 0.0), 1.0)))

        return report

    greedy, greedy_trials = _greedy(
        workload,
        settings,
        oracle,
        grid,
        judge,
        cold_start_s,
        lo,
        hi,
        exact=decisions_out is not None,
        progress=phase_progress(0),
        spare_workers=spare_workers,
    )
    # The greedy counts with their dips filled where holding a replica is cheaper than buying it
    # back (a dip shorter than a cold start): one full run, no more misses.
    filled = None
    filled_schedule = fill_dips(greedy.schedule, grid.interval_s, cold_start_s)
    if filled_schedule != greedy.schedule:
        filled = run_schedule(workload, settings, grid, cold_start_s, filled_schedule, judge)
    stepped = greedy
    if filled is not None and filled.misses <= max(greedy.misses, judge.allowed_misses):
        stepped = min(greedy, filled, key=lambda c: c.gpu_s)
    constant, constant_runs = _cheapest_constant(
        workload, settings, grid, judge, cold_start_s, lo, hi, stepped, progress=phase_progress(1)
    )
    candidates = [c for c in (greedy, filled, constant) if c is not None]
    allowed = judge.allowed_misses
    meeting = [c for c in candidates if c.misses <= allowed]
    if meeting:
        start = min(meeting, key=lambda c: c.gpu_s)
    else:
        # No schedule met the target (not even the largest constant fleet): hold the descent
        # to the fewest misses found instead, so that it still only trades nothing for GPU-hours.
        start = min(candidates, key=lambda c: (c.misses, c.gpu_s))
        allowed = start.misses
    best, stats = descend(
        start,
        workload,
        settings,
        grid,
        cold_start_s,
        judge,
        allowed,
        lo,
        descent=DescentSettings(max_runs=oracle.descent_runs, max_run_intervals=oracle.run_intervals),
        progress=phase_progress(2),
        spare_workers=spare_workers,
    )
    if decisions_out is not None:
        _write_decisions(decisions_out, workload, grid, oracle, best, greedy, greedy_trials)
    result = best.result
    summary = result.summary
    summary["wall_s"] = round(time.perf_counter() - wall0, 3)
    summary["oracle_interval_s"] = oracle.interval_s
    summary["oracle_target"] = oracle.target
    summary["oracle_trials"] = sum(len(t) for t in greedy_trials) + stats.trials
    summary["oracle_search"] = {
        "allowed_misses": allowed,
        "misses": best.misses,
        "greedy_gpu_hours": round(greedy.gpu_s / 3600.0, 5),
        "greedy_misses": greedy.misses,
        "constant_replicas": None if constant is None else constant.schedule[0],
        "constant_runs": constant_runs,
        "filled_gpu_hours": None if filled is None else round(filled.gpu_s / 3600.0, 5),
        "filled_misses": None if filled is None else filled.misses,
        "start": "greedy" if start is greedy else "filled" if start is filled else "constant",
        "descent_runs": stats.runs,
        "descent_runs_kept": stats.kept,
        "descent_trials": stats.trials,
        "intervals_lowered": stats.lowered,
        # the replica count of each interval (the last: after the last arrival's interval)
        "schedule": list(best.schedule),
    }
    return result


def _write_decisions(
    out: IO[str],
    workload: Workload,
    grid: Grid,
    oracle: OracleSettings,
    best: Scored,
    greedy: Scored,
    greedy_trials: Sequence[dict[int, float]],
) -> None:
    """One line per interval: the count run, the greedy step's count and its trials' attainments."""
    arrivals = workload.arrival_s
    for k, n in enumerate(best.schedule):
        t0 = grid.start_s(k)
        i0, i1 = (int(i) for i in np.searchsorted(arrivals, [t0, t0 + grid.interval_s], side="left"))
        trials = greedy_trials[k] if k < len(greedy_trials) else {}
        row = {
            "time_s": t0,
            "policy": "oracle",
            "desired": n,
            "rule": "whole-trace-search",
            "inputs": {
                "requests": i1 - i0,
                "target": oracle.target,
                "greedy": greedy.schedule[k],
                "trials": {str(m): round(a, 4) for m, a in sorted(trials.items())},
            },
        }
        out.write(json.dumps(row) + "\n")


def _greedy(
    workload: Workload,
    settings: BacktestSettings,
    oracle: OracleSettings,
    grid: Grid,
    judge: Judge,
    cold_start_s: float,
    lo: int,
    hi: int,
    *,
    exact: bool,
    progress: Callable[[float], None],
    spare_workers: Callable[[], int] | None,
) -> tuple[Scored, list[dict[int, float]]]:
    """Step 1: interval by interval, the fewest replicas meeting the target on the interval's requests.

    Returns the schedule's full run and, per interval, the attainment of each count tried.
    ``exact``: every trial runs until its requests are resolved or to its cap (the decision log
    records exact attainments), instead of stopping once its verdict is certain; the answers are
    the same.
    """
    arrivals = workload.arrival_s
    run = ScheduleRun(workload, settings, grid, cold_start_s)
    n_prev = max(lo, min(hi, settings.initial_replicas))
    #: requests per replica the previous interval's answer served: the guess of the next answer
    per_replica: float | None = None
    schedule: list[int] = []
    tried: list[dict[int, float]] = []
    exiting: list[int] = []
    # Trials that answered exit on their own; every one is waited for, also when the search fails.
    try:
        for k in range(grid.num_intervals):
            t0 = grid.start_s(k)
            t1 = grid.start_s(k + 1)
            i0, i1 = (int(i) for i in np.searchsorted(arrivals, [t0, t1], side="left"))

            def trial(fleet: Fleet, n: int, t0: float = t0, i0: int = i0, i1: int = i1) -> Outcome:
                scale(fleet, n, t0, cold_start_s)
                return _run_trial(
                    fleet,
                    t0,
                    i0,
                    i1,
                    judge,
                    oracle.target,
                    cap_s=oracle.interval_s + oracle.tail_s,
                    exact=exact,
                )

            trials = Trials(run.fleet, trial, exiting)
            queried: list[int] = []
            if not judge.feasible[i0:i1].any():
                n = lo
            else:
                guess = None if per_replica is None else (i1 - i0) / per_replica
                try:
                    n = _search_with(trials, queried, n_prev, lo, hi, oracle.target, guess, spare_workers)
                finally:
                    trials.cancel()
                # n replicas met the SLO and n - 1 (usually) did not: a replica's capacity lies between
                # requests / n and requests / (n - 1). Guessing with the midpoint, a replay of the
                # default preset's searches runs 66 guesses it needs and 17 it does not (with
                # requests / n: 48 and 34; always guessing "met": 63 and 65).
                per_replica = (i1 - i0) / (n - 0.5)
            tried.append({m: trials.done[m][0] for m in set(queried)})
            schedule.append(n)
            run.step(k, n)
            n_prev = n
            progress(float(k + 1) / (grid.num_intervals + 1))
    finally:
        reap(exiting, block=True)
    # After the last interval: in-flight work finishes at the last count.
    schedule.append(schedule[-1] if schedule else lo)
    run.step(grid.num_intervals, schedule[-1])
    progress(1.0)
    return run.result(judge, schedule), tried


def _cheapest_constant(
    workload: Workload,
    settings: BacktestSettings,
    grid: Grid,
    judge: Judge,
    cold_start_s: float,
    lo: int,
    hi: int,
    greedy: Scored,
    *,
    progress: Callable[[float], None],
) -> tuple[Scored | None, int]:
    """Step 2: the fewest replicas that, held throughout, meet the target; (its run, full runs made).

    Only counts cheaper than the greedy schedule are tried when that one meets the target: a
    constant ``n`` costs at least ``n x GPUs x last arrival``. When no count meets it, the
    largest count's run is returned (the fewest misses any fleet here reaches, for the fallback
    target of :func:`run_oracle`), if the greedy schedule missed too.
    """
    allowed = judge.allowed_misses
    arrivals = workload.arrival_s
    last_arrival = float(arrivals[-1]) if arrivals.size else 0.0
    greedy_meets = greedy.misses <= allowed
    if greedy_meets:
        gpus = settings.tp
        top = min(hi, int(greedy.gpu_s // (gpus * last_arrival))) if last_arrival > 0 else lo
    else:
        top = hi
    runs = 0
    size = len(greedy.schedule)

    def meets(n: int) -> Scored | None:
        nonlocal runs
        runs += 1
        scored = run_schedule(workload, settings, grid, cold_start_s, [n] * size, judge, give_up_over=allowed)
        return scored if scored is not None and scored.misses <= allowed else None

    if top < lo:
        progress(1.0)
        return None, runs
    best = meets(top)
    progress(0.25)
    if best is None:
        progress(1.0)
        if greedy_meets:
            return None, runs
        runs += 1
        return run_schedule(workload, settings, grid, cold_start_s, [top] * size, judge), runs
    bad = lo - 1
    good = top
    while good - bad > 1:
        mid = (good + bad) // 2
        scored = meets(mid)
        if scored is not None:
            good, best = mid, scored
        else:
            bad = mid
        progress(0.25 + 0.75 * (1.0 - (good - bad) / max(1.0, top - lo + 1.0)))
    progress(1.0)
    return best, runs


def _run_trial(
    trial: Fleet,
    t0: float,
    i0: int,
    i1: int,
    judge: Judge,
    target: float,
    *,
    cap_s: float,
    exact: bool = False,
) -> Outcome:
    """Simulate ``trial`` from ``t0`` and judge the feasible requests ``i0:i1`` (:class:`_Verdict`).

    Every :data:`_CHECK_S` simulated seconds a :class:`_Verdict` looks. The
    trial ends once every request ``i0:i1`` is resolved (the outcome is then
    exact), once its verdict is certain (unless ``exact``; the simulation up to
    that stop is the full run's, ``run_until`` in steps processing the same
    events, so the verdict is the full run's), or at ``t0 + cap_s``.
    """
    verdict = _Verdict(trial, i0, i1, judge, target)
    end_s = t0 + cap_s
    t = t0
    while True:
        t = min(t + _CHECK_S, end_s)
        trial.run_until(t)
        outcome = verdict.at(t, final=t >= end_s, exact=exact)
        if outcome is not None:
            return outcome


class _Verdict:
    """Whether the feasible requests ``i0:i1`` of a trial are sure to miss or to meet ``target``.

    With ``S`` the feasible requests, ``M`` those that will meet the SLO, and at a
    time ``now``: ``missed`` = those resolved without meeting it plus those still
    queued without a first token past their TTFT target (their TTFT can only be
    later), ``met`` = those completed within the SLO (final). Then
    ``M <= S - missed`` and ``M >= met``:

    * ``(S - missed) / S < target`` -> the attainment is below target;
    * ``met / S >= target`` -> it reaches target.

    Float division rounds monotonically, so the float comparisons imply the
    full run's own. E.g. 2,000 requests and target 0.99: 21 sure misses end
    the trial as failed (1,979 / 2,000 = 0.9895, logged as "at most").
    """

    def __init__(self, trial: Fleet, i0: int, i1: int, judge: Judge, target: float) -> None:
        self.trial, self.i0, self.i1, self.judge, self.target = trial, i0, i1, judge, target
        self.feasible = judge.feasible[i0:i1]
        self.count = int(self.feasible.sum())

    def at(self, now: float, *, final: bool = False, exact: bool = False) -> Outcome | None:
        count, feasible = self.count, self.feasible
        if count == 0:
            return 1.0, 0
        resolved, met = self.judge.outcomes(self.trial, self.i0, self.i1)
        met_n = int(np.count_nonzero(met & feasible))
        open_ = ~resolved & feasible
        if not open_.any():
            return met_n / count, 0
        if final:
            # Still generating at the cap: met if on pace to meet it (a long answer need not end).
            return (met_n + self.judge.on_track(self.trial, self.i0, self.i1, now)) / count, 0
        if exact:
            return None
        missed = int(np.count_nonzero(resolved & ~met & feasible))
        missed += self.judge.late_without_first_token(self.trial, self.i0, self.i1, now)
        upper = float(count - missed) / float(count)
        if upper < self.target:
            return upper, -1
        lower = float(met_n) / float(count)
        if lower >= self.target:
            return lower, 1
        return None


def _search(start: int, lo: int, hi: int) -> Generator[int, bool, int]:
    """Smallest n in [lo, hi] that meets the target, searching outward from ``start``.

    Yields each count to try and is sent whether it met the target; returns
    the answer. Attainment is (nearly) monotone in n; gallop from the previous
    interval's count, then bisect. If even ``hi`` misses, returns ``hi``. The
    sequence of counts tried is a function of the answers alone, so the same
    answers give the same search (``_next_query`` replays it).
    """
    start = min(max(start, lo), hi)
    if (yield start):
        good = start
        step = 1
        bad = lo - 1
        while good - step >= lo:
            if (yield good - step):
                good -= step
                step *= 2
            else:
                bad = good - step
                break
        # bisect in (bad, good]
        while good - bad > 1:
            mid = (good + bad) // 2
            if (yield mid):
                good = mid
            else:
                bad = mid
        return good
    bad = start
    step = 1
    good = hi + 1
    while bad + step <= hi:
        if (yield bad + step):
            good = bad + step
            break
        bad += step
        step *= 2
    if good > hi:
        if (yield hi):
            good = hi
        else:
            return hi
    while good - bad > 1:
        mid = (good + bad) // 2
        if (yield mid):
            good = mid
        else:
            bad = mid
    return good


def _next_query(start: int, lo: int, hi: int, answers: Sequence[bool]) -> tuple[int | None, int | None]:
    """After ``answers`` to the search's queries so far: (next count to try, None) or (None, the answer)."""
    search = _search(start, lo, hi)
    try:
        query = next(search)
        for met in answers:
            query = search.send(met)
    except StopIteration as done:
        return None, int(done.value)
    return query, None


def _smallest_meeting(
    attainment: Callable[[int], float],
    start: int,
    lo: int,
    hi: int,
    target: float,
    before_query: Callable[[int, list[bool]], None] | None = None,
) -> int:
    """:func:`_search` driven by ``attainment(n) >= target``.

    ``before_query(n, answers so far)`` is called before each count is asked about.
    """
    answers: list[bool] = []
    while True:
        query, answer = _next_query(start, lo, hi, answers)
        if query is None:
            assert answer is not None
            return answer
        if before_query is not None:
            before_query(query, answers)
        answers.append(attainment(query) >= target)


def _search_with(
    trials: Trials,
    queried: list[int],
    start: int,
    lo: int,
    hi: int,
    target: float,
    guess: float | None,
    spare_workers: Callable[[], int] | None,
) -> int:
    """:func:`_search` over ``trials``, appending each count queried to ``queried``.

    While ``spare_workers()`` allows, the count the search will query next if
    the current one goes the likely way starts alongside it: likely met when
    the count is at least ``guess`` (the interval's estimated need in
    replicas, fractional). Nothing starts when the likely way ends the search.
    A guess only ever answers a query the search makes anyway, so the answer
    is the same with or without them.
    """

    def before_query(query: int, answers: list[bool]) -> None:
        if spare_workers is not None and query not in trials.done and spare_workers() > 0:
            likely_met = guess is None or query >= guess
            ahead = _next_query(start, lo, hi, [*answers, likely_met])[0]
            trials.start(query)
            if ahead is not None:
                trials.start(ahead)
        queried.append(query)

    return _smallest_meeting(lambda n: trials.outcome(n)[0], start, lo, hi, target, before_query)
