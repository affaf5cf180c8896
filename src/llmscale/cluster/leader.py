"""Leader election over a ``coordination.k8s.io/v1`` Lease: many ``llmscale run`` replicas, one actor.

Every replica observes and decides each tick; only the one holding the Lease actuates and
writes the controller state. :class:`LeaseElector` runs in its own thread, every
``retry_period_s``:

- it reads the Lease; if this replica holds it, it renews it (``renewTime`` now, a ``PUT``
  carrying the resourceVersion it read, so a concurrent writer makes it fail with 409);
- if another replica holds it, it takes it only once the Lease has not changed for
  ``lease_duration_s`` *as measured on this replica's own monotonic clock* since it first saw
  that version. Comparing the Lease's ``renewTime`` with the local wall clock would make the
  election depend on clock skew between nodes; the local observation does not.
- a Lease that does not exist is created (deploy/rbac/lease.yaml ships it, since RBAC cannot
  limit ``create`` to one name).

Fencing by time: :meth:`LeaseElector.is_leader` is true only while the last successful renewal
*began* less than ``renew_deadline_s`` ago. A standby saw that renewal's new version no earlier
than the request began, and waits ``lease_duration_s`` from then, so with client-go's 15 / 10 s
a leader that can no longer reach the API server stops actuating at least 5 s before anyone
else may start: the margin absorbs a scale request already in flight (its time-out is 10 s;
the live loop asks :meth:`is_leader` again just before it scales) and the two replicas' clocks
running at slightly different rates. No network round trip is needed to stop.

The term is the Lease's ``leaseTransitions`` after this replica acquired it: two leaderships
never share a term, so decision records of overlapping terms are detectable afterwards.

A clean stop releases the Lease (empty holder), so a standby takes over at its next retry
instead of after a full lease duration.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["LeaseElector", "LeaseSettings", "default_identity", "lease_name"]

log = logging.getLogger(__name__)


def lease_name(target_name: str) -> str:
    """The Lease of the controllers scaling ``target_name``: ``llmscale-leader-<name>``."""
    return f"llmscale-leader-{target_name}"


def default_identity() -> str:
    """``$POD_NAME`` (the downward API, deploy/controller/deployment.yaml) or the hostname, plus
    a random suffix: two processes on one host (or a restarted container of the same pod) must
    never both believe they hold the Lease."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "llmscale"
    return f"{base}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str
    identity: str
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    #: each API request's time-out; below the renew deadline so a hung request cannot outlast it
    request_timeout_s: float = 5.0


def _micro_time(t_s: float) -> str:
    """Kubernetes' MicroTime text (RFC 3339 with exactly six fraction digits, UTC)."""
    return datetime.fromtimestamp(t_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Acquires and renews one Lease in a background thread; see the module docstring.

    ``monotonic`` and ``wall`` are injectable for tests; the wall clock only fills the Lease's
    informative ``acquireTime`` / ``renewTime`` fields, never a decision.
    """

    def __init__(
        self,
        api_client: ApiClient,
        settings: LeaseSettings,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        from kubernetes import client

        self.settings = settings
        self._api = client.CoordinationV1Api(api_client)
        self._mono = monotonic
        self._wall = wall
        self._lock = threading.Lock()
        #: monotonic time at which the last successful acquire/renew request began; None: not leading
        self._renewed_at: float | None = None
        self._term: int | None = None
        #: the last Lease version seen held by someone else, and when it was first seen here
        self._observed: tuple[str, float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.transitions_seen = 0
        self.errors = 0

    # -- what the controller asks -----------------------------------------------------------

    def is_leader(self) -> bool:
        """True while the last successful renewal began less than ``renew_deadline_s`` ago."""
        with self._lock:
            at = self._renewed_at
        return at is not None and self._mono() - at < self.settings.renew_deadline_s

    @property
    def term(self) -> int | None:
        """The Lease's ``leaseTransitions`` when this replica acquired it; None when not leading."""
        return self._term if self.is_leader() else None

    @property
    def identity(self) -> str:
        return self.settings.identity

    # -- the loop ---------------------------------------------------------------------------

    def start(self) -> None:
        """Try once now (so a lone replica leads from its first tick), then every retry period."""
        self.try_once()
        self._thread = threading.Thread(target=self._run, name="lease-elector", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True) -> None:
        """Stop the loop; ``release``: give the Lease up if this replica holds it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.request_timeout_s + self.settings.retry_period_s)
        if release and self.is_leader():
            self._release()
        with self._lock:
            self._renewed_at = None

    def _run(self) -> None:
        while not self._stop.wait(self.settings.retry_period_s):
            self.try_once()

    def try_once(self) -> bool:
        """One acquire-or-renew attempt; returns whether this replica leads afterwards."""
        began = self._mono()
        try:
            ok = self._attempt(began)
        except Exception as e:  # the elector's loop must survive any API failure; leading then lapses
            self.errors += 1
            log.warning(
                "lease %s/%s: %s: %s", self.settings.namespace, self.settings.name, type(e).__name__, e
            )
            ok = False
        if ok:
            with self._lock:
                self._renewed_at = began
        elif self.is_leader():
            log.warning(
                "lease %s/%s: renewal failed; still leading for %.1f s at most",
                self.settings.namespace, self.settings.name,
                self.settings.renew_deadline_s - (self._mono() - (self._renewed_at or began)),
            )  # fmt: skip
        return self.is_leader()

    def _attempt(self, began: float) -> bool:
        from kubernetes.client.exceptions import ApiException

        s = self.settings
        try:
            lease = self._api.read_namespaced_lease(s.name, s.namespace, _request_timeout=s.request_timeout_s)
        except ApiException as e:
            if e.status != 404:
                raise
            return self._create()
        spec = lease.spec
        holder = spec.holder_identity if spec is not None else None
        transitions = (spec.lease_transitions if spec is not None else None) or 0
        version = _version(lease)
        if holder == s.identity and self._renewed_at is not None:
            return self._write(lease, holder=s.identity, transitions=transitions, acquired=False)
        if holder and holder != s.identity:
            # Someone else holds it (an operator's edit, or a successor after this replica's
            # renew deadline passed): stop at once rather than at the deadline.
            with self._lock:
                self._renewed_at = None
        if holder:
            # Someone else (or this identity from before a lapse: treat it like anyone else).
            if self._observed is None or self._observed[0] != version:
                self._observed = (version, began)
                return False
            if began - self._observed[1] < s.lease_duration_s:
                return False
            log.info("lease %s/%s: %s stopped renewing; taking over", s.namespace, s.name, holder)
        ok = self._write(lease, holder=s.identity, transitions=transitions + 1, acquired=True)
        return ok

    def _body(
        self, holder: str | None, transitions: int, acquire_s: float | None, version: str | None
    ) -> Any:
        s = self.settings
        now = self._wall()
        spec: dict[str, Any] = {
            "holderIdentity": holder,
            # whole seconds in the API; rounded up so no reader waits less than this replica does
            "leaseDurationSeconds": max(1, int(-(-s.lease_duration_s // 1))),
            "leaseTransitions": transitions,
            "renewTime": _micro_time(now),
        }
        if acquire_s is not None:
            spec["acquireTime"] = _micro_time(acquire_s)
        meta: dict[str, Any] = {"name": s.name, "namespace": s.namespace}
        if version is not None:
            meta["resourceVersion"] = version
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    def _write(self, lease: Any, *, holder: str, transitions: int, acquired: bool) -> bool:
        from kubernetes.client.exceptions import ApiException

        s = self.settings
        acquire_s = self._wall() if acquired else _wall_of(lease)
        body = self._body(holder, transitions, acquire_s, _version(lease))
        try:
            self._api.replace_namespaced_lease(
                s.name, s.namespace, body, _request_timeout=s.request_timeout_s
            )
        except ApiException as e:
            if e.status == 409:  # another replica wrote first: it leads, or renewed just now
                self._observed = None
                return False
            raise
        if acquired:
            self._term = transitions
            self.transitions_seen += 1
            self._observed = None
            log.info("lease %s/%s: %s leads (term %d)", s.namespace, s.name, s.identity, transitions)
        return True

    def _create(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        s = self.settings
        body = self._body(s.identity, 0, self._wall(), None)
        try:
            self._api.create_namespaced_lease(s.namespace, body, _request_timeout=s.request_timeout_s)
        except ApiException as e:
            if e.status == 409:  # created by another replica meanwhile
                return False
            if e.status == 403:
                raise PermissionError(
                    f"Lease {s.namespace}/{s.name} does not exist and this ServiceAccount may not create "
                    "it: apply deploy/rbac/lease.yaml"
                ) from e
            raise
        self._term = 0
        self.transitions_seen += 1
        log.info("lease %s/%s: created; %s leads (term 0)", s.namespace, s.name, s.identity)
        return True

    def _release(self) -> None:
        from kubernetes.client.exceptions import ApiException

        s = self.settings
        try:
            lease = self._api.read_namespaced_lease(s.name, s.namespace, _request_timeout=s.request_timeout_s)
            if lease.spec is None or lease.spec.holder_identity != s.identity:
                return
            body = self._body(None, lease.spec.lease_transitions or 0, None, _version(lease))
            self._api.replace_namespaced_lease(
                s.name, s.namespace, body, _request_timeout=s.request_timeout_s
            )
            log.info("lease %s/%s: released by %s", s.namespace, s.name, s.identity)
        except (ApiException, OSError) as e:
            log.warning(
                "lease %s/%s: could not release it (a standby waits one lease duration): %s",
                s.namespace,
                s.name,
                e,
            )


def _wall_of(lease: Any) -> float | None:
    """The Lease's acquireTime as epoch seconds, to keep it on a renewal."""
    t = lease.spec.acquire_time if lease.spec is not None else None
    return t.timestamp() if isinstance(t, datetime) else None


def _version(lease: Any) -> str:
    meta = lease.metadata
    return str(meta.resource_version) if meta is not None else ""
