"""How much a policy that cannot see the future must already hold when load jumps without warning.

A causal policy decides at ``t`` from what arrived before ``t``. Before a
step or a flash crowd the history is flat, so the fleet it holds when the
jump arrives, and until replicas ordered then are Ready, was chosen on flat
load. This module measures that fleet with the simulator:

* :func:`run_reactive` runs the *best reactive continuation* of a count
  ``pre`` held until the jump: ``pre`` replicas serve from t = 0 (warm, as
  every policy's initial fleet); at the jump, with zero detection delay,
  replicas are ordered up to ``post`` and serve one start later
  (``start_s``: the tier the caller names, charged ``start_s`` per GPU per
  replica as a real start is billed from Pending); optionally the fleet
  drains back to ``pre`` at ``back_s``. No real policy reacts faster: it
  must see arrivals before it can tell a jump from noise.
* :func:`smallest_pre` bisects on full runs for the fewest ``pre`` under
  which that run reaches a required attainment, given a ``post`` as large as
  the caller allows (hindsight sizing after the jump). Attainment is
  (nearly) monotone in ``pre``; every count it reports as the answer was
  run and met the target, and the one below it was run and missed
  (``tests/backtest/test_causal_bound.py`` re-runs both).
* :func:`flat_companion` is the same workload without the jump: the jump's
  own requests before the jump (the identical history a causal policy saw),
  then the flat rate continued to the end. A policy that does not know *when*
  a jump comes must hold ``pre`` at every moment of such a history, so
  there it spends at least ``pre`` x GPUs x the window, against the flat
  cell's oracle.

``benchmarks/causal_bound.py --matrix`` runs this on the workload matrix's step
and flash cells.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from llmscale.backtest.oracle_schedule import scale
from llmscale.backtest.results import PolicyResult, summarize
from llmscale.backtest.runner import BacktestSettings, SeriesRecorder, build_fleet, series_step_for
from llmscale.errors import ConfigError
from llmscale.workloads.model import Workload

__all__ = [
    "PreSearch",
    "ReactivePlan",
    "flat_companion",
    "run_reactive",
    "run_steps",
    "smallest_pre",
]


@dataclass(frozen=True)
class ReactivePlan:
    """``pre`` replicas until ``event_s + start_s``, then ``post`` (until ``back_s``, then ``pre``)."""

    pre_replicas: int
    #: when the load jumps (s); replicas are ordered at this instant (zero detection delay)
    event_s: float
    #: order-to-serving time of a replica ordered at the jump (s), and what each one is charged
    start_s: float
    post_replicas: int
    #: when the fleet drains back to ``pre_replicas`` (s); None: ``post_replicas`` to the end
    back_s: float | None = None

    def __post_init__(self) -> None:
        if self.pre_replicas < 1 or self.post_replicas < 1:
            raise ConfigError(
                f"pre_replicas = {self.pre_replicas}, post_replicas = {self.post_replicas}: must be >= 1"
            )
        if not (math.isfinite(self.event_s) and self.event_s >= 0.0):
            raise ConfigError(f"event_s = {self.event_s}: must be a finite time >= 0")
        if not (math.isfinite(self.start_s) and self.start_s >= 0.0):
            raise ConfigError(f"start_s = {self.start_s}: must be a finite duration >= 0")
        if self.back_s is not None and not self.back_s >= self.ready_s:
            raise ConfigError(f"back_s = {self.back_s}: must be >= event_s + start_s ({self.ready_s})")

    @property
    def ready_s(self) -> float:
        return self.event_s + self.start_s

    def steps(self) -> list[tuple[float, int]]:
        out = [(self.ready_s, max(self.pre_replicas, self.post_replicas))]
        if self.back_s is not None:
            out.append((self.back_s, self.pre_replicas))
        return out


def run_steps(
    workload: Workload,
    settings: BacktestSettings,
    initial_replicas: int,
    steps: Sequence[tuple[float, int]],
    start_s: float,
    *,
    name: str = "reactive",
) -> PolicyResult:
    """A full simulator run: ``initial_replicas`` warm at t = 0, then at each ``(time_s, n)`` the
    fleet is scaled to ``n`` serving replicas, as the oracle scales
    (:func:`~llmscale.backtest.oracle_schedule.scale`): each replica added serves at once and is
    charged ``start_s`` per GPU (it was ordered ``start_s`` earlier), removed ones drain until idle
    (nothing is killed). Runs until every request is resolved or ``drain_horizon_s`` after the last
    arrival. ``steps`` in time order."""
    times = [t for t, _ in steps]
    if any(b < a for a, b in itertools.pairwise(times)):
        raise ConfigError(f"steps must be in time order: {list(steps)}")
    wall0 = time.perf_counter()
    settings = replace(settings, sim=replace(settings.sim, grace_s=math.inf))
    fleet = build_fleet(workload, settings, initial_replicas)
    step_s = series_step_for(workload.duration_s)
    recorder = SeriesRecorder(fleet, step_s)
    arrivals = workload.arrival_s
    last_arrival_s = float(arrivals[-1]) if arrivals.size else 0.0
    horizon_s = last_arrival_s + settings.drain_horizon_s
    pending = list(steps)
    t_sample = step_s
    while True:
        t_next = min(t_sample, pending[0][0]) if pending else t_sample
        fleet.run_until(t_next)
        if pending and pending[0][0] <= t_next:
            at_s, n = pending.pop(0)
            scale(fleet, n, at_s, start_s)
            continue
        recorder.sample(t_next)
        t_sample += step_s
        done = fleet.arrivals_done and fleet.unresolved == 0
        if not pending and (done or t_next > horizon_s):
            break
    fleet.finish(fleet.now)
    end_s = max(fleet.last_resolved_s, last_arrival_s)
    return summarize(
        name, workload, fleet, recorder.cols, settings, end_s=end_s, wall_s=time.perf_counter() - wall0
    )


def run_reactive(workload: Workload, settings: BacktestSettings, plan: ReactivePlan) -> PolicyResult:
    """The run of ``plan`` (:func:`run_steps`)."""
    return run_steps(workload, settings, plan.pre_replicas, plan.steps(), plan.start_s)


@dataclass(frozen=True)
class PreSearch:
    """The fewest replicas held at the jump that reach ``need``, and every count's attainment tried."""

    #: the answer; None when even the largest count allowed misses ``need``
    pre_replicas: int | None
    need: float
    #: attainment of each count run
    tried: dict[int, float]
    #: the answer's run (None with no answer)
    run: PolicyResult | None


def smallest_pre(attainment_run: Callable[[int], PolicyResult], need: float, lo: int, hi: int) -> PreSearch:
    """Bisect for the fewest ``n`` in ``[lo, hi]`` whose run reaches ``need`` (``slo_attainment``).

    ``attainment_run(n)``: a full run with ``n`` replicas held at the jump. Starts with ``hi``
    (None when it misses too); the answer's neighbour below was run and missed, unless it is
    ``lo``. E.g. counts 1..16: ``hi`` and four more runs.
    """
    if not 1 <= lo <= hi:
        raise ConfigError(f"lo = {lo}, hi = {hi}: need 1 <= lo <= hi")
    tried: dict[int, float] = {}
    runs: dict[int, PolicyResult] = {}

    def meets(n: int) -> bool:
        r = attainment_run(n)
        runs[n] = r
        tried[n] = float(r.summary["slo_attainment"])
        return tried[n] >= need

    if not meets(hi):
        return PreSearch(None, need, tried, None)
    good, bad = hi, lo - 1
    while good - bad > 1:
        mid = (good + bad) // 2
        if meets(mid):
            good = mid
        else:
            bad = mid
    return PreSearch(good, need, tried, runs[good])


def flat_companion(step: Workload, flat: Workload, event_s: float) -> Workload:
    """``step``'s requests before ``event_s``, then ``flat``'s from ``event_s`` on.

    ``flat`` is drawn at the rate ``step`` holds before its jump (Poisson
    arrivals with lengths from the same mix), so the result is that flat rate
    over the whole window, and its history up to the jump is ``step``'s own:
    any causal policy's fleet until ``event_s`` is the same on both.
    """
    a, b = step.arrival_s < event_s, flat.arrival_s >= event_s
    if not a.any() or not b.any():
        raise ConfigError(f"flat_companion: event_s = {event_s} leaves one side without requests")
    return Workload.from_arrays(
        f"{step.name}:flat",
        np.concatenate((step.arrival_s[a], flat.arrival_s[b])),
        np.concatenate((step.input_tokens[a], flat.input_tokens[b])),
        np.concatenate((step.output_tokens[a], flat.output_tokens[b])),
        {"flat_companion_of": step.name, "event_s": event_s},
    )
