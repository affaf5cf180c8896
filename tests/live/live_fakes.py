"""Fakes for one room at a time: a MetricSource and a Cluster, each a few lines, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmscale.clock import ManualClock
from llmscale.controller.decision_log import DecisionLog, policy_version
from llmscale.controller.live import LiveController, PolicyRun
from llmscale.controller.server import ControllerMetrics
from llmscale.deployment import Deployment
from llmscale.errors import ActuationError
from llmscale.guards import GuardConfig
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Mode, Observation, Phase, ReplicaSample, ReplicaView

#: a replica serving some load, under vLLM's names
LOADED = {"vllm:num_requests_running": 6.0, "vllm:num_requests_waiting": 0.0, "vllm:kv_cache_usage_perc": 0.3}

#: guards that let a fixed proposal through at once: the tests pin one guard at a time
PLAIN = GuardConfig(min_replicas=1, max_replicas=20, headroom_max_usage=None, drain_aware=False)


class FakeSource:
    """Returns a sample per named replica; ``None`` values mean the scrape failed (unknown)."""

    def __init__(self, replicas: Mapping[str, Mapping[str, float] | None]) -> None:
        self.replicas = dict(replicas)
        self.calls = 0

    def observe(self, now_s: float) -> Observation:
        self.calls += 1
        samples = tuple(
            ReplicaSample(name, Phase.READY, ok=v is not None, values=dict(v or {}))
            for name, v in self.replicas.items()
        )
        fleet = FleetView(len(samples), ready=sum(s.ok for s in samples))
        return Observation(now_s, fleet, samples)


class FakeCluster:
    """``n`` READY replicas named r0..; scale_to records calls, or raises ``fail`` when set."""

    def __init__(self, n: int, *, fail: ActuationError | None = None) -> None:
        self._spec = n
        self.fail = fail
        self.calls: list[tuple[int, float]] = []

    @property
    def spec_replicas(self) -> int:
        return self._spec

    def scale_to(self, n: int, now_s: float, *, drain_until_idle: bool = False) -> None:
        self.calls.append((n, now_s))
        if self.fail is not None:
            raise self.fail
        self._spec = n

    def replicas_view(self) -> tuple[ReplicaView, ...]:
        return tuple(ReplicaView(f"r{i}", Phase.READY, 0.0, 0.0) for i in range(self._spec))


class ReasonError(ActuationError):
    """An ActuationError carrying ``reason`` the way cluster/kubernetes.py's does."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class FollowingSource:
    """Every replica the cluster lists reports LOADED: a fleet whose scrapes all succeed."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def observe(self, now_s: float) -> Observation:
        return FakeSource({v.name: LOADED for v in self.cluster.replicas_view()}).observe(now_s)


def loaded_source(n: int) -> FakeSource:
    return FakeSource({f"r{i}": LOADED for i in range(n)})


def static_run(replicas: int, guards: GuardConfig = PLAIN) -> PolicyRun:
    params: dict[str, Any] = {"replicas": replicas}
    policy = create_policy("static", Deployment(), params)
    return PolicyRun(policy, guards, policy_version("static", params, {}))


def controller(
    source: Any,
    cluster: Any,
    *,
    mode: Mode = Mode.APPLY,
    primary: PolicyRun | None = None,
    shadow: PolicyRun | None = None,
    log: DecisionLog | None = None,
    store: Any = None,
    clock: ManualClock | None = None,
    tick_s: float | None = 15.0,
    primary_acts: bool | None = None,
) -> LiveController:
    return LiveController(
        source=source,
        cluster=cluster,
        primary=primary or static_run(4),
        shadow=shadow,
        mode=mode,
        primary_acts=primary_acts,
        target="llm/llama",
        metrics=ControllerMetrics("llm/llama", "scrape"),
        tick_s=tick_s,
        clock=clock or ManualClock(),
        decision_log=log,
        store=store,
        timer=ManualClock(),
    )


def sample_value(
    metrics: ControllerMetrics, name: str, labels: Mapping[str, str] | None = None
) -> float | None:
    return metrics.registry.get_sample_value(name, dict(labels or {}))
