"""The core applies every hold and rolls the guard clocks back in one place (``core.settle``).

A static policy asking for 6 of a fleet of 2 with a 300 s up-cooldown: the guards let the
scale-up through and start the cooldown (``last_up_s`` = the tick). Whatever then keeps the
scale from happening (an admission held whole, a standby replica, a failed or fenced scale)
must put the clocks back, or the next tick would wait 300 s for a scale that never began; a
partly admitted scale-up does scale, and keeps its cooldown.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmscale.controller.core import (
    AdmissionVerdict,
    Controller,
    TickFacts,
    decide,
    initial_state,
    observe,
    settle,
)
from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Observation, Phase, ReplicaSample

LOADED = {"vllm:num_requests_running": 6.0, "vllm:num_requests_waiting": 0.0, "vllm:kv_cache_usage_perc": 0.3}


def _obs(now_s: float, n: int = 2, ok: bool = True) -> Observation:
    samples = tuple(ReplicaSample(f"r{i}", Phase.READY, ok=ok, values=LOADED if ok else {}) for i in range(n))
    return Observation(now_s, FleetView(n, ready=n), samples)


def _controller(replicas: int, **guards: object) -> Controller:
    d = Deployment(min_replicas=1, max_replicas=10, initial_replicas=2)
    policy = create_policy("static", d, {"replicas": replicas})
    g = GuardConfig(min_replicas=1, max_replicas=10, cooldown_up_s=300.0, headroom_max_usage=None)
    return Controller(policy, replace(g, **guards), d)


def _decided(replicas: int = 6, ok: bool = True, **guards: object):
    c = _controller(replicas, **guards)
    before = initial_state(c, 0.0)
    observed, signals = observe(before, _obs(100.0, ok=ok))
    record, state = decide(c, observed, signals, 100.0)
    return before, record, state


@pytest.mark.parametrize(
    ("facts", "final", "guard", "rolled_back"),
    [
        pytest.param(TickFacts(), 6, None, False, id="nothing-learnt"),
        pytest.param(TickFacts(admission=AdmissionVerdict(2, "node-check", "no node")), 2, "node-check", True,
                     id="held-whole"),
        pytest.param(TickFacts(admission=AdmissionVerdict(3, "mig-quota", "quota")), 3, "mig-quota", False,
                     id="partly-admitted"),
        pytest.param(TickFacts(admission=AdmissionVerdict(8, "mig-pool")), 6, None, False, id="admitted-all"),
        pytest.param(TickFacts(leading=False), 6, None, True, id="standby-replica"),
        pytest.param(TickFacts(scale_failed=True), 6, None, True, id="scale-failed"),
        # an admin scaled 2 -> 3 after the observation: nothing acts on a decision made for 2
        pytest.param(TickFacts(spec_now=3), 3, "spec-moved", True, id="spec-moved"),
        pytest.param(TickFacts(spec_now=2), 6, None, False, id="spec-read-again-unchanged"),
    ],
)  # fmt: skip
def test_settle_holds_and_rolls_back_in_one_place(facts, final, guard, rolled_back):
    before, record, decided = _decided()
    assert record.final == 6 and decided.guard_state.last_up_s == 100.0  # the guards let it through
    settled, state = settle(record, decided, before, facts)
    assert (settled.final, settled.guard) == (final, guard)
    assert state.guard_state.last_up_s == (-math.inf if rolled_back else 100.0)
    # the rest of the state (policy state, window, next tick) is the decision's
    assert replace(state, guard_state=decided.guard_state) == decided
    # settling again with what is already applied changes nothing (the live loop settles twice)
    assert settle(settled, state, before, facts) == (settled, state)


def test_a_total_outage_holds_a_scale_down_in_the_core_and_starts_no_clock():
    """No replica reports: a wish for 1 of 2 is held at 2 by the core itself, in every adapter,
    even with the guards' own hold on missing data switched off."""
    before, record, state = _decided(replicas=1, ok=False, hold_on_missing_data=False, drain_aware=False)
    assert record.metrics_outage and record.guard == "metrics-outage"
    assert (record.proposed.desired, record.final) == (1, 2)
    assert state.guard_state == before.guard_state
