"""A backtest's settings built from the user's choices (``llmscale.backtest.setup``), without the
command line: each step returns new settings and leaves what it was given unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.backtest.runner import BacktestSettings
from llmscale.backtest.setup import (
    Engine,
    FleetRequest,
    engine_settings,
    faults_from_text,
    needs_capacity_probe,
    sized_settings,
    with_faults,
    with_node_pool,
    with_standby_replicas,
    with_start_tiers,
)
from llmscale.deployment import DEFAULT_DEPLOYMENT
from llmscale.errors import ConfigError
from llmscale.policies.base import DEFAULT_POLICIES, policy_names, select_policies
from llmscale.workloads.source import WorkloadSource, read_workload, reshape_workload


def _request(**changes: object) -> FleetRequest:
    base = FleetRequest(
        model=DEFAULT_DEPLOYMENT.model,
        gpu=DEFAULT_DEPLOYMENT.gpu,
        tp=DEFAULT_DEPLOYMENT.tp,
        min_replicas=1,
        max_replicas=8,
        initial_replicas=2,
        static_replicas=3,
        slo_ttft_s=DEFAULT_DEPLOYMENT.slo_ttft_s,
        slo_tpot_s=DEFAULT_DEPLOYMENT.slo_tpot_s,
        slo_ttft_per_1k_tokens_s=0.0,
        seed=0,
        timeout_s=60.0,
        grace_s=30.0,
        router="least-outstanding",
        engine=engine_settings(None, None, None, None),
        calibration=None,
        policy_params={"slo": {"headroom": 1.2}},
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param((None, None, None), Engine(256, 8192, True), id="vllm-v1-defaults"),
        pytest.param((64, None, False), Engine(64, 8192, False), id="given-wins"),
        # 0 is kept, not read as "not given": the command line refuses it by its option name
        pytest.param((0, None, None), Engine(0, 8192, True), id="zero-kept"),
    ],
)
def test_engine_settings(given, expected):
    assert engine_settings(None, *given) == expected


def test_every_bound_given_measures_nothing_and_copies_the_parameters():
    w = read_workload(WorkloadSource(preset="default", duration_s=120.0), seed=0)
    request = _request()
    assert not needs_capacity_probe(request)
    sizing = sized_settings(w, request)
    s = sizing.settings
    assert (s.min_replicas, s.max_replicas, s.initial_replicas) == (1, 8, 2)
    assert s.policy_params == {"slo": {"headroom": 1.2}, "static": {"replicas": 3}}
    assert request.policy_params == {"slo": {"headroom": 1.2}}  # not changed in place
    assert sizing.capacity_rps is None and sizing.peak_need is None


def test_static_left_out_is_not_sized():
    w = read_workload(WorkloadSource(preset="default", duration_s=120.0), seed=0)
    s = sized_settings(w, _request(static_replicas=0)).settings
    assert "static" not in s.policy_params


def test_open_bounds_are_sized_from_one_replicas_capacity():
    w = read_workload(WorkloadSource(preset="default", duration_s=120.0), seed=0)
    sizing = sized_settings(w, _request(max_replicas=None, initial_replicas=None, static_replicas=None))
    assert sizing.capacity_rps is not None and sizing.capacity_rps > 0
    assert sizing.peak_need is not None and sizing.peak_need >= 1
    s = sizing.settings
    # max(64, 2 x the peak minute's need, min_replicas)
    assert s.max_replicas == max(64, 2 * sizing.peak_need, 1)
    assert 1 <= s.initial_replicas <= s.max_replicas
    assert s.policy_params["static"] == {"replicas": sizing.peak_need}


def test_a_tier_total_keeps_the_catalogues_split():
    base = BacktestSettings().with_cold_start()
    sim = base.sim
    total = sim.pending_s + sim.loading_s + sim.warmup_s
    out = with_start_tiers(base, total / 2, None, 2.5, 600.0)
    # half the total: each phase halved
    assert out.sim.pending_s == pytest.approx(sim.pending_s / 2)
    assert out.sim.loading_s == pytest.approx(sim.loading_s / 2)
    assert out.sim.warmup_s == pytest.approx(sim.warmup_s / 2)
    assert (out.sim.wake_s, out.sim.node_keep_s) == (2.5, 600.0)
    assert out.sim.warm_node_pending_s == sim.warm_node_pending_s
    assert base.sim == sim  # unchanged


def test_pool_standby_and_faults_return_new_settings():
    base = BacktestSettings(policy_params={"slo": {"headroom": 1.2}})
    pooled = with_node_pool(base, 120.0, 10)
    assert (pooled.sim.node_start_s, pooled.sim.max_nodes) == (120.0, 10)
    standby = with_standby_replicas(base, 4)
    assert standby.policy_params == {"slo": {"headroom": 1.2, "standby_replicas": 4}}
    assert base.policy_params == {"slo": {"headroom": 1.2}}
    faults = faults_from_text(["60:30"], adaptive_batch=True)
    faulty = with_faults(base, faults)
    assert faulty.sim.hbm_glitches == faults.hbm_glitches and len(faults.hbm_glitches) == 1
    assert faulty.sim.adaptive_batch is not None and base.sim.adaptive_batch is None


def test_a_preset_window_and_its_rate_scale():
    source = WorkloadSource(preset="default", start_s=60.0, duration_s=120.0, rate_scale=2.0)
    w = read_workload(source, seed=1)
    assert w.duration_s <= 120.0
    scaled = reshape_workload(w, source, seed=1)
    # x2 the users: exactly round(2 x n) requests
    assert scaled.num_requests == round(2 * w.num_requests)


def test_a_trace_and_a_preset_at_once_is_refused():
    from pathlib import Path

    with pytest.raises(ConfigError, match="either a trace or a workload preset"):
        WorkloadSource(trace=Path("t.csv"), preset="default")


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        pytest.param([], [p for p in DEFAULT_POLICIES if p in policy_names()], id="none-the-defaults"),
        pytest.param(["static", "slo", "static"], ["static", "slo"], id="order-kept-no-repeats"),
        pytest.param(["slo", "all"], None, id="all"),
    ],
)
def test_select_policies(names, expected):
    assert select_policies(names) == (policy_names() if expected is None else expected)


def test_an_unknown_policy_is_named():
    with pytest.raises(ConfigError, match=r"^'slo2' is not a policy; known: .*, or 'all'$"):
        select_policies(["slo", "slo2"])


def test_a_workload_no_replica_admits_is_refused_after_the_context_is_reported():
    """12,000-token prompts on an 8,192-token model: the caller hears of the context first (the
    warning it prints), then ConfigError naming a model that would take them."""
    import math

    from llmscale.workloads import LognormalLengths, poisson

    w = poisson(1.0, 30.0, seed=2, lengths=LognormalLengths(math.log(12_000), 0.05, math.log(200), 0.3))
    seen = []
    with pytest.raises(ConfigError, match="a backtest would reject them all"):
        sized_settings(w, _request(), lambda clamped, context: seen.append(context.over_context_requests))
    assert seen == [w.num_requests]
