"""Seed 003 3.2: ``dual-objective`` — sliding-window P95 AND OOM risk; weights 0.6 / 0.4."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Signals, SignalValue

CTX = Deployment(min_replicas=1, max_replicas=20)
BASE = Signals(time_s=0.0, fleet=FleetView(spec_replicas=3, ready=3), values={})


def sig(p95: float | None, risk: float | None, **extra: float | None) -> Signals:
    values = {"ttft_p95_s": p95, "oom_risk": risk, "queue_waiting": 2.0, "running": 30.0, **extra}
    return replace(BASE, values={k: SignalValue(v) for k, v in values.items()})


@pytest.mark.parametrize(
    ("signals", "desired", "rule"),
    [
        pytest.param(sig(0.21, 0.36), 4, "p95-and-oom-high", id="210ms-and-0.36-up"),
        pytest.param(sig(0.21, 0.35), 3, "one-objective-only", id="oom-0.35-strict-and-holds"),
        pytest.param(sig(0.20, 0.36), 3, "one-objective-only", id="p95-200ms-strict"),
        pytest.param(sig(2.0, 0.05), 3, "one-objective-only", id="latency-alone-no-scale-out"),
        pytest.param(sig(0.05, 0.9), 3, "one-objective-only", id="oom-alone-no-scale-out"),
        # S = 0.6 x 80/200 + 0.4 x 0.07/0.35 = 0.24 + 0.08 = 0.32 < 0.5
        pytest.param(sig(0.08, 0.07), 2, "pressure-low", id="S-0.32-down"),
        # S = 0.6 x 150/200 + 0.4 x 0.1/0.35 = 0.45 + 0.114 = 0.564
        pytest.param(sig(0.15, 0.10), 3, "hold", id="S-0.56-holds"),
        pytest.param(
            sig(None, 0.0, queue_waiting=0.0, running=0.0), 2, "pressure-low", id="idle-empty-window-reads-0"
        ),
        pytest.param(sig(None, 0.1), 3, "no-data", id="p95-undefined-with-requests-running"),
        pytest.param(sig(0.1, None), 3, "no-data", id="oom-risk-missing"),
    ],
)
def test_and_trigger_and_weighted_scale_down(signals, desired, rule):
    policy = create_policy("dual-objective", CTX)
    d, _ = policy.decide(signals, policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (desired, rule)


def test_weighted_pressure_in_the_inputs():
    d, _ = create_policy("dual-objective", CTX).decide(sig(0.08, 0.07), None, 0.0)
    assert d.inputs["weighted_pressure"] == pytest.approx(0.32)
    assert d.inputs["latency_pressure"] == pytest.approx(0.4)
    assert d.inputs["oom_pressure"] == pytest.approx(0.2)


def test_latency_signal_and_threshold_are_parameters():
    policy = create_policy("dual-objective", CTX, {"latency_signal": "e2e_p95_s", "p95_threshold_s": 5.0})
    d, _ = policy.decide(sig(0.01, 0.5, e2e_p95_s=6.0), None, 0.0)
    assert d.rule == "p95-and-oom-high"
