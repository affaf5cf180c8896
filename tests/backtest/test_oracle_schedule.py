"""The oracle's schedule search: its arithmetic, its purchases, and that what it reports is a real run."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmscale.backtest.oracle import OracleSettings, run_oracle
from llmscale.backtest.oracle_judge import Judge
from llmscale.backtest.oracle_schedule import Grid, Offer, _choose, cost_change_s, run_schedule
from llmscale.backtest.runner import BacktestSettings
from llmscale.sim.fleet import SimConfig
from llmscale.workloads import flash_crowd

# The default preset's numbers: 60 s intervals, a 108 s cold start.
I_S, COLD_S = 60.0, 108.0


@pytest.mark.parametrize(
    ("schedule", "k", "m", "change_s"),
    [
        # a dip between equal neighbours: 60 s saved, a cold start to buy the replica back
        pytest.param([5, 5, 5], 1, 4, -60.0 + 108.0, id="dip-costs-a-cold-start"),
        # the first interval of a rise: 60 s and the cold start of the rise saved, one paid later
        pytest.param([4, 5, 5], 1, 4, -60.0 - 108.0 + 108.0, id="delay-a-rise"),
        # the last interval of a fall: 60 s saved, nothing bought back
        pytest.param([5, 5, 4], 1, 4, -60.0, id="fall-earlier"),
        # a peak cut by two: 120 s and two cold starts saved
        pytest.param([3, 5, 3], 1, 3, -120.0 - 216.0, id="cut-a-peak"),
        # the first interval: replicas at t = 0 are free, only the next rise is paid
        pytest.param([5, 5], 0, 3, -120.0 + 216.0, id="start-lower"),
        # the last entry (after the arrivals): nothing follows
        pytest.param([5, 5], 1, 2, -180.0, id="drain-smaller"),
    ],
)
def test_cost_change(schedule, k, m, change_s):
    assert cost_change_s(schedule, k, m, I_S, COLD_S) == pytest.approx(change_s)


def test_offers_are_bought_cheapest_first_while_the_slack_lasts():
    run_misses, allowed = 100, 200
    offers = [
        Offer(k=0, m=4, misses=150.0, saved_s=60.0),  # 50 misses for 60 s: 0.83 a second
        Offer(k=1, m=4, misses=110.0, saved_s=60.0),  # 10 for 60 s: 0.17
        Offer(k=2, m=3, misses=180.0, saved_s=60.0),  # 80 for 60 s: 1.33
        Offer(k=1, m=3, misses=130.0, saved_s=120.0),  # interval 1 lower still: 30 for 120 s: 0.25
    ]
    bought = _choose(offers, run_misses, allowed)
    # 10 (k=1 at 4), then k=1 at 3 replaces it (+20), then k=0 (+50): 80 of the 100 of slack; k=2's
    # 80 more does not fit.
    assert [(o.k, o.m) for o in bought] == [(1, 3), (0, 4)]


def _workload():
    return flash_crowd(10.0, 300.0, spike_start_s=100.0, spike_duration_s=60.0, multiplier=4.0, seed=11)


def _settings() -> BacktestSettings:
    return BacktestSettings(
        min_replicas=1,
        max_replicas=10,
        initial_replicas=2,
        sim=SimConfig(pending_s=20.0, loading_s=10.0, warmup_s=5.0, grace_s=10.0, timeout_s=30.0),
    )


def test_the_reported_schedule_is_a_real_run_that_meets_the_target():
    # What the oracle reports is a full simulated run of the schedule it names, not an estimate:
    # replayed, the schedule gives the same GPU-hours and attainment, within its own 99% target.
    w, s = _workload(), _settings()
    result = run_oracle(w, s, OracleSettings())
    summary = result.summary
    schedule = summary["oracle_search"]["schedule"]
    assert summary["slo_attainment_feasible"] >= 0.99
    quiet = replace(s, sim=replace(s.sim, grace_s=math.inf))
    again = run_schedule(w, quiet, Grid.of(w, 60.0), 35.0, schedule, Judge.build(w, quiet, 0.99))
    assert again is not None
    assert again.result.summary["gpu_hours"] == summary["gpu_hours"]
    assert again.result.summary["slo_attainment"] == summary["slo_attainment"]
    # and it is no dearer than where its search started
    assert summary["gpu_hours"] <= summary["oracle_search"]["greedy_gpu_hours"]
