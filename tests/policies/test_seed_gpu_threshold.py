"""Seed 000 ch. 1 and 3.3: ``gpu-mem-copy`` (max(SM, MEM_COPY) target 35 %), ``effective-vram`` (0.85)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig
from llmscale.metrics.names import DCGM
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Signals, SignalValue

CTX = Deployment(min_replicas=1, max_replicas=50)
BASE = Signals(time_s=0.0, fleet=FleetView(spec_replicas=4, ready=4), values={})


def pods(*utils: tuple[float | None, float | None]) -> Signals:
    """One pod per (SM active %, MEM_COPY_UTIL) pair; None leaves the field out. Every pod also
    reads GPU_UTIL 100 (a request in flight), which the policy must not read."""
    per = {}
    for i, (sm_pct, copy) in enumerate(utils):
        m = {DCGM.GPU_UTIL: 100.0}
        if sm_pct is not None:
            m[DCGM.SM_ACTIVE] = sm_pct / 100.0
        if copy is not None:
            m[DCGM.MEM_COPY_UTIL] = copy
        per[f"pod-{i}"] = m
    n = len(utils)
    return replace(BASE, fleet=FleetView(spec_replicas=n, ready=n), per_replica=per)


@pytest.mark.parametrize(
    ("signals", "desired", "rule"),
    [
        # the seed's decode-bound replica: compute (SM) 9 %, MEM_COPY 92 % -> composite 92 % / 35 = 2.63
        pytest.param(pods(*[(9.0, 92.0)] * 4), 11, "scale-up", id="sm-9-copy-92-x4-to-11"),
        pytest.param(pods((36.0, 10.0), (20.0, 37.0)), 2, "within-tolerance", id="36.5-within-10pct"),
        pytest.param(pods((20.0, 5.0), (10.0, 2.0)), 1, "scale-down", id="15-of-35-halves"),
        pytest.param(pods((None, 70.0), (70.0, None)), 4, "scale-up", id="either-field-alone"),
        pytest.param(
            pods((70.0, 70.0), (None, None)), 2, "within-tolerance", id="missing-pod-0-on-the-way-up"
        ),
        pytest.param(pods((None, None), (None, None)), 2, "no-data", id="no-pod-sample"),
    ],
)
def test_gpu_mem_copy_per_pod(signals, desired, rule):
    policy = create_policy("gpu-mem-copy", CTX)
    d, _ = policy.decide(signals, policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (desired, rule)


def test_gpu_mem_copy_falls_back_to_the_fleet_composite():
    s = replace(
        BASE, fleet=FleetView(spec_replicas=2, ready=2), values={"gpu_composite_util": SignalValue(70.0)}
    )
    d, _ = create_policy("gpu-mem-copy", CTX).decide(s, None, 0.0)
    assert (d.desired, d.rule) == (4, "scale-up")


def ev(value: float | None, ready: int = 4, loading: int = 0) -> Signals:
    fleet = FleetView(spec_replicas=ready + loading, ready=ready, loading=loading)
    return replace(BASE, fleet=fleet, values={"effective_vram": SignalValue(value)})


@pytest.mark.parametrize(
    ("signals", "desired", "rule"),
    [
        pytest.param(ev(0.95), 5, "scale-up", id="0.95-of-0.85-x4"),
        pytest.param(ev(0.90), 4, "within-tolerance", id="0.90-within-10pct"),
        # vLLM's preallocated pool alone is 0.4 x 0.9 = 0.36; idle-ish 0.42 -> ratio 0.49
        pytest.param(ev(0.42), 2, "scale-down", id="0.42-halves"),
        # starting replicas are missing: counted at the target on the way down
        # (0.42 x 2 + 0.85 x 2) / 4 / 0.85 = 0.747 -> ceil(2.99) = 3
        pytest.param(ev(0.42, ready=2, loading=2), 3, "scale-down", id="loading-pods-at-target"),
        pytest.param(ev(None), 4, "no-data", id="no-l2-miss-on-a-live-fleet"),
    ],
)
def test_effective_vram(signals, desired, rule):
    policy = create_policy("effective-vram", CTX)
    d, _ = policy.decide(signals, policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (desired, rule)


@pytest.mark.parametrize("name", ["gpu-mem-copy", "effective-vram"])
def test_hpa_scale_down_stabilisation_is_a_guard_override(name):
    policy = create_policy(name, CTX, {"down_stabilization_s": 120.0})
    assert dict(policy.guard_overrides) == {"stabilization_down_s": 120.0}
    assert GuardConfig().merged(policy.guard_overrides).stabilization_down_s == 120.0
