"""Actuation through the Kubernetes scale subresource of a Deployment or StatefulSet.

:class:`KubernetesCluster` implements the :class:`~llmscale.cluster.base.Cluster`
protocol against a real API server:

* ``spec_replicas`` and ``scale_to`` go through ``.../scale`` only, so the RBAC
  Role can be limited to that subresource (see ``deploy/rbac/``). A write is a
  read + replace carrying the read ``resourceVersion``: if anyone else (a human
  with kubectl, a GitOps sync) wrote in between, the server answers 409 and we
  re-read rather than overwrite what we did not see.
* ``replicas_view`` and ``pod_targets`` list the pods matching the target's
  label selector and map their state onto :class:`~llmscale.types.Phase`.
* ``check_ownership`` refuses to run next to another autoscaler (an HPA or a
  KEDA ScaledObject) on the same target: two controllers writing one scale
  fight, and the fleet flaps.
* A scale-down, with ``pod_load`` given, first annotates every pod with its
  ``pod-deletion-cost`` from its own /metrics and, on servers that ignore the
  annotation, deletes the least-loaded pods itself (``prepare_scale_down``;
  :mod:`llmscale.cluster.scale_down` has the rules).

Every API call has a per-request time-out; 5xx, 429 and connection failures
back off exponentially within a bounded total time and then raise
:class:`KubeActuationError`, so a sick API server costs the controller at most
``RetryConfig.budget_s + request_timeout_s`` per call, never a crash.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from llmscale.clock import Clock, WallClock
from llmscale.errors import ActuationError, ConfigError
from llmscale.types import Phase, ReplicaView

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, V1Pod, V1Scale

    from llmscale.cluster.scale_down import PodCandidate, PodLoad, ScaleDownOrder

#: what reads the pods' loads: ``(name, ip)`` pairs -> ``{name: load or None (unknown)}``
PodLoadReader = Callable[[Sequence[tuple[str, str]]], Mapping[str, "PodLoad | None"]]

__all__ = [
    "ErrorReason",
    "KubeActuationError",
    "KubeScaleTarget",
    "KubernetesCluster",
    "PodLoadReader",
    "RetryConfig",
    "pod_phase",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

Kind = Literal["Deployment", "StatefulSet"]
_KINDS: tuple[Kind, ...] = ("Deployment", "StatefulSet")
_RESOURCE = {"Deployment": "deployments", "StatefulSet": "statefulsets"}

#: statuses worth retrying: the server (or something in front of it) is overloaded or restarting
_TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})

#: values of KubeActuationError.reason, the label of llmscale_actuation_errors_total
ErrorReason = Literal["conflict", "server_error", "forbidden", "other"]


class KubeActuationError(ActuationError):
    """An API call failed for good; ``reason`` is one of conflict, server_error, forbidden, other."""

    def __init__(self, message: str, *, reason: ErrorReason) -> None:
        super().__init__(message)
        self.reason: ErrorReason = reason


@dataclass(frozen=True, slots=True)
class KubeScaleTarget:
    """The workload llmscale scales: ``kind`` ``namespace/name``, whose pods match ``selector``.

    ``selector`` is a label selector in the API's string form (``app=vllm,model=llama``);
    it must select exactly the target's pods, as the workload's own ``spec.selector`` does.
    """

    namespace: str
    kind: Kind
    name: str
    selector: str

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ConfigError(f"target kind = {self.kind!r}, must be one of {', '.join(_KINDS)}")
        for attr in ("namespace", "name", "selector"):
            if not getattr(self, attr).strip():
                # An empty selector would list every pod of the namespace as a replica.
                raise ConfigError(f"target {attr} is empty; it must name the {self.kind}'s {attr}")

    @property
    def resource(self) -> str:
        """The plural resource name as RBAC spells it: ``deployments`` or ``statefulsets``."""
        return _RESOURCE[self.kind]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """Bounds on retries. Worked numbers with the defaults: back-off sleeps 0.2, 0.4, 0.8,
    1.6, 3.2, 5, 5, ... s, so a server that stays down is given up on after about 30 s
    (``budget_s``) plus at most one ``request_timeout_s``; see test_kube_faults.py.
    """

    #: re-reads after a 409 before giving up; each is a fresh read, so only a writer
    #: racing us six times in a row can make scale_to fail
    conflict_retries: int = 5
    backoff_initial_s: float = 0.2
    backoff_factor: float = 2.0
    backoff_max_s: float = 5.0
    #: total time spent retrying one call on 5xx/connection errors
    budget_s: float = 30.0
    #: client-side time-out of each HTTP request
    request_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.conflict_retries < 0:
            raise ConfigError(f"conflict_retries = {self.conflict_retries}, must be >= 0")
        if self.backoff_initial_s <= 0 or self.backoff_factor < 1 or self.backoff_max_s <= 0:
            raise ConfigError("back-off must have initial_s > 0, factor >= 1 and max_s > 0")
        if self.budget_s < 0 or self.request_timeout_s <= 0:
            raise ConfigError(
                f"budget_s = {self.budget_s}, request_timeout_s = {self.request_timeout_s}, "
                "must be >= 0 and > 0"
            )


def _server_message(exc: Any) -> str:
    """The ``message`` of the Status object the API server returned, else the HTTP reason."""
    body = getattr(exc, "body", None)
    if body:
        try:
            msg = json.loads(body).get("message")
        except (ValueError, AttributeError):
            msg = None
        if msg:
            return str(msg)
    return f"{getattr(exc, 'status', '?')} {getattr(exc, 'reason', '')}".strip()


def _transient(exc: BaseException) -> bool:
    """Whether retrying can help: overload/5xx answers and connection-level failures."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as Urllib3Error

    if isinstance(exc, ApiException):
        return exc.status in _TRANSIENT_STATUSES
    return isinstance(exc, Urllib3Error | OSError)


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


#: statuses of a pod write that mean the pod is gone (or replaced under its name): skipped
_GONE = frozenset({404, 409})


def _cost(candidate: PodCandidate) -> int:
    from llmscale.cluster.scale_down import deletion_cost

    return deletion_cost(candidate.load)


def pod_phase(pod: V1Pod) -> tuple[Phase, float | None] | None:
    """A pod's lifecycle phase and the wall time (epoch s) it entered it; None for finished pods.

    The rule, first match wins:

    * ``deletionTimestamp`` set -> DRAINING: the pod got SIGTERM (or its preStop hook
      runs) and is on its way out, whatever its readiness says.
    * status.phase Succeeded/Failed -> gone (None): the container exited and will not serve.
    * Not bound to a node, and the scheduler said no node fits (condition PodScheduled False,
      reason Unschedulable) or nominated a node it is freeing (``status.nominatedNodeName``) ->
      NODE_PENDING, since the condition's lastTransitionTime: the pod waits for the cluster
      autoscaler (or Karpenter) to provision a GPU node, or for a full pool to free one. Both
      act only on pods carrying that condition (the cluster-autoscaler's ``TriggeredScaleUp``
      event names such a pod), so the condition alone tells the state, with no events to read.
    * Pending otherwise (bound, image pull, ContainerCreating; or not yet seen by a scheduler)
      -> PENDING.
    * Running and the pod's Ready condition True -> READY.
    * Running, not Ready, some container not yet ``started`` -> LOADING: its startupProbe
      has not passed; for vLLM/TGI that is weight loading, the long part of a cold start.
    * Running, not Ready, every container started -> WARMUP: the process is up but the
      readinessProbe does not pass yet (CUDA graphs, KV-cache profiling).

    A pod without a startupProbe is ``started`` as soon as its container runs, so its
    whole not-ready time shows as WARMUP; both count as capacity on the way, so the
    split only sharpens the dashboards. Unknown phases count as PENDING: not serving,
    but not to be replaced either.
    """
    meta = pod.metadata
    status = pod.status
    if meta is not None and meta.deletion_timestamp is not None:
        grace_s = meta.deletion_grace_period_seconds or 0
        # deletionTimestamp is the kill deadline; the drain began a grace period earlier.
        return Phase.DRAINING, meta.deletion_timestamp.timestamp() - grace_s
    created = _ts(meta.creation_timestamp) if meta is not None else None
    phase = status.phase if status is not None else None
    if phase in ("Succeeded", "Failed"):
        return None
    if phase != "Running" or status is None:
        return _node_wait(pod, created) or (Phase.PENDING, created)
    conditions = {c.type: c for c in status.conditions or ()}
    ready = conditions.get("Ready")
    if ready is not None and ready.status == "True":
        return Phase.READY, _ts(ready.last_transition_time) or created
    containers = status.container_statuses or ()
    started_at = [
        _ts(c.state.running.started_at) if c.state and c.state.running else None for c in containers
    ]
    since = max((t for t in started_at if t is not None), default=created)
    if not containers or not all(c.started for c in containers):
        return Phase.LOADING, since
    return Phase.WARMUP, since


def _node_wait(pod: V1Pod, created: float | None) -> tuple[Phase, float | None] | None:
    """``(NODE_PENDING, since)`` for a pod waiting for a node (see :func:`pod_phase`), else None.

    A pod bound to a node (``spec.nodeName``) has one, whatever a stale condition says.
    """
    status = pod.status
    if status is None or (pod.spec is not None and pod.spec.node_name):
        return None
    for c in status.conditions or ():
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            return Phase.NODE_PENDING, _ts(c.last_transition_time) or created
    if status.nominated_node_name:
        return Phase.NODE_PENDING, created
    return None


@dataclass
class _Apis:
    """The typed API groups a cluster uses, built lazily from one ApiClient."""

    apps: Any
    core: Any
    custom: Any


class KubernetesCluster:
    """The Cluster protocol over one Deployment's or StatefulSet's scale subresource.

    Build it with :meth:`from_config` (in-cluster, or a kubeconfig path/context) or
    directly from an ``ApiClient`` (tests). ``clock`` is the controller's time line:
    ReplicaView times are shifted onto it from the API's wall-clock timestamps (without
    a clock they stay Unix epoch seconds, as the API reports them).
    ``apps_api`` replaces the AppsV1Api (tests use it to interleave a competing write).
    """

    def __init__(
        self,
        target: KubeScaleTarget,
        api_client: ApiClient,
        *,
        retry: RetryConfig | None = None,
        clock: Clock | None = None,
        backoff_clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        wall_time_s: Callable[[], float] = time.time,
        apps_api: Any = None,
        pod_load: PodLoadReader | None = None,
        scale_down_order: str = "auto",
    ) -> None:
        from kubernetes import client

        self.target = target
        self.api_client = api_client
        self.retry = retry or RetryConfig()
        # ReplicaView times use ``clock`` when given, else the API's epoch timestamps as they
        # are. Back-off budgets run on their own real monotonic clock: a simulated ``clock``
        # that only moves between ticks would never let a retry loop run out of budget.
        self._view_clock = clock
        self._backoff_clock: Clock = backoff_clock or WallClock()
        self._sleep = sleep
        self._wall_time_s = wall_time_s
        self._apis = _Apis(
            apps=apps_api if apps_api is not None else client.AppsV1Api(api_client),
            core=client.CoreV1Api(api_client),
            custom=client.CustomObjectsApi(api_client),
        )
        #: with leader election, the elector's ``is_leader``: every scale write asks it first
        self.may_write: Callable[[], bool] | None = None
        #: reads each pod's load before a scale-down; None: no annotation, no choice (as before)
        self.pod_load = pod_load
        from llmscale.cluster.scale_down import ORDERS

        if scale_down_order not in ("auto", *ORDERS):
            raise ConfigError(
                f"scale_down_order = {scale_down_order!r}, must be one of auto, {', '.join(ORDERS)}"
            )
        self._order_override = scale_down_order
        self._order: ScaleDownOrder | None = None

    @classmethod
    def from_config(
        cls,
        target: KubeScaleTarget,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        **kwargs: Any,
    ) -> KubernetesCluster:
        """In-cluster config when running in a pod and no kubeconfig/context is given, else the
        kubeconfig (``kubeconfig`` path, or ``$KUBECONFIG`` / ``~/.kube/config``) and ``context``."""
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        try:
            if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
                cfg = client.Configuration()
                config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
                api_client = client.ApiClient(cfg)
            else:
                api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, context=context
                )
        except (ConfigException, OSError) as e:
            where = kubeconfig or "the in-cluster service account / default kubeconfig"
            ctx = f", context {context!r}" if context else ""
            raise ConfigError(f"cannot load Kubernetes credentials from {where}{ctx}: {e}") from e
        return cls(target, api_client, **kwargs)

    # -- call plumbing ---------------------------------------------------------------------

    def _call(
        self, verb: str, resource: str, fn: Callable[[], T], *, passthrough: frozenset[int] = frozenset()
    ) -> T:
        """Run one API call with back-off on transient failures.

        Statuses in ``passthrough`` re-raise the ApiException for the caller to handle
        (409 in scale_to, 404 for optional APIs); every other failure becomes a
        KubeActuationError naming ``verb`` and ``resource``.
        """
        from kubernetes.client.exceptions import ApiException

        cfg = self.retry
        started = self._backoff_clock.now_s()
        delay = cfg.backoff_initial_s
        attempts = 0
        where = f"{verb} {resource} in namespace {self.target.namespace}"
        while True:
            attempts += 1
            try:
                return fn()
            except ApiException as e:
                if e.status in passthrough:
                    raise
                if e.status == 403:
                    raise KubeActuationError(
                        f"forbidden: cannot {where}: {_server_message(e)}. The ServiceAccount llmscale "
                        f"runs as needs '{verb}' on '{resource}' there; apply deploy/rbac/ with the "
                        f"target name filled in",
                        reason="forbidden",
                    ) from e
                if not _transient(e):
                    raise KubeActuationError(f"cannot {where}: {_server_message(e)}", reason="other") from e
                last = _server_message(e)
            except Exception as e:
                if not _transient(e):
                    raise
                last = f"{type(e).__name__}: {e}"
            elapsed = self._backoff_clock.now_s() - started
            remaining = cfg.budget_s - elapsed
            if remaining <= 0:
                raise KubeActuationError(
                    f"cannot {where}: the API server kept failing for {elapsed:.1f} s "
                    f"({attempts} attempts); last error: {last}",
                    reason="server_error",
                )
            pause = min(delay, remaining)
            log.warning("%s failed (%s); retrying in %.2f s", where, last, pause)
            self._sleep(pause)
            delay = min(delay * cfg.backoff_factor, cfg.backoff_max_s)

    def _read_scale(self, *, passthrough: frozenset[int] = frozenset()) -> V1Scale:
        t = self.target
        apps = self._apis.apps
        timeout = self.retry.request_timeout_s
        read = (
            apps.read_namespaced_deployment_scale
            if t.kind == "Deployment"
            else apps.read_namespaced_stateful_set_scale
        )
        scale: V1Scale = self._call(
            "get",
            f"{t.resource}/scale",
            lambda: read(t.name, t.namespace, _request_timeout=timeout),
            passthrough=passthrough,
        )
        return scale

    def _replace_scale(self, body: V1Scale) -> None:
        t = self.target
        apps = self._apis.apps
        timeout = self.retry.request_timeout_s
        method = (
            apps.replace_namespaced_deployment_scale
            if t.kind == "Deployment"
            else apps.replace_namespaced_stateful_set_scale
        )

        def write() -> Any:
            # Asked before every attempt, retries included: a leader whose lease lapsed while
            # it backed off from a 503 storm must not land its scale after a successor took over.
            if self.may_write is not None and not self.may_write():
                raise KubeActuationError(
                    f"not scaling {t}: this replica no longer holds the leader lease", reason="other"
                )
            return method(t.name, t.namespace, body, _request_timeout=timeout)

        self._call("update", f"{t.resource}/scale", write, passthrough=frozenset({409}))

    # -- Cluster protocol ------------------------------------------------------------------

    @property
    def spec_replicas(self) -> int:
        """The scale subresource's ``spec.replicas`` (read from the server on every access)."""
        scale = self._read_scale()
        return int(scale.spec.replicas or 0) if scale.spec is not None else 0

    def scale_to(self, n: int, now_s: float, *, drain_until_idle: bool = False) -> None:
        """Set ``spec.replicas`` to ``n``; pre: n >= 0. Raises KubeActuationError on failure.

        A shrink with ``pod_load`` set first runs :meth:`prepare_scale_down` once (annotate
        the pods' deletion costs; where the server ignores them, delete the least-loaded pods
        itself), so the least-loaded pods go. The draining is the pod's own: its preStop hook
        waits until its server has no running or waiting request, bounded by
        ``terminationGracePeriodSeconds`` (deploy/vllm/). So ``drain_until_idle`` is the pod
        spec's to honour, not this call's: a grace period longer than the longest generation
        is "until idle"; at the deadline the kubelet kills, as the simulator's non-idle drain.
        """
        del now_s, drain_until_idle  # the server's time and the pod spec govern both
        from kubernetes.client import V1ObjectMeta, V1Scale, V1ScaleSpec
        from kubernetes.client.exceptions import ApiException

        if n < 0:
            raise KubeActuationError(
                f"cannot scale {self.target} to {n} replicas: must be >= 0", reason="other"
            )
        t = self.target
        prepared = self.pod_load is None
        for attempt in range(self.retry.conflict_retries + 1):
            current = self._read_scale()
            meta = current.metadata
            if current.spec is not None and current.spec.replicas == n:
                return
            current_n = int(current.spec.replicas or 0) if current.spec is not None else 0
            if not prepared and n < current_n:
                prepared = True  # once: a 409 retry must not delete more pods
                self.prepare_scale_down(current_n, n)
            # Only name, namespace and the read resourceVersion: the server rejects the
            # write with 409 if the object changed since that read.
            body = V1Scale(
                metadata=V1ObjectMeta(
                    name=t.name,
                    namespace=t.namespace,
                    resource_version=meta.resource_version if meta is not None else None,
                ),
                spec=V1ScaleSpec(replicas=n),
            )
            try:
                self._replace_scale(body)
            except ApiException as e:  # only 409 reaches here
                log.info(
                    "%s: scale conflict on attempt %d (%s); re-reading", t, attempt + 1, _server_message(e)
                )
                continue
            log.info("%s: scaled to %d replicas", t, n)
            return
        raise KubeActuationError(
            f"cannot scale {t} to {n}: the scale changed under us {self.retry.conflict_retries + 1} times "
            "in a row (another writer is active; check for a second autoscaler or a GitOps sync)",
            reason="conflict",
        )

    # -- choosing which pods a scale-down removes -------------------------------------------

    def check_scale_down(self, *, via_keda: bool = False) -> ScaleDownOrder:
        """How this target's scale-downs pick their pods (read once; see ``scale_down_order``).

        Logs a warning naming the target and the reason when the server or the target kind
        ignores pod-deletion-cost (a StatefulSet; a server older than v1.22, where llmscale
        deletes the pods itself, or cannot under KEDA).
        Called at start by ``llmscale run``; a failed /version read counts as an unknown version.
        """
        from llmscale.cluster.scale_down import scale_down_order, server_minor

        if self._order is not None:
            return self._order
        minor: int | None = None
        if self.target.kind == "Deployment" and self._order_override == "auto":
            from kubernetes import client

            version_api = client.VersionApi(self.api_client)
            timeout = self.retry.request_timeout_s
            try:
                info = self._call("get", "version", lambda: version_api.get_code(_request_timeout=timeout))
                minor = server_minor(info.major, info.minor)
            except KubeActuationError as e:
                log.warning("%s: cannot read the API server's version: %s", self.target, e)
        order, warning = scale_down_order(
            self.target.kind, minor, via_keda=via_keda, override=self._order_override
        )
        if warning:
            log.warning("%s: scale-downs: %s", self.target, warning)
        log.info("%s: scale-down order %s", self.target, order)
        self._order = order
        return order

    def prepare_scale_down(self, current_n: int, n: int, *, via_keda: bool = False) -> list[str]:
        """Before lowering ``current_n`` replicas to ``n``: annotate every live pod with its
        deletion cost and, in ``explicit`` order, delete the chosen ready pods; returns the pods
        deleted. Best effort: a failure is logged and the scale-down goes on (the preStop drain
        protects whatever pod Kubernetes picks). No-op without ``pod_load``, for a non-leader,
        or in ``off`` order.
        """
        from llmscale.cluster.scale_down import choose_victims

        if self.pod_load is None or n >= current_n:
            return []
        if self.may_write is not None and not self.may_write():
            return []
        order = self.check_scale_down(via_keda=via_keda)
        if order == "off":
            return []
        try:
            candidates, uids = self._candidates()
            self._annotate(candidates)
            victims = choose_victims(candidates, current_n - n)
            if order != "explicit":
                return []
            # Only ready victims: the ReplicaSet removes not-ready pods first by itself.
            chosen = [v for v in victims if v.phase == Phase.READY]
            for v in chosen:
                self._delete_pod(v.name, uids[v.name])
            if chosen:
                log.info(
                    "%s: deleted the least-loaded pods %s before scaling %d -> %d",
                    self.target,
                    ", ".join(f"{v.name} (cost {_cost(v)})" for v in chosen),
                    current_n,
                    n,
                )
            return [v.name for v in chosen]
        except KubeActuationError as e:
            log.warning(
                "%s: could not choose the pods of the scale-down %d -> %d: %s", self.target, current_n, n, e
            )
            return []

    def _candidates(self) -> tuple[list[PodCandidate], dict[str, str]]:
        """Live (not terminating, not finished) pods with their phase and load; their uids."""
        from llmscale.cluster.scale_down import PodCandidate

        assert self.pod_load is not None
        live: list[tuple[str, str, Phase, float, str | None]] = []  # name, uid, phase, created, ip
        for pod in self._list_pods():
            mapped = pod_phase(pod)
            meta = pod.metadata
            if mapped is None or mapped[0] == Phase.DRAINING or meta is None or not meta.name:
                continue
            ip = pod.status.pod_ip if pod.status is not None else None
            live.append((meta.name, meta.uid or "", mapped[0], _ts(meta.creation_timestamp) or 0.0, ip))
        loads = self.pod_load([(name, ip) for name, _, _, _, ip in live if ip])
        out = [
            PodCandidate(name=name, phase=phase, created_s=created_s, load=loads.get(name))
            for name, _, phase, created_s, _ in live
        ]
        return out, {name: uid for name, uid, _, _, _ in live}

    def _annotate(self, candidates: Sequence[PodCandidate]) -> None:
        """Write each ready pod's deletion cost (int32, decimal).

        Not-ready pods are left alone: the ReplicaSet removes them before any ready pod
        whatever their cost, and a pod without an IP has no metrics to read.
        """
        from kubernetes.client.exceptions import ApiException

        from llmscale.cluster.scale_down import DELETION_COST_ANNOTATION

        core = self._apis.core
        ns = self.target.namespace
        timeout = self.retry.request_timeout_s

        def patch(name: str, cost: int) -> Any:
            body = {"metadata": {"annotations": {DELETION_COST_ANNOTATION: str(cost)}}}
            return core.patch_namespaced_pod(name, ns, body, _request_timeout=timeout)

        for c in candidates:
            if c.phase != Phase.READY:
                continue
            cost = _cost(c)
            try:
                self._call("patch", "pods", functools.partial(patch, c.name, cost), passthrough=_GONE)
            except ApiException:
                continue  # 404: the pod went away meanwhile

    def _delete_pod(self, name: str, uid: str) -> None:
        """Delete pod ``name`` gracefully (its preStop drains it), only if it is still ``uid``."""
        from kubernetes.client import V1DeleteOptions, V1Preconditions
        from kubernetes.client.exceptions import ApiException

        core = self._apis.core
        ns = self.target.namespace
        timeout = self.retry.request_timeout_s
        body = V1DeleteOptions(preconditions=V1Preconditions(uid=uid))
        try:
            self._call(
                "delete",
                "pods",
                lambda: core.delete_namespaced_pod(name, ns, body=body, _request_timeout=timeout),
                passthrough=_GONE,
            )
        except ApiException as e:  # 404: gone already; 409: a new pod under that name
            log.info("%s: pod %s not deleted: %s", self.target, name, _server_message(e))

    def _list_pods(self) -> list[V1Pod]:
        t = self.target
        core = self._apis.core
        timeout = self.retry.request_timeout_s
        pods = self._call(
            "list",
            "pods",
            lambda: core.list_namespaced_pod(
                t.namespace, label_selector=t.selector, _request_timeout=timeout
            ),
        )
        return sorted(pods.items or (), key=lambda p: p.metadata.name if p.metadata else "")

    def replicas_view(self) -> tuple[ReplicaView, ...]:
        """Every pod matching the selector that has not finished, with its phase (see :func:`pod_phase`).

        Times are on the controller's clock: ``created_s`` is the pod's creation, ``since_s``
        when it entered the phase (the API's wall-clock timestamps shifted onto ``clock``).
        """
        offset_s = 0.0 if self._view_clock is None else self._view_clock.now_s() - self._wall_time_s()
        out = []
        for pod in self._list_pods():
            mapped = pod_phase(pod)
            if mapped is None or pod.metadata is None or pod.metadata.name is None:
                continue
            phase, since_wall = mapped
            created_wall = _ts(pod.metadata.creation_timestamp)
            created_s = (created_wall if created_wall is not None else self._wall_time_s()) + offset_s
            since_s = since_wall + offset_s if since_wall is not None else created_s
            out.append(ReplicaView(pod.metadata.name, phase, since_s=since_s, created_s=created_s))
        return tuple(out)

    def pod_targets(self) -> list[tuple[str, str]]:
        """``(pod_name, pod_ip)`` of every unfinished pod that has an IP, for the /metrics scraper.

        Draining pods stay listed: their in-flight requests still show in their metrics.
        """
        out = []
        for pod in self._list_pods():
            if pod_phase(pod) is None or pod.metadata is None or pod.status is None:
                continue
            if pod.metadata.name and pod.status.pod_ip:
                out.append((pod.metadata.name, pod.status.pod_ip))
        return out

    # -- ownership -------------------------------------------------------------------------

    def check_ownership(self) -> None:
        """Raise ConfigError if the target is missing or another autoscaler already scales it.

        Checked: HorizontalPodAutoscalers (autoscaling/v2, falling back to v2beta2 and v1,
        which list the same objects: v1.20 serves no v2) and KEDA ScaledObjects (a missing
        CRD means KEDA is not installed). Not for the KEDA mode, where a ScaledObject
        driving the target through llmscale's external scaler is the intended owner.
        """
        from kubernetes.client.exceptions import ApiException

        t = self.target
        try:
            self._read_scale(passthrough=frozenset({404}))
        except ApiException as e:
            raise ConfigError(f"target {t} not found: {_server_message(e)}") from e
        owners = [*self._hpa_owners(), *self._keda_owners()]
        if owners:
            raise ConfigError(
                f"{t} is already scaled by {'; '.join(owners)}. Two autoscalers writing one scale "
                "make the fleet flap: delete that object, or run llmscale in KEDA mode, or point "
                "llmscale at another target"
            )

    def _list_objects(self, group: str, version: str, plural: str) -> list[dict[str, Any]] | None:
        """Items of a namespaced list as plain dicts; None when the server does not serve it."""
        from kubernetes.client.exceptions import ApiException

        custom = self._apis.custom
        ns = self.target.namespace
        timeout = self.retry.request_timeout_s
        try:
            body = self._call(
                "list",
                f"{plural}.{group}",
                lambda: custom.list_namespaced_custom_object(
                    group, version, ns, plural, _request_timeout=timeout
                ),
                passthrough=frozenset({404}),
            )
        except ApiException:
            return None
        items = body.get("items") if isinstance(body, dict) else None
        return [i for i in items or () if isinstance(i, dict)]

    def _refers_to_target(self, ref: Any, default_kind: str | None = None) -> bool:
        if not isinstance(ref, dict):
            return False
        api_version = str(ref.get("apiVersion") or "apps/v1")
        group = api_version.split("/")[0] if "/" in api_version else ""
        return (
            ref.get("name") == self.target.name
            and (ref.get("kind") or default_kind) == self.target.kind
            and group in ("apps", "extensions")
        )

    def _hpa_owners(self) -> list[str]:
        for version in ("v2", "v2beta2", "v1"):
            items = self._list_objects("autoscaling", version, "horizontalpodautoscalers")
            if items is None:
                continue
            return [
                f"HorizontalPodAutoscaler {self.target.namespace}/{i.get('metadata', {}).get('name')} "
                f"(autoscaling/{version})"
                for i in items
                if self._refers_to_target(i.get("spec", {}).get("scaleTargetRef"))
            ]
        return []

    def _keda_owners(self) -> list[str]:
        items = self._list_objects("keda.sh", "v1alpha1", "scaledobjects")
        # KEDA's scaleTargetRef defaults kind to Deployment when it is left out.
        return [
            f"KEDA ScaledObject {self.target.namespace}/{i.get('metadata', {}).get('name')} "
            "(keda.sh/v1alpha1)"
            for i in items or ()
            if self._refers_to_target(i.get("spec", {}).get("scaleTargetRef"), default_kind="Deployment")
        ]
