"""Seed 003 3.1: ``three-layer`` — the request layer triggers, instances check readiness, resources admit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Signals, SignalValue

CTX = Deployment(min_replicas=1, max_replicas=50, slo_ttft_s=2.0)
BASE = Signals(time_s=0.0, fleet=FleetView(spec_replicas=4, ready=4), values={})
CALM = {
    "ttft_p95_s": 1.5,
    "queue_per_replica": 2.0,
    "queue_waiting": 8.0,
    "running": 100.0,
    "kv_usage_mean": 0.3,
    "preemptions_per_s": 0.0,
}


def sig(fleet: FleetView | None = None, unknown: int = 0, **values: float | None) -> Signals:
    merged = {**CALM, **values}
    return replace(
        BASE,
        fleet=fleet or BASE.fleet,
        values={k: SignalValue(v) for k, v in merged.items()},
        unknown_replicas=unknown,
    )


DOWN = {"ttft_p95_s": 0.5, "queue_per_replica": 0.0, "queue_waiting": 0.0}


@pytest.mark.parametrize(
    ("signals", "desired", "rule"),
    [
        pytest.param(sig(), 4, "hold", id="calm"),
        pytest.param(sig(ttft_p95_s=2.5), 5, "request-layer-up", id="ttft-above-slo-plus-1"),
        # HPA on the seed's queue target 5 per pod: ceil(4 x 12 / 5) = 10
        pytest.param(sig(queue_per_replica=12.0), 10, "request-layer-up", id="queue-12-per-pod-to-10"),
        pytest.param(sig(queue_per_replica=5.0), 4, "hold", id="queue-5-strict"),
        pytest.param(
            sig(FleetView(spec_replicas=4, ready=2, loading=2), queue_per_replica=6.0),
            4,
            "instances-warming",
            id="two-warming-cover-5",
        ),
        pytest.param(
            sig(FleetView(spec_replicas=4, ready=3, loading=1), queue_per_replica=12.0),
            10,
            "request-layer-up",
            id="one-warming-does-not-cover-10",
        ),
        pytest.param(sig(**DOWN), 3, "request-layer-down", id="ttft-below-half-slo-queue-0-down"),
        pytest.param(sig(**{**DOWN, "ttft_p95_s": 1.0}), 4, "hold", id="ttft-at-half-slo-holds"),
        pytest.param(
            sig(**{**DOWN, "queue_per_replica": 0.5}), 3, "request-layer-down", id="half-per-pod-waiting"
        ),
        pytest.param(sig(**{**DOWN, "queue_per_replica": 1.0}), 4, "hold", id="one-per-pod-waiting-holds"),
        pytest.param(
            sig(FleetView(spec_replicas=4, ready=3, loading=1), **DOWN),
            4,
            "instance-layer-hold",
            id="starting",
        ),
        pytest.param(
            sig(FleetView(spec_replicas=4, ready=4, draining=1), **DOWN),
            4,
            "instance-layer-hold",
            id="draining",
        ),
        pytest.param(sig(unknown=1, **DOWN), 4, "instance-layer-hold", id="unscraped"),
        # KV 0.65 x 4/3 = 0.867 >= 0.8
        pytest.param(sig(kv_usage_mean=0.65, **DOWN), 4, "resource-kv-headroom", id="kv-headroom"),
        pytest.param(sig(preemptions_per_s=0.2, **DOWN), 4, "resource-preempting", id="preempting"),
        pytest.param(
            sig(ttft_p95_s=None, queue_per_replica=0.0, queue_waiting=0.0, running=0.0),
            3,
            "request-layer-down",
            id="idle-empty-window",
        ),
        pytest.param(
            sig(
                FleetView(spec_replicas=0),
                queue_per_replica=None,
                queue_waiting=3.0,
                running=0.0,
                ttft_p95_s=None,
            ),
            1,
            "scale-from-zero",
            id="scale-from-zero-on-the-gateway-queue",
        ),
        pytest.param(sig(queue_waiting=None), 4, "no-data", id="queue-missing"),
    ],
)
def test_layers(signals, desired, rule):
    policy = create_policy("three-layer", CTX)
    d, _ = policy.decide(signals, policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (desired, rule)


@pytest.mark.parametrize(
    ("spec", "desired", "rule"),
    [
        pytest.param(4, 6, "resource-gpu-budget", id="budget-6-admits-up-to-6"),
        pytest.param(6, 6, "resource-gpu-budget", id="at-budget-holds"),
    ],
)
def test_gpu_budget_from_the_parameter(spec, desired, rule):
    policy = create_policy("three-layer", CTX, {"gpu_budget": 6})
    s = sig(FleetView(spec_replicas=spec, ready=spec), queue_per_replica=12.0)
    d, _ = policy.decide(s, None, 0.0)
    assert (d.desired, d.rule) == (desired, rule)


def test_gpu_budget_counts_tp_gpus_per_replica_and_reaches_the_guard():
    policy = create_policy("three-layer", replace(CTX, tp=2), {"gpu_budget": 12})
    assert dict(policy.guard_overrides) == {"gpu_budget": 12, "gpus_per_replica": 2}
    assert GuardConfig().merged(policy.guard_overrides).gpu_budget == 12
    d, _ = policy.decide(sig(queue_per_replica=12.0), None, 0.0)
    assert (d.desired, d.rule) == (6, "resource-gpu-budget")
    assert dict(create_policy("three-layer", CTX).guard_overrides) == {}


def test_slo_comes_from_the_context_or_a_parameter():
    d, _ = create_policy("three-layer", replace(CTX, slo_ttft_s=1.0)).decide(sig(), None, 0.0)
    assert d.rule == "request-layer-up"
    d, _ = create_policy("three-layer", CTX, {"ttft_slo_s": 1.0}).decide(sig(), None, 0.0)
    assert d.rule == "request-layer-up"
