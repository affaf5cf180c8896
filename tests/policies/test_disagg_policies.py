"""The pool policies of a disaggregated deployment: ``slo-disagg`` and the Dynamo disaggregated planner."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import pytest

from llmscale.deployment import DEFAULT_DEPLOYMENT
from llmscale.errors import ConfigError
from llmscale.perf.interconnect import INTERCONNECTS
from llmscale.policies.disagg import erlang_c, make_slo_disagg, prefill_pool_replicas
from llmscale.policies.dynamo.disagg import (
    DynamoDisaggConfig,
    DynamoDisaggPolicy,
    decode_thpt_per_gpu,
    make_dynamo_disagg,
)
from llmscale.policies.trend import slope, slope_se
from llmscale.types import FleetView, Signals, SignalValue

LINK = INTERCONNECTS["infiniband"]


def sig(spec: int, ready: int | None = None, **values: float | None) -> Signals:
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=spec, ready=spec if ready is None else ready),
        values={k: SignalValue(v) for k, v in values.items()},
    )


# -- slo-disagg ---------------------------------------------------------------------------------------


def _slo(pool: str, **params):
    return make_slo_disagg(pool, DEFAULT_DEPLOYMENT, params, LINK)


def test_prefill_capacity_worked_number():
    # docstring: a replica with prompts waiting runs full 8,192-token iterations: ~33,800 prompt
    # tokens/s at a 2,048-token mean of CV 1 (one prompt alone: ~31,800). Its own prefill behind
    # the queue is the iteration carrying its last chunk, 8,192 / 33,800 = 0.243 s, which leaves
    # 1.895 - 0.243 s of the budget to wait. 20 req/s is 1.21 Erlangs: 2 replicas (at 0.61 busy),
    # where almost no prompt waits that long; 40 req/s, 2.43 Erlangs: 3 (at 0.81).
    policy = _slo("prefill")
    d, _ = policy.decide(
        sig(1, arrival_rate_rps=20.0, prompt_len_mean_tokens=2048.0), policy.initial_state(), 15
    )
    cap = d.inputs["prefill_capacity_tokens_s"]
    assert 33_000 < cap < 34_500
    assert cap > policy.perf.prefill_capacity_tokens_s(8192, 2048)
    budget = policy.ttft_budget_s(2048.0)
    assert (d.desired, d.rule) == (2, "capacity")
    assert d.desired == prefill_pool_replicas(20.0, 2048 / cap, budget - 8192 / cap, 0.01)
    assert d.inputs["planned_util"] == pytest.approx(20 * 2048 / (2 * cap))
    d, _ = policy.decide(
        sig(1, arrival_rate_rps=40.0, prompt_len_mean_tokens=2048.0), policy.initial_state(), 15
    )
    assert d.desired == 3 == math.ceil(40 * 2048 / cap / 0.9)


@pytest.mark.parametrize(
    ("servers", "load", "chance"),
    [
        pytest.param(1, 0.5, 0.5, id="one-server-waits-with-its-utilisation"),
        pytest.param(2, 1.2, 0.45, id="two-at-1.2-erlangs"),
        pytest.param(3, 3.0, 1.0, id="unstable"),
        pytest.param(4, 0.0, 0.0, id="idle"),
    ],
)
def test_erlang_c(servers, load, chance):
    assert erlang_c(servers, load) == pytest.approx(chance, abs=5e-4)


def test_a_pool_of_long_prompts_runs_cooler_than_one_of_short_prompts():
    # Worked in the docstring: 1.3 req/s of 0.92 s prompts (1.2 Erlangs) with 0.95 s left to
    # wait and prompt CV 1.2 need 4 replicas (0.3 busy): the chance of waiting past 0.95 s falls
    # 0.23, 0.031, 0.0035 from 2 to 4. Short prompts at the same load run at util_max.
    late = [erlang_c(k, 1.3 * 0.92) * math.exp(-(k - 1.3 * 0.92) * 0.95 / (0.92 * 1.22)) for k in (2, 3, 4)]
    assert [round(x, 4) for x in late] == [0.2266, 0.0304, 0.0034]
    assert prefill_pool_replicas(1.3, 0.92, 0.95, 0.01, variability=1.22) == 4
    assert prefill_pool_replicas(1.3 * 0.92 / 0.01, 0.01, 1.5, 0.01) == math.ceil(1.3 * 0.92 / 0.9)
    # no time left to wait: not plannable by the wait (the policy then plans at target_util)
    assert prefill_pool_replicas(1.0, 0.5, 0.0, 0.01) is None
    # bursty arrivals (variability 3) need more replicas than Poisson ones
    assert prefill_pool_replicas(1.3, 0.92, 0.95, 0.01, variability=3.0) > 4


def test_prefill_reads_the_prompts_spread_and_the_arrivals_dispersion():
    # Long prompts (8,000 tokens, 0.24 s each with 1.4 s left to wait), 12 req/s: prompts of
    # nearly one length (CV 0.3) pack a little faster and wait less than CV 1 ones; bursty
    # arrivals (dispersion 8) wait longer. Each moves the pool the way the queue model says.
    policy = _slo("prefill")
    base = {"arrival_rate_rps": 12.0, "prompt_len_mean_tokens": 8000.0}

    def decided(**extra):
        d, _ = policy.decide(sig(1, **base, **extra), policy.initial_state(), 15)
        return d

    plain, even, bursty = decided(), decided(prompt_len_cv=0.3), decided(arrival_dispersion=8.0)
    assert plain.inputs["prompt_cv"] == 1.0 and plain.inputs["arrival_dispersion"] == 1.0
    assert even.inputs["prefill_capacity_tokens_s"] > plain.inputs["prefill_capacity_tokens_s"]
    assert even.desired <= plain.desired < bursty.desired
    cap = bursty.inputs["prefill_capacity_tokens_s"]
    budget = policy.ttft_budget_s(8000.0)
    assert bursty.desired == prefill_pool_replicas(
        12.0, 8000 / cap, budget - 8192 / cap, 0.01, variability=(8.0 + 1.0) / 2
    )


def test_a_prefill_queue_is_judged_by_the_time_it_takes_to_drain():
    # 7 waiting 1,314-token prompts a replica drain in ~0.25 s of full iterations: no reaction;
    # 30 take ~1.1 s, over half the wait the budget leaves: one more replica.
    policy = _slo("prefill")
    base = {"arrival_rate_rps": 20.0, "prompt_len_mean_tokens": 1314.0}
    calm, _ = policy.decide(sig(2, **base, queue_per_replica=7.0), policy.initial_state(), 15)
    deep, _ = policy.decide(sig(2, **base, queue_per_replica=30.0), policy.initial_state(), 15)
    assert 20 < calm.inputs["queue_per_replica_max"] < 30
    assert (calm.desired, calm.rule) == (1, "capacity")
    assert (deep.desired, deep.rule) == (3, "prefill-queue")


def test_decode_context_is_the_length_biased_one_in_flight():
    # 1,000-token prompts, 400-token outputs: an arriving request's mean context over its life is
    # 1,000 + 200, but those in flight are the long ones: CV 1 -> 1,000 + 400 x 2 / 2 = 1,400;
    # CV 0.5 -> 1,000 + 400 x 1.25 / 2 = 1,250. A longer context fits fewer sequences in a step.
    policy = _slo("decode")
    base = {"arrival_rate_rps": 20.0, "prompt_len_mean_tokens": 1000.0, "decode_steps_mean": 400.0}
    d1, _ = policy.decide(sig(4, **base), policy.initial_state(), 15)
    d0, _ = policy.decide(sig(4, **base, output_len_cv=0.5), policy.initial_state(), 15)
    assert (d1.inputs["context_tokens"], d0.inputs["context_tokens"]) == (1400.0, 1250.0)
    assert d1.inputs["batch"] <= d0.inputs["batch"]


def test_prefill_is_planned_within_its_ceiling_and_at_its_floor_when_no_wait_fits():
    tight = _slo("prefill", util_max=0.5)
    d, _ = tight.decide(
        sig(1, arrival_rate_rps=40.0, prompt_len_mean_tokens=2048.0), tight.initial_state(), 15
    )
    assert d.inputs["planned_util"] <= 0.5
    # prompts whose own prefill takes the whole budget: waiting decides nothing, target_util does
    slow = _slo("prefill", target_util=0.5)
    d, _ = slow.decide(
        sig(1, arrival_rate_rps=1.0, prompt_len_mean_tokens=70_000.0), slow.initial_state(), 15
    )
    cap = d.inputs["prefill_capacity_tokens_s"]
    assert 70_000 / cap > slow.ttft_budget_s(70_000.0)
    assert d.desired == math.ceil(70_000 / (cap * 0.5))


@pytest.mark.parametrize(
    ("pool", "ready", "values", "desired", "rule"),
    [
        pytest.param(
            "prefill", 2, {"ttft_p95_s": 3.0}, 4, "ttft-over-budget", id="prefill-ttft-1.58x-its-budget"
        ),
        pytest.param("prefill", 2, {"queue_per_replica": 40.0}, 3, "prefill-queue", id="prefill-queue-deep"),
        pytest.param(
            "prefill", 2, {"ttft_p95_s": 0.3, "queue_per_replica": 0.5}, 1, "capacity", id="prefill-calm"
        ),
        pytest.param("decode", 3, {"kv_usage_max": 0.95}, 4, "kv-high", id="decode-kv-full"),
        pytest.param("decode", 4, {"itl_p95_s": 0.15}, 6, "itl-over-target", id="decode-itl-1.5x-target"),
        pytest.param("decode", 4, {"itl_p95_s": 0.05, "kv_usage_max": 0.3}, 1, "capacity", id="decode-calm"),
    ],
)
def test_slo_disagg_reacts_to_its_pools_signals(pool, ready, values, desired, rule):
    # A light load (2 req/s of 1,000 + 100 tokens): the capacity figure is 1, so what moves the
    # pool is its own signal. The prefill budget at a 2 s SLO, 100 ms ITL and InfiniBand:
    # 2 - 0.0027 - 0.1 = 1.8973 s; a P95 TTFT of 3.0 s is 1.581x that: ceil(2 x 1.581) = 4.
    policy = _slo(pool)
    base = {"arrival_rate_rps": 2.0, "prompt_len_mean_tokens": 1000.0, "decode_steps_mean": 100.0}
    d, _ = policy.decide(sig(ready, **base, **values), policy.initial_state(), 15.0)
    if rule == "ttft-over-budget":
        budget = policy.ttft_budget_s(1000.0)
        assert budget == pytest.approx(2.0 - (1000 * 131_072 / 50e9 + 50e-6) - 0.1)
        assert math.ceil(ready * 3.0 / budget) == desired
    assert (d.desired, d.rule) == (desired, rule)


@pytest.mark.parametrize(
    ("pool", "values"),
    [
        pytest.param("prefill", {"ttft_p95_s": 9.7}, id="prefill-ttft-while-starting"),
        pytest.param("decode", {"itl_p95_s": 0.3}, id="decode-itl-while-starting"),
    ],
)
def test_slo_disagg_reactions_wait_for_replicas_on_the_way(pool, values):
    # 6 asked for, 2 ready after a cold start: a 9.7 s P95 TTFT read as a ratio would ask for
    # ceil(2 x 9.7 / 1.897) = 11; it is the backlog those 4 starting replicas will serve.
    policy = _slo(pool)
    base = {"arrival_rate_rps": 2.0, "prompt_len_mean_tokens": 1000.0, "decode_steps_mean": 100.0}
    d, _ = policy.decide(sig(6, ready=2, **base, **values), policy.initial_state(), 15.0)
    assert (d.desired, d.rule) == (6, "scaling-in-progress")
    # ... and with every replica ready the reaction is capped at twice the ready count
    d, _ = policy.decide(sig(2, **base, **values), policy.initial_state(), 15.0)
    assert d.desired == 4 and d.rule in ("ttft-over-budget", "itl-over-target")


def test_slo_disagg_holds_without_data():
    policy = _slo("decode")
    d, state = policy.decide(
        sig(3, arrival_rate_rps=5.0, prompt_len_mean_tokens=900.0), policy.initial_state(), 15
    )
    assert d.desired == 3 and d.rule == "no-data" and d.no_data is not None
    assert state.isl_tokens == 900.0 and state.osl_tokens is None


def test_slo_disagg_refuses_unknown_parameters_and_pools():
    with pytest.raises(ConfigError, match="no parameter 'target'"):
        _slo("prefill", target=0.5)
    with pytest.raises(ConfigError, match="pool = 'mixed'"):
        _slo("mixed")
    with pytest.raises(ConfigError, match=r"target_util = 1\.5"):
        _slo("decode", target_util=1.5)


# -- dynamo-disagg ------------------------------------------------------------------------------------


class _Aff(NamedTuple):
    base_s: float
    per_ctx_s: float


@dataclass(frozen=True)
class Stub:
    """10,000 prefill tokens/s per GPU at any ISL; ITL = 15 ms + 0.4 ms x batch at any context."""

    def prefill_capacity_tokens_s(self, chunk_tokens, prompt_tokens):
        return 10_000.0

    def decode_affine(self, b):
        return _Aff(0.015 + 0.0004 * b, 0.0)


CFG = DynamoDisaggConfig(pool="prefill", ttft_sla_s=2.0, itl_sla_s=0.0251, max_num_seqs=256)


def test_decode_thpt_scans_from_the_largest_batch_down():
    thpt, batch = decode_thpt_per_gpu(Stub(), 0.0251, 1100.0, 256, None, 1)
    assert batch == 25 and thpt == pytest.approx(25 / 0.025)
    # KV holds 10 sequences of 1,100 tokens: the scan starts at 10
    assert decode_thpt_per_gpu(Stub(), 0.0251, 1100.0, 256, 11_000, 1)[1] == 10
    # nothing within 10 ms: batch 1's figure (Dynamo: the emptiest grid point)
    thpt, batch = decode_thpt_per_gpu(Stub(), 0.010, 1100.0, 256, None, 1)
    assert batch == 1 and thpt == pytest.approx(1 / 0.0154)


@pytest.mark.parametrize(
    ("pool", "rate", "desired"),
    [
        pytest.param("prefill", 600 / 180, 1, id="prefill-600-req"),
        pytest.param("decode", 600 / 180, 1, id="decode-600-req"),
        pytest.param("prefill", 9.0, 1, id="prefill-1620-req"),
        pytest.param("decode", 9.0, 2, id="decode-1620-req"),
    ],
)
def test_dynamo_disagg_worked_example(pool, rate, desired):
    policy = DynamoDisaggPolicy(replace(CFG, pool=pool), Stub())
    state = policy.initial_state()
    values = {"arrival_rate_rps": rate, "prompt_len_mean_tokens": 1000.0, "decode_steps_mean": 200.0}
    rules = []
    for now in (60.0, 120.0, 180.0):
        d, state = policy.decide(sig(3, **values), state, now)
        rules.append(d.rule)
    assert rules == ["observing", "observing", f"{pool}-throughput"]
    assert d.desired == desired
    # held at the planned count until the next interval closes
    d, state = policy.decide(sig(desired, **values), state, 240.0)
    assert (d.desired, d.rule) == (desired, "observing")


def test_dynamo_disagg_builds_from_a_deployment():
    policy = make_dynamo_disagg("decode", DEFAULT_DEPLOYMENT, {"adjustment_interval_s": 120.0})
    assert policy.name == "dynamo-disagg:decode" and policy.tick_s == 60.0
    assert policy.config.max_kv_tokens is not None and policy.config.max_kv_tokens > 100_000
    with pytest.raises(ConfigError, match="no parameter 'itl'"):
        make_dynamo_disagg("decode", DEFAULT_DEPLOYMENT, {"itl": 0.05})
    with pytest.raises(ConfigError, match="observe_s = 300"):
        make_dynamo_disagg("prefill", DEFAULT_DEPLOYMENT, {"observe_s": 300.0})


@pytest.mark.parametrize(
    "rate", [pytest.param(5.0, id="few-in-flight"), pytest.param(60.0, id="many-in-flight")]
)
def test_decode_holds_the_poisson_tail_of_sequences_in_flight(rate):
    from statistics import NormalDist

    policy = _slo("decode")
    values = {"arrival_rate_rps": rate, "prompt_len_mean_tokens": 1000.0, "decode_steps_mean": 200.0}
    d, _ = policy.decide(sig(1, **values), policy.initial_state(), 15)
    i = d.inputs
    demand = rate * 200.0
    batch, thpt = i["batch"], i["decode_tokens_s"]
    in_flight = demand * batch / thpt
    tail = math.ceil((in_flight + NormalDist().inv_cdf(0.99) * math.sqrt(in_flight)) / batch)
    fixed = math.ceil(demand / (thpt * 0.7))
    assert d.rule == "capacity"
    assert d.desired == min(fixed, max(tail, math.ceil(demand / (thpt * 0.9))))
    # never more than the fixed 0.7 planned, and never planned above 90% of the capacity
    assert d.desired <= fixed and d.desired * thpt * 0.9 >= demand


def test_a_rising_rate_is_planned_one_cold_start_ahead():
    # 10, 12, ..., 18 req/s at 15 s ticks: the smoothed rate (alpha 0.4) rises with a slope the
    # fit is sure of, so the pool plans for 18 + that slope, less its standard error, x 90 s (the
    # default deployment's cold start). A rate bouncing between 10 and 12 has a slope no surer
    # than its noise: planned as it is.
    for pool in ("prefill", "decode"):
        policy = _slo(pool)
        state = policy.initial_state()
        shape = {"prompt_len_mean_tokens": 1000.0, "decode_steps_mean": 200.0}
        levels, level = [], None
        for i, rate in enumerate((10.0, 12.0, 14.0, 16.0, 18.0)):
            d, state = policy.decide(sig(2, arrival_rate_rps=rate, **shape), state, 15.0 * (i + 1))
            level = rate if level is None else level + 0.4 * (rate - level)
            levels.append((15.0 * (i + 1), level))
        trend = slope(levels)
        sure = trend - slope_se(levels, trend)
        assert 0.0 < sure < trend
        assert d.inputs["rate_rps"] == 18.0
        assert d.inputs["forecast_rps"] == pytest.approx(18.0 + sure * policy.config.cold_start_s)
        assert d.inputs["forecast_rps"] > 25.0
        flat = policy.initial_state()
        for i, rate in enumerate((11.0, *(10.0, 12.0) * 5, 12.0)):
            d, flat = policy.decide(sig(2, arrival_rate_rps=rate, **shape), flat, 15.0 * (i + 1))
        assert d.inputs["forecast_rps"] == 12.0


@pytest.mark.parametrize("rate", [math.inf, math.nan, -3.0])
def test_a_rate_that_is_no_rate_is_held_as_missing_data(rate):
    for pool in ("prefill", "decode"):
        policy = _slo(pool)
        shape = {"prompt_len_mean_tokens": 1000.0, "decode_steps_mean": 200.0}
        d, state = policy.decide(sig(3, arrival_rate_rps=rate, **shape), policy.initial_state(), 15.0)
        assert (d.desired, d.rule) == (3, "no-data")
        assert state.rate_history == ()
