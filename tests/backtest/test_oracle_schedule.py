"""The oracle's schedule search: its arithmetic, its purchases, and that what it reports is a real run."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.backtest.oracle import OracleSettings, run_oracle
from llmscale.backtest.oracle_judge import Judge
from llmscale.backtest.oracle_schedule import (
    DescentSettings,
    Grid,
    Offer,
    _choose,
    cost_change_s,
    descend,
    fill_dips,
    run_schedule,
    schedule_cost_s,
)
from llmscale.backtest.runner import BacktestSettings
from llmscale.sim.config import SimConfig
from llmscale.workloads import Workload, diurnal, flash_crowd
from llmscale.workloads.matrix import mix_lengths

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


@settings(max_examples=200, deadline=None)
@given(schedule=st.lists(st.integers(0, 6), min_size=1, max_size=7), k=st.integers(0, 6), m=st.integers(0, 6))
def test_cost_change_is_the_difference_of_the_schedules_costs(schedule, k, m):
    k %= len(schedule)
    changed = [*schedule[:k], m, *schedule[k + 1 :]]
    whole = schedule_cost_s(changed, I_S, COLD_S) - schedule_cost_s(schedule, I_S, COLD_S)
    assert cost_change_s(schedule, k, m, I_S, COLD_S) == pytest.approx(whole)


@pytest.mark.parametrize(
    ("schedule", "filled"),
    [
        # the default preset's greedy zigzag: a one-interval dip saves 60 s and costs a 108 s
        # start; the first entry rises too (replicas at t = 0 need no start: 120 s for 216 s)
        pytest.param([5, 7, 5, 7, 5, 7, 5], [7, 7, 7, 7, 7, 7, 5], id="zigzag"),
        # two intervals down save 120 s per replica, more than the 108 s to come back: kept
        pytest.param([6, 5, 5, 6], [6, 5, 5, 6], id="two-interval-dip-kept"),
        # a dip of two replicas for one interval: 120 s saved, 216 s of starts: filled
        pytest.param([6, 6, 4, 6, 6], [6, 6, 6, 6, 6], id="deep-dip"),
        # a fall with nothing after it is no dip
        pytest.param([6, 6, 1], [6, 6, 1], id="last"),
        # a lower shoulder inside a dip: filled to the shoulder's level where that pays
        pytest.param([6, 4, 5, 6], [6, 5, 5, 6], id="shoulder"),
    ],
)
def test_fill_dips(schedule, filled):
    assert fill_dips(schedule, I_S, COLD_S) == tuple(filled)


@settings(max_examples=150, deadline=None)
@given(schedule=st.lists(st.integers(0, 4), min_size=1, max_size=5))
def test_fill_dips_is_the_cheapest_schedule_at_least_as_high_everywhere(schedule):
    filled = fill_dips(schedule, I_S, COLD_S)
    assert all(f >= c for f, c in zip(filled, schedule, strict=True))
    # Brute force over every schedule between the given one and its maximum.
    best = min(
        schedule_cost_s(list(c), I_S, COLD_S)
        for c in itertools.product(*(range(n, max(schedule) + 1) for n in schedule))
    )
    assert schedule_cost_s(filled, I_S, COLD_S) == pytest.approx(best)


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


def test_a_run_of_intervals_replaces_the_single_offers_it_covers_and_overlaps_no_other():
    run_misses, allowed = 100, 200
    offers = [
        Offer(k=1, m=4, misses=110.0, saved_s=60.0),  # 10 for 60 s: 0.17 a second
        # intervals 0-3 lowered together: 40 for 240 s, 0.17 too; the larger saving first
        Offer(k=0, m=4, misses=140.0, saved_s=240.0, counts=(4, 4, 4, 4)),
        # overlaps the run without covering interval 1 as low: left
        Offer(k=1, m=3, misses=120.0, saved_s=60.0, counts=(3,)),
        Offer(k=3, m=4, misses=150.0, saved_s=60.0, counts=(4, 4)),  # overlaps, not covered: left
    ]
    bought = _choose(offers, run_misses, allowed)
    # The run goes first; the single offer k=1 at 3 covers none of it: it replaces nothing and
    # sits on a bought interval, so it is left, and so is the run 3-4.
    assert [o.changes() for o in bought] == [{0: 4, 1: 4, 2: 4, 3: 4}]


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


def _code_ramp() -> tuple[Workload, BacktestSettings]:
    """Ten minutes of code completions (2,000-token prompts, 30-token answers) rising from 6 to
    16 req/s: two replicas' worth at the top, one at the bottom; a 108 s cold start."""
    base = diurnal(6.0, 16.0, 1200.0, 600.0, seed=2)
    rng = np.random.default_rng(2)
    prompt, output = mix_lengths("code", Path(".")).sample(base.num_requests, rng)
    w = Workload.from_arrays("code-ramp", base.arrival_s, prompt, output, {})
    s = BacktestSettings(
        min_replicas=1,
        max_replicas=8,
        initial_replicas=2,
        sim=SimConfig(pending_s=60.0, loading_s=19.0, warmup_s=29.0, grace_s=math.inf, timeout_s=60.0),
    )
    return w, s


def test_runs_of_intervals_lower_a_level_that_single_lowerings_cannot():
    # A constant fleet (the oracle's cheapest start on a ramp) holds two replicas from the first
    # minute, where the load needs one. Inside a level every single-interval lowering costs a
    # cold start to buy the replica back (60 s saved, 108 s paid), so the descent of single
    # intervals only trims the drain after the last arrival; lowered together, the first
    # intervals save their minutes for one cold start. Both schedules are full simulated runs.
    w, s = _code_ramp()
    cold_s = 108.0
    grid = Grid.of(w, I_S)
    judge = Judge.build(w, s, 0.99)
    start = run_schedule(w, s, grid, cold_s, [2] * (grid.num_intervals + 1), judge)
    assert start is not None and start.misses <= judge.allowed_misses
    singles, _ = descend(
        start,
        w,
        s,
        grid,
        cold_s,
        judge,
        judge.allowed_misses,
        1,
        descent=DescentSettings(max_run_intervals=1),
    )
    runs, _ = descend(start, w, s, grid, cold_s, judge, judge.allowed_misses, 1)
    # the single-interval search is stuck: no single lowering inside its levels saves GPU-time
    stuck = singles.schedule
    inside = [k for k in range(len(stuck) - 1) if stuck[k] > 1 and stuck[k + 1] == stuck[k]]
    assert len(inside) >= len(stuck) // 2
    assert all(cost_change_s(stuck, k, stuck[k] - 1, I_S, cold_s) > 0 for k in inside)
    # the runs find a cheaper schedule that lowers the first minutes, and it meets the target
    replay = run_schedule(w, s, grid, cold_s, runs.schedule, judge)
    assert replay is not None
    assert replay.misses == runs.misses <= judge.allowed_misses
    assert singles.misses <= judge.allowed_misses
    assert runs.schedule[0] < start.schedule[0]
    assert runs.gpu_s < 0.9 * singles.gpu_s, (runs.schedule, singles.schedule)
