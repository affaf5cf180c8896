"""The live loop keeps the policy's standby pool (``Decision.standby``) on a cluster that can
(``cluster/base.py``'s ``StandbyCapable``), as the backtest keeps it on the simulated fleet.

A policy asking for 2 sleeping replicas beside its serving ones (``slo``'s ``standby_replicas: 2``
does, on the simulated fleet of ``tests/controller/test_adapter_parity.py``): the live loop sets
them on every tick that acts, never in dry-run, never on a cluster without sleep mode;
a failed ``set_standby`` is recorded (``actuation_error``) and counted, and the tick's scale stands.
"""

from __future__ import annotations

import io
import json

import pytest
from live_fakes import PLAIN, FakeCluster, FollowingSource, controller

from llmscale.cluster.base import StandbyCapable
from llmscale.controller.decision_log import DecisionLog, policy_version
from llmscale.controller.live import PolicyRun
from llmscale.deployment import Deployment
from llmscale.errors import ActuationError
from llmscale.policies.base import create_policy
from llmscale.policies.static import StaticPolicy
from llmscale.types import Decision, Mode, Signals


class SleepyCluster(FakeCluster):
    """A FakeCluster with vLLM sleep mode: ``set_standby`` records its calls, or raises ``fail_standby``."""

    def __init__(self, n: int, *, fail_standby: ActuationError | None = None) -> None:
        super().__init__(n)
        self.asleep = 0
        self.standby_calls: list[tuple[int, float]] = []
        self.fail_standby = fail_standby

    @property
    def standby_replicas(self) -> int:
        return self.asleep

    def set_standby(self, n: int, now_s: float) -> None:
        self.standby_calls.append((n, now_s))
        if self.fail_standby is not None:
            raise self.fail_standby
        self.asleep = n


class PooledStatic(StaticPolicy):
    """static with a standby pool: the typed target any policy may set."""

    def decide(self, signals: Signals, state: None, now_s: float) -> tuple[Decision, None]:
        decision, state = super().decide(signals, state, now_s)
        return Decision(decision.desired, decision.rule, decision.inputs, standby=2), state


def _pooled(replicas: int) -> PolicyRun:
    base = create_policy("static", Deployment(), {"replicas": replicas})
    assert isinstance(base, StaticPolicy)
    policy = PooledStatic(base.replicas)
    return PolicyRun(policy, PLAIN, policy_version("static", {"replicas": replicas}, {}))


def test_the_sleepy_cluster_is_standby_capable_and_the_fake_is_not():
    assert isinstance(SleepyCluster(1), StandbyCapable)
    assert not isinstance(FakeCluster(1), StandbyCapable)


@pytest.mark.parametrize(
    ("mode", "cluster", "calls"),
    [
        pytest.param(Mode.APPLY, SleepyCluster(2), [(2, 0.0), (2, 15.0)], id="apply-every-tick"),
        pytest.param(Mode.DRY_RUN, SleepyCluster(2), [], id="dry-run-never"),
        pytest.param(Mode.APPLY, FakeCluster(2), None, id="no-sleep-mode"),
    ],
)
def test_the_live_loop_keeps_the_pool_only_when_it_acts(mode, cluster, calls):
    c = controller(FollowingSource(cluster), cluster, mode=mode, primary=_pooled(3))
    for t in (0.0, 15.0):
        entry = c.tick(t)
        assert entry is not None and entry.record is not None and entry.record.standby == 2
    assert getattr(cluster, "standby_calls", None) == calls


def test_a_failed_standby_is_recorded_and_the_scale_stands():
    cluster = SleepyCluster(2, fail_standby=ActuationError("sleep endpoint refused"))
    out = io.StringIO()
    c = controller(FollowingSource(cluster), cluster, primary=_pooled(3), log=DecisionLog("-", stream=out))
    entry = c.tick(0.0)
    assert entry is not None and entry.actuation_error is not None
    assert entry.actuation_error["message"].startswith("standby 2: sleep endpoint refused")
    assert cluster.calls == [(3, 0.0)] and c.state.guard_state.last_change_s == 0.0
    first, second = (json.loads(x) for x in out.getvalue().splitlines())
    assert first["trace_id"] == second["trace_id"] and second["actuation_error"]["reason"] == "other"
    assert c.last_failure is not None and "asleep failed" in c.last_failure
