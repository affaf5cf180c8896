"""Seed 003's resource layer, live: a scale-up needs room in the tenant's MIG quota (4.2) and a
node that can take a replica (3.1), checked in that order, as ``llmscale tenants`` checks them.

**MIG quota** (``admission.mig_quota`` in ``llmscale run``'s config: a tenants file, the one
``llmscale tenants`` reads, and the tenant this controller scales): the tenant may hold at most
``quota`` instances of its profile (a ResourceQuota on ``nvidia.com/mig-3g.40gb``). Every replica
not yet gone holds one, draining ones included; a scale-up gets what the quota has room for,
through the same :func:`~llmscale.tenancy.pool.quota_room_of` the tenants backtest uses (quota 2,
2 held, 4 wanted: held at the spec, guard ``mig-quota``). The pool's free placements are not
checked live: the device plugin and the scheduler place the pod.

The policy decides how many replicas the load needs; this asks whether the cluster's nodes can
take one more. Each configured node is read through Prometheus (node-exporter's free memory and
disk busy time, cAdvisor's CFS throttling: :mod:`llmscale.tenancy.node_metrics`) and checked
against the seed's limits (:func:`~llmscale.tenancy.node_checks.check_node`: > 2 GiB free,
< 10% of CPU periods throttled, disk < 70% busy). When no node passes, the tick's scale-up is
held at the current spec and its record says so (``admission.held_by: "node"``, each node's
readings and failed checks); when one passes, the scale goes ahead: the scheduler, not llmscale,
places the pod, and one node with room is where it can go.

A node whose readings are missing fails (no data, no scale-up), as everywhere in llmscale; a
scale-down is never held here. This module does I/O and so lives beside the live adapter, not in
the controller core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmscale.controller.core import AdmissionVerdict
from llmscale.tenancy.node_checks import NodeSample, NodeThresholds, check_node
from llmscale.tenancy.pool import quota_note, quota_room_of
from llmscale.types import FleetView

__all__ = ["AdmissionResult", "MigQuota", "NodeAdmission", "check_scale_up"]

Reader = Callable[[str], NodeSample]


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    """The node layer's answer to one scale-up: held or not, with what each node read."""

    held: bool
    nodes: Mapping[str, Mapping[str, Any]]

    def as_json(self) -> dict[str, Any]:
        nodes = {k: dict(v) for k, v in self.nodes.items()}
        return {"held_by": "node" if self.held else None, "nodes": nodes}

    def verdict(self, spec_replicas: int) -> AdmissionVerdict | None:
        """The core's input (:func:`llmscale.controller.core.settle`): held at ``spec_replicas``
        when no node passes; None when one does (the scheduler places the pod)."""
        if not self.held:
            return None
        return AdmissionVerdict(spec_replicas, "node-check", "no node can take a replica (seed 003 3.1)")


class NodeAdmission:
    """Reads ``nodes`` (label-selector bodies, e.g. ``instance="10.0.0.5:9100"``) on each scale-up."""

    def __init__(self, nodes: Sequence[str], read: Reader, limits: NodeThresholds | None = None) -> None:
        self.nodes = tuple(nodes)
        self._read = read
        self.limits = limits or NodeThresholds()

    @classmethod
    def from_prometheus(
        cls,
        base_url: str,
        nodes: Sequence[str],
        *,
        window: str,
        timeout_s: float,
        limits: NodeThresholds | None = None,
    ) -> NodeAdmission:
        from llmscale.tenancy.node_metrics import read_node_sample

        def read(node: str) -> NodeSample:
            return read_node_sample(base_url, node, window=window, timeout_s=timeout_s)

        return cls(nodes, read, limits)

    def check(self) -> AdmissionResult:
        """Read every node; held when none passes every check."""
        report: dict[str, Mapping[str, Any]] = {}
        any_ok = False
        for node in self.nodes:
            sample = self._read(node)
            failed = check_node(sample, self.limits)
            any_ok = any_ok or not failed
            report[node] = {**sample.as_json(), "failed": list(failed)}
        return AdmissionResult(held=not any_ok, nodes=report)


@dataclass(frozen=True, slots=True)
class MigQuota:
    """One tenant's quota of MIG instances, from a tenants file (``backtest/tenants.py``'s
    :func:`~llmscale.backtest.tenants.load_tenant_quota`)."""

    tenant: str
    profile: str
    quota: int

    def check(self, fleet: FleetView, final: int) -> tuple[AdmissionVerdict | None, dict[str, Any]]:
        """The verdict on scaling ``fleet`` to ``final`` (None: all admitted) and what it read.

        ``final - spec`` new replicas are asked for; held are the replicas not yet gone (the
        FleetView's active and draining). A replica a scale-up would reclaim from draining is
        counted both held and asked for: live the two cannot be told apart, and the quota errs
        towards holding (the tenants backtest, which can, does not count it as asked).
        """
        spec = fleet.spec_replicas
        requested = max(0, final - spec)
        held = fleet.active + fleet.draining
        admitted = min(requested, quota_room_of(self.quota, held))
        doc: dict[str, Any] = {
            "tenant": self.tenant,
            "profile": self.profile,
            "quota": self.quota,
            "held": held,
            "requested": requested,
            "admitted": admitted,
        }
        if admitted == requested:
            return None, doc
        return AdmissionVerdict(spec + admitted, "mig-quota", quota_note(self.profile, self.quota, held)), doc


def check_scale_up(
    fleet: FleetView, final: int, quota: MigQuota | None, nodes: NodeAdmission | None
) -> tuple[AdmissionVerdict | None, dict[str, Any] | None]:
    """The resource layer on a tick's scale-up to ``final``: the quota first, then the nodes
    (not read when the quota holds the whole scale-up). Returns the tightest verdict for the core
    (:func:`llmscale.controller.core.settle`) and the decision line's ``admission`` object
    (``held_by``: ``quota``, ``node`` or None; ``quota``'s counts; each node's readings), or
    (None, None) when there is no scale-up or nothing to check."""
    spec = fleet.spec_replicas
    if final <= spec or (quota is None and nodes is None):
        return None, None
    verdict: AdmissionVerdict | None = None
    doc: dict[str, Any] = {"held_by": None}
    if quota is not None:
        verdict, doc["quota"] = quota.check(fleet, final)
        if verdict is not None:
            doc["held_by"] = "quota"
    if nodes is not None and (verdict is None or verdict.limit > spec):
        result = nodes.check()
        doc["nodes"] = result.as_json()["nodes"]
        held = result.verdict(spec)
        if held is not None:
            verdict, doc["held_by"] = held, "node"
    return verdict, doc
