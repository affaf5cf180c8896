"""Invariants of every peer policy (Hypothesis): bounds, and missing data never shrinks the fleet."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig, GuardState, apply_guards
from llmscale.metrics.names import VLLM
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Signals, SignalValue

PEERS = [
    "keda-queue",
    "knative-kpa",
    "aibrix-apa",
    "ray-serve",
    "dynamo-sla",
    "dynamo-load",
    "wva-saturation",
]
#: rules of ticks at which a policy only observes (it decides at a longer interval)
OBSERVING = {"observing", "between-intervals"}
KV, WAITING, RUNNING = (n or "" for n in (VLLM.kv_usage, VLLM.waiting, VLLM.running))
SIGNAL_NAMES = (
    "queue_waiting",
    "queue_per_replica",
    "running",
    "kv_usage_mean",
    "request_rate_rps",
    "prompt_len_mean_tokens",
    "decode_steps_mean",
    "prompt_tps",
)


def maybe(top: int, scale: float = 1.0) -> st.SearchStrategy[float | None]:
    """None (invalid) or a value in [0, top x scale]; integers keep the search cheap."""
    return st.one_of(st.none(), st.integers(0, top).map(lambda v: v * scale))


@st.composite
def observation(draw: st.DrawFn) -> Signals:
    ready = draw(st.integers(0, 6))
    starting = draw(st.integers(0, 2))
    spec = draw(st.integers(0, ready + starting + 2))
    values = {
        "queue_waiting": draw(maybe(500)),
        "queue_per_replica": draw(maybe(100)),
        "running": draw(maybe(1500)),
        "kv_usage_mean": draw(maybe(100, 0.01)),
        "request_rate_rps": draw(maybe(100)),
        "prompt_len_mean_tokens": draw(maybe(8000)),
        "decode_steps_mean": draw(maybe(1000)),
        "prompt_tps": draw(maybe(50_000)),
    }
    per: dict[str, dict[str, float]] = {}
    for i in range(ready):
        if draw(st.booleans()):  # a pod with all three metrics, or one without any
            per[f"pod-{i}"] = {
                KV: draw(st.integers(0, 100)) / 100,
                WAITING: float(draw(st.integers(0, 40))),
                RUNNING: float(draw(st.integers(0, 256))),
            }
        else:
            per[f"pod-{i}"] = {}
    return Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=spec, ready=ready, loading=starting),
        values={k: SignalValue(v) for k, v in values.items()},
        per_replica=per,
        unknown_replicas=draw(st.integers(0, 1)) if ready else 0,
    )


@st.composite
def bounds(draw: st.DrawFn) -> tuple[int, int]:
    lo = draw(st.integers(0, 3))
    return lo, draw(st.integers(max(lo, 1), lo + 8))


@pytest.mark.parametrize("name", PEERS)
@settings(max_examples=30, deadline=None)
@given(bnd=bounds(), ticks=st.lists(observation(), min_size=1, max_size=8))
def test_desired_stays_within_the_policy_bounds(name, bnd, ticks):
    lo, hi = bnd
    policy = create_policy(name, Deployment(min_replicas=lo, max_replicas=hi))
    state = policy.initial_state()
    for i, sig in enumerate(ticks):
        d, state = policy.decide(sig, state, (i + 1) * policy.tick_s)
        assert lo <= d.desired <= hi, (d, sig.fleet)
        assert d.rule


@pytest.mark.parametrize("name", PEERS)
@settings(max_examples=30, deadline=None)
@given(bnd=bounds(), extra=st.integers(0, 8), n_ticks=st.integers(8, 12))
def test_missing_inputs_are_no_data_and_never_shrink(name, bnd, extra, n_ticks):
    lo, hi = bnd
    spec = min(hi, max(lo, 1) + extra)
    blind = Signals(
        time_s=0.0,
        fleet=FleetView(spec_replicas=spec, ready=spec),
        values={k: SignalValue(None, "scrape failed") for k in SIGNAL_NAMES},
        per_replica={f"pod-{i}": {} for i in range(spec)},
        unknown_replicas=spec,
    )
    policy = create_policy(name, Deployment(min_replicas=lo, max_replicas=hi))
    guards = GuardConfig(lo, hi).merged(getattr(policy, "guard_overrides", {}))
    state, gstate = policy.initial_state(), GuardState()
    rules = []
    for i in range(n_ticks):
        now = (i + 1) * policy.tick_s
        d, state = policy.decide(blind, state, now)
        rules.append(d.rule)
        assert d.no_data is not None or d.rule in OBSERVING, d
        assert (d.no_data is not None) == d.rule.startswith("no-data"), d  # the type and its name agree
        if name != "keda-queue":  # KEDA reads a null query as 0 by design; its guard holds (below)
            assert d.desired >= spec, d
        out, gstate = apply_guards(d, blind, guards, gstate, now)
        assert out.desired >= spec, (d, out)
    assert any(r.startswith("no-data") for r in rules)
