"""Seed 002 3.2 / 5.1: ``hybrid`` and ``hybrid-predictive``, with the document's own thresholds."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig, GuardState, apply_guards
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Signals, SignalValue

CTX = Deployment(min_replicas=1, max_replicas=20, cold_start_s=90.0)
BASE = Signals(time_s=0.0, fleet=FleetView(spec_replicas=3, ready=3), values={})
#: a busy, healthy fleet: nothing fires
CALM = {"queue_waiting": 5.0, "running": 40.0, "e2e_p99_s": 1.0, "gpu_util_mean": 60.0}


def sig(now_s: float = 0.0, spec: int = 3, **values: float | None) -> Signals:
    merged = {**CALM, **values}
    return replace(
        BASE,
        time_s=now_s,
        fleet=replace(BASE.fleet, spec_replicas=spec, ready=spec),
        values={k: SignalValue(v) for k, v in merged.items()},
    )


@pytest.mark.parametrize(
    ("values", "spec", "desired", "rule"),
    [
        pytest.param({"queue_waiting": 51.0}, 3, 4, "queue-critical", id="queue-51-up"),
        pytest.param({"queue_waiting": 50.0}, 3, 3, "hold", id="queue-50-strictly-greater-no"),
        pytest.param(
            {"e2e_p99_s": 5.1, "gpu_util_mean": 86.0}, 3, 4, "p99-and-gpu-high", id="p99-5.1-gpu-86-up"
        ),
        pytest.param({"e2e_p99_s": 5.0, "gpu_util_mean": 86.0}, 3, 3, "hold", id="p99-5.0-no"),
        pytest.param({"e2e_p99_s": 5.1, "gpu_util_mean": 85.0}, 3, 3, "hold", id="gpu-85-no"),
        pytest.param({"e2e_p99_s": 9.0, "gpu_util_mean": 40.0}, 3, 3, "hold", id="p99-alone-no"),
        pytest.param(
            {"gpu_util_mean": 29.0, "queue_waiting": 0.0, "e2e_p99_s": 1.9},
            3,
            2,
            "idle-gpu-low",
            id="gpu-29-queue-0-p99-1.9-three-above-min-2-down",
        ),
        pytest.param(
            {"gpu_util_mean": 29.0, "queue_waiting": 0.0, "e2e_p99_s": 1.9}, 2, 2, "at-floor", id="keeps-2"
        ),
        pytest.param(
            {"gpu_util_mean": 30.0, "queue_waiting": 0.0, "e2e_p99_s": 1.9}, 3, 3, "hold", id="gpu-30"
        ),
        pytest.param(
            {"gpu_util_mean": 29.0, "queue_waiting": 1.0, "e2e_p99_s": 1.9}, 3, 3, "hold", id="queue-1"
        ),
        pytest.param(
            {"gpu_util_mean": 29.0, "queue_waiting": 0.0, "e2e_p99_s": 2.0}, 3, 3, "hold", id="p99-2.0"
        ),
        pytest.param(
            {"queue_waiting": 21.0, "gpu_util_mean": 96.0},
            3,
            4,
            "warn-queue-gpu-saturated",
            id="warn-21-gpu-96",
        ),
        pytest.param({"queue_waiting": 20.0, "gpu_util_mean": 96.0}, 3, 3, "hold", id="warn-20-no"),
        pytest.param({"queue_waiting": 30.0, "gpu_util_mean": 95.0}, 3, 3, "hold", id="gpu-95-no"),
        pytest.param({"gpu_util_mean": None}, 3, 3, "no-data", id="gpu-missing"),
        pytest.param({"queue_waiting": None}, 3, 3, "no-data", id="queue-missing"),
        pytest.param(
            {"queue_waiting": 0.0, "running": 0.0, "e2e_p99_s": None, "gpu_util_mean": 2.0},
            3,
            2,
            "idle-gpu-low",
            id="idle-empty-window-p99-reads-0",
        ),
        pytest.param(
            {"queue_waiting": 0.0, "e2e_p99_s": None, "gpu_util_mean": 2.0},
            3,
            3,
            "no-data-p99",
            id="p99-undefined-with-requests-running",
        ),
        pytest.param(
            {"queue_waiting": 60.0, "e2e_p99_s": None}, 3, 4, "queue-critical", id="queue-needs-no-p99"
        ),
    ],
)
def test_make_decision(values, spec, desired, rule):
    policy = create_policy("hybrid", CTX)
    d, _ = policy.decide(sig(spec=spec, **values), policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (desired, rule)


def test_warn_rule_can_be_switched_off():
    policy = create_policy("hybrid", CTX, {"warn_scale_up": False})
    d, _ = policy.decide(sig(queue_waiting=21.0, gpu_util_mean=96.0), None, 0.0)
    assert (d.desired, d.rule) == (3, "hold")
    assert "GPU 96% > critical 95%" in d.note


def test_p99_signal_is_a_parameter():
    policy = create_policy("hybrid", CTX, {"p99_signal": "ttft_p99_s"})
    d, _ = policy.decide(sig(e2e_p99_s=9.0, ttft_p99_s=5.1, gpu_util_mean=90.0), None, 0.0)
    assert d.rule == "p99-and-gpu-high"


def test_cooldowns_are_guard_overrides_120_up_600_down():
    policy = create_policy("hybrid", CTX)
    assert dict(policy.guard_overrides) == {"cooldown_up_s": 120.0, "cooldown_down_s": 600.0}
    cfg = GuardConfig(min_replicas=1, max_replicas=20, drain_aware=False, headroom_max_usage=None).merged(
        policy.guard_overrides
    )
    gs = GuardState()
    spec = 3
    finals = []
    for now_s in (0.0, 60.0, 119.0, 120.0):
        s = sig(now_s, spec=spec, queue_waiting=51.0)
        d, _ = policy.decide(s, None, now_s)
        out, gs = apply_guards(d, s, cfg, gs, now_s)
        finals.append(out.desired)
        spec = out.desired
    # +1 at t=0, held by the 120 s cooldown at 60 and 119, +1 again at 120.
    assert finals == [4, 4, 4, 5]
    # A scale-down waits 600 s after the last change (t=120).
    for now_s, expected in ((700.0, 5), (720.0, 4)):
        s = sig(now_s, spec=spec, queue_waiting=0.0, gpu_util_mean=10.0, e2e_p99_s=1.0)
        d, _ = policy.decide(s, None, now_s)
        out, gs = apply_guards(d, s, cfg, gs, now_s)
        assert out.desired == expected, now_s
        spec = out.desired


# -- hybrid-predictive -----------------------------------------------------------------


def ramp(now_s: float, spec: int = 4) -> Signals:
    """Healthy and busy, the request rate rising 0.02 req/s every second from 8 req/s."""
    return sig(now_s, spec=spec, request_rate_rps=8.0 + 0.02 * now_s, serving_replicas=float(spec))


def test_predictive_scales_ahead_of_a_ramp():
    policy = create_policy("hybrid-predictive", CTX)
    reactive = create_policy("hybrid", CTX)
    state = policy.initial_state()
    first = None
    for i in range(40):
        now_s = 15.0 * i
        d, state = policy.decide(ramp(now_s), state, now_s)
        r, _ = reactive.decide(ramp(now_s), None, now_s)
        assert r.rule == "hold"  # nothing reactive fires: queue 5, P99 1 s, GPU 60 %
        if d.rule == "predictive-up":
            first = (now_s, d)
            break
    assert first is not None
    now_s, d = first
    assert now_s == 240.0  # the worked example of the module docstring: 12.8 req/s, forecast 14.13
    # The capacity learned is the rate per replica now (the highest seen while healthy); the
    # forecast one 90 s cold start ahead must exceed 4 replicas' worth by 10 %.
    cap = d.inputs["capacity_rps_per_replica"]
    forecast = d.inputs["forecast_rps"]
    assert cap == pytest.approx((8.0 + 0.02 * now_s) / 4)
    assert forecast > 1.1 * 4 * cap
    assert d.desired == 5
    assert d.inputs["horizon_s"] == 90.0


def test_predictive_holds_a_reactive_scale_down_the_forecast_needs():
    policy = create_policy("hybrid-predictive", CTX)
    state = policy.initial_state()
    for i in range(4):  # learn ~2 req/s per replica at 8 req/s on 4 replicas
        d, state = policy.decide(
            sig(15.0 * i, spec=4, request_rate_rps=8.0, serving_replicas=4.0), state, 15.0 * i
        )
    idle_gpu = sig(
        60.0, spec=4, request_rate_rps=8.0, serving_replicas=4.0, gpu_util_mean=20.0, queue_waiting=0.0
    )
    assert create_policy("hybrid", CTX).decide(idle_gpu, None, 60.0)[0].desired == 3
    d, state = policy.decide(idle_gpu, state, 60.0)
    assert (d.desired, d.rule) == (4, "predictive-hold")


def test_predictive_no_data_before_anything_is_learned():
    policy = create_policy("hybrid-predictive", CTX)
    d, _ = policy.decide(sig(gpu_util_mean=None), policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (3, "no-data")


def test_horizon_defaults_to_the_cold_start():
    policy = create_policy("hybrid-predictive", replace(CTX, cold_start_s=240.0))
    d, _ = policy.decide(ramp(0.0), policy.initial_state(), 0.0)
    assert d.inputs["horizon_s"] == 240.0


@pytest.mark.parametrize(
    ("ghosts", "capacity"),
    [
        # learned at 8 req/s on 4 serving replicas: 2 req/s each
        pytest.param(None, 2.0, id="no-ghost-signal"),
        pytest.param(0.0, 2.0, id="no-ghost"),
        # one of them a ghost (no request for 60 s): 8 / 3 = 2.67 req/s per working replica
        pytest.param(1.0, 8.0 / 3.0, id="one-ghost-is-not-capacity"),
    ],
)
def test_predictive_capacity_leaves_ghost_replicas_out(ghosts, capacity):
    policy = create_policy("hybrid-predictive", CTX)
    state = policy.initial_state()
    for i in range(4):  # healthy at 8 req/s: the capacity is learned
        s = sig(15.0 * i, spec=4, request_rate_rps=8.0, serving_replicas=4.0, ghost_replicas=ghosts)
        d, state = policy.decide(s, state, 15.0 * i)
    assert d.inputs["capacity_rps_per_replica"] == pytest.approx(capacity)
    # Then the ghost is gone and the rate climbs 3 req/s a tick with a queue (25 > queue_warn 20: not
    # healthy, nothing more is learned) until the forecast runs ahead of the fleet: the replicas
    # it asks for are the forecast over the capacity per *working* replica. With the ghost counted
    # as capacity the fleet looks a third weaker (2 against 2.67 req/s a replica): it scales up at
    # a forecast of 9.44 req/s (> 1.1 x 4 x 2) instead of 11.93 (> 1.1 x 4 x 2.67), and asks for a
    # third more replicas for any given forecast.
    for i in range(4, 20):
        now_s = 15.0 * i
        s = sig(
            now_s,
            spec=4,
            request_rate_rps=8.0 + 3.0 * (i - 3),
            serving_replicas=4.0,
            ghost_replicas=0.0,
            queue_waiting=25.0,
        )
        d, state = policy.decide(s, state, now_s)
        if d.rule == "predictive-up":
            break
    assert d.rule == "predictive-up"
    cap = d.inputs["capacity_rps_per_replica"]
    assert cap == pytest.approx(capacity, rel=1e-3)  # decayed with a day's half-life since
    assert d.desired == math.ceil(d.inputs["forecast_rps"] / cap)
