"""Seed 003 chapter 1 + 2.5: ``breathing`` — urgent scale-out after 30 s, gradual scale-in, rhythm."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.policies.base import create_policy
from llmscale.policies.breathing import rhythm_blocks_scale_in
from llmscale.types import FleetView, Signals, SignalValue

CTX = Deployment(min_replicas=1, max_replicas=50, cold_start_s=90.0)
BASE = Signals(time_s=0.0, fleet=FleetView(spec_replicas=3, ready=3), values={})
CALM = {
    "queue_per_replica": 2.0,
    "queue_waiting": 6.0,
    "running": 60.0,
    "ttft_p99_s": 0.5,
    "e2e_p99_s": 20.0,
    "gpu_util_mean": 50.0,
    "request_rate_rps": 10.0,
    "load_zscore": 0.0,
}
IDLE = {"queue_per_replica": 0.0, "queue_waiting": 0.0, "gpu_util_mean": 20.0}


def sig(now_s: float = 0.0, spec: int = 3, **values: float | None) -> Signals:
    merged = {**CALM, **values}
    return replace(
        BASE,
        time_s=now_s,
        fleet=FleetView(spec_replicas=spec, ready=spec),
        values={k: SignalValue(v) for k, v in merged.items()},
    )


def run(policy, steps):
    """Decide at each (now_s, signal values) in turn; the decisions."""
    state = policy.initial_state()
    out = []
    for now_s, values in steps:
        d, state = policy.decide(sig(now_s, **values), state, now_s)
        out.append((d.desired, d.rule))
    return out


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            {"queue_per_replica": 11.0},
            [(3, "urgent-pending"), (3, "urgent-pending"), (4, "urgent-up")],
            id="queue-11-for-30s",
        ),
        # HPA-sized on the queue: ceil(3 x 25 / 10) = 8
        pytest.param(
            {"queue_per_replica": 25.0},
            [(3, "urgent-pending"), (3, "urgent-pending"), (8, "urgent-up")],
            id="queue-25-sized",
        ),
        pytest.param({"queue_per_replica": 10.0}, [(3, "hold")] * 3, id="queue-10-strict"),
        pytest.param(
            {"ttft_p99_s": 2.1},
            [(3, "urgent-pending"), (3, "urgent-pending"), (4, "urgent-up")],
            id="p99-2.1s",
        ),
        pytest.param({"ttft_p99_s": 2.0}, [(3, "hold")] * 3, id="p99-2.0-strict"),
        pytest.param(
            {"queue_per_replica": 11.0, "load_zscore": 4.47},
            [(4, "early-zscore"), (4, "early-zscore"), (4, "urgent-up")],
            id="z-4.47-now",
        ),
        pytest.param({"load_zscore": 6.0}, [(3, "hold")] * 3, id="z-alone-never"),
    ],
)
def test_high_priority_sustained_30s(values, expected):
    policy = create_policy("breathing", CTX)
    assert run(policy, [(t, values) for t in (0.0, 15.0, 30.0)]) == expected


def test_a_break_restarts_the_30s():
    policy = create_policy("breathing", CTX)
    steps = [(0.0, {"queue_per_replica": 11.0}), (15.0, {}), (30.0, {"queue_per_replica": 11.0})]
    assert run(policy, steps)[-1] == (3, "urgent-pending")


def test_gradual_scale_in_after_2_minutes():
    policy = create_policy("breathing", CTX)
    steps = [(t, IDLE) for t in (0.0, 60.0, 105.0, 120.0, 135.0)]
    assert run(policy, steps) == [
        (3, "idle-pending"),
        (3, "idle-pending"),
        (3, "idle-pending"),
        (2, "gradual-down"),
        (2, "gradual-down"),
    ]
    # one step at a time: the guard's down cooldown spaces the steps by 2 minutes
    assert dict(policy.guard_overrides) == {"cooldown_down_s": 120.0}


@pytest.mark.parametrize(
    ("values", "rule"),
    [
        pytest.param({**IDLE, "gpu_util_mean": 30.0}, "hold", id="gpu-30-strict"),
        pytest.param(
            {**IDLE, "queue_per_replica": 1.0, "queue_waiting": 3.0}, "hold", id="one-per-pod-waits"
        ),
        pytest.param({**IDLE, "gpu_util_mean": None}, "hold", id="no-gpu-no-scale-in"),
    ],
)
def test_no_scale_in(values, rule):
    policy = create_policy("breathing", CTX)
    assert run(policy, [(0.0, values), (120.0, values)])[-1] == (3, rule)


def test_e2e_is_the_literal_reading():
    policy = create_policy("breathing", CTX, {"p99_signal": "e2e_p99_s"})
    assert run(policy, [(0.0, {}), (30.0, {})])[-1] == (4, "urgent-up")  # e2e 20 s on a calm fleet


def test_a_request_or_two_waiting_on_a_large_fleet_is_no_backlog():
    flicker = {**IDLE, "queue_waiting": 2.0, "queue_per_replica": 2.0 / 3.0}
    assert run(create_policy("breathing", CTX), [(0.0, flicker), (120.0, flicker)])[-1] == (2, "gradual-down")
    strict = create_policy("breathing", CTX, {"no_new_requests": "queue-empty"})
    assert run(strict, [(0.0, flicker), (120.0, flicker)])[-1] == (3, "hold")


def test_literal_reading_needs_zero_arrivals():
    policy = create_policy("breathing", CTX, {"no_new_requests": "zero-rate"})
    assert run(policy, [(0.0, IDLE), (120.0, IDLE)])[-1] == (3, "hold")
    idle = {**IDLE, "request_rate_rps": 0.0}
    assert run(policy, [(0.0, idle), (120.0, idle)])[-1] == (2, "gradual-down")


def test_rhythm_rising_blocks_the_scale_in():
    policy = create_policy("breathing", CTX)
    rising = {**IDLE, "rhythm_amplitude_ratio": 0.8, "rhythm_decay": 0.0, "rhythm_phase": -1.0}
    assert run(policy, [(0.0, rising), (120.0, rising)])[-1] == (3, "rhythm-hold")
    fading = {**rising, "rhythm_decay": 0.5}
    assert run(policy, [(0.0, fading), (120.0, fading)])[-1] == (2, "gradual-down")
    weak = {**rising, "rhythm_amplitude_ratio": 0.2}
    assert run(policy, [(0.0, weak), (120.0, weak)])[-1] == (2, "gradual-down")


def falling(horizon_s: float) -> list[tuple[str, float | None]]:
    """A 10-minute rhythm seen every 15 s from phase 0.3 (just past its peak) for 2 minutes."""
    omega = 2 * math.pi / 600.0
    policy = create_policy("breathing", CTX, {"horizon_s": horizon_s})
    state = policy.initial_state()
    out = []
    for i in range(9):
        now_s = 15.0 * i
        values = {
            **IDLE,
            "rhythm_amplitude_ratio": 0.8,
            "rhythm_decay": 0.0,
            "rhythm_phase": 0.3 + omega * now_s,
        }
        d, state = policy.decide(sig(now_s, **values), state, now_s)
        out.append((d.rule, d.inputs.get("seconds_to_rise")))
    return out


def test_rhythm_rise_beyond_the_cold_start_allows_the_scale_in():
    # at 120 s the phase is 0.3 + 1.257 = 1.557: the trough is (pi - 1.557) / (2 pi / 600) = 151 s away
    rule, to_rise = falling(90.0)[-1]
    assert rule == "gradual-down"
    assert to_rise == pytest.approx(151.3, abs=0.5)
    assert falling(200.0)[-1][0] == "rhythm-hold"


@pytest.mark.parametrize(
    ("phase", "omega", "hold", "to_rise"),
    [
        pytest.param(math.pi / 2, 2 * math.pi / 120, True, 30.0, id="docstring-trough-in-30s"),
        pytest.param(-math.pi / 2, 2 * math.pi / 120, True, 0.0, id="rising-now"),
        pytest.param(0.0, 2 * math.pi / 600, False, 300.0, id="at-the-peak-10min-period"),
        pytest.param(1.0, None, True, None, id="unknown-frequency-holds"),
    ],
)
def test_rhythm_timing(phase, omega, hold, to_rise):
    h, t = rhythm_blocks_scale_in(phase, omega, 90.0)
    assert h is hold
    assert t == (None if to_rise is None else pytest.approx(to_rise))


def test_no_data_and_scale_from_zero():
    policy = create_policy("breathing", CTX)
    assert run(policy, [(0.0, {"queue_per_replica": None})]) == [(3, "no-data")]
    s = replace(sig(queue_per_replica=None, queue_waiting=4.0), fleet=FleetView(spec_replicas=0))
    d, _ = policy.decide(s, policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (1, "scale-from-zero")
