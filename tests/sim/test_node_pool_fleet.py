"""The simulated node pool: starts wait for a node (Phase.NODE_PENDING), a full pool holds them.

On the affine model of fake_perf.py with the round tier durations of test_start_tiers_fleet.py
(cold 10 + 20 + 30 s, warm node 1 + 2 + 3 s), and a node that takes 100 s to provision, so each
phase change is asserted at its exact time.
"""

from __future__ import annotations

import numpy as np
import pytest
from fake_perf import FakePerf
from test_start_tiers_fleet import TIERS, phases

from llmscale.errors import ConfigError
from llmscale.sim.config import SimConfig
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.types import FleetView, Phase

NODE_S = 100.0


def make_fleet(*, replicas: int = 1, arrivals=(), output_tokens: int = 10, **cfg) -> Fleet:
    n = len(arrivals)
    return Fleet(
        FakePerf(),
        SimConfig(**{**TIERS, **cfg}),
        np.asarray(arrivals, dtype=np.float64),
        np.full(n, 100, dtype=np.int64),
        np.full(n, output_tokens, dtype=np.int64),
        initial_replicas=replicas,
        gpus_per_replica=2,
    )


def test_a_start_waits_for_its_node_then_starts_cold() -> None:
    f = make_fleet(node_start_s=NODE_S)
    f.scale_to(2, 0.0)
    f.run_until(99.9)
    assert phases(f) == [Phase.READY, Phase.NODE_PENDING]
    view = FleetView.from_replicas(2, f.replicas_view())
    assert (view.node_pending, view.pending, view.starting) == (1, 0, 1)
    # What the controller observes of the simulated fleet: the same counts, the waiting replica
    # unscraped (no node, no container), like a Pending one.
    obs = SimMetricSource(f).observe(99.9)
    assert obs.fleet == view
    assert [(s.phase, s.ok) for s in obs.replicas] == [(Phase.READY, True), (Phase.NODE_PENDING, False)]
    f.run_until(100.0)
    assert phases(f) == [Phase.PENDING, Phase.READY]
    f.run_until(159.9)
    assert len(f.ready) == 1
    f.run_until(160.0)  # 100 s node + 10 + 20 + 30 s cold start
    assert len(f.ready) == 2
    assert f.node_pending_seconds(500.0) == pytest.approx(NODE_S)
    assert f.starts_by_tier() == {"cold": 1, "warm_node": 0, "sleeping": 0}


def test_a_kept_node_skips_the_node_wait() -> None:
    f = make_fleet(replicas=2, node_start_s=NODE_S, node_keep_s=300.0)
    f.scale_to(1, 0.0)  # idle: gone at once, its node kept until t = 300
    f.scale_to(2, 50.0)
    assert phases(f) == [Phase.PENDING, Phase.READY]
    f.run_until(56.0)  # warm node: 1 + 2 + 3 s, no node wait
    assert len(f.ready) == 2
    assert f.node_pending_seconds(100.0) == 0.0


def test_a_full_pool_holds_a_start_until_a_node_frees() -> None:
    # Two nodes, both serving: a third replica waits with no node and no GPU.
    f = make_fleet(replicas=2, node_start_s=NODE_S, max_nodes=2)
    f.scale_to(3, 0.0)
    f.run_until(500.0)
    assert phases(f) == [Phase.READY, Phase.READY, Phase.NODE_PENDING]
    assert f.gpu_seconds(500.0) == pytest.approx(2 * 500.0 * 2)  # 2 replicas x 500 s x 2 GPUs
    # A scale-down cancels the waiting replica first (a ReplicaSet deletes unscheduled pods first).
    f.scale_to(2, 500.0)
    assert phases(f) == [Phase.READY, Phase.READY]
    assert f.node_pending_seconds(600.0) == pytest.approx(500.0)
    assert f.starts_by_tier() == {"cold": 0, "warm_node": 0, "sleeping": 0}


def test_a_freed_node_goes_to_the_waiting_start_warm() -> None:
    # Both replicas busy with an ~80 s request (8,000 tokens at ~10 ms a step): a shrink drains one
    # until the 30 s grace deadline, and a scale-up right after finds the pool full (the draining
    # replica still holds its node). At t = 31 it is killed: its node goes to the waiting replica,
    # which starts on it as a warm node (1 + 2 + 3 s): ready at 37 s.
    f = make_fleet(replicas=2, arrivals=(0.0, 0.0), node_start_s=NODE_S, max_nodes=2, output_tokens=8000)
    f.run_until(1.0)
    f.scale_to(1, 1.0)
    f.scale_to(2, 2.0)
    assert phases(f) == [Phase.READY, Phase.DRAINING, Phase.NODE_PENDING]
    f.run_until(30.9)
    assert Phase.NODE_PENDING in phases(f)
    f.run_until(31.0)
    assert phases(f) == [Phase.PENDING, Phase.READY]
    f.run_until(37.0)
    assert len(f.ready) == 2
    assert f.starts_by_tier() == {"cold": 0, "warm_node": 1, "sleeping": 0}
    assert f.node_pending_seconds(100.0) == pytest.approx(29.0)
    # The wait held no GPU: 2 GPUs x (37 s + the drained replica's 31 s + 6 s starting on its node).
    assert f.gpu_seconds(37.0) == pytest.approx(2 * (37.0 + 31.0 + 6.0))


def test_a_withdrawn_node_request_hands_its_slot_to_a_waiting_start() -> None:
    f = make_fleet(replicas=1, node_start_s=NODE_S, max_nodes=2)
    f.scale_to(2, 0.0)  # provisions the second node (up at 100)
    f.set_standby(1, 10.0)  # a standby replica starts: the pool is full, it waits
    (standby,) = f.standby_starting
    assert standby.phase == Phase.NODE_PENDING
    f.scale_to(1, 20.0)  # the start goes with its node request: the waiting one asks for a node
    assert phases(f) == [Phase.READY]
    f.run_until(119.9)
    assert standby.phase == Phase.NODE_PENDING
    f.run_until(120.0)
    assert standby.phase == Phase.PENDING
    # 20 s (the cancelled start) + 10 s waiting without a node + 100 s provisioning
    assert f.node_pending_seconds(200.0) == pytest.approx(130.0)
    # GPUs: the first replica 200 s, the cancelled one 20 s, the standby one from 20 s on (not
    # while it waited with no node)
    assert f.gpu_seconds(200.0) == pytest.approx(2 * (200.0 + 20.0 + 180.0))


def test_no_pool_no_node_wait() -> None:
    f = make_fleet(replicas=1)
    f.scale_to(3, 0.0)
    assert phases(f) == [Phase.PENDING, Phase.PENDING, Phase.READY]
    assert f.node_pending_seconds(10.0) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"node_start_s": -1.0}, "node_start_s = -1.0", id="negative-node-start"),
        pytest.param({"max_nodes": 0}, "max_nodes = 0", id="no-nodes"),
    ],
)
def test_pool_settings_are_validated(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SimConfig(**kwargs)  # type: ignore[arg-type]
