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
"""

from __future__ import annotations

import json
import math
import os
import struct
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import IO

import numpy as np

from llmscale.backtest.results import PolicyResult, slo_met, summarize
from llmscale.backtest.runner import BacktestSettings, SeriesRecorder, build_fleet, series_step_for
from llmscale.errors import LlmscaleError
from llmscale.sim.fleet import Fleet
from llmscale.sim.request import Status
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


def _trial_in_child(fleet: Fleet, run: Callable[[Fleet], float]) -> float:
    """``run(fleet)`` in a forked copy of this process; the parent's fleet is untouched.

    A fork is the snapshot: the child sees the fleet exactly as it is, changes
    only its own copy-on-write pages and sends back one float. This is faster
    than deep-copying a fleet with thousands of requests in flight, and it
    works for the mypyc-compiled simulator classes, which cannot be copied.
    """
    if not hasattr(os, "fork"):
        raise LlmscaleError("the oracle searches with forked trial runs, which needs a POSIX system")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the trial
        code = 1
        try:
            os.close(read_fd)
            os.write(write_fd, struct.pack("<d", run(fleet)))
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        data = b""
        while chunk := os.read(read_fd, 64):
            data += chunk
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    if len(data) != 8 or os.waitstatus_to_exitcode(status) != 0:
        raise LlmscaleError(f"an oracle trial run failed (exit status {status}); its traceback is above")
    return float(struct.unpack("<d", data)[0])


def run_oracle(
    workload: Workload,
    settings: BacktestSettings,
    oracle: OracleSettings | None = None,
    *,
    decisions_out: IO[str] | None = None,
    progress: Callable[[float], None] | None = None,
) -> PolicyResult:
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
    next_sample = step_s
    trials_total = 0
    for k in range(num_intervals):
        t0 = k * oracle.interval_s
        t1 = t0 + oracle.interval_s
        i0, i1 = np.searchsorted(arrivals, [t0, t1], side="left")
        cache: dict[int, float] = {}

        def attainment(
            n: int,
            t0: float = t0,
            t1: float = t1,
            i0: int = int(i0),
            i1: int = int(i1),
            cache: dict[int, float] = cache,
        ) -> float:
            if n not in cache:

                def run(trial: Fleet) -> float:
                    _scale(trial, n, t0, cold_start_s)
                    trial.run_until(t1 + oracle.tail_s)
                    return _interval_attainment(trial, i0, i1, settings)

                cache[n] = _trial_in_child(fleet, run)
            return cache[n]

        no_arrivals = i1 == i0
        n = (
            lo_bound
            if no_arrivals
            else _smallest_meeting(attainment, n_prev, lo_bound, hi_bound, oracle.target)
        )
        trials_total += len(cache)
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
                            "requests": int(i1 - i0),
                            "target": oracle.target,
                            "trials": {str(m): round(a, 4) for m, a in sorted(cache.items())},
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


def _smallest_meeting(attainment: Callable[[int], float], start: int, lo: int, hi: int, target: float) -> int:
    """Smallest n in [lo, hi] with attainment(n) >= target, searching outward from ``start``.

    Attainment is (nearly) monotone in n; gallop from the previous interval's
    count, then bisect. If even ``hi`` misses, returns ``hi``.
    """
    start = min(max(start, lo), hi)
    if attainment(start) >= target:
        good = start
        step = 1
        bad = lo - 1
        while good - step >= lo:
            if attainment(good - step) >= target:
                good -= step
                step *= 2
            else:
                bad = good - step
                break
        # bisect in (bad, good]
        while good - bad > 1:
            mid = (good + bad) // 2
            if attainment(mid) >= target:
                good = mid
            else:
                bad = mid
        return good
    bad = start
    step = 1
    good = hi + 1
    while bad + step <= hi:
        if attainment(bad + step) >= target:
            good = bad + step
            break
        bad += step
        step *= 2
    if good > hi:
        if attainment(hi) >= target:
            good = hi
        else:
            return hi
    while good - bad > 1:
        mid = (good + bad) // 2
        if attainment(mid) >= target:
            good = mid
        else:
            bad = mid
    return good
