"""Seed 003 3.1's resource layer, live: a scale-up needs a node that can take a replica.

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

__all__ = ["AdmissionResult", "NodeAdmission"]

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
        return AdmissionVerdict(
            spec_replicas, "node-check", "no node can take a replica (seed 003 3.1)", self.as_json()
        )


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
