"""ray-serve: the error-ratio formula, smoothing factors, the 30 s / 600 s delays; explicit 10 s steps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.policies.base import PolicyContext, create_policy
from llmscale.policies.ray_serve import RayServeConfig, RayServePolicy, RayServeState, apply_scaling_factors
from llmscale.types import FleetView, Signals, SignalValue

CFG = RayServeConfig(min_replicas=1, max_replicas=50)


def signals(spec: int, ongoing: float | None, *, ready: int | None = None) -> Signals:
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=spec, ready=spec if ready is None else ready),
        values={"running": SignalValue(ongoing), "queue_waiting": SignalValue(0.0)},
    )


def steps(policy, state, spec, ongoing, times):
    out = []
    for t in times:
        d, state = policy.decide(signals(spec, ongoing), state, float(t))
        out.append((t, d.desired, d.rule))
    return out, state


@pytest.mark.parametrize(
    ("desired", "current", "up", "down", "expected"),
    [
        pytest.param(4.0, 2, 1.0, 1.0, 4, id="factor-1-takes-the-full-step"),
        pytest.param(6.0, 2, 0.5, 1.0, 4, id="upscaling-factor-0.5-halves-the-step"),
        pytest.param(1.0, 4, 1.0, 0.5, 3, id="downscaling-factor-0.5-ceil-2.5"),
        pytest.param(3.0, 4, 1.0, 0.1, 3, id="stuck-by-a-small-factor-steps-one"),
        pytest.param(3.5, 4, 1.0, 0.1, 4, id="ceil-3.5-is-not-below-4-no-step"),
        pytest.param(4.0, 4, 1.0, 1.0, 4, id="at-target"),
    ],
)
def test_scaling_factors(desired, current, up, down, expected):
    assert apply_scaling_factors(desired, current, up, down) == expected


def test_upscale_only_after_30s_of_consistent_demand():
    # 8 ongoing on 2 replicas with target 2: error ratio 2 -> 4 replicas.
    out, _ = steps(RayServePolicy(CFG), RayServeState(), 2, 8.0, [0, 10, 20, 30])
    assert out == [
        (0, 2, "upscale-delay"),
        (10, 2, "upscale-delay"),
        (20, 2, "upscale-delay"),
        (30, 4, "scale-up"),
    ]


def test_downscale_only_after_600s():
    # 2 ongoing on 4 replicas: 1 replica wanted.
    policy = RayServePolicy(CFG)
    out, state = steps(policy, RayServeState(), 4, 2.0, range(0, 600, 10))
    assert all(d == 4 and rule == "downscale-delay" for _, d, rule in out)
    d, _ = policy.decide(signals(4, 2.0), state, 600.0)
    assert (d.desired, d.rule) == (1, "scale-down")


def test_a_change_of_direction_restarts_the_delay():
    policy = RayServePolicy(replace(CFG, look_back_period_s=1.0))  # each tick sees its own sample
    _, state = steps(policy, RayServeState(), 2, 8.0, [0, 10, 20])
    d, state = policy.decide(signals(2, 0.0), state, 25.0)  # one "down" decision resets the run
    assert d.rule == "downscale-delay"
    out, _ = steps(policy, state, 2, 8.0, [30, 40, 50, 60])
    assert [d for _, d, _ in out] == [2, 2, 2, 4]


def test_look_back_average_over_30s():
    policy = RayServePolicy(CFG)
    state = RayServeState()
    for t, ongoing in ((0, 0.0), (10, 0.0), (20, 12.0)):
        d, state = policy.decide(signals(2, ongoing), state, float(t))
    assert d.inputs["total_num_requests"] == pytest.approx(4.0)  # (0 + 0 + 12) / 3 -> exactly 2 replicas
    assert d.rule == "no-change"
    d, state = policy.decide(signals(2, 12.0), state, 30.0)  # t=0 left the 30 s window: (0 + 12 + 12) / 3
    assert d.inputs["total_num_requests"] == pytest.approx(8.0)


def test_cold_start_from_zero_skips_the_delay():
    policy = RayServePolicy(replace(CFG, min_replicas=0))
    d, _ = policy.decide(signals(0, 3.0), RayServeState(), 0.0)
    assert (d.desired, d.rule) == (1, "cold-start")
    d, _ = policy.decide(signals(0, 0.0), RayServeState(), 0.0)
    assert (d.desired, d.rule) == (0, "no-running-replica")


def test_replicas_still_starting_are_left_to_come_up():
    d, _ = RayServePolicy(CFG).decide(signals(3, 50.0, ready=0), RayServeState(), 0.0)
    assert (d.desired, d.rule) == (3, "cold-start")


def test_missing_requests_is_no_data_and_holds():
    state = RayServeState(samples=((0.0, 8.0),), direction=1, run_since_s=0.0)
    d, after = RayServePolicy(CFG).decide(signals(3, None), state, 10.0)
    assert (d.desired, d.rule) == (3, "no-data")
    assert after == state


def test_registered_defaults_and_smoothing():
    policy = create_policy("ray-serve", PolicyContext(), {"smoothing_factor": 0.5, "upscaling_factor": 2.0})
    assert isinstance(policy, RayServePolicy)
    cfg = policy.config
    assert (cfg.target_ongoing_requests, cfg.upscale_delay_s, cfg.downscale_delay_s) == (2.0, 30.0, 600.0)
    assert (cfg.upscaling_factor, cfg.downscaling_factor) == (2.0, 0.5)
    assert policy.tick_s == 10.0
