"""The default preset's flash crowd rebuilt: x3 for two minutes outruns a 108 s cold start.

Fifteen minutes of the default hour around its crowd (minute 39: 25,726 of the window's 80,507
requests arrive in its two minutes), ``slo`` on Llama-3-8B / H100 with the catalogue's start
tiers (cold 108 s, wake from level-1 sleep 1.6 s). Without a pool the crowd's queue outlives the
clients' 60 s time-out; a pool of 16 sleeping replicas (the crowd needs ~12 more: the README's
curve) is woken at the next tick and serves it. The same pool waking as slowly as a cold start
buys nothing: the tier is what the pool is for.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from llmscale.backtest.runner import BacktestSettings, run_policy
from llmscale.workloads.presets import make_preset
from llmscale.workloads.transform import window

CROWD_START_S = 300.0  # the default hour's crowd starts at 2,340 s; the window at 2,040 s


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    w = window(make_preset("default", seed=0), 2040.0, 900.0)
    first_minute_rps = float((w.arrival_s < 60.0).sum()) / 60.0
    # The fleet the window starts with: the first minute at ~7 req/s a replica, as slo plans it.
    base = BacktestSettings(
        max_replicas=64, initial_replicas=math.ceil(first_minute_rps / 7.0)
    ).with_cold_start()
    cold_s = base.sim.pending_s + base.sim.loading_s + base.sim.warmup_s
    out: dict[str, Any] = {"workload": w, "cold_s": cold_s}
    for label, pool, sim in (
        ("no pool", 0, {}),
        ("pool 16", 16, {}),
        ("pool 16, slow wake", 16, {"wake_s": cold_s}),
    ):
        settings = replace(
            base, sim=replace(base.sim, **sim), policy_params={"slo": {"standby_replicas": pool}}
        )
        out[label] = run_policy(w, "slo", settings).summary
    return out


def test_the_crowd_outruns_a_cold_start_without_a_pool(runs: dict[str, Any]) -> None:
    w = runs["workload"]
    crowd = int(((w.arrival_s >= CROWD_START_S) & (w.arrival_s < CROWD_START_S + 120.0)).sum())
    r = runs["no pool"]
    assert runs["cold_s"] == pytest.approx(107.9, abs=0.1)
    assert r["starts"]["cold"] > 0 and r["starts"]["sleeping"] == 0
    # Clients give up in the crowd's queue: misses of the order of the crowd itself.
    assert r["timed_out"] > crowd / 4
    assert r["slo_attainment"] < 1.0 - crowd / w.num_requests / 2


def test_a_pool_of_sleeping_replicas_absorbs_it(runs: dict[str, Any]) -> None:
    w = runs["workload"]
    crowd_share = float(((w.arrival_s >= CROWD_START_S) & (w.arrival_s < CROWD_START_S + 120.0)).mean())
    before, after = runs["no pool"], runs["pool 16"]
    assert after["starts"]["sleeping"] >= 12
    # Woken at the next 15 s tick, serving 1.6 s later: long before a client's 60 s time-out.
    assert after["timed_out"] == 0
    assert after["slo_attainment"] - before["slo_attainment"] > crowd_share / 2
    # The pool is paid for while it sleeps: 16 replicas over the 900 s window, 4 GPU-hours.
    assert after["gpu_hours"] - before["gpu_hours"] >= 0.9 * 16 * 900.0 / 3600.0


def test_the_pool_helps_by_its_tier(runs: dict[str, Any]) -> None:
    """The same pool, woken in a cold start's time, leaves the crowd's misses where they were."""
    slow, before = runs["pool 16, slow wake"], runs["no pool"]
    assert slow["starts"]["sleeping"] >= 12
    assert slow["slo_attainment"] == pytest.approx(before["slo_attainment"], abs=0.01)
    assert slow["slo_attainment"] < runs["pool 16"]["slo_attainment"] - crowd_gain_floor(runs)


def crowd_gain_floor(runs: dict[str, Any]) -> float:
    w = runs["workload"]
    return float(((w.arrival_s >= CROWD_START_S) & (w.arrival_s < CROWD_START_S + 120.0)).mean()) / 2
