"""Seed 000 4.2: ``capacity`` (the seed's constants) and ``capacity-calibrated`` (the model's mean mode)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.policies.base import create_policy
from llmscale.policies.capacity import CapacityConfig, seed_tps
from llmscale.types import FleetView, Signals, SignalValue

CTX = Deployment(min_replicas=1, max_replicas=100)
BASE = Signals(time_s=0.0, fleet=FleetView(spec_replicas=2, ready=2), values={})


def sig(now_s: float = 0.0, **values: float | None) -> Signals:
    return replace(BASE, time_s=now_s, values={k: SignalValue(v) for k, v in values.items()})


def test_seed_throughput_model():
    # 1200 / (1 + 0.002 x 1000) = 400 tokens/s; x 2 s = 800 requests per GPU
    assert seed_tps(CapacityConfig(), 1000.0) == (400.0, 800)
    assert seed_tps(CapacityConfig(), 0.0) == (1200.0, 2400)


@pytest.mark.parametrize(
    ("values", "tp", "desired", "rule"),
    [
        pytest.param(
            {
                "running": 1500.0,
                "queue_waiting": 101.0,
                "prompt_len_mean_tokens": 750.0,
                "decode_steps_mean": 250.0,
            },
            1,
            3,
            "capacity",
            id="seq-1000-active-1601-to-3",
        ),
        pytest.param(
            {
                "running": 1500.0,
                "queue_waiting": 100.0,
                "prompt_len_mean_tokens": 750.0,
                "decode_steps_mean": 250.0,
            },
            1,
            2,
            "capacity",
            id="active-1600-exactly-2",
        ),
        pytest.param(
            {
                "running": 1500.0,
                "queue_waiting": 101.0,
                "prompt_len_mean_tokens": 750.0,
                "decode_steps_mean": 250.0,
            },
            2,
            2,
            "capacity",
            id="3-gpus-at-tp2-is-2-replicas",
        ),
        pytest.param(
            {"running": 0.0, "queue_waiting": 0.0, "prompt_len_mean_tokens": None, "decode_steps_mean": None},
            1,
            1,
            "idle",
            id="nothing-active-floor-1",
        ),
        pytest.param(
            {
                "running": 10.0,
                "queue_waiting": 0.0,
                "prompt_len_mean_tokens": None,
                "decode_steps_mean": None,
            },
            1,
            2,
            "no-data",
            id="no-shape-known-yet",
        ),
        pytest.param({"running": None, "queue_waiting": 3.0}, 1, 2, "no-data", id="running-missing"),
    ],
)
def test_calc_gpu_quota(values, tp, desired, rule):
    policy = create_policy("capacity", replace(CTX, tp=tp))
    d, _ = policy.decide(sig(**values), policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (desired, rule)


def test_seed_numbers_in_the_decision():
    policy = create_policy("capacity", CTX)
    s = sig(running=1500.0, queue_waiting=101.0, prompt_len_mean_tokens=750.0, decode_steps_mean=250.0)
    d, _ = policy.decide(s, policy.initial_state(), 0.0)
    assert d.inputs["tps"] == 400.0
    assert d.inputs["req_per_gpu"] == 800.0
    assert d.inputs["active_requests"] == 1601.0


def test_the_last_known_shape_carries_over_an_empty_window():
    policy = create_policy("capacity", CTX)
    state = policy.initial_state()
    d, state = policy.decide(
        sig(0.0, running=10.0, queue_waiting=0.0, prompt_len_mean_tokens=750.0, decode_steps_mean=250.0),
        state,
        0.0,
    )
    d, state = policy.decide(sig(15.0, running=1601.0, queue_waiting=0.0), state, 15.0)
    assert (d.desired, d.rule) == (3, "capacity")
    assert "last known" in d.note


# -- calibrated --------------------------------------------------------------------------
#
# The model itself (both modes, worked numbers, against the simulator) is pinned in
# tests/perf/test_one_capacity_model.py; here, what the policy does with it.


def test_mean_mode_is_a_decode_batch_within_the_tpot_slo():
    # With prompts of one token the prefill share is ~0: the mean mode's operating point is the
    # decode batch whose step fits the TPOT, as large as the engine's cap and the SLO allow.
    policy = create_policy("capacity-calibrated", CTX)
    for decode, tpot in ((256, 0.1), (1024, 0.05), (64, 0.02)):
        p = replace(policy, tpot_s=tpot)
        cap = p.capacity(1.0, float(decode))
        assert cap.within_target and cap.mean_itl_s <= tpot
        # Little's law over the model's output lengths: 24 equal-mass lognormal quantile midpoints,
        # whose mean is 2.5% below the bucket's (249.6 for 256), as far as the damped fixed point
        # of the batch goes (it stops on a step under 0.5%).
        little = cap.rate_rps * 0.975 * cap.output_tokens * cap.mean_itl_s
        assert cap.batch == pytest.approx(little, rel=0.03)
        assert cap.batch <= 256


def test_concurrency_shrinks_with_longer_prompts_and_a_tighter_slo():
    # A 30 ms TPOT keeps every case below max_num_seqs (at 100 ms Llama-3-8B on an H100 runs ~256
    # sequences of 128- or 1,024-token prompts and the cap, not the SLO, binds).
    policy = replace(create_policy("capacity-calibrated", CTX), tpot_s=0.03)
    b = [policy.capacity(p, 256.0).batch for p in (128.0, 1024.0, 4096.0)]
    assert 256 > b[0] > b[1] > b[2] > 0, b
    assert replace(policy, tpot_s=0.02).capacity(1024.0, 256.0).batch < b[1]
    assert replace(policy, tpot_s=10.0).capacity(1024.0, 256.0).batch <= 256  # max_num_seqs caps it
    assert not replace(policy, tpot_s=1e-4).capacity(1024.0, 256.0).within_target  # out of reach


SHAPE = {"prompt_len_mean_tokens": 1000.0, "decode_steps_mean": 250.0}


@pytest.mark.parametrize(
    ("values", "demand"),
    [
        # light TPOT now: 530 in the system, but 60 req/s at the SLO's operating point needs
        # 60 x B / capacity (a request decodes for B / capacity = D x ITL seconds there)
        pytest.param(
            {"running": 480.0, "queue_waiting": 50.0, "request_rate_rps": 60.0}, "at-slo", id="rate"
        ),
        # already slower than the operating point: the running requests are the floor
        pytest.param(
            {"running": 3000.0, "queue_waiting": 50.0, "request_rate_rps": 60.0}, 3050.0, id="running"
        ),
        pytest.param(
            {"running": 700.0, "queue_waiting": 50.0, "request_rate_rps": None}, 750.0, id="no-rate"
        ),
    ],
)
def test_calibrated_demand_at_the_slo_operating_point(values, demand):
    policy = create_policy("capacity-calibrated", CTX)
    d, _ = policy.decide(sig(**SHAPE, **values), policy.initial_state(), 0.0)
    cap = policy.capacity(1000.0, 250.0)
    # ~5% log buckets: 1,000 / 250 tokens are planned as 992 / 245. Llama-3-8B on one H100 holds
    # ~246 sequences of that shape at a mean ITL of ~76 ms: max_num_seqs (256), not the 100 ms
    # TPOT, binds.
    assert (cap.prompt_tokens, cap.output_tokens) == (992, 245)
    assert 230 < cap.batch <= 256 and cap.mean_itl_s <= CTX.slo_tpot_s
    if demand == "at-slo":
        demand = 60.0 * cap.batch / cap.rate_rps + 50.0
        # B / capacity is D x ITL over the model's output lengths (their mean 2.5% below D's),
        # as far as the model's damped fixed point of B goes (it stops on a 0.5% step: 2% here)
        assert cap.batch / cap.rate_rps == pytest.approx(0.975 * 245 * cap.mean_itl_s, rel=0.03)
    assert d.inputs["demand"] == pytest.approx(demand)
    # each replica planned at 95% of what it holds (target_fraction)
    assert d.inputs["per_replica"] == pytest.approx(0.95 * cap.batch)
    assert d.desired == math.ceil(demand / (0.95 * cap.batch))
    assert d.inputs["sustainable_concurrency"] == cap.batch
    assert d.inputs["capacity_rps_per_replica"] == cap.rate_rps


def test_calibrated_worked_example_60_rps_needs_5():
    # One replica holds 13.0 req/s with B = 239.5 in flight; 60 req/s keeps 60 x 239.5 / 13.0
    # = 1,105 in flight at that operating point; planned at 95% of B (227.5) per replica: 4.9 -> 5.
    policy = create_policy("capacity-calibrated", CTX)
    s = sig(**SHAPE, running=480.0, queue_waiting=0.0, request_rate_rps=60.0)
    d, _ = policy.decide(s, policy.initial_state(), 0.0)
    assert d.inputs["capacity_rps_per_replica"] == pytest.approx(13.0, rel=0.01)
    assert d.inputs["demand"] == pytest.approx(1105.0, rel=0.02)
    assert d.desired == 5
    assert dict(policy.guard_overrides) == {"stabilization_down_s": 300.0}


def test_calibrated_is_deterministic_whatever_the_call_order():
    shapes = [(1000.0, 250.0), (200.0, 900.0), (3000.0, 40.0)]
    a = create_policy("capacity-calibrated", CTX)
    b = create_policy("capacity-calibrated", CTX, {"target_fraction": 1.0})
    first = [a.capacity(p, d) for p, d in shapes]
    second = [b.capacity(p, d) for p, d in reversed(shapes)][::-1]
    assert first == second


def test_calibrated_idle_and_no_data():
    policy = create_policy("capacity-calibrated", CTX)
    d, _ = policy.decide(sig(running=0.0, queue_waiting=0.0), policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (1, "idle")
    d, _ = policy.decide(sig(running=5.0), policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (2, "no-data")
