"""The simulated fleet as a Cluster: what the backtest and a live controller over the simulator
actuate through (``tests/controller/test_adapter_parity.py`` runs both on one trace).

The fleet already speaks the protocol's verbs; this names them as the protocol does and adds
what it lacks, the count of replicas asleep (:class:`~llmscale.cluster.base.StandbyCapable`).
"""

from __future__ import annotations

from llmscale.sim.fleet import Fleet
from llmscale.types import ReplicaView

__all__ = ["SimCluster"]


class SimCluster:
    """A :class:`~llmscale.cluster.base.Cluster` and ``StandbyCapable`` over a simulated
    :class:`~llmscale.sim.fleet.Fleet`; ``now_s`` is the fleet's simulated time."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    @property
    def spec_replicas(self) -> int:
        return self.fleet.spec_replicas

    def scale_to(self, n: int, now_s: float, *, drain_until_idle: bool = False) -> None:
        self.fleet.scale_to(n, now_s, drain_until_idle=drain_until_idle)

    def replicas_view(self) -> tuple[ReplicaView, ...]:
        return self.fleet.replicas_view()

    @property
    def standby_replicas(self) -> int:
        """Replicas asleep now (those still starting for the pool are not asleep yet)."""
        return len(self.fleet.sleeping)

    def set_standby(self, n: int, now_s: float) -> None:
        self.fleet.set_standby(n, now_s)
