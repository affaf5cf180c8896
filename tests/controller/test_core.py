"""The controller core schedules its own ticks from the policy's cadence (``controller/core.py``)."""

from __future__ import annotations

import pytest

from llmscale.controller.core import Controller, initial_state, next_tick_after, tick
from llmscale.deployment import Deployment, guard_config
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Observation, Phase, ReplicaSample

LOADED = {"vllm:num_requests_running": 6.0, "vllm:num_requests_waiting": 0.0, "vllm:kv_cache_usage_perc": 0.3}


def _obs(now_s: float, n: int = 2) -> Observation:
    samples = tuple(ReplicaSample(f"r{i}", Phase.READY, ok=True, values=LOADED) for i in range(n))
    return Observation(now_s, FleetView(n, ready=n), samples)


def _controller(name: str, params: dict | None = None, tick_s: float | None = None) -> Controller:
    d = Deployment(min_replicas=1, max_replicas=10, initial_replicas=2)
    policy = create_policy(name, d, params or {})
    return Controller(policy, guard_config(d, policy), d, tick_s=tick_s)


@pytest.mark.parametrize(
    ("name", "params", "override_s", "cadence_s"),
    [
        pytest.param("knative-kpa", {}, None, 2.0, id="knative-2s"),
        pytest.param("hpa-gpu-util", {}, None, 15.0, id="hpa-15s"),
        pytest.param("slo", {"tick_s": 30.0}, None, 30.0, id="slo-param"),
        pytest.param("knative-kpa", {}, 0.5, 0.5, id="override"),
    ],
)
def test_the_next_tick_is_one_policy_cadence_after_the_last(name, params, override_s, cadence_s):
    c = _controller(name, params, override_s)
    assert c.cadence_s == cadence_s
    state = initial_state(c, first_tick_s=100.0)
    due = state.next_tick_s
    for _ in range(3):
        record, state, nxt = tick(c, state, _obs(due))
        assert record.time_s == due and not record.applied  # the adapter actuates, not the core
        assert nxt == state.next_tick_s == due + cadence_s
        due = nxt


def test_the_state_carries_the_window_and_the_policys_state():
    c = _controller("knative-kpa")
    state = initial_state(c, 0.0)
    for k in range(25):
        _, state, _ = tick(c, state, _obs(2.0 * k))
    assert len(state.window) == 20  # WINDOW_LEN: the oldest observations dropped
    assert state.window[-1].time_s == 48.0


@pytest.mark.parametrize(
    ("due_s", "now_s", "expected_s"),
    [
        pytest.param(30.0, 30.0, 45.0, id="on-time"),
        pytest.param(30.0, 44.9, 45.0, id="late-within-a-cadence"),
        pytest.param(30.0, 50.0, 65.0, id="overran: one cadence after, no burst"),
        pytest.param(30.0, 20.0, 45.0, id="early"),
    ],
)
def test_next_tick_after(due_s, now_s, expected_s):
    assert next_tick_after(due_s, 15.0, now_s) == expected_s
