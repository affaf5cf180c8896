"""aibrix-apa: the APA tolerance band and rates, the window average, the cooldown filter; 10 s steps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.policies.aibrix import ApaConfig, ApaPolicy, ApaState, apa_replicas
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Signals, SignalValue

CFG = ApaConfig(min_replicas=1, max_replicas=50)
#: a 1 s window: each decision sees only its own sample, so the table reads directly
NOW_ONLY = replace(CFG, window_s=1.0)


def signals(spec: int, kv: float | None, queue: float | None = None) -> Signals:
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=spec, ready=spec),
        values={"kv_usage_mean": SignalValue(kv), "queue_per_replica": SignalValue(queue)},
    )


@pytest.mark.parametrize(
    ("current", "value", "expected", "rule"),
    [
        pytest.param(4, 0.56, 5, "scale-up", id="ratio-1.12-above-1.1-ceil-4.48"),
        pytest.param(4, 0.54, 4, "within-tolerance", id="ratio-1.08-inside-band"),
        pytest.param(4, 0.46, 4, "within-tolerance", id="ratio-0.92-inside-band"),
        pytest.param(4, 0.30, 3, "scale-down", id="ratio-0.6-ceil-2.4"),
        pytest.param(4, 0.05, 2, "scale-down-rate-limited", id="ratio-0.1-floored-at-4/2"),
        pytest.param(2, 5.00, 4, "scale-up-rate-limited", id="ratio-10-capped-at-2x2"),
    ],
)
def test_apa_band_and_rates(current, value, expected, rule):
    assert apa_replicas(current, value, 0.5, 0.1, 0.1, 2.0, 2.0) == (expected, rule)


def test_the_180s_window_smooths_a_one_tick_spike():
    policy = ApaPolicy(CFG)
    state = ApaState()
    for t in range(0, 170, 10):
        d, state = policy.decide(signals(4, 0.5), state, float(t))
        assert d.desired == 4
    # One tick at KV 1.0: the window average is (17 x 0.5 + 1.0) / 18 = 0.528 -> inside the band.
    d, state = policy.decide(signals(4, 1.0), state, 170.0)
    assert (d.desired, d.rule) == (4, "within-tolerance")
    assert d.inputs["kv_usage_mean"] == pytest.approx((17 * 0.5 + 1.0) / 18)


def test_the_scale_down_cooldown_does_not_delay_a_scale_down():
    # AIBrix keeps the *lowest* recommendation of the 300 s scale-down window.
    policy = ApaPolicy(NOW_ONLY)
    d, state = policy.decide(signals(4, 0.5), ApaState(), 0.0)
    assert d.desired == 4
    d, state = policy.decide(signals(4, 0.3), state, 10.0)
    assert (d.desired, d.rule) == (3, "scale-down")


def test_the_scale_down_window_can_deepen_to_an_earlier_lower_recommendation():
    policy = ApaPolicy(NOW_ONLY)
    d, state = policy.decide(signals(4, 0.2), ApaState(), 0.0)  # ratio 0.4 -> ceil(1.6) = 2
    assert d.desired == 2
    d, state = policy.decide(signals(2, 1.0), state, 10.0)  # ratio 2 -> 4
    assert d.desired == 4
    d, state = policy.decide(signals(4, 0.35), state, 20.0)  # ratio 0.7 -> 3, but 2 is in the window
    assert (d.desired, d.rule) == (2, "scale-down-window-min")
    d, state = policy.decide(signals(4, 0.35), state, 310.0)  # the 2 from t=0 has left the window
    assert (d.desired, d.rule) == (3, "scale-down")


def test_queue_metric_with_its_own_target():
    policy = ApaPolicy(replace(NOW_ONLY, metric="queue_per_replica", target=4.0))
    d, _ = policy.decide(signals(2, None, queue=10.0), ApaState(), 0.0)  # ratio 2.5 -> ceil(5) capped at 4
    assert (d.desired, d.rule) == (4, "scale-up-rate-limited")


def test_missing_metric_is_no_data_and_records_nothing():
    # Since vllm-project/aibrix#2592 a failed fetch stops the reconcile instead of reading 0.
    d, state = ApaPolicy(CFG).decide(signals(5, None), ApaState(), 0.0)
    assert (d.desired, d.rule) == (5, "no-data")
    assert state == ApaState()


@pytest.mark.parametrize(
    ("params", "metric", "target"),
    [
        pytest.param({}, "kv_usage_mean", 0.5, id="default-kv-target-0.5"),
        pytest.param({"metric": "queue_per_replica"}, "queue_per_replica", 100.0, id="queue-sample-target"),
        pytest.param({"metric": "queue_per_replica", "target": 8}, "queue_per_replica", 8.0, id="own-target"),
    ],
)
def test_registered_targets(params, metric, target):
    policy = create_policy("aibrix-apa", Deployment(), params)
    assert isinstance(policy, ApaPolicy)
    assert (policy.config.metric, policy.config.target, policy.tick_s) == (metric, target, 10.0)


def test_unknown_metric_is_refused():
    with pytest.raises(ConfigError, match="metric"):
        create_policy("aibrix-apa", Deployment(), {"metric": "gpu_util_mean"})
