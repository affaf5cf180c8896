"""Start tiers in the simulated fleet: cold, warm node (a kept node), and the sleeping standby pool.

On the affine model of fake_perf.py. Tier durations here are round numbers so each phase
change can be asserted at its exact time: cold 10 + 20 + 30 s, warm node 1 + 2 + 3 s, wake 2 s.
"""

from __future__ import annotations

import numpy as np
import pytest
from fake_perf import FakePerf

from llmscale.sim.config import SimConfig
from llmscale.sim.fleet import Fleet
from llmscale.types import Phase

TIERS = {
    "pending_s": 10.0,
    "loading_s": 20.0,
    "warmup_s": 30.0,
    "warm_node_pending_s": 1.0,
    "warm_node_loading_s": 2.0,
    "warm_node_warmup_s": 3.0,
    "wake_s": 2.0,
}


def make_fleet(*, replicas: int = 1, arrivals=(), **cfg) -> Fleet:
    n = len(arrivals)
    return Fleet(
        FakePerf(),
        SimConfig(**{**TIERS, **cfg}),
        np.asarray(arrivals, dtype=np.float64),
        np.full(n, 100, dtype=np.int64),
        np.full(n, 10, dtype=np.int64),
        initial_replicas=replicas,
        gpus_per_replica=2,
    )


def phases(f: Fleet) -> list[Phase]:
    return sorted(r.phase for r in f.replicas)


def test_a_cold_start_pays_every_phase() -> None:
    f = make_fleet()
    f.scale_to(2, 0.0)
    f.run_until(59.9)
    assert phases(f) == [Phase.WARMUP, Phase.READY]
    f.run_until(60.0)
    assert phases(f) == [Phase.READY, Phase.READY]
    assert f.starts_by_tier() == {"cold": 1, "warm_node": 0, "sleeping": 0}


def test_a_kept_node_starts_warm_until_it_is_released() -> None:
    f = make_fleet(replicas=2, node_keep_s=100.0)
    f.scale_to(1, 0.0)  # idle: gone at once, its node kept until t = 100
    f.scale_to(2, 50.0)
    f.run_until(55.9)
    assert Phase.READY in phases(f) and len(f.ready) == 1
    f.run_until(56.0)  # 1 + 2 + 3 s
    assert len(f.ready) == 2
    f.scale_to(1, 60.0)  # a node kept until t = 160
    f.scale_to(2, 170.0)  # released by then: cold again
    f.run_until(229.9)
    assert len(f.ready) == 1
    f.run_until(230.0)
    assert len(f.ready) == 2
    assert [tier for _, tier in f.start_log] == [1, 0]
    assert f.starts_by_tier() == {"cold": 1, "warm_node": 1, "sleeping": 0}


def test_without_kept_nodes_every_start_is_cold() -> None:
    f = make_fleet(replicas=2)  # node_keep_s = 0, the default
    f.scale_to(1, 0.0)
    f.scale_to(2, 1.0)
    f.run_until(60.9)
    assert len(f.ready) == 1
    f.run_until(61.0)
    assert len(f.ready) == 2


def test_the_pool_fills_asleep_then_wakes_in_seconds() -> None:
    f = make_fleet(replicas=1)
    f.set_standby(2, 0.0)
    # Starting for the pool is not capacity on the way: the controller does not see it.
    assert f.replicas_view() == f.replicas_view()[:1] and len(f.standby_starting) == 2
    f.run_until(60.0)
    assert [r.phase for r in f.sleeping] == [Phase.SLEEPING, Phase.SLEEPING]
    assert len(f.replicas) == 1 and f.start_log == []
    f.scale_to(3, 100.0)
    assert not f.sleeping and phases(f) == [Phase.LOADING, Phase.LOADING, Phase.READY]
    f.run_until(101.9)
    assert len(f.ready) == 1
    f.run_until(102.0)
    assert len(f.ready) == 3
    assert f.starts_by_tier() == {"cold": 0, "warm_node": 0, "sleeping": 2}


def test_sleeping_replicas_are_charged() -> None:
    """A replica in level-1 sleep still holds its GPUs: 1 serving + 2 asleep x 2 GPUs each."""
    f = make_fleet(replicas=1)
    f.set_standby(2, 0.0)
    f.run_until(1000.0)
    assert f.gpu_seconds(1000.0) == pytest.approx(3 * 2 * 1000.0)
    f.set_standby(0, 1000.0)  # released: charged until then only
    f.run_until(2000.0)
    assert not f.sleeping
    assert f.gpu_seconds(2000.0) == pytest.approx(2 * (2000.0 + 2 * 1000.0))


def test_a_scale_down_puts_replicas_to_sleep_while_the_pool_is_short() -> None:
    f = make_fleet(replicas=3)
    f.set_standby(1, 0.0)  # one start for the pool
    f.scale_to(1, 5.0, drain_until_idle=True)  # two idle replicas leave: the pool takes one
    assert len(f.sleeping) == 1 and len(f.replicas) == 1
    # The replica starting for the pool gave its place to one that is ready now.
    assert not f.standby_starting
    # Charged, 2 GPUs each: 3 replicas to t = 5, the cancelled pool start for its 5 s, then one
    # serving and one asleep from 5 to 10.
    assert f.gpu_seconds(10.0) == pytest.approx(2 * (3 * 5 + 5 + 2 * 5))
    f.scale_to(2, 10.0)
    f.run_until(11.9)
    assert len(f.ready) == 1
    f.run_until(12.0)
    assert len(f.ready) == 2 and f.starts_by_tier()["sleeping"] == 1


def test_a_pool_start_is_taken_into_service_when_needed_before_it_sleeps() -> None:
    f = make_fleet(replicas=1)
    f.set_standby(1, 0.0)
    f.scale_to(2, 5.0)  # nobody asleep yet: the pool's replica, 5 s into its cold start, joins
    assert not f.standby_starting and len(f.replicas) == 2
    f.run_until(60.0)
    assert len(f.ready) == 2 and not f.sleeping
    assert f.starts_by_tier() == {"cold": 1, "warm_node": 0, "sleeping": 0}


def test_standby_must_not_be_negative() -> None:
    from llmscale.errors import ConfigError

    with pytest.raises(ConfigError, match=r"set_standby\(-1\)"):
        make_fleet().set_standby(-1, 0.0)
