"""The causal reference: the cheapest schedule found that a controller without foresight could run.

The oracle (:mod:`~llmscale.backtest.oracle`) knows every arrival: it has a
replica Ready at the instant an interval's load needs it. A causal controller
learns of a rise only once it has seen it (``detection_s``) and its replicas
serve one cold start later. The gap between the two is the *price of
foresight*; the gap between a policy and this reference is the policy's own.

The reference is derived from the oracle's schedule, with the same machinery
(:class:`~llmscale.backtest.oracle_schedule.ScheduleRun`, the oracle's
:class:`~llmscale.backtest.oracle_judge.Judge`, its start charge):

1. **Delay.** The oracle's counts are learnt ``detection_s`` late (15 s: a
   tick and a few seconds of arrivals); a rise serves one cold start after it
   is learnt (the default 108 s: 123 s after the oracle has it), a fall at once
   (:func:`delayed_schedule`). Changes land on the reference's own 6 s grid.
   Before the first change the fleet is the oracle's first count, warm from
   t = 0 like every policy's initial fleet.
2. **Headroom where it misses.** Delayed, the oracle's counts arrive after
   the load they were chosen for. The delayed schedule is run in full; while it
   misses the target, the minutes holding the most missed requests (and the
   minute before each) get headroom levels of max(1, 10%) replicas each, 1
   then doubled (:func:`_raise_levels`), and it runs again (``rounds``); the
   last doubling is bisected back (two runs) where it overshot.
3. **Uniform headroom** when that does not meet the target: ``ceil(n x (1 +
   h))`` everywhere, ``h`` doubling from 1/8 up to ``max_headroom`` until a run
   meets it, then bisected (``bisect_steps`` runs). A run is given up once its
   certain misses exceed the budget, so a short run costs little.
4. **Constant fleets**: the oracle's cheapest constant fleet (or its peak
   count) and one fewer, each a run: holding a fleet needs no foresight of when.
5. **Target.** The oracle's (99% of the feasible requests), or what the
   largest headroom reaches when it misses that: min(99%, reachable).

The answer is the cheapest run of the search that met the target: every
number it reports was run in full on the simulator. It is a reference, not a
proof: ``tests/backtest/test_causal_reference.py`` checks that no policy of the
default roster reaches min(99%, its attainment) with fewer GPU-hours on the
default preset and a shared trace, and that it never costs less than the
oracle.

Cost: one full run per headroom tried, most of them given up early; on the
default hour ten full runs (six rounds, two trims, two constant fleets), under
the oracle's own search (the CLI prints the reference's ``wall_s``). With
``spare_workers`` (a pool's worker) the constant fleets, and the trim's second
candidates when a worker is idle, run in forked processes beside the search
(:class:`_Forked`); ``benchmarks/causal_reference_cost.py`` prints the ratio of
the default backtest's wall time with and without the reference.
"""

from __future__ import annotations

import functools
import math
import os
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from llmscale.backtest.forks import Forks
from llmscale.backtest.oracle_judge import Judge
from llmscale.backtest.oracle_schedule import Grid, ScheduleRun, Scored
from llmscale.backtest.results import PolicyResult
from llmscale.backtest.runner import BacktestSettings
from llmscale.errors import ConfigError, LlmscaleError
from llmscale.workloads.model import Workload

__all__ = ["REFERENCE", "ReferenceSettings", "delayed_schedule", "run_causal_reference", "uniform_headroom"]

#: the reference's name in results and the JSON document's key
REFERENCE = "causal-reference"


@dataclass(frozen=True)
class ReferenceSettings:
    #: how long a causal controller needs to see a change of load (s); 15 s: one tick of the
    #: fastest default policy loop plus a few seconds of arrivals
    detection_s: float = 15.0
    #: the reference's own control grid (s): the delayed changes land on its multiples
    step_s: float = 6.0
    #: largest headroom tried (2.0: three times the oracle's count)
    max_headroom: float = 2.0
    #: bisection runs between the last headroom that missed and the first that met
    bisect_steps: int = 3
    #: the span (s) of one headroom level in the targeted search
    segment_s: float = 60.0
    #: full runs of the targeted search after the delayed schedule's own
    rounds: int = 5
    #: most headroom levels of one segment
    max_level: int = 32

    def __post_init__(self) -> None:
        if not (math.isfinite(self.detection_s) and self.detection_s >= 0.0):
            raise ConfigError(f"detection_s = {self.detection_s}: must be a finite duration >= 0")
        if not (math.isfinite(self.step_s) and self.step_s > 0.0):
            raise ConfigError(f"step_s = {self.step_s}: must be a finite duration > 0")
        if not (math.isfinite(self.max_headroom) and self.max_headroom >= 0.0):
            raise ConfigError(f"max_headroom = {self.max_headroom}: must be finite and >= 0")
        if not (math.isfinite(self.segment_s) and self.segment_s >= self.step_s):
            raise ConfigError(f"segment_s = {self.segment_s}: must be finite and >= step_s ({self.step_s})")
        if self.rounds < 0 or self.max_level < 1:
            raise ConfigError(f"rounds = {self.rounds}, max_level = {self.max_level}: need >= 0 and >= 1")
        if self.bisect_steps < 0:
            raise ConfigError(f"bisect_steps = {self.bisect_steps}: must be >= 0")


def delayed_schedule(
    oracle_schedule: Sequence[int],
    oracle_interval_s: float,
    detection_s: float,
    start_s: float,
    grid: Grid,
    headroom: float,
    lo: int,
    hi: int,
) -> tuple[int, ...]:
    """What a causal controller holds if it learns each oracle count ``detection_s`` late and its
    new replicas serve ``start_s`` after it orders them, times ``1 + headroom`` (rounded up), on
    ``grid`` (one entry per step and one after the last, as a schedule of
    :class:`~llmscale.backtest.oracle_schedule.ScheduleRun`), clipped to ``[lo, hi]``.

    Learnt at ``t``: ``L(t) = S(t - detection_s)`` (``S``: the oracle's count, its first before
    ``detection_s``). A rise is served one start later, a fall at once (a drained replica stops
    taking requests when asked), so the fleet serving at ``t`` is ``min(L(t), L(t - start_s))``.
    E.g. oracle [4, 6, 5] at 60 s, detection 15 s, start 108 s, 6 s steps, headroom 0.25: the
    rise to 6 is learnt at 75 s, the fall to 5 at 135 s, before the rise would serve (183 s), so
    the 6 never serves: 5 replicas (4 x 1.25) until 180 s, then 7 (5 x 1.25, rounded up) from
    186 s, the first step after 183 s.
    """
    if not oracle_schedule:
        raise ConfigError("delayed_schedule: the oracle's schedule is empty")
    last = len(oracle_schedule) - 1

    def learnt(t: float) -> int:
        j = 0 if t < detection_s else min(last, int((t - detection_s) // oracle_interval_s))
        return oracle_schedule[j]

    out = []
    for k in range(grid.num_intervals + 1):
        t = grid.start_s(k)
        base = min(learnt(t), learnt(t - start_s))
        # 1e-9: 4 x 1.25 is exactly 5 and must not round up to 6 through float error
        n = math.ceil(base * (1.0 + headroom) - 1e-9)
        out.append(min(hi, max(lo, n)))
    return tuple(out)


def _run(
    workload: Workload,
    settings: BacktestSettings,
    grid: Grid,
    cold_start_s: float,
    schedule: Sequence[int],
    judge: Judge,
    give_up_over: int | None,
    check_every: int,
) -> Scored | None:
    """The full run of ``schedule``; None once more than ``give_up_over`` misses are certain
    (looked at every ``check_every`` steps: a look scans every request, ~1 ms per 100k)."""
    run = ScheduleRun(workload, settings, grid, cold_start_s)
    for k, n in enumerate(schedule):
        run.step(k, n)
        if (
            give_up_over is not None
            and k < grid.num_intervals
            and k % check_every == check_every - 1
            and judge.sure_misses(run.fleet, run.fleet.now) > give_up_over
        ):
            return None
    return run.result(judge, schedule)


class _Forked:
    """Runs of :func:`_run` in forked processes (:class:`~llmscale.backtest.forks.Forks`), started
    before the search asks for them.

    A fork starts from the parent's memory as it is, so the child's run is the run the parent
    would make (a fresh fleet from the same settings and seed: nothing of the parent's own runs
    leaks into it) and its :class:`Scored` comes back pickled through a pipe. The search still
    asks for its runs in its own order and records only those it asks for: a run started on a
    guess it does not need is killed, so the record (``reference_search``) is the serial one's.
    """

    def __init__(self) -> None:
        #: (schedule, give-up budget) -> its forked run
        self._forks: Forks[tuple[tuple[int, ...], int | None]] = Forks()

    def start(self, key: tuple[tuple[int, ...], int | None], run: Callable[[], Scored | None]) -> None:
        self._forks.start(key, lambda: pickle.dumps(run(), protocol=pickle.HIGHEST_PROTOCOL))

    def __contains__(self, key: tuple[tuple[int, ...], int | None]) -> bool:
        return key in self._forks

    def take(self, key: tuple[tuple[int, ...], int | None]) -> Scored | None:
        """The run started for ``key``, waited for."""
        pid, data = self._forks.read(key)
        _, status = os.waitpid(pid, 0)
        if status != 0 or not data:
            raise LlmscaleError(
                f"a causal reference run failed (exit status {status}); its traceback is above"
            )
        scored: Scored | None = pickle.loads(data)
        return scored

    def cancel(self) -> None:
        """Stop the runs the search did not ask for."""
        self._forks.cancel()


def _middle(low: Sequence[int], high: Sequence[int]) -> list[int]:
    """Halfway from ``low`` to ``high``, segment by segment (rounded down; ``high`` where it is
    not above ``low``): the trim's bisection step. E.g. [0, 2, 4] to [1, 4, 8]: [1, 3, 6]."""
    return [(a + b) // 2 if b > a else b for a, b in zip(low, high, strict=True)]


def with_levels(
    base: Sequence[int], levels: Sequence[int], segment_steps: int, lo: int, hi: int
) -> tuple[int, ...]:
    """``base`` with each segment of ``segment_steps`` entries raised by its headroom level:
    ``level`` x max(1, ceil(10% of the count)) replicas, clipped to ``[lo, hi]``. E.g. base 3,
    level 2: 5; base 16, level 1: 18."""
    out = []
    for k, n in enumerate(base):
        level = levels[min(k // segment_steps, len(levels) - 1)]
        step = max(1, math.ceil(0.1 * n - 1e-9))
        out.append(min(hi, max(lo, n + level * step)))
    return tuple(out)


def _raise_levels(
    levels: list[int], miss_arrival_s: np.ndarray, excess: int, segment_s: float, max_level: int
) -> bool:
    """Raise the segments with the most misses (by arrival), and the segment before each (a
    backlog builds before the requests it delays), until they hold ``excess`` misses: a level
    of 0 to 1, else doubled (1, 2, 4, 8: a flash crowd that needs ten more replicas is reached
    in five runs); False when none could be raised."""
    segs = np.minimum((miss_arrival_s // segment_s).astype(np.int64), len(levels) - 1)
    counts = np.bincount(segs, minlength=len(levels))
    raised, covered = False, 0
    done: set[int] = set()
    for seg in np.argsort(-counts, kind="stable"):
        if covered >= excess or counts[seg] == 0:
            break
        for j in (int(seg) - 1, int(seg)):
            if j >= 0 and j not in done and levels[j] < max_level:
                levels[j] = min(max_level, max(1, 2 * levels[j]))
                done.add(j)
                raised = True
        covered += int(counts[seg])
    return raised


def uniform_headroom(meets_at: Callable[[float], bool], reference: ReferenceSettings) -> float | None:
    """The search's uniform headroom (step 3 of the module docstring): ``meets_at(h)`` runs the
    schedule with headroom ``h`` and says whether it met the target; ``h`` doubles from 1/8 up to
    ``max_headroom`` until one meets, then ``bisect_steps`` runs halve the gap to the last that
    missed. The lowest ``h`` that met, or None when not even ``max_headroom`` did. E.g. misses
    at 1/8 and 1/4, meets at 1/2: then 3/8 (meets), 5/16, 11/32."""
    miss_h, hit_h = 0.0, None
    h = 0.125
    while True:
        h = min(h, reference.max_headroom)
        if meets_at(h):
            hit_h = h
            break
        miss_h = h
        if h >= reference.max_headroom:
            return None
        h *= 2.0
    for _ in range(reference.bisect_steps):
        mid = (miss_h + hit_h) / 2.0
        if meets_at(mid):
            hit_h = mid
        else:
            miss_h = mid
    return hit_h


def run_causal_reference(
    workload: Workload,
    settings: BacktestSettings,
    oracle: PolicyResult,
    reference: ReferenceSettings | None = None,
    *,
    spare_workers: Callable[[], int] | None = None,
) -> PolicyResult:
    """The causal reference's run on ``workload``, derived from ``oracle`` (a result of
    :func:`~llmscale.backtest.oracle.run_oracle`, whose summary holds its schedule, interval and
    target). ``settings`` as given to the oracle.

    With ``spare_workers`` (how many more processes may run now, as the oracle is given it; None:
    every run in this process, one after another) the runs that wait for no verdict of the search
    fork beside it (POSIX only): the two constant fleets from the start (runs the search makes
    anyway, ~30% of its work on the default hour), and, while a worker is spare, both candidates
    of the trim's second step alongside its first (one of them is wasted, on a core that was idle).
    The result is the serial search's, byte for byte
    (``tests/backtest/test_causal_reference_parallel.py``).
    """
    reference = reference or ReferenceSettings()
    forked = _Forked() if spare_workers is not None and hasattr(os, "fork") else None
    try:
        return _search(workload, settings, oracle, reference, forked, spare_workers or (lambda: 0))
    finally:
        if forked is not None:
            forked.cancel()


def _search(
    workload: Workload,
    settings: BacktestSettings,
    oracle: PolicyResult,
    reference: ReferenceSettings,
    forked: _Forked | None,
    spare_workers: Callable[[], int],
) -> PolicyResult:
    wall0 = time.perf_counter()
    summary = oracle.summary
    search = summary.get("oracle_search")
    if not isinstance(search, dict) or not search.get("schedule"):
        raise ConfigError("run_causal_reference: the oracle result carries no schedule")
    oracle_schedule = [int(n) for n in search["schedule"]]
    interval_s = float(summary["oracle_interval_s"])
    target = float(summary["oracle_target"])
    # The oracle's accounting: a start costs the cold start per GPU, removed replicas drain.
    cold_start_s = settings.sim.pending_s + settings.sim.loading_s + settings.sim.warmup_s
    settings = replace(settings, sim=replace(settings.sim, grace_s=math.inf))
    delay_s = reference.detection_s + cold_start_s  # of a rise
    grid = Grid.of(workload, reference.step_s)
    judge = Judge.build(workload, settings, target)
    lo = max(1, settings.min_replicas)
    hi = max(lo, settings.max_replicas)
    # Look at a run's certain misses about once a minute of simulated time.
    check_every = max(1, round(60.0 / reference.step_s))
    segment_steps = max(1, round(reference.segment_s / reference.step_s))
    arrivals = workload.arrival_s

    runs: dict[tuple[int, ...], Scored | None] = {}
    tried: list[tuple[str, int | None, float | None]] = []
    allowed = judge.allowed_misses

    def run_now(schedule: tuple[int, ...], give_up_over: int | None) -> Scored | None:
        return _run(workload, settings, grid, cold_start_s, schedule, judge, give_up_over, check_every)

    def prefetch(schedule: tuple[int, ...]) -> None:
        """Start the run ``attempt(..., schedule)`` will ask for (give-up budget as now)."""
        if forked is not None and schedule not in runs:
            forked.start((schedule, allowed), functools.partial(run_now, schedule, allowed))

    def attempt(label: str, schedule: tuple[int, ...], *, give_up: bool = True) -> Scored | None:
        if schedule not in runs or (runs[schedule] is None and not give_up):
            key = (schedule, allowed if give_up else None)
            if forked is not None and key in forked:
                runs[schedule] = forked.take(key)
            else:
                runs[schedule] = run_now(schedule, key[1])
        scored = runs[schedule]
        tried.append(
            (label, None if scored is None else scored.misses, None if scored is None else scored.gpu_s)
        )
        return scored

    def uniform(h: float, *, give_up: bool = True) -> Scored | None:
        schedule = delayed_schedule(
            oracle_schedule, interval_s, reference.detection_s, cold_start_s, grid, h, lo, hi
        )
        return attempt(f"h={h:g}", schedule, give_up=give_up)

    def meets(s: Scored | None) -> bool:
        return s is not None and s.misses <= allowed

    # The constant fleets of step 3 wait for no verdict of the search: started now, they run
    # beside it (with ``forked``) under the budget they will be judged by, unless step 2 lowers it.
    constant = search.get("constant_replicas")
    peak = int(constant) if isinstance(constant, int) else max(oracle_schedule)
    constants = [(n, tuple([n] * (grid.num_intervals + 1))) for n in (peak - 1, peak) if lo <= n <= hi]
    for _, schedule in constants:
        prefetch(schedule)
    # 1. Headroom where the delayed schedule misses: run it in full, raise the segments holding
    #    the most misses (and the one before each) a level, run again, up to ``rounds`` times.
    base = delayed_schedule(
        oracle_schedule, interval_s, reference.detection_s, cold_start_s, grid, 0.0, lo, hi
    )
    levels = [0] * (len(base) // segment_steps + 1)
    previous = list(levels)
    found = False
    for r in range(reference.rounds + 1):
        run = attempt(f"levels#{r}", with_levels(base, levels, segment_steps, lo, hi), give_up=False)
        assert run is not None
        if run.misses <= allowed:
            found = True
            break
        missed = ~run.met & judge.feasible
        previous = list(levels)
        if not _raise_levels(
            levels, arrivals[missed], run.misses - allowed, reference.segment_s, reference.max_level
        ):
            break
    if found and levels != previous:
        # The last doubling may overshoot (a crowd needing 5 levels got 8): halfway back, twice.
        # The second step halves whichever side the first leaves: while a worker is spare, both
        # of its candidates run beside the first (one is wasted, on a core otherwise idle).
        if spare_workers() > 0:
            first = _middle(previous, levels)
            for low, high in ((previous, first), (first, levels)):
                middle = _middle(low, high)
                if first not in (previous, levels) and middle not in (low, high):
                    prefetch(with_levels(base, middle, segment_steps, lo, hi))
        for _ in range(2):
            middle = _middle(previous, levels)
            if middle in (levels, previous):
                break
            if meets(attempt("levels-trim", with_levels(base, middle, segment_steps, lo, hi))):
                levels = middle
            else:
                previous = middle
    # 2. Otherwise the same headroom everywhere: doubling from 1/8, then bisected.
    if not found:
        hit_h = uniform_headroom(lambda h: meets(uniform(h)), reference)
        if hit_h is None:
            # Not even the largest headroom meets 99%: its attainment is what is reachable, and
            # the reference is the cheapest run reaching it.
            top = uniform(reference.max_headroom, give_up=False)
            assert top is not None
            allowed = min(s.misses for s in runs.values() if s is not None)
    # 3. A constant fleet is causal too (it needs no forecast): the oracle's cheapest constant
    #    meeting the target (its search's, else its peak count) and one replica fewer. On a
    #    bursty cell (Azure in burst mode) 8 replicas held cost less than any late schedule.
    for n, schedule in constants:
        attempt(f"constant={n}", schedule)
    meeting = [s for s in runs.values() if s is not None and s.misses <= allowed]
    best = min(meeting, key=lambda s: s.gpu_s)
    result = best.result
    out = dict(result.summary)
    out["policy"] = REFERENCE
    out["wall_s"] = round(time.perf_counter() - wall0, 3)
    out["reference_detection_s"] = reference.detection_s
    out["reference_delay_s"] = round(delay_s, 3)
    out["reference_target"] = target
    out["reference_search"] = {
        "allowed_misses": allowed,
        "misses": best.misses,
        "runs": sum(1 for s in runs.values() if s is not None),
        "given_up": sum(1 for s in runs.values() if s is None),
        # (what was run, misses or None when given up, GPU-seconds) of each attempt, in order
        "tried": [[label, m, None if g is None else round(g, 1)] for label, m, g in tried],
        "step_s": reference.step_s,
        "schedule": list(best.schedule),
    }
    return PolicyResult(out, result.series)
