"""Seed 004: ``bandwidth-entropy`` — bandwidth P95 x queue entropy, lag compensation, 90 s warm-up buffer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig, GuardState, apply_guards
from llmscale.policies.bandwidth_entropy import compensated, fusion_weights
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Signals, SignalValue

CTX = Deployment(min_replicas=1, max_replicas=20)
BASE = Signals(time_s=0.0, fleet=FleetView(spec_replicas=3, ready=3), values={})


def sig(
    now_s: float, bw: float | None, ent: float | None, spec: int = 3, ready: int | None = None
) -> Signals:
    return replace(
        BASE,
        time_s=now_s,
        fleet=FleetView(spec_replicas=spec, ready=spec if ready is None else ready),
        values={"bw_saturation_p95": SignalValue(bw), "queue_entropy": SignalValue(ent)},
    )


@pytest.mark.parametrize(
    ("bw", "ent", "desired", "rule"),
    [
        pytest.param(0.86, 0.73, 4, "bandwidth-and-entropy-high", id="0.86-0.73-up"),
        pytest.param(0.85, 0.73, 3, "hold", id="bw-0.85-strict"),
        pytest.param(0.86, 0.72, 3, "hold", id="entropy-0.72-strict"),
        pytest.param(0.99, 0.10, 3, "hold", id="bandwidth-alone-no"),
        pytest.param(0.91, 0.81, 5, "severe-bandwidth-entropy", id="table-0.9-0.8-up-2"),
        pytest.param(0.91, 0.79, 4, "bandwidth-and-entropy-high", id="not-severe-up-1"),
        pytest.param(0.39, 0.24, 2, "bandwidth-and-entropy-low", id="0.39-0.24-down"),
        pytest.param(0.40, 0.24, 3, "hold", id="bw-0.40-strict"),
        pytest.param(0.39, 0.25, 3, "hold", id="entropy-0.25-strict"),
        pytest.param(None, 0.5, 3, "no-data", id="bandwidth-missing"),
        pytest.param(0.5, None, 3, "no-data", id="entropy-missing"),
    ],
)
def test_decision_functions(bw, ent, desired, rule):
    policy = create_policy("bandwidth-entropy", CTX)
    d, _ = policy.decide(sig(0.0, bw, ent), policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (desired, rule)


def test_compensated_score_worked_example():
    # (0.9 + 0.8 x 0.5 + 0.64 x 0.3) / (1 + 0.8 + 0.64)
    assert compensated([0.3, 0.5, 0.9], 0.8) == pytest.approx(1.492 / 2.44)
    assert compensated([0.7], 0.8) == 0.7


@pytest.mark.parametrize(
    ("entropy", "weights"),
    [
        pytest.param(0.1, (0.8, 0.2), id="stable"),
        pytest.param(0.3, (0.5, 0.5), id="jitter-from-0.3"),
        pytest.param(0.69, (0.5, 0.5), id="jitter"),
        pytest.param(0.7, (0.2, 0.8), id="burst-from-0.7"),
    ],
)
def test_fusion_table(entropy, weights):
    assert fusion_weights(entropy) == weights


def test_a_dip_after_saturation_is_not_a_scale_down_yet():
    """Lag compensation: after 4 ticks at 0.9 bandwidth one low sample weighs 1 / 3.36 of the mean."""
    policy = create_policy("bandwidth-entropy", CTX)
    state = policy.initial_state()
    for i in range(4):
        d, state = policy.decide(sig(15.0 * i, 0.9, 0.5), state, 15.0 * i)
    d, state = policy.decide(sig(60.0, 0.2, 0.1), state, 60.0)
    assert d.rule == "hold"
    assert d.inputs["bw_compensated"] > 0.4
    for i in range(5, 20):  # the old samples fade (and leave the 5-minute window)
        d, state = policy.decide(sig(15.0 * i, 0.2, 0.1), state, 15.0 * i)
    assert d.rule == "bandwidth-and-entropy-low"


def test_five_minute_hold_is_the_guards_confirmation():
    policy = create_policy("bandwidth-entropy", CTX)
    assert dict(policy.guard_overrides) == {"confirm_down_ticks": 20}  # 300 s / 15 s
    assert dict(create_policy("bandwidth-entropy", CTX, {"tick_s": 10.0}).guard_overrides) == {
        "confirm_down_ticks": 30
    }
    cfg = GuardConfig(min_replicas=1, max_replicas=20, drain_aware=False).merged(policy.guard_overrides)
    gs = GuardState()
    state = policy.initial_state()
    finals = []
    for i in range(21):
        now_s = 15.0 * i
        s = sig(now_s, 0.3, 0.1)
        d, state = policy.decide(s, state, now_s)
        out, gs = apply_guards(d, s, cfg, gs, now_s)
        finals.append(out.desired)
    assert finals[:19] == [3] * 19
    assert finals[19] == 2  # the 20th consecutive proposal, 285 s after the first


def test_warmup_buffer_90s_after_a_replica_becomes_ready():
    policy = create_policy("bandwidth-entropy", CTX)
    state = policy.initial_state()
    d, state = policy.decide(sig(0.0, 0.95, 0.9, spec=4, ready=3), state, 0.0)
    assert d.rule == "severe-bandwidth-entropy"
    d, state = policy.decide(sig(15.0, 0.95, 0.9, spec=4, ready=4), state, 15.0)  # the 4th is ready
    assert (d.desired, d.rule) == (4, "warmup-buffer")
    d, state = policy.decide(sig(90.0, 0.95, 0.9, spec=4, ready=4), state, 90.0)
    assert (d.desired, d.rule) == (4, "warmup-buffer")
    d, state = policy.decide(sig(105.0, 0.95, 0.9, spec=4, ready=4), state, 105.0)
    assert (d.desired, d.rule) == (6, "severe-bandwidth-entropy")


def test_compensate_up_smooths_the_scale_up_too():
    policy = create_policy("bandwidth-entropy", CTX, {"compensate_up": True})
    state = policy.initial_state()
    for i in range(4):
        d, state = policy.decide(sig(15.0 * i, 0.5, 0.5), state, 15.0 * i)
    d, state = policy.decide(sig(60.0, 0.95, 0.9), state, 60.0)
    assert d.rule == "hold"


def slo_sig(now_s: float, bw: float, ent: float, p99_s: float | None, load_rps: float = 50.0) -> Signals:
    s = sig(now_s, bw, ent)
    values = {
        **s.values,
        "ttft_p99_s": SignalValue(p99_s),
        "gpu_util_mean": SignalValue(99.0),
        "arrival_rate_rps": SignalValue(load_rps),
        "queue_waiting": SignalValue(0.0),
    }
    return replace(s, values=values)


def test_the_state_machine_blocks_a_scale_down_while_saturated():
    """Seed 004 3.2: SLO missed (P99 2.5 s > 2 s) -> Saturated; low bandwidth and entropy do not shrink it."""
    policy = create_policy("bandwidth-entropy", CTX)
    d, state = policy.decide(slo_sig(0.0, 0.3, 0.1, 2.5), policy.initial_state(), 0.0)
    assert (d.desired, d.rule, d.fleet_state) == (3, "shrink-blocked", "saturated")
    # SLO met on 3 ticks: back to Idle, and the same low readings now propose -1
    for t in (15.0, 30.0):
        d, state = policy.decide(slo_sig(t, 0.3, 0.1, 1.0), state, t)
        assert d.fleet_state == "saturated"
    d, state = policy.decide(slo_sig(45.0, 0.3, 0.1, 1.0), state, 45.0)
    assert (d.desired, d.rule, d.fleet_state) == (2, "bandwidth-and-entropy-low", "idle")


def test_degraded_scales_up_on_the_slo_alone():
    """60 s of missed SLO with the GPUs busy 99 % of the time -> Degraded: +1 though bandwidth 0.6
    and entropy 0.5 are below the trigger's 0.85 and 0.72."""
    policy = create_policy("bandwidth-entropy", CTX)
    state = policy.initial_state()
    for t in (0.0, 15.0, 30.0, 45.0):
        d, state = policy.decide(slo_sig(t, 0.6, 0.5, 3.0), state, t)
        assert (d.rule, d.fleet_state) == ("hold", "saturated")
    d, state = policy.decide(slo_sig(60.0, 0.6, 0.5, 3.0), state, 60.0)
    assert (d.desired, d.rule, d.fleet_state, d.relative) == (4, "degraded-slo", "degraded", True)
    assert d.inputs["slo_missed_for_s"] == 60.0


def test_the_decision_log_carries_the_machine_state():
    """The core's record takes the policy's state, not its own per-tick reading: SLO missed with
    the queue empty reads "degraded" per tick, but the machine has only just become Saturated."""
    from llmscale.controller.core import Controller, decide, initial_state

    policy = create_policy("bandwidth-entropy", CTX)
    controller = Controller(policy, GuardConfig(), CTX)
    record, _ = decide(controller, initial_state(controller, 0.0), slo_sig(0.0, 0.3, 0.1, 2.5), 0.0)
    assert record.as_json()["fleet_state"] == "saturated"
    assert record.as_json()["rule"] == "shrink-blocked"
