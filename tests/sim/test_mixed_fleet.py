"""A fleet of two GPU types (sim/mixed.py): per-type step times, the router by least expected wait,
scaling per type and GPU-seconds per type. On the affine fake step-time model (fake_perf.py)."""

from __future__ import annotations

import numpy as np
import pytest
from fake_perf import FakePerf

from llmscale.errors import ConfigError
from llmscale.sim.config import SimConfig
from llmscale.sim.fleet import Fleet
from llmscale.sim.mixed import GpuPool
from llmscale.types import Phase, Status

SLOW = GpuPool("slow", FakePerf(base_s=0.020, per_prefill_tok_s=2e-4), 1.0, weight_rps=1.0)
FAST = GpuPool("fast", FakePerf(base_s=0.010, per_prefill_tok_s=1e-4), 1.0, weight_rps=2.0)
CFG = SimConfig(pending_s=1.0, loading_s=1.0, warmup_s=1.0, grace_s=5.0, timeout_s=600.0)


def _fleet(arrivals, inputs, outputs, *, replicas=1, cfg=CFG) -> Fleet:
    return Fleet(
        SLOW.perf,
        cfg,
        np.asarray(arrivals, dtype=np.float64),
        np.asarray(inputs, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
        initial_replicas=replicas,
        gpus_per_replica=1.0,
        pools=(SLOW, FAST),
    )


def test_the_router_weighs_replicas_by_their_speed() -> None:
    # One slow replica (warm, pool 0) and one fast one (started by scale_mix, ready at t = 3 s).
    # Three long requests at t = 10 s, one after another: (outstanding + 1) / weight sends the
    # first to the fast replica (1/2 < 1/1), the second to the slow one (2/2 = 1/1: the first in
    # ready order), the third to the fast one again (2/2 < 2/1): two of three to the twice-as-fast.
    f = _fleet([10.0, 10.0, 10.0], [100, 100, 100], [2000, 2000, 2000])
    f.scale_mix((1, 1), 0.0)
    f.run_until(10.0)
    assert f.pool_counts() == (1, 1)
    held = {f._pool_of[r]: r.outstanding for r in f.ready}
    assert held == {0: 1, 1: 2}


def test_each_type_runs_at_its_own_speed() -> None:
    # The same 100-token prompt: 20 ms + 2e-4 x 100 = 40 ms alone on a slow replica, 10 + 10 = 20 ms
    # on a fast one.
    f = _fleet([10.0], [100], [1])
    f.scale_mix((0, 1), 0.0)  # the slow replica drains away idle; the fast one takes the request
    f.run_until(60.0)
    assert f.status[0] == Status.COMPLETED
    assert f.ttft_s[0] == pytest.approx(0.020)
    g = _fleet([0.0], [100], [1])
    g.run_until(60.0)
    assert g.ttft_s[0] == pytest.approx(0.040)


def test_scaling_per_type_and_gpu_seconds_per_type() -> None:
    f = _fleet(np.linspace(0.0, 50.0, 60), [100] * 60, [50] * 60, replicas=2)
    f.scale_mix((1, 2), 10.0)  # one slow drains (idle-ish), two fast start
    f.run_until(100.0)
    f.scale_mix((0, 1), 100.0)
    f.run_until(400.0)
    assert f.pool_counts() == (0, 1)
    assert f.spec_replicas == 1
    assert sum(f.counts) == 60 and f.counts[Status.COMPLETED] == 60
    slow_s, fast_s = f.pool_gpu_seconds(400.0)
    # Both types' seconds add up to the fleet's; the fast pool held 2 replicas from 10 s to ~100 s
    # then one to the end.
    assert slow_s + fast_s == pytest.approx(f.gpu_seconds(400.0))
    assert fast_s == pytest.approx(2 * 90.0 + 300.0, abs=6.0)
    assert all(r.phase != Phase.GONE for r in f.replicas)


def test_scale_mix_checks_its_counts() -> None:
    f = _fleet([], [], [])
    with pytest.raises(ConfigError, match=r"one count >= 0 per GPU pool \(2\)"):
        f.scale_mix((1,), 0.0)


def test_a_mixed_fleet_has_no_node_pool() -> None:
    with pytest.raises(ConfigError, match="no node pool"):
        _fleet([], [], [], cfg=SimConfig(node_start_s=60.0))
