"""keda-queue: KEDA's Prometheus scaler + the HPA External AverageValue path, explicit now_s steps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig, GuardState, apply_guards
from llmscale.policies.base import create_policy
from llmscale.policies.keda import KedaConfig, KedaPolicy, KedaState, external_average_value_replicas
from llmscale.types import FleetView, Signals, SignalValue

CFG = KedaConfig(min_replicas=1, max_replicas=50)


def signals(spec: int, queue: float | None, *, active: int | None = None) -> Signals:
    n = spec if active is None else active
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=spec, ready=n),
        values={"queue_waiting": SignalValue(queue)},
    )


@pytest.mark.parametrize(
    ("value", "status", "expected", "rule"),
    [
        pytest.param(51.0, 2, 3, "scale", id="51-on-2-ratio-1.275-ceil-2.55"),
        pytest.param(21.0, 1, 1, "within-tolerance", id="21-on-1-ratio-1.05-kept"),
        pytest.param(18.0, 1, 1, "within-tolerance", id="18-on-1-ratio-0.9-kept"),
        pytest.param(17.0, 1, 1, "scale", id="17-on-1-ratio-0.85-ceil-0.85"),
        pytest.param(30.0, 4, 2, "scale", id="30-on-4-ratio-0.375-down-to-2"),
        pytest.param(0.0, 3, 0, "scale", id="empty-queue-asks-0"),
        pytest.param(100.0, 0, 5, "scale", id="no-pods-ratio-inf"),
        pytest.param(0.0, 0, 0, "within-tolerance", id="no-pods-no-load-nan-kept"),
    ],
)
def test_external_average_value_path(value, status, expected, rule):
    replicas, _, got_rule = external_average_value_replicas(value, 20.0, status, 0.1)
    assert (replicas, got_rule) == (expected, rule)


@pytest.mark.parametrize(
    ("spec", "queue", "expected", "rule"),
    [
        pytest.param(2, 51.0, 3, "scale", id="seed-002-queue-51-target-20"),
        pytest.param(1, 21.0, 1, "within-tolerance", id="tolerance-holds-21-on-1"),
        pytest.param(2, 400.0, 6, "scale-up-rate-limited", id="raw-20-capped-at-max-2+4-or-2x2"),
        pytest.param(60, 20.0, 50, "above-max", id="above-max-goes-to-max"),
    ],
)
def test_one_decision(spec, queue, expected, rule):
    d, _ = KedaPolicy(CFG).decide(signals(spec, queue), KedaState(), 0.0)
    assert (d.desired, d.rule) == (expected, rule)


def test_scale_down_waits_for_the_300s_stabilization_window():
    policy = KedaPolicy(CFG)
    d, state = policy.decide(signals(4, 80.0), KedaState(), 0.0)  # 80 / (20 x 4) = 1.0
    assert d.desired == 4
    for t in (30.0, 150.0, 270.0):
        d, state = policy.decide(signals(4, 0.0), state, t)
        assert (d.desired, d.rule) == (4, "scale-down-stabilized"), t
    d, state = policy.decide(signals(4, 0.0), state, 300.0)
    assert d.desired == 1  # HPA min is max(minReplicaCount, 1)


@pytest.mark.parametrize(
    ("queue", "expected", "rule"),
    [
        pytest.param(1.0, 1, "activate-from-zero", id="active-above-activation-0"),
        pytest.param(0.0, 0, "idle-at-zero", id="inactive-stays-at-zero"),
    ],
)
def test_activation_from_zero(queue, expected, rule):
    policy = KedaPolicy(replace(CFG, min_replicas=0))
    d, _ = policy.decide(signals(0, queue), KedaState(), 0.0)
    assert (d.desired, d.rule) == (expected, rule)


def test_scale_to_zero_only_after_the_cooldown_since_last_active():
    policy = KedaPolicy(replace(CFG, min_replicas=0))
    _, state = policy.decide(signals(1, 10.0), KedaState(), 0.0)  # active at t=0
    for t in (30.0, 150.0, 300.0):
        d, state = policy.decide(signals(1, 0.0), state, t)
        assert d.desired == 1, t  # idle 300 s is not more than cooldownPeriod 300 s
    d, state = policy.decide(signals(1, 0.0), state, 330.0)
    assert (d.desired, d.rule) == (0, "scale-to-zero")


def test_never_active_scales_to_zero_at_once_with_min_zero():
    # KEDA's nil LastActiveTime: no cooldown to wait for.
    d, _ = KedaPolicy(replace(CFG, min_replicas=0)).decide(signals(2, 0.0), KedaState(), 0.0)
    assert (d.desired, d.rule) == (0, "scale-to-zero")


def test_min_replicas_above_zero_never_scales_to_zero():
    policy = KedaPolicy(CFG)
    state = KedaState()
    for t in range(0, 1200, 30):
        d, state = policy.decide(signals(1, 0.0), state, float(t))
        assert d.desired == 1


def test_null_query_is_read_as_zero_but_the_guard_holds():
    policy = KedaPolicy(CFG)
    # Steady 4 replicas, then the query returns nothing for longer than the window.
    _, state = policy.decide(signals(4, 80.0), KedaState(), 0.0)
    guards = GuardConfig(1, 50).merged(policy.guard_overrides)
    gstate = GuardState()
    for t in range(30, 900, 30):
        d, state = policy.decide(signals(4, None), state, float(t))
        assert d.rule == "no-data-null-as-zero"
        out, gstate = apply_guards(d, signals(4, None), guards, gstate, float(t))
        assert out.desired == 4, t
    # What KEDA itself would have done once the 300 s window passed: shrink to its minimum.
    assert d.desired == 1


def test_registered_factory_uses_the_context_bounds():
    policy = create_policy("keda-queue", Deployment(min_replicas=0, max_replicas=8))
    assert isinstance(policy, KedaPolicy)
    assert policy.tick_s == 30.0
    assert (policy.config.min_replicas, policy.config.max_replicas, policy.config.threshold) == (0, 8, 20.0)
    assert policy.guard_overrides["pending_aware"] is False
