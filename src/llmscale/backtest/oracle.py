"""The oracle: the fewest replicas per control interval that meet the SLO, knowing the future.

For each control interval in turn, the oracle snapshots the simulated fleet at
the interval's start and searches (with the simulator itself) for the smallest
replica count under which the requests *arriving in that interval* meet the
SLO at the target rate. It then commits that count and moves on. Replicas it
adds are Ready at the interval's start because it launched them one cold start
earlier — and it pays for that: every added replica is charged
``cold_start_s x GPUs`` on top of its simulated life. Scale-downs drain with
no grace deadline (knowing the future, it never kills a generation).

Greedy interval by interval, this is a lower bound on GPU-hours for the SLO in
the sense practitioners use it (what perfect foresight would have spent), not
a proven global optimum: a policy may beat it by a little where holding
capacity a bit longer avoids a second cold start.

Cost. The search queries the same replica counts in the same order as
always (:func:`_smallest_meeting`); two things make a query cheaper without
changing any answer:

* a trial stops as soon as its verdict is certain (:class:`_Verdict`): once
  the requests that can no longer meet the SLO make the target unreachable
  (an under-provisioned trial usually shows it within seconds), or once the
  requests already served within the SLO reach it whatever the rest do. The
  simulation up to the stop is the one a full trial runs (``run_until`` in
  steps processes the same events), so the verdict is the full trial's. Only
  without a decision log: the log records each trial's exact attainment, so
  with one every trial runs to its end (and the log is what it always was);
* while a core is free (``spare_workers``: the other backtest jobs are done),
  the next count the search will likely query runs alongside the current one,
  guessed from the interval's request count against what the previous count
  served; a guess not needed is discarded, and the trials counted and logged
  are the queried ones, so the document does not depend on the timing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import struct
import time
import traceback
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import IO

import numpy as np

from llmscale.backtest.results import PolicyResult, slo_met, summarize
from llmscale.backtest.runner import BacktestSettings, SeriesRecorder, build_fleet, series_step_for
from llmscale.errors import LlmscaleError
from llmscale.sim.fleet import Fleet
from llmscale.sim.request import Req, Status
from llmscale.types import Phase
from llmscale.workloads.model import Workload

__all__ = ["OracleSettings", "run_oracle"]


@dataclass(frozen=True)
class OracleSettings:
    interval_s: float = 60.0
    #: share of an interval's servable requests that must meet the SLO
    target: float = 0.99
    #: how long after an interval's end its requests are followed to judge them: TTFT is settled
    #: within seconds; a request still generating then is judged on its first token
    tail_s: float = 30.0


#: a trial's outcome: its attainment and whether that is exact (0), an upper bound (-1: the trial
#: stopped once it could no longer reach the target) or a lower bound (+1: it stopped once it had)
Outcome = tuple[float, int]

#: simulated seconds between two looks at a trial's verdict (:class:`_Verdict`): a look costs
#: ~0.2 ms, 2 s of a 10-replica fleet ~5 ms (shared 2-core VM)
_CHECK_S = 2.0


class _Trials:
    """Trial runs of one interval, each in a forked copy of this process; the parent's fleet is untouched.

    A fork is the snapshot: the child sees the fleet exactly as it is, changes
    only its own copy-on-write pages and sends back its :data:`Outcome`. This
    is faster than deep-copying a fleet with thousands of requests in flight,
    and it works for the mypyc-compiled simulator classes, which cannot be
    copied. Several trials may run at once (one core each).
    """

    def __init__(self, fleet: Fleet, run: Callable[[Fleet, int], Outcome], exiting: list[int]) -> None:
        if not hasattr(os, "fork"):
            raise LlmscaleError("the oracle searches with forked trial runs, which needs a POSIX system")
        self._fleet = fleet
        self._run = run
        #: replica count -> (child pid, read end of its pipe)
        self._running: dict[int, tuple[int, int]] = {}
        #: children that answered and are exiting (shared from interval to interval): see :func:`reap`
        self._exiting = exiting
        self.done: dict[int, Outcome] = {}

    def start(self, n: int) -> None:
        """Start the trial of ``n`` replicas unless it ran or runs already."""
        if n in self.done or n in self._running:
            return
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the trial
            code = 1
            try:
                os.close(read_fd)
                for _, other_fd in self._running.values():
                    os.close(other_fd)  # the siblings' pipes are the parent's
                value, kind = self._run(self._fleet, n)
                os.write(write_fd, struct.pack("<dd", value, float(kind)))
                # Closed now, the parent reads its end-of-file before this process's memory is
                # torn down (tens of ms for a large fleet here), which it need not wait for.
                os.close(write_fd)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(write_fd)
        self._running[n] = (pid, read_fd)

    def outcome(self, n: int) -> Outcome:
        """The outcome of ``n`` replicas: started now if it is not running, then waited for."""
        if n not in self.done:
            self.start(n)
            pid, read_fd = self._running.pop(n)
            try:
                data = b""
                while chunk := os.read(read_fd, 64):
                    data += chunk
            finally:
                os.close(read_fd)
            if len(data) != 16:
                _, status = os.waitpid(pid, 0)
                raise LlmscaleError(
                    f"an oracle trial run failed (exit status {status}); its traceback is above"
                )
            # A child that wrote its outcome has nothing left to do but exit: reaped later.
            self._exiting.append(pid)
            value, kind = struct.unpack("<dd", data)
            self.done[n] = (value, int(kind))
        return self.done[n]

    def cancel(self) -> None:
        """Stop the trials still running (guesses the search did not need)."""
        for pid, read_fd in self._running.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
        self._running.clear()
        reap(self._exiting, block=False)


def reap(pids: list[int], *, block: bool) -> None:
    """Wait for the children in ``pids`` that have exited (all of them with ``block``); drop them."""
    left = []
    for pid in pids:
        done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
        if done == 0:
            left.append(pid)
    pids[:] = left


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
    by the other jobs), for guessed trials run ahead of the search; None: none."""
    oracle = oracle or OracleSettings()
    wall0 = time.perf_counter()
    cold_start_s = settings.sim.pending_s + settings.sim.loading_s + settings.sim.warmup_s
    sim = replace(settings.sim, grace_s=math.inf)
    settings = replace(settings, sim=sim)
    fleet = build_fleet(workload, settings, 0)
    step_s = series_step_for(workload.duration_s)
    recorder = SeriesRecorder(fleet, step_s)
    arrivals = workload.arrival_s
    last_arrival = float(arrivals[-1]) if arrivals.size else 0.0
    num_intervals = int(last_arrival // oracle.interval_s) + 1
    lo_bound = max(1, settings.min_replicas)
    hi_bound = settings.max_replicas
    n_prev = settings.initial_replicas
    #: requests per replica the previous interval's answer served: the guess of the next answer
    per_replica: float | None = None
    next_sample = step_s
    trials_total = 0
    # The decision log records each trial's attainment, which a trial stopped early does not know
    # (only that it is above or below the target): with a log, every trial runs to its end.
    check_s = _CHECK_S if decisions_out is None else math.inf
    exiting: list[int] = []
    # Trials that answered exit on their own; every one is waited for, also when the search fails.
    try:
        for k in range(num_intervals):
            t0 = k * oracle.interval_s
            t1 = t0 + oracle.interval_s
            i0, i1 = (int(i) for i in np.searchsorted(arrivals, [t0, t1], side="left"))

            def run(
                trial: Fleet, n: int, t0: float = t0, t1: float = t1, i0: int = i0, i1: int = i1
            ) -> Outcome:
                _scale(trial, n, t0, cold_start_s)
                return _run_trial(trial, t0, t1 + oracle.tail_s, i0, i1, settings, oracle.target, check_s)

            trials = _Trials(fleet, run, exiting)
            queried: list[int] = []
            if i1 == i0:
                n = lo_bound
            else:
                guess = None if per_replica is None else (i1 - i0) / per_replica
                try:
                    n = _search_with(
                        trials, queried, n_prev, lo_bound, hi_bound, oracle.target, guess, spare_workers
                    )
                finally:
                    trials.cancel()
                # n replicas met the SLO and n - 1 (usually) did not: a replica's capacity lies between
                # requests / n and requests / (n - 1). Guessing with the midpoint, a replay of the
                # default preset's searches runs 66 guesses it needs and 17 it does not (with
                # requests / n: 48 and 34; always guessing "met": 63 and 65).
                per_replica = (i1 - i0) / (n - 0.5)
            trials_total += len(set(queried))
            _scale(fleet, n, t0, cold_start_s)
            if decisions_out is not None:
                decisions_out.write(
                    json.dumps(
                        {
                            "time_s": t0,
                            "policy": "oracle",
                            "desired": n,
                            "rule": "smallest-meeting-slo",
                            "inputs": {
                                "requests": i1 - i0,
                                "target": oracle.target,
                                "trials": {str(m): round(trials.done[m][0], 4) for m in sorted(set(queried))},
                            },
                        }
                    )
                    + "\n"
                )
            n_prev = n
            while next_sample <= t1:
                fleet.run_until(next_sample)
                recorder.sample(next_sample)
                next_sample += step_s
            fleet.run_until(t1)
            if progress is not None:
                progress(t1)
    finally:
        reap(exiting, block=True)
    # After the last interval: let in-flight work finish at the last count.
    horizon = last_arrival + settings.drain_horizon_s
    t = fleet.now
    while fleet.unresolved > 0 and t <= horizon:
        t = next_sample
        fleet.run_until(t)
        recorder.sample(t)
        next_sample += step_s
    fleet.finish(fleet.now)
    end_s = max(fleet.last_resolved_s, last_arrival)
    result = summarize(
        "oracle",
        workload,
        fleet,
        recorder.cols,
        settings,
        end_s=end_s,
        wall_s=time.perf_counter() - wall0,
    )
    result.summary["oracle_interval_s"] = oracle.interval_s
    result.summary["oracle_target"] = oracle.target
    result.summary["oracle_trials"] = trials_total
    return result


def _scale(fleet: Fleet, n: int, now: float, cold_start_s: float) -> None:
    active = sum(1 for r in fleet.replicas if r.phase < Phase.DRAINING)
    if n > active and now > 0.0:
        fleet.prepaid_gpu_s += (n - active) * cold_start_s * fleet.gpus_per_replica
    fleet.scale_to(n, now, warm=True)


def _interval_attainment(trial: Fleet, i0: int, i1: int, settings: BacktestSettings) -> float:
    status = np.frombuffer(bytes(trial.status[i0:i1]), dtype=np.uint8)
    ttft = np.asarray(trial.ttft_s[i0:i1], dtype=np.float64)
    tpot = np.asarray(trial.tpot_s[i0:i1], dtype=np.float64)
    servable = status != Status.REJECTED
    if not servable.any():
        return 1.0
    met = slo_met(status, ttft, tpot, settings.slo_ttft_s, settings.slo_tpot_s)
    # Still generating at the end of the tail but with a timely first token: judged on TTFT.
    in_flight = (status == Status.IN_FLIGHT) & (np.nan_to_num(ttft, nan=math.inf) <= settings.slo_ttft_s)
    return float((met | in_flight).sum()) / float(servable.sum())


def _run_trial(
    trial: Fleet,
    t0: float,
    end_s: float,
    i0: int,
    i1: int,
    settings: BacktestSettings,
    target: float,
    check_s: float,
) -> Outcome:
    """Simulate ``trial`` to ``end_s`` and judge requests ``i0:i1``, stopping once the verdict is certain.

    Every ``check_s`` simulated seconds (inf: never) a :class:`_Verdict` looks; the
    simulation up to a stop is the full run's (``run_until`` in steps
    processes the same events in the same order), so the verdict is the full
    run's. Run to the end, the outcome is :func:`_interval_attainment`, exact.
    """
    verdict = _Verdict(trial, i0, i1, settings, target)
    t = t0
    while t < end_s:
        t = min(t + check_s, end_s)
        trial.run_until(t)
        if t < end_s:
            early = verdict.at(t)
            if early is not None:
                return early
    return _interval_attainment(trial, i0, i1, settings), 0


class _Verdict:
    """Whether requests ``i0:i1`` of a trial are sure to miss or to meet ``target`` at its end.

    With ``S`` the servable requests at the end, ``M`` those that will count as
    meeting the SLO (:func:`_interval_attainment`), and at a time ``now``:
    ``S_up`` = all minus those rejected so far (rejection happens on arrival,
    so ``S <= S_up``), ``missed`` = those resolved without meeting it plus
    those still queued without a first token ``slo_ttft_s`` after arriving
    (their TTFT can only be later; unresolved at the end they count as missed
    too), ``met`` = those completed within the SLO (final). Then
    ``M <= S - missed`` and ``M >= met``, and since (S - missed) / S grows with S:

    * ``(S_up - missed) / S_up < target`` -> the attainment is below target;
    * ``met / S_up >= target`` -> it reaches target.

    Float division rounds monotonically, so the float comparisons imply the
    full run's own. E.g. 2,000 requests and target 0.99: 21 sure misses end
    the trial as failed (1,979 / 2,000 = 0.9895, logged as "at most").

    A look counts the interval's resolved requests in the simulator
    (:meth:`Fleet.tally`, native): a Python loop over the newly resolved ones
    took ~1 ms a look, about 40% of a trial's time.
    """

    def __init__(self, trial: Fleet, i0: int, i1: int, settings: BacktestSettings, target: float) -> None:
        self.trial, self.i0, self.i1, self.target = trial, i0, i1, target
        self.slo_ttft_s, self.slo_tpot_s = settings.slo_ttft_s, settings.slo_tpot_s

    def at(self, now: float) -> Outcome | None:
        trial, i0, i1 = self.trial, self.i0, self.i1
        rejected, met, missed = trial.tally(i0, i1, self.slo_ttft_s, self.slo_tpot_s)
        servable_max = (i1 - i0) - rejected
        if servable_max <= 0:
            return 1.0, 0  # every request rejected: nothing to serve, as _interval_attainment says
        missed += _late_without_first_token(trial, i0, i1, now - self.slo_ttft_s)
        upper = float(servable_max - missed) / float(servable_max)
        if upper < self.target:
            return upper, -1
        lower = float(met) / float(servable_max)
        if lower >= self.target:
            return lower, 1
        return None


def _late_without_first_token(trial: Fleet, i0: int, i1: int, arrived_before_s: float) -> int:
    """Requests ``i0:i1`` with no first token yet that arrived before ``arrived_before_s``.

    An unresolved request without a first token is in the gateway queue, in a
    replica's waiting queue, or running with prompt tokens left (its
    replica's prefill queue, a subset of its running requests; the first
    token comes with the last prompt token). The three are disjoint, so none
    is counted twice. A request preempted after its first token is not one.
    """
    late = 0
    queued: list[Iterable[Req]] = [trial.gateway]
    for r in trial.replicas:
        queued.append(r.waiting.items())
        # The prefill queue is linked through pf_next and has no iterator; between two
        # run_until calls it is whole (a replica detaches it only inside an iteration's end).
        prefilling = []
        req = r.prefill.first
        while req is not None:
            prefilling.append(req)
            req = req.pf_next
        queued.append(prefilling)
    for queue in queued:
        for req in queue:
            if req.first_token_s < 0.0 and req.arrival_s < arrived_before_s and i0 <= req.idx < i1:
                late += 1
    return late


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
    trials: _Trials,
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
