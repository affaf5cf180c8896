"""wva-saturation: saturation thresholds, spare triggers, the N/(N-1) scale-down check; 15 s steps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.policies.base import create_policy
from llmscale.policies.wva import (
    KV_METRIC,
    WAITING_METRIC,
    WvaConfig,
    WvaPolicy,
    WvaState,
    analyze_saturation,
)
from llmscale.types import FleetView, Signals

CFG = WvaConfig(min_replicas=1, max_replicas=20)


def pods(*loads: tuple[float, float] | None, starting: int = 0, unknown: int = 0) -> Signals:
    """One entry per serving pod: (KV usage, waiting), or None for a pod without metrics."""
    per = {
        f"pod-{i}": ({} if load is None else {KV_METRIC: load[0], WAITING_METRIC: load[1]})
        for i, load in enumerate(loads)
    }
    n = len(loads)
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=n + starting, ready=n, pending=starting),
        values={},
        per_replica=per,
        unknown_replicas=unknown,
    )


@pytest.mark.parametrize(
    ("loads", "up", "safe"),
    [
        pytest.param([(0.75, 0), (0.72, 0)], True, False, id="kv-spare-0.065-below-0.1"),
        pytest.param([(0.40, 0)] * 3, False, True, id="3-at-kv-0.4-to-2-at-0.6-spare-0.2"),
        pytest.param([(0.50, 0)] * 3, False, False, id="3-at-kv-0.5-to-2-at-0.75-spare-0.05"),
        pytest.param([(0.2, 2), (0.2, 2)], False, False, id="queue-2x2-leaves-spare-1-below-3"),
        pytest.param([(0.2, 3), (0.2, 3)], True, False, id="queue-spare-2-below-3"),
        pytest.param([(0.85, 0), (0.3, 0)], False, False, id="one-saturated-needs-2-non-saturated"),
        pytest.param([(0.9, 0), (0.2, 6)], True, False, id="all-saturated-spare-0"),
        # WVA redistributes only the non-saturated replicas' load: the saturated pod is left out.
        pytest.param([(0.1, 5), (0.1, 0), (0.1, 0)], False, True, id="queue-5-saturates-left-out-of-n-1"),
        pytest.param([(0.79, 0), (0.1, 0)], False, False, id="kv-0.79-not-saturated-avg-spare-0.355"),
    ],
)
def test_saturation_analysis(loads, up, safe):
    a = analyze_saturation({f"p{i}": load for i, load in enumerate(loads)}, CFG)
    assert (a.scale_up, a.scale_down_safe) == (up, safe)


@pytest.mark.parametrize(
    ("sig", "expected", "rule"),
    [
        pytest.param(pods((0.75, 0), (0.72, 0)), 3, "scale-up-spare-low", id="ready-plus-one"),
        pytest.param(pods((0.4, 0), (0.4, 0), (0.4, 0)), 2, "scale-down-safe", id="ready-minus-one"),
        pytest.param(pods((0.5, 0), (0.5, 0), (0.5, 0)), 3, "no-change", id="unsafe-holds"),
        pytest.param(pods((0.1, 0)), 1, "no-change", id="one-replica-never-below-1"),
        pytest.param(pods((0.9, 9), starting=1), 2, "model-in-transition", id="pending-blocks-scaling"),
        pytest.param(pods((0.1, 0), (0.1, 0), None), 3, "no-data", id="pod-without-metrics-is-not-zero"),
        pytest.param(pods((0.1, 0), (0.1, 0), (0.1, 0), unknown=1), 3, "no-data", id="failed-scrape"),
    ],
)
def test_one_analysis(sig, expected, rule):
    d, _ = WvaPolicy(CFG).decide(sig, WvaState(), 0.0)
    assert (d.desired, d.rule) == (expected, rule)


def test_analysis_runs_every_60s_between_15s_observations():
    policy = WvaPolicy(CFG)
    low = pods((0.4, 0), (0.4, 0), (0.4, 0))
    d, state = policy.decide(low, WvaState(), 0.0)
    assert d.rule == "scale-down-safe"
    for t in (15.0, 30.0, 45.0):
        d, state = policy.decide(low, state, t)
        assert (d.desired, d.rule) == (3, "between-intervals"), t
    d, state = policy.decide(low, state, 60.0)
    assert d.rule == "scale-down-safe"


def test_the_peak_of_the_last_minute_blocks_a_scale_down():
    policy = WvaPolicy(CFG)
    _, state = policy.decide(pods((0.3, 0), (0.3, 0)), WvaState(), 0.0)
    # A spike on pod-0 at t=15, gone by t=30: max_over_time[1m] still sees it at t=60.
    for t, kv in ((15.0, 0.78), (30.0, 0.3), (45.0, 0.3)):
        _, state = policy.decide(pods((kv, 0), (0.3, 0)), state, t)
    d, _ = policy.decide(pods((0.3, 0), (0.3, 0)), state, 60.0)
    # Peaks 0.78 and 0.3: load 0.54 x 2/1 = 1.08 -> no spare. The latest values alone (0.3, 0.3) would
    # have allowed 2 -> 1 (0.3 x 2 = 0.6, spare 0.2).
    assert (d.desired, d.rule) == (2, "no-change")
    d, _ = WvaPolicy(replace(CFG, peak_window_s=1.0)).decide(pods((0.3, 0), (0.3, 0)), state, 60.0)
    assert (d.desired, d.rule) == (1, "scale-down-safe")


def test_registered_defaults():
    policy = create_policy("wva-saturation", Deployment())
    assert isinstance(policy, WvaPolicy)
    c = policy.config
    assert (c.kv_cache_threshold, c.queue_length_threshold, c.kv_spare_trigger, c.queue_spare_trigger) == (
        0.8,
        5.0,
        0.1,
        3.0,
    )
    assert (policy.tick_s, c.interval_s) == (15.0, 60.0)
