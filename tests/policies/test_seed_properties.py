"""Invariants of every seed policy: an int >= 0 whatever the signals; no signal at all -> hold on no-data."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig
from llmscale.metrics.names import DCGM
from llmscale.policies.base import POLICIES, create_policy, policy_names
from llmscale.signals.catalog import SIGNALS
from llmscale.types import FleetView, Signals, SignalValue

SEED_POLICIES = [
    "hybrid",
    "hybrid-predictive",
    "composite",
    "gpu-mem-copy",
    "effective-vram",
    "capacity",
    "capacity-calibrated",
    "bandwidth-entropy",
    "dual-objective",
    "three-layer",
    "breathing",
    "token-rate",
]
CTX = Deployment(min_replicas=1, max_replicas=64)
#: three-layer's resource layer exercised with a budget of 32 GPUs
PARAMS = {"three-layer": {"gpu_budget": 32}}
NAMES = sorted(SIGNALS)

values_st = st.dictionaries(
    st.sampled_from(NAMES),
    st.one_of(st.none(), st.floats(min_value=-5.0, max_value=5e3, allow_nan=False)),
)
fleet_st = st.builds(
    lambda spec, ready, loading, warmup, draining: FleetView(
        spec_replicas=spec, ready=min(ready, spec), loading=loading, warmup=warmup, draining=draining
    ),
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(0, 3),
    st.integers(0, 2),
    st.integers(0, 2),
)
per_pod_st = st.dictionaries(
    st.sampled_from([f"pod-{i}" for i in range(6)]),
    st.fixed_dictionaries(
        {},
        optional={
            DCGM.GPU_UTIL: st.floats(0.0, 100.0),
            DCGM.SM_ACTIVE: st.floats(0.0, 1.0),
            DCGM.MEM_COPY_UTIL: st.floats(0.0, 100.0),
        },
    ),
    max_size=6,
)


def signals(
    fleet: FleetView, values: dict[str, float | None], per_pod: Any = None, unknown: int = 0
) -> Signals:
    full = {n: SignalValue(values.get(n)) for n in NAMES}
    return Signals(time_s=0.0, fleet=fleet, values=full, per_replica=per_pod or {}, unknown_replicas=unknown)


def test_every_seed_policy_is_registered_and_listed():
    names = policy_names()
    for name in SEED_POLICIES:
        assert name in names


def test_no_summary_cites_a_design_document_section():
    """`llmscale policies` names each policy's idea, not a section of a document a user does not have
    ("seed 000 4.2", "§3.2", "doc 4")."""
    cites = re.compile(r"seed 00\d|§|\bdoc \d|\b\d\.\d: ")
    assert [n for n in policy_names() if cites.search(POLICIES[n].summary)] == []


@pytest.mark.parametrize("name", SEED_POLICIES)
def test_guard_overrides_are_guard_config_fields(name):
    policy = create_policy(name, CTX, PARAMS.get(name))
    GuardConfig().merged(getattr(policy, "guard_overrides", {}))  # raises ConfigError on an unknown name
    assert policy.tick_s > 0


#: built once: policies are immutable (capacity-calibrated's memo is a pure function of its key)
BUILT = {name: create_policy(name, CTX, PARAMS.get(name)) for name in SEED_POLICIES}


@settings(max_examples=100, deadline=None)
@given(
    ticks=st.lists(st.tuples(fleet_st, values_st, per_pod_st, st.integers(0, 2)), min_size=1, max_size=5),
    dt=st.floats(1.0, 120.0),
)
def test_desired_is_a_non_negative_int(ticks, dt):
    for name, policy in BUILT.items():
        state = policy.initial_state()
        for i, (fleet, values, per_pod, unknown) in enumerate(ticks):
            d, state = policy.decide(signals(fleet, values, per_pod, unknown), state, i * dt)
            assert type(d.desired) is int, name
            assert d.desired >= 0, (name, d)
            assert d.rule, name
            assert all(v is None or isinstance(v, float) for v in d.inputs.values()), (name, d.inputs)


@settings(max_examples=100, deadline=None)
@given(history=st.lists(st.tuples(fleet_st, values_st), max_size=4), fleet=fleet_st, dt=st.floats(1.0, 120.0))
def test_every_signal_missing_holds_on_no_data(history, fleet, dt):
    empty_pods = {f"pod-{i}": {} for i in range(fleet.ready)}
    for name, policy in BUILT.items():
        state = policy.initial_state()
        for i, (f, values) in enumerate(history):
            _, state = policy.decide(signals(f, values), state, i * dt)
        d, _ = policy.decide(signals(fleet, {}, empty_pods), state, len(history) * dt)
        assert d.no_data is not None and d.rule.startswith("no-data"), (name, d.rule, d.note)
        assert d.desired == fleet.spec_replicas, name
