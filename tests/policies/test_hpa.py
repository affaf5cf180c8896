"""HPA (autoscaling/v2) on a per-pod metric: table-driven, explicit now_s steps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.metrics.names import DCGM
from llmscale.policies._hpa_behavior import HpaState
from llmscale.policies.hpa import HpaConfig, HpaPolicy, hpa_replicas_for_metric
from llmscale.types import FleetView, Signals

CFG = HpaConfig(min_replicas=1, max_replicas=50)


def signals(now_s: float, spec: int, utils: list[float | None]) -> Signals:
    per = {f"pod-{i}": ({} if u is None else {DCGM.GPU_UTIL: u}) for i, u in enumerate(utils)}
    return Signals(
        time_s=now_s, fleet=FleetView(spec_replicas=spec, ready=len(utils)), values={}, per_replica=per
    )


@pytest.mark.parametrize(
    ("values", "current", "expected"),
    [
        pytest.param({"a": 90.0, "b": 80.0}, 2, 3, id="docstring-example-85-of-70"),
        pytest.param({"a": 75.0, "b": 72.0}, 2, 2, id="within-tolerance-1.05"),
        pytest.param({"a": 20.0, "b": 10.0, "c": 30.0, "d": 20.0}, 4, 2, id="scale-down-ratio-0.29"),
        pytest.param({"a": 150.0, "b": None}, 2, 2, id="missing-pod-zero-brings-1.07-within-tolerance"),
        pytest.param({"a": 160.0, "b": None}, 2, 3, id="missing-pod-zero-still-above-1.14"),
        pytest.param({"a": 10.0, "b": None}, 2, 2, id="missing-pod-at-target-on-scale-down-0.57-to-1"),
        pytest.param({"a": None}, 3, 3, id="no-metrics-holds"),
    ],
)
def test_replica_calculation(values, current, expected):
    desired, _, _ = hpa_replicas_for_metric(values, 70.0, 0.1, current)
    assert desired == expected


def test_scale_down_waits_for_the_300s_stabilization_window():
    policy = HpaPolicy(CFG)
    state = HpaState()
    # At t=0 the pods are busy: recommendation 4 of 4.
    d, state = policy.decide(signals(0.0, 4, [70, 70, 70, 70]), state, 0.0)
    assert d.desired == 4
    # Load vanishes: raw recommendation 1, but the window still holds the 4 from t=0.
    for t in (15.0, 150.0, 285.0):
        d, state = policy.decide(signals(t, 4, [5, 5, 5, 5]), state, t)
        assert d.desired == 4, t
        assert d.rule == "scale-down-stabilized"
    d, state = policy.decide(signals(300.0, 4, [5, 5, 5, 5]), state, 300.0)
    assert d.desired == 1


def test_scale_up_is_limited_to_max_of_4_pods_or_double_per_period():
    policy = HpaPolicy(CFG)
    d, state = policy.decide(signals(0.0, 2, [700.0, 700.0]), HpaState(), 0.0)
    # raw = ceil(10 x 2) = 20; limit = max(2 + 4, 2 x 2) = 6
    assert d.desired == 6
    assert d.rule == "scale-up-rate-limited"
    # 15 s later the period has rolled over: from 6, max(10, 12) = 12
    d, state = policy.decide(signals(15.0, 6, [700.0] * 6), state, 15.0)
    assert d.desired == 12


def test_bounds_apply_last():
    policy = HpaPolicy(replace(CFG, max_replicas=5))
    d, _ = policy.decide(signals(0.0, 4, [700.0] * 4), HpaState(), 0.0)
    assert d.desired == 5


def test_a_new_hpa_does_not_shrink_before_its_window_passes():
    # recordInitialRecommendation: the first window holds the current replicas (4).
    policy = HpaPolicy(CFG)
    d, state = policy.decide(signals(0.0, 4, [1, 1, 1, 1]), HpaState(), 0.0)
    assert d.desired == 4
    d, state = policy.decide(signals(299.0, 4, [1, 1, 1, 1]), state, 299.0)
    assert d.desired == 4
    d, state = policy.decide(signals(301.0, 4, [1, 1, 1, 1]), state, 301.0)
    assert d.desired == 1
