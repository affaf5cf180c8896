"""knative-kpa: stable/panic windows, panic ratchet, rate limits, scale to zero; explicit 2 s steps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.policies.base import create_policy
from llmscale.policies.knative import KpaConfig, KpaPolicy, KpaState
from llmscale.types import FleetView, Signals, SignalValue

CFG = KpaConfig(min_replicas=1, max_replicas=100)
#: an autoscaler that has already run (no start-up panic)
RUNNING = KpaState(started=True)


def signals(ready: int, concurrency: float | None, *, spec: int | None = None) -> Signals:
    value = None if concurrency is None else SignalValue(concurrency)
    values = {"running": value or SignalValue(None), "queue_waiting": SignalValue(0.0)}
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=ready if spec is None else spec, ready=ready),
        values=values,
    )


def run(policy, state, ready, concurrency, t0, t1):
    """Decide every 2 s over [t0, t1] at a constant concurrency; return the last decision and state."""
    d = None
    t = t0
    while t <= t1:
        d, state = policy.decide(signals(ready, concurrency), state, t)
        t += 2.0
    return d, state


@pytest.mark.parametrize(
    ("ready", "concurrency", "expected"),
    [
        pytest.param(1, 70.0, 1, id="at-target-70"),
        pytest.param(2, 200.0, 3, id="200-over-70-is-ceil-2.86"),
        pytest.param(10, 0.0, 5, id="no-load-halves-at-most-rate-2"),
        pytest.param(5, 70.0, 2, id="5-to-1-limited-to-floor-5/2"),
    ],
)
def test_stable_mode_targets_70_per_pod_within_the_rate_limits(ready, concurrency, expected):
    d, _ = run(KpaPolicy(CFG), RUNNING, ready, concurrency, 0.0, 58.0)
    assert (d.desired, d.rule) == (expected, "stable")


def test_max_scale_up_rate_permits_one_more_pod():
    # Knative's comment: MSUR=1.1, 3 in flight, 2 ready, target 1 -> ceil(2.2) = 3, not 2.
    policy = KpaPolicy(replace(CFG, target_concurrency=1.0, max_scale_up_rate=1.1))
    d, _ = policy.decide(signals(2, 3.0), RUNNING, 0.0)
    assert d.desired == 3


def test_panic_entered_when_the_6s_window_wants_2x_the_ready_pods():
    policy = KpaPolicy(CFG)
    _, state = run(policy, RUNNING, 1, 70.0, 0.0, 58.0)
    # Burst at t=60: panic window (t=56, 58, 60) averages (70 + 70 + 700) / 3 = 280 -> 4 pods = 4x ready.
    d, state = policy.decide(signals(1, 700.0), state, 60.0)
    assert (d.desired, d.rule) == (4, "panic")
    assert d.inputs["in_panic"] == 1.0
    assert d.inputs["desired_panic_pods"] == 4.0


def test_below_the_panic_threshold_stays_stable():
    policy = KpaPolicy(CFG)
    _, state = run(policy, RUNNING, 2, 140.0, 0.0, 58.0)
    # (140 + 140 + 230) / 3 = 170 -> 3 pods, 3 / 2 = 1.5 < 2: no panic.
    d, _ = policy.decide(signals(2, 230.0), state, 60.0)
    assert d.inputs["in_panic"] == 0.0
    assert d.rule == "stable"


def test_never_scales_down_in_panic_and_leaves_60s_after_the_last_burst():
    policy = KpaPolicy(CFG)
    _, state = run(policy, RUNNING, 1, 70.0, 0.0, 58.0)
    d, state = policy.decide(signals(1, 700.0), state, 60.0)
    assert d.desired == 4
    # The load vanishes at once; the fleet has grown to 4 ready pods.
    for t in range(62, 121, 2):
        d, state = policy.decide(signals(4, 0.0), state, float(t))
        assert d.desired == 4, t
        assert d.rule in ("panic", "panic-no-scale-down")
    # panicTime (60) + stable window (60) < now: un-panic, then at most halve: floor(4 / 2) = 2.
    d, state = policy.decide(signals(4, 0.0), state, 122.0)
    assert (d.desired, d.rule) == (2, "stable")


def test_a_new_autoscaler_starts_in_panic_holding_the_ready_pods():
    policy = KpaPolicy(CFG)
    d, state = policy.decide(signals(6, 0.0), KpaState(), 0.0)
    assert (d.desired, d.rule) == (6, "panic-no-scale-down")
    d, state = run(policy, state, 6, 0.0, 2.0, 60.0)
    assert d.desired == 6
    d, state = policy.decide(signals(6, 0.0), state, 62.0)
    assert (d.desired, d.rule) == (3, "stable")


def test_one_ready_pod_starts_in_stable_mode():
    d, _ = KpaPolicy(CFG).decide(signals(1, 0.0), KpaState(), 0.0)
    assert d.inputs["in_panic"] == 0.0


def test_scale_to_zero_waits_for_the_30s_grace():
    policy = KpaPolicy(replace(CFG, min_replicas=0))
    state = RUNNING
    for t in range(0, 30, 2):
        d, state = policy.decide(signals(1, 0.0), state, float(t))
        assert (d.desired, d.rule) == (1, "scale-to-zero-grace"), t
    d, state = policy.decide(signals(1, 0.0), state, 30.0)
    assert (d.desired, d.rule) == (0, "scale-to-zero")


def test_min_one_never_goes_to_zero():
    d, _ = run(KpaPolicy(CFG), RUNNING, 1, 0.0, 0.0, 120.0)
    assert d.desired == 1


def test_scale_down_delay_keeps_the_highest_count_of_its_window():
    policy = KpaPolicy(replace(CFG, scale_down_delay_s=30.0))
    _, state = run(policy, RUNNING, 4, 280.0, 0.0, 58.0)
    d, state = run(policy, state, 4, 0.0, 60.0, 88.0)
    assert (d.desired, d.rule) == (4, "scale-down-delayed")


def test_missing_concurrency_is_no_data_and_holds():
    d, state = KpaPolicy(CFG).decide(signals(3, None, spec=3), RUNNING, 0.0)
    assert (d.desired, d.rule) == (3, "no-data")
    assert state.samples == ()


def test_registered_defaults():
    policy = create_policy("knative-kpa", Deployment())
    assert isinstance(policy, KpaPolicy)
    assert policy.tick_s == 2.0
    assert policy.config.target_concurrency == 70.0
    assert policy.config.panic_window_s == pytest.approx(6.0)
