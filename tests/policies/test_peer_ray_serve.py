"""ray-serve as Ray 2.60 runs it: the gain, the time-weighted look-back mean, sampling and pushes,
the 1e-6 s delay tolerance, the delay run kept across the cold-start path, bounds after the delays."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.errors import ConfigError
from llmscale.policies.base import create_policy
from llmscale.policies.ray_serve import (
    RayServeConfig,
    RayServePolicy,
    RayServeState,
    apply_scaling_factors,
    decide_replicas,
    time_weighted_mean,
)
from llmscale.types import FleetView, Signals, SignalValue

CFG = RayServeConfig(min_replicas=1, max_replicas=50)


def signals(spec: int, ongoing: float | None, *, ready: int | None = None) -> Signals:
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=spec, ready=spec if ready is None else ready),
        values={"running": SignalValue(ongoing), "queue_waiting": SignalValue(0.0)},
    )


@pytest.mark.parametrize(
    ("desired", "current", "up", "down", "expected"),
    [
        pytest.param(4.0, 2, 1.0, 1.0, 4, id="factor-1-takes-the-full-step"),
        pytest.param(6.0, 2, 0.5, 1.0, 4, id="upscaling-factor-0.5-halves-the-step"),
        pytest.param(1.0, 4, 1.0, 0.5, 3, id="downscaling-factor-0.5-ceil-2.5"),
        pytest.param(3.0, 4, 1.0, 0.1, 3, id="stuck-by-a-small-factor-steps-one"),
        pytest.param(3.5, 4, 1.0, 0.1, 4, id="ceil-3.5-is-not-below-4-no-step"),
        pytest.param(4.0, 4, 1.0, 1.0, 4, id="at-target"),
        pytest.param(2.5, 0, 0.5, 1.0, 3, id="from-zero-no-gain-ceil"),
    ],
)
def test_scaling_factors(desired, current, up, down, expected):
    assert apply_scaling_factors(desired, current, up, down) == expected


@pytest.mark.parametrize(
    ("samples", "now_s", "expected"),
    [
        # (4 x 6 + 10 x 6 + 1 x 4) / 16: the newest sample holds until now.
        pytest.param(((0.0, 4.0), (6.0, 10.0), (12.0, 1.0)), 16.0, 5.5, id="worked-example"),
        # Read at the newest sample's own time it weighs 1 ms: (24 + 60 + 0.001) / 12.001.
        pytest.param(((0.0, 4.0), (6.0, 10.0), (12.0, 1.0)), 12.0, 84.001 / 12.001, id="newest-weighs-1ms"),
        pytest.param(((5.0, 7.0),), 9.0, 7.0, id="one-sample-is-its-value"),
        pytest.param((), 9.0, 0.0, id="no-sample-reads-zero"),
    ],
)
def test_time_weighted_mean(samples, now_s, expected):
    assert time_weighted_mean(samples, now_s) == pytest.approx(expected)


def test_time_weighted_mean_worked_example():
    assert time_weighted_mean(((0.0, 4.0), (6.0, 10.0), (12.0, 1.0)), 16.0) == pytest.approx(5.5)


def run(policy, state, script):
    """script: (now_s, spec, ready, ongoing) rows; returns [(now_s, desired, rule, total)], final state."""
    out = []
    for now_s, spec, ready, ongoing in script:
        d, state = policy.decide(signals(spec, ongoing, ready=ready), state, float(now_s))
        out.append((now_s, d.desired, d.rule, d.inputs.get("total_num_requests")))
    return out, state


def test_samples_every_6s_pushed_every_10s_so_a_step_is_seen_late():
    # Ongoing jumps 0 -> 12 at 20 s. Samples at 0, 6, 12, 18 (0) and 24, 30 (12); pushes at 0, 10, 20, 30.
    policy = RayServePolicy(CFG)
    script = [(t, 2, 2, 0.0 if t < 20 else 12.0) for t in range(0, 31)]
    out, state = run(policy, RayServeState(), script)
    totals = {t: total for t, _, _, total in out}
    assert totals[29] == 0.0  # the t=24 sample is still at the replica
    # Pushed at 30: 0, 0, 0, 0, 12, 12 at 0..30 s -> (12 x 6 + 12 x 0.001) / 30.001.
    assert totals[30] == pytest.approx((72 + 0.012) / 30.001)
    assert [s[0] for s in state.pushed] == [0.0, 6.0, 12.0, 18.0, 24.0, 30.0]


def test_the_look_back_prunes_samples_older_than_30s_at_each_push():
    policy = RayServePolicy(CFG)
    _, state = run(policy, RayServeState(), [(t, 2, 2, 4.0) for t in range(0, 41)])
    assert [s[0] for s in state.pushed] == [12.0, 18.0, 24.0, 30.0, 36.0]  # pushed at 40: >= 10 s


DELAY = replace(CFG, upscale_delay_s=30.0, downscale_delay_s=600.0)


@pytest.mark.parametrize(
    ("total", "running", "target", "direction", "since", "now_s", "expected"),
    [
        pytest.param(8.0, 2, 2, 0, None, 0.0, (2, "upscale-delay", 1, 0.0), id="first-up-starts-the-run"),
        pytest.param(8.0, 2, 2, 1, 0.0, 29.9, (2, "upscale-delay", 1, 0.0), id="up-before-30s-waits"),
        pytest.param(8.0, 2, 2, 1, 0.0, 30.0, (4, "scale-up", 0, None), id="up-at-30s-applies"),
        # 32.3 - 2.3 = 29.999999999999996 in floats: the 1e-6 s tolerance still applies it.
        pytest.param(8.0, 2, 2, 1, 2.3, 32.3, (4, "scale-up", 0, None), id="tolerance-1e-6"),
        pytest.param(8.0, 2, 2, 1, 2.3, 32.29, (2, "upscale-delay", 1, 2.3), id="10ms-short-waits"),
        pytest.param(
            8.0, 2, 2, -1, 0.0, 500.0, (2, "upscale-delay", 1, 500.0), id="direction-change-restarts"
        ),
        pytest.param(4.0, 2, 2, 1, 0.0, 20.0, (2, "no-change", 0, None), id="no-change-resets"),
        pytest.param(2.0, 4, 4, -1, 0.0, 599.0, (4, "downscale-delay", -1, 0.0), id="down-waits-600s"),
        pytest.param(2.0, 4, 4, -1, 0.0, 600.0, (1, "scale-down", 0, None), id="down-at-600s"),
        pytest.param(0.0, 4, 4, -1, 0.0, 600.0, (1, "scale-down", 0, None), id="down-stops-at-one"),
        # No running replica but requests: straight to max(ceil(1 x 1.0), target); the run is kept.
        pytest.param(3.0, 0, 0, 1, 5.0, 10.0, (1, "cold-start", 1, 5.0), id="cold-start-keeps-run"),
        pytest.param(50.0, 0, 3, -1, 5.0, 10.0, (3, "cold-start", -1, 5.0), id="starting-replicas-kept"),
        pytest.param(0.0, 0, 3, 1, 5.0, 10.0, (3, "no-running-replica", 1, 5.0), id="idle-starting-kept"),
    ],
)
def test_decide_replicas(total, running, target, direction, since, now_s, expected):
    assert decide_replicas(DELAY, total, running, target, direction, since, now_s) == expected


def test_delay_timer_survives_the_cold_start_path():
    # A scale-up run starts at 0 s; at 10 s every replica is gone (cold start, run kept); at 30 s one
    # replica serves again with the load still high: the run began at 0 s, so the scale-up is due now.
    cfg = replace(CFG, min_replicas=0)
    step0 = decide_replicas(cfg, 8.0, 2, 2, 0, None, 0.0)
    assert step0[1:] == ("upscale-delay", 1, 0.0)
    step1 = decide_replicas(cfg, 8.0, 0, 2, step0[2], step0[3], 10.0)
    assert step1 == (2, "cold-start", 1, 0.0)
    step2 = decide_replicas(cfg, 8.0, 1, 2, step1[2], step1[3], 30.0)
    assert step2[:2] == (4, "scale-up")


def test_bounds_apply_after_the_delays():
    # 3 replicas at min 3, load for 1: the down run times although the bounded result stays 3.
    cfg = replace(CFG, min_replicas=3)
    d0 = decide_replicas(cfg, 2.0, 3, 3, 0, None, 0.0)
    assert d0 == (3, "downscale-delay", -1, 0.0)
    assert decide_replicas(cfg, 2.0, 3, 3, -1, 0.0, 600.0) == (3, "scale-down", 0, None)


def test_policy_scales_up_30s_after_the_controller_first_sees_the_load():
    # 8 ongoing on 2 replicas from 0 s: pushed at 0 s (one sample, 8.0) -> up run starts at 0 s.
    policy = RayServePolicy(CFG)
    out, _ = run(policy, RayServeState(), [(t, 2, 2, 8.0) for t in range(0, 31)])
    assert [(t, d, rule) for t, d, rule, _ in out if t in (0, 29, 30)] == [
        (0, 2, "upscale-delay"),
        (29, 2, "upscale-delay"),
        (30, 4, "scale-up"),
    ]


def test_missing_requests_when_a_sample_is_due_is_no_data_and_holds():
    state = RayServeState(recorded=((0.0, 8.0),), pushed=((0.0, 8.0),), next_record_s=6.0, next_push_s=10.0)
    d, after = RayServePolicy(CFG).decide(signals(3, None), state, 6.0)
    assert (d.desired, d.rule) == (3, "no-data")
    assert after == state


def test_registered_defaults_and_smoothing():
    policy = create_policy("ray-serve", Deployment(), {"smoothing_factor": 0.5, "upscaling_factor": 2.0})
    assert isinstance(policy, RayServePolicy)
    cfg = policy.config
    assert (cfg.target_ongoing_requests, cfg.upscale_delay_s, cfg.downscale_delay_s) == (2.0, 30.0, 600.0)
    assert (cfg.upscaling_factor, cfg.downscaling_factor) == (2.0, 0.5)
    assert (policy.tick_s, cfg.record_interval_s) == (1.0, 6.0)


def test_a_tick_longer_than_the_sampling_interval_is_refused():
    with pytest.raises(ConfigError, match=r"control_interval_s = 10\.0"):
        create_policy("ray-serve", Deployment(), {"control_interval_s": 10.0})
