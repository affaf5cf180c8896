"""Which pods a Kubernetes scale-down removes: the least-loaded, read from each pod's own /metrics.

The scale subresource says *how many* replicas; the ReplicaSet controller picks *which* pods go.
It deletes, in order: unscheduled, pending, not-ready pods; then, among ready ones, the lowest
``controller.kubernetes.io/pod-deletion-cost`` (PodDeletionCost: alpha and off by default in
1.21, beta and on from 1.22); then pods sharing a node with more siblings, the most recently
ready and the youngest. Without help a busy
replica with long generations in flight can go while an idle one stays.

Before lowering the count, :class:`~llmscale.cluster.kubernetes.KubernetesCluster` (or the KEDA
scaler, through the same cluster, before it publishes a lower count) reads every pod's load and

* annotates each pod with a deletion cost from its remaining work (:func:`deletion_cost`), so a
  controller that honours the annotation removes the least-loaded first; and
* where the annotation is not honoured (``explicit``: a server older than 1.22), deletes the
  chosen pods itself, then lowers the count (:func:`choose_victims`).

Either way the pod goes through graceful termination: its preStop hook
(``deploy/vllm/drain-prestop.py``) waits until its running and waiting requests are 0, bounded
by ``terminationGracePeriodSeconds``. :func:`scale_down_order` decides the mode from the target
kind and the server version, with the warning to log at start when llmscale cannot choose.
docs/kubernetes-drain.md has the whole story and the version table.
"""

from __future__ import annotations

import math
import re
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from llmscale.metrics.exposition import ExpositionError, ParsedPage, parse_exposition
from llmscale.metrics.names import VLLM, Names, VllmMetric
from llmscale.types import Phase

__all__ = [
    "DELETION_COST_ANNOTATION",
    "INT32_MAX",
    "ORDERS",
    "PodCandidate",
    "PodLoad",
    "ScaleDownOrder",
    "ScrapePodLoad",
    "choose_victims",
    "deletion_cost",
    "pod_load_of",
    "scale_down_order",
    "server_minor",
]

#: the annotation the ReplicaSet controller reads; its value is an int32 in decimal
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
INT32_MAX = 2**31 - 1
#: the first minor release where PodDeletionCost is on by default (beta in 1.22)
DELETION_COST_DEFAULT_ON_MINOR = 22

#: * ``deletion-cost``: annotate, then lower the count; the ReplicaSet removes the lowest cost.
#: * ``explicit``: annotate, delete the chosen pods, then lower the count (servers < 1.22).
#: * ``annotate-only``: annotate and lower the count; the server may ignore the annotation
#:   (KEDA on a server < 1.22, or a version llmscale could not read).
#: * ``off``: no annotation, no choice: Kubernetes picks (StatefulSets: the highest ordinal).
ScaleDownOrder = Literal["deletion-cost", "explicit", "annotate-only", "off"]
ORDERS: tuple[ScaleDownOrder, ...] = ("deletion-cost", "explicit", "annotate-only", "off")


@dataclass(frozen=True, slots=True)
class PodLoad:
    """One pod's work in flight, read from its own /metrics page.

    ``tokens_left``: the estimated output tokens its requests still have to generate (see
    :func:`pod_load_of`).
    """

    running: int
    waiting: int
    tokens_left: float

    @property
    def in_flight(self) -> int:
        return self.running + self.waiting


def pod_load_of(
    page: ParsedPage, *, names: Names = VLLM, default_output_tokens: float = 256.0
) -> PodLoad | None:
    """The load of one pod's parsed page; None when the page lacks the running/waiting gauges.

    ``tokens_left`` = (running + waiting) x the pod's mean output length, from its
    ``vllm:request_generation_tokens`` histogram (``_sum / _count``: every finished request,
    aborted ones included), or ``default_output_tokens`` before it finished any. Progress is
    left out on purpose: vLLM exports no per-request progress, and the fleet-wide difference
    ``generation_tokens_total - request_generation_tokens_sum`` (tokens of requests still in
    flight) says nothing about which one is nearly done; for geometric output lengths the
    expected remainder is the mean whatever was generated, and real lengths are heavier-tailed,
    where a long runner tends to run longer still. Worked: 3 running + 1 waiting with a mean of
    212 tokens -> 848 tokens left (tests/cluster/test_scale_down.py pins it).
    """
    values = page.values
    running = values.get(names.running) if names.running else None
    waiting = values.get(names.waiting) if names.waiting else None
    if running is None and waiting is None:
        return None
    r = max(0, round(running or 0.0))
    w = max(0, round(waiting or 0.0))
    mean = default_output_tokens
    hist = page.histograms.get(VllmMetric.REQUEST_GENERATION_TOKENS)
    if hist is not None and hist.count and hist.count > 0 and math.isfinite(hist.sum):
        mean = hist.sum / hist.count
    return PodLoad(running=r, waiting=w, tokens_left=(r + w) * mean)


def deletion_cost(load: PodLoad | None) -> int:
    """The pod-deletion-cost of a pod with ``load``: higher keeps the pod longer.

    ``ceil(tokens_left) + in_flight``, so any pod with a request costs more than an idle one
    (0) even when its mean output is 0 tokens; clamped to int32 as the annotation requires.
    A pod whose load is unknown (its scrape failed) gets INT32_MAX: an unknown replica is
    never taken for an idle one. Worked: 848 tokens left over 4 requests -> 852.
    """
    if load is None:
        return INT32_MAX
    cost = math.ceil(load.tokens_left) + load.in_flight
    return max(0, min(INT32_MAX, cost))


@dataclass(frozen=True, slots=True)
class PodCandidate:
    """A pod a scale-down may remove: ``phase`` from the API, ``load`` from its metrics."""

    name: str
    phase: Phase
    created_s: float
    load: PodLoad | None


def choose_victims(pods: Sequence[PodCandidate], k: int) -> list[PodCandidate]:
    """The ``k`` pods a scale-down by ``k`` should remove, first to go first.

    Not-ready pods first (they serve nothing; the ReplicaSet removes them first too), then
    ready pods by ascending :func:`deletion_cost`, the youngest first on a tie (the
    ReplicaSet's own tie-break). Pods already draining are not candidates; pass only live ones.
    A pod of unknown load is chosen only when nothing else is left. Pre: k >= 0.
    """

    def key(p: PodCandidate) -> tuple[int, int, float]:
        ready = p.phase == Phase.READY
        return (1 if ready else 0, deletion_cost(p.load) if ready else 0, -p.created_s)

    return sorted(pods, key=key)[: max(0, k)]


def server_minor(major: str | None, minor: str | None) -> int | None:
    """The minor version of a v1 API server from /version's strings; None if it is not v1.x.

    Managed clusters add suffixes: GKE and EKS answer ``minor: "27+"``.
    """
    if (major or "").strip() != "1":
        return None
    m = re.match(r"\d+", (minor or "").strip())
    return int(m.group()) if m else None


def scale_down_order(
    kind: str, minor: int | None, *, via_keda: bool, override: str = "auto"
) -> tuple[ScaleDownOrder, str | None]:
    """How a scale-down of a ``kind`` target on a v1.``minor`` server picks its pods, and the
    warning to log at start when llmscale cannot make it pick the least-loaded (else None).

    ``override`` (``actuator.kubernetes.scale_down_order``) replaces ``auto``'s choice, e.g.
    ``deletion-cost`` on a 1.21 cluster that turned the alpha PodDeletionCost gate on.
    """
    if override != "auto":
        return override, None  # type: ignore[return-value]
    if kind == "StatefulSet":
        return "off", (
            "a StatefulSet removes its highest ordinal on a scale-down and ignores "
            "pod-deletion-cost: llmscale cannot choose which replica goes; the pods' preStop "
            "drain still lets in-flight requests finish"
        )
    if minor is not None and minor >= DELETION_COST_DEFAULT_ON_MINOR:
        return "deletion-cost", None
    version = "of unknown version" if minor is None else f"v1.{minor}"
    why = (
        f"the API server is {version}: PodDeletionCost is on by default from v1.22 (alpha, off "
        "by default, in v1.21; absent before)"
    )
    if via_keda:
        return "annotate-only", (
            f"{why}, and through KEDA the HPA lowers the count later, so llmscale cannot delete "
            "the chosen pods itself: pods are annotated but Kubernetes picks which go; the pods' "
            "preStop drain still lets in-flight requests finish"
        )
    if minor is None:
        return "annotate-only", f"{why}: pods are annotated but the server may ignore it"
    return "explicit", (
        f"{why}: llmscale deletes the least-loaded pods itself before lowering the count "
        "(the ReplicaSet may briefly create and remove a replacement pod)"
    )


class ScrapePodLoad:
    """Reads pods' loads from their /metrics pages, concurrently, each under ``timeout_s``.

    ``url_of(name, ip)`` gives a pod's page (default ``http://{ip}:{port}{path}``); a page
    that fails, answers non-200 or lacks the gauges gives None (unknown load).
    """

    def __init__(
        self,
        *,
        port: int = 8000,
        path: str = "/metrics",
        timeout_s: float = 2.0,
        names: Names = VLLM,
        default_output_tokens: float = 256.0,
        url_of: Callable[[str, str], str] | None = None,
        max_workers: int = 16,
    ) -> None:
        self.timeout_s = timeout_s
        self.names = names
        self.default_output_tokens = default_output_tokens
        self.url_of = url_of or (lambda _name, ip: f"http://{ip}:{port}{path}")
        self.max_workers = max_workers

    def _one(self, name: str, ip: str) -> PodLoad | None:
        url = self.url_of(name, ip)
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                if resp.status != 200:
                    return None
                text = resp.read().decode("utf-8", "replace")
            page = parse_exposition(text, source=url)
        except (OSError, ValueError, ExpositionError):
            return None
        return pod_load_of(page, names=self.names, default_output_tokens=self.default_output_tokens)

    def __call__(self, pods: Sequence[tuple[str, str]]) -> Mapping[str, PodLoad | None]:
        """``{pod name: load or None}`` for ``(name, ip)`` pairs."""
        if not pods:
            return {}
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(pods))) as pool:
            loads = list(pool.map(lambda p: self._one(*p), pods))
        return {name: load for (name, _), load in zip(pods, loads, strict=True)}
