"""The Cluster protocol: what the controller needs from whatever runs the replicas."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from llmscale.types import ReplicaView

__all__ = ["Cluster", "StandbyCapable"]


class Cluster(Protocol):
    """Implemented by the simulator, the Kubernetes scale subresource and the KEDA scaler."""

    @property
    def spec_replicas(self) -> int:
        """Replicas last asked for (the scale spec)."""
        ...

    def scale_to(self, n: int, now_s: float, *, drain_until_idle: bool = False) -> None:
        """Ask for ``n`` active replicas at ``now_s``; pre: n >= 0. Raises ActuationError on failure.

        ``drain_until_idle``: replicas removed by a shrink stop taking requests and leave only
        once idle (never killed at a grace deadline); a later scale-up reclaims them first.
        """
        ...

    def replicas_view(self) -> tuple[ReplicaView, ...]:
        """Every replica not yet gone, with its lifecycle phase."""
        ...


@runtime_checkable
class StandbyCapable(Protocol):
    """A cluster that can keep replicas asleep (vLLM sleep mode) beside its spec: not serving,
    woken in seconds instead of a cold start."""

    @property
    def standby_replicas(self) -> int:
        """Replicas asleep now."""

    def set_standby(self, n: int, now_s: float) -> None:
        """Put replicas to sleep or wake them so that ``n`` (>= 0) sleep; raises ActuationError."""
