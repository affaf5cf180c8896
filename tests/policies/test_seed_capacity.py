"""Seed 000 4.2: ``capacity`` (the seed's constants) and ``capacity-calibrated`` (the fitted perf model)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmscale.perf import get_perf_model
from llmscale.policies.base import PolicyContext, create_policy
from llmscale.policies.capacity import CapacityConfig, seed_tps, sustainable_concurrency
from llmscale.types import FleetView, Signals, SignalValue

CTX = PolicyContext(min_replicas=1, max_replicas=100)
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

PERF = get_perf_model(CTX.model, CTX.gpu, CTX.tp)


def test_decode_only_matches_the_perf_models_tpot_batch():
    # With no prompt the amortised prefill is 0: the largest decode batch within TPOT.
    for decode, tpot in ((256, 0.1), (1024, 0.05), (64, 0.02)):
        b, t_b = sustainable_concurrency(PERF, 0, decode, tpot, 256)
        assert b == PERF.max_decode_batch_for_tpot(tpot, decode // 2, 256)
        assert t_b <= tpot


def test_concurrency_shrinks_with_longer_prompts_and_a_tighter_slo():
    # A 30 ms TPOT keeps every case below max_num_seqs (at 100 ms Llama-3-8B on an H100 runs 256
    # sequences of 128- or 1,024-token prompts and the cap, not the SLO, binds).
    b = [sustainable_concurrency(PERF, p, 256, 0.03, 256)[0] for p in (128, 1024, 4096)]
    assert 256 > b[0] > b[1] > b[2] > 0
    assert sustainable_concurrency(PERF, 1024, 256, 0.02, 256)[0] < b[1]
    assert sustainable_concurrency(PERF, 1024, 256, 10.0, 256)[0] == 256  # max_num_seqs caps it
    assert sustainable_concurrency(PERF, 1024, 256, 1e-4, 256)[0] == 0  # out of reach


SHAPE = {"prompt_len_mean_tokens": 1000.0, "decode_steps_mean": 250.0}


@pytest.mark.parametrize(
    ("values", "demand"),
    [
        # light TPOT now: 530 in the system, but 60 req/s at the SLO's t(B) needs 60 x 256 x t(B)
        pytest.param(
            {"running": 480.0, "queue_waiting": 50.0, "request_rate_rps": 60.0}, "at-slo", id="rate"
        ),
        # already slower than t(B): the running requests are the floor
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
    b, t_b, pb, db = policy.concurrency(1000.0, 250.0)
    # Buckets of 32 tokens, rounded up; Llama-3-8B on one H100 holds max_num_seqs = 256 sequences of
    # 1,024 + 128 context within the 100 ms TPOT (t(256) = 78 ms), so the engine's cap binds.
    assert (b, pb, db) == (256, 1024, 256)
    assert t_b <= CTX.slo_tpot_s
    if demand == "at-slo":
        demand = 60.0 * 256 * t_b + 50.0
    assert d.inputs["demand"] == pytest.approx(demand)
    assert d.desired == math.ceil(demand / b)
    assert d.inputs["sustainable_concurrency"] == float(b)


def test_calibrated_worked_example_60_rps_needs_10():
    policy = create_policy("capacity-calibrated", CTX)
    s = sig(**SHAPE, running=480.0, queue_waiting=0.0, request_rate_rps=60.0)
    d, _ = policy.decide(s, policy.initial_state(), 0.0)
    assert d.desired == 5  # 60 x 256 x 0.0782 / 256 = 4.69
    assert dict(policy.guard_overrides) == {"stabilization_down_s": 300.0}


def test_calibrated_is_deterministic_whatever_the_call_order():
    shapes = [(1000.0, 250.0), (200.0, 900.0), (3000.0, 40.0)]
    a = create_policy("capacity-calibrated", CTX)
    b = create_policy("capacity-calibrated", CTX, {"target_fraction": 1.0})
    first = [a.concurrency(p, d)[:2] for p, d in shapes]
    second = [b.concurrency(p, d)[:2] for p, d in reversed(shapes)][::-1]
    assert first == second


def test_calibrated_idle_and_no_data():
    policy = create_policy("capacity-calibrated", CTX)
    d, _ = policy.decide(sig(running=0.0, queue_waiting=0.0), policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (1, "idle")
    d, _ = policy.decide(sig(running=5.0), policy.initial_state(), 0.0)
    assert (d.desired, d.rule) == (2, "no-data")
