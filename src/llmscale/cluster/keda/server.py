"""KEDA external scaler: the controller's decision served over KEDA's ``externalscaler`` gRPC protocol.

When KEDA already owns a Deployment, llmscale does not patch the scale subresource itself. It
publishes its decision here, and a ScaledObject with a trigger of type ``external`` (KEDA polls
``IsActive``) or ``external-push`` (KEDA holds ``StreamIsActive`` open) drives the Deployment::

    triggers:
      - type: external-push
        metadata:
          scalerAddress: llmscale.llmscale-system:9090
          metricName: llmscale-desired-replicas   # optional; this is the default

* :class:`KedaScaler` holds one ScaledObject's decision and implements the ``Cluster`` protocol, so
  the controller's adapters actuate through it exactly as through Kubernetes or the simulator.
* :class:`ExternalScalerServicer` answers KEDA from those holders, keyed by the ScaledObject's
  namespace and name (what KEDA sends in ``ScaledObjectRef``; not the Deployment's name).
* ``IsActive`` is true while the decision is above 0 or an activator holds requests
  (:meth:`KedaScaler.set_held_requests`, fed by the live loop from ``Observation.gateway_queue``):
  at zero replicas a request waiting at the front door activates the ScaledObject at once.
* :func:`serve` starts a gRPC server on ``address`` (default ``127.0.0.1:0``, a free loopback port).

Before the first decision there is nothing to serve: unary calls answer ``UNAVAILABLE`` and a stream
sends nothing yet, so KEDA keeps the current replicas (or, if the ScaledObject sets ``fallback``,
goes to ``fallback.replicas`` after ``failureThreshold`` failed polls). A missing decision is never
reported as 0, which would let KEDA scale a serving fleet to zero.

The controller calls ``scale_to`` only when the decision differs from ``spec_replicas``; before
the first decision that is ``initial_replicas``, so a first decision equal to it publishes nothing.
Callers that want KEDA to hear every decision call ``scale_to`` on every tick: it is a memory write,
and only a change of activity wakes the streams.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import grpc

from llmscale.cluster.keda import externalscaler_pb2 as pb
from llmscale.cluster.keda import externalscaler_pb2_grpc as pb_grpc
from llmscale.errors import ActuationError, ConfigError, LlmscaleError
from llmscale.types import ReplicaView

if TYPE_CHECKING:
    from llmscale.cluster.base import Cluster

__all__ = [
    "DEFAULT_METRIC_NAME",
    "METRIC_NAME_KEY",
    "ExternalScalerServicer",
    "KedaScaler",
    "KedaServer",
    "ServerTls",
    "peer_host",
    "serve",
]

#: External metric name reported to KEDA when the trigger's metadata does not set one.
DEFAULT_METRIC_NAME = "llmscale-desired-replicas"
#: Trigger metadata key (``ScaledObjectRef.scalerMetadata``) that overrides the metric name.
METRIC_NAME_KEY = "metricName"

ReplicasViewFn = Callable[[], tuple[ReplicaView, ...]]

#: a metric name KEDA may be handed (``scalerMetadata.metricName``): it becomes part of the HPA's
#: external metric name and of the metrics API's URL path, so no "/", no control characters, and
#: at most 200 characters ("../../namespaces/kube-system/x" was once served back as given)
_METRIC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
#: how much of a caller's name an error message repeats: a 1 MB name echoed whole made the status
#: trailer itself too large, and KEDA read RESOURCE_EXHAUSTED instead of NOT_FOUND
_ECHO_CHARS = 80


def _echo(text: str, *, quote: bool = False) -> str:
    """``text`` as an error message repeats it: at most ``_ECHO_CHARS`` of it, quoted when asked or
    when it holds anything but printable characters."""
    short = text[:_ECHO_CHARS]
    shown = repr(short) if quote or not short.isprintable() else short
    return shown if len(text) <= _ECHO_CHARS else f"{shown}... ({len(text)} characters)"


log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Decision:
    desired: int
    time_s: float


@dataclass(frozen=True)
class ServerTls:
    """TLS of the gRPC server, as KEDA's ``external`` trigger speaks it.

    KEDA's trigger (metadata ``enableTLS: "true"``) verifies :attr:`cert_pem` with the ``caCert``
    of its TriggerAuthentication; ``tlsClientCert`` / ``tlsClientKey`` there are the client
    certificate that :attr:`client_ca_pem`, when set, requires (mTLS): a client without a
    certificate signed by that CA is refused in the handshake.
    """

    cert_pem: bytes
    key_pem: bytes
    client_ca_pem: bytes | None = None

    @classmethod
    def from_files(cls, cert_file: str, key_file: str, client_ca_file: str | None = None) -> ServerTls:
        """Read the PEM files; raises ConfigError naming the file that cannot be read."""

        def read(path: str, what: str) -> bytes:
            try:
                data = Path(path).read_bytes()
            except OSError as e:
                raise ConfigError(f"{what} {path!r} cannot be read: {e.strerror or e}") from e
            if b"-----BEGIN" not in data:
                raise ConfigError(f"{what} {path!r} is not PEM (no -----BEGIN line)")
            return data

        return cls(
            cert_pem=read(cert_file, "actuator.keda.tls.cert_file"),
            key_pem=read(key_file, "actuator.keda.tls.key_file"),
            client_ca_pem=None
            if client_ca_file is None
            else read(client_ca_file, "actuator.keda.tls.client_ca_file"),
        )

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key_pem, self.cert_pem)],
            root_certificates=self.client_ca_pem,
            require_client_auth=self.client_ca_pem is not None,
        )


class KedaScaler:
    """One ScaledObject's current decision; a ``Cluster`` whose actuator is KEDA.

    Thread-safe: the controller calls :meth:`scale_to` from its loop while gRPC worker threads read
    the decision and stream subscribers wait for it to change.
    """

    def __init__(
        self,
        name: str,
        namespace: str = "default",
        *,
        metric_name: str = DEFAULT_METRIC_NAME,
        initial_replicas: int | Callable[[], int] = 0,
        replicas_view: ReplicasViewFn | None = None,
        before_scale_down: Callable[[int, int], object] | None = None,
        role: str = "KEDA scaler",
    ) -> None:
        """``name``/``namespace``: the ScaledObject KEDA asks about.

        ``initial_replicas``: what :attr:`spec_replicas` reports before the first decision (for
        instance the target's scale spec read at start-up, or a function giving the replicas the
        metric source saw at its last observation when no Kubernetes API is at hand); it is never
        served to KEDA.
        ``replicas_view``: where :meth:`replicas_view` gets the replicas (pod discovery); KEDA
        itself tells nothing about them, so without it the view is empty.
        ``before_scale_down(current, n)``: run before a lower count is published, e.g.
        ``KubernetesCluster.prepare_scale_down(..., via_keda=True)``, which annotates the pods'
        deletion costs so that the ReplicaSet, when the HPA applies the count, removes the
        least-loaded pods; an error there is logged and the count is published anyway.
        ``role``: what the messages call this holder ("external metric" when the HPA reads the
        decision through the external metrics API instead of KEDA).
        """
        if not name:
            raise ConfigError("KEDA ScaledObject name is empty")
        if isinstance(initial_replicas, int) and initial_replicas < 0:
            raise ConfigError(f"initial_replicas = {initial_replicas}, must be >= 0")
        if not _METRIC_NAME.fullmatch(metric_name):
            raise ConfigError(
                f"{role} {namespace}/{name}: metric_name = {metric_name!r}, must be 1 to 200 letters, "
                "digits, '.', '_' or '-', starting with a letter or digit"
            )
        self.name = name
        self.namespace = namespace
        self.metric_name = metric_name
        self.role = role
        self._initial_replicas = initial_replicas
        self._replicas_view = replicas_view
        self._before_scale_down = before_scale_down
        self._cond = threading.Condition()
        self._decision: _Decision | None = None
        self._held = 0  # requests an activator holds (set_held_requests)
        # Bumped whenever activity (desired > 0) changes or the first decision arrives; streams
        # compare it with the generation they last sent.
        self._activity_generation = 0

    @property
    def key(self) -> tuple[str, str]:
        """``(namespace, name)`` of the ScaledObject."""
        return (self.namespace, self.name)

    # --- Cluster protocol ---------------------------------------------------------------

    @property
    def spec_replicas(self) -> int:
        """The last decision (replicas); ``initial_replicas`` before the first one."""
        with self._cond:
            if self._decision is not None:
                return self._decision.desired
        initial = self._initial_replicas
        return initial() if callable(initial) else initial

    @property
    def decision(self) -> tuple[int, float] | None:
        """(replicas, controller time s) of the last decision; None before the first."""
        with self._cond:
            d = self._decision
        return None if d is None else (d.desired, d.time_s)

    @property
    def has_decision(self) -> bool:
        """False until the first ``scale_to``: until then KEDA is answered UNAVAILABLE."""
        with self._cond:
            return self._decision is not None

    def scale_to(self, n: int, now_s: float, *, drain_until_idle: bool = False) -> None:
        """Publish ``n`` replicas, decided at ``now_s`` (controller time, s); pre: n >= 0.

        Wakes ``StreamIsActive`` subscribers when activity (n > 0) changes. On a shrink the
        ``before_scale_down`` hook runs first, so the pods carry their deletion costs before KEDA
        can read the lower count; the pods' preStop hook does the draining, so
        ``drain_until_idle`` is the pod spec's to honour (see ``KubernetesCluster.scale_to``).
        Raises ActuationError for a negative ``n``.
        """
        del drain_until_idle
        if n < 0:
            raise ActuationError(f"{self.role} {self.namespace}/{self.name}: replicas = {n}, must be >= 0")
        current = self.spec_replicas
        if self._before_scale_down is not None and n < current:
            try:
                self._before_scale_down(current, n)
            except LlmscaleError:  # best effort: a missing annotation must not hold a shrink
                log.exception(
                    "%s %s/%s: preparing the scale-down failed", self.role, self.namespace, self.name
                )
        with self._cond:
            before, was_active = self._decision, self._active_locked()
            self._decision = _Decision(desired=int(n), time_s=float(now_s))
            if before is None or was_active != self._active_locked():
                self._activity_generation += 1
                self._cond.notify_all()

    def set_held_requests(self, n: int | None) -> None:
        """Requests an activator holds now for want of a ready replica (None: unknown, read as none).

        Held demand makes the ScaledObject active at once, whatever the last decision said: at zero
        replicas KEDA's activation is what starts the first one, and a request waiting at the front
        door is the demand it must not miss (the policy's own 0 -> 1 follows at its next tick).
        Wakes ``StreamIsActive`` subscribers when that changes activity.
        """
        held = max(0, int(n or 0))
        with self._cond:
            was_active = self._active_locked()
            self._held = held
            if self._decision is not None and was_active != self._active_locked():
                self._activity_generation += 1
                self._cond.notify_all()

    @property
    def held_requests(self) -> int:
        """The last :meth:`set_held_requests` (0 before any)."""
        with self._cond:
            return self._held

    def _active_locked(self) -> bool | None:
        """Active: desired > 0 or held demand; None before the first decision. Hold ``_cond``."""
        if self._decision is None:
            return None
        return self._decision.desired > 0 or self._held > 0

    def replicas_view(self) -> tuple[ReplicaView, ...]:
        """The injected view's replicas, or ``()`` when none was given."""
        return () if self._replicas_view is None else self._replicas_view()

    # --- read side ----------------------------------------------------------------------

    @property
    def desired_replicas(self) -> int | None:
        """The decision served to KEDA; ``None`` until the first :meth:`scale_to`."""
        with self._cond:
            return None if self._decision is None else self._decision.desired

    @property
    def decided_at_s(self) -> float | None:
        """``now_s`` of the last :meth:`scale_to`; ``None`` until the first one."""
        with self._cond:
            return None if self._decision is None else self._decision.time_s

    @property
    def active(self) -> bool | None:
        """What ``IsActive`` answers: desired > 0, or requests held at the activator; None before the
        first decision."""
        with self._cond:
            return self._active_locked()

    def _activity(self) -> tuple[bool | None, int]:
        """(active or None before the first decision, activity generation), read together."""
        with self._cond:
            return self._active_locked(), self._activity_generation

    def _wait_for_activity_change(
        self, seen_generation: int, timeout_s: float, stop: Callable[[], bool]
    ) -> bool:
        """Block until activity changes past ``seen_generation`` or ``stop()``; False on time-out."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._activity_generation != seen_generation or stop(), timeout=timeout_s
            )

    def _wake(self) -> None:
        """Wake every waiting stream so it re-checks whether its RPC or the server is done."""
        with self._cond:
            self._cond.notify_all()


def peer_host(peer: str) -> str:
    """The client address of a gRPC peer string, without its port.

    ``ipv4:10.0.0.7:51234`` -> ``ipv4:10.0.0.7``; ``ipv6:[::1]:51234`` -> ``ipv6:[::1]`` (gRPC
    1.5x+ writes it URL-encoded, ``ipv6:%5B::1%5D:51234``); anything else (``unix:...``) is
    kept whole.
    """
    from urllib.parse import unquote

    kind, _, rest = unquote(peer).partition(":")
    if kind in ("ipv4", "ipv6"):
        host, sep, port = rest.rpartition(":")
        if sep and port.isdigit():
            return f"{kind}:{host}"
    return unquote(peer)


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)  # raises: ends the RPC with this status
    raise AssertionError("unreachable: ServicerContext.abort raises")


class ExternalScalerServicer(pb_grpc.ExternalScalerServicer):
    """KEDA's ``ExternalScaler`` service over a fixed set of :class:`KedaScaler` holders."""

    def __init__(
        self,
        scalers: Iterable[KedaScaler],
        *,
        keepalive_s: float = 30.0,
        max_streams: int = 8,
        max_streams_per_peer: int | None = None,
    ) -> None:
        """``keepalive_s``: a stream resends the current activity after this long without a change,
        so a subscriber that missed nothing still hears the server is alive, and a vanished one is
        detected by the failed write. ``max_streams``: concurrent ``StreamIsActive`` calls; each
        holds a server worker thread, so more are refused with RESOURCE_EXHAUSTED instead of
        starving the unary calls of threads. ``max_streams_per_peer``: of those, how many one
        client address may hold. Without it any client that reaches the port could open all 8
        and lock KEDA out; KEDA opens one per ScaledObject trigger, and 2 (the default, or
        ``max_streams`` if lower) lets a restarted KEDA open its new stream before the server
        has seen the old one close.
        """
        if max_streams_per_peer is None:
            max_streams_per_peer = min(2, max_streams)
        by_key: dict[tuple[str, str], KedaScaler] = {}
        for s in scalers:
            if s.key in by_key:
                raise ConfigError(f"KEDA ScaledObject {s.namespace}/{s.name} is listed twice")
            by_key[s.key] = s
        if not by_key:
            raise ConfigError("the KEDA external scaler needs at least one ScaledObject to serve")
        if keepalive_s <= 0:
            raise ConfigError(f"keepalive_s = {keepalive_s}, must be > 0")
        if max_streams < 1:
            raise ConfigError(f"max_streams = {max_streams}, must be >= 1")
        if not 1 <= max_streams_per_peer <= max_streams:
            raise ConfigError(
                f"max_streams_per_peer = {max_streams_per_peer}, must be in 1..max_streams ({max_streams})"
            )
        self._scalers = by_key
        self._keepalive_s = keepalive_s
        self._max_streams = max_streams
        self._max_per_peer = max_streams_per_peer
        self._lock = threading.Lock()
        self._open_streams = 0
        #: open streams per client address (its host, without the port: a client opening more
        #: connections gets a new port each time, not a new address)
        self._open_by_peer: dict[str, int] = {}
        self._closing = threading.Event()

    @property
    def open_streams(self) -> int:
        """``StreamIsActive`` calls currently open."""
        with self._lock:
            return self._open_streams

    def open_streams_of(self, peer: str) -> int:
        """``StreamIsActive`` calls currently open from client address ``peer`` (see :func:`peer_host`)."""
        with self._lock:
            return self._open_by_peer.get(peer, 0)

    def close(self) -> None:
        """End every open stream (with status OK) and refuse new ones; unary calls still answer."""
        self._closing.set()
        for s in self._scalers.values():
            s._wake()

    # --- lookups ------------------------------------------------------------------------

    def _find(self, ref: pb.ScaledObjectRef, context: grpc.ServicerContext) -> KedaScaler:
        scaler = self._scalers.get((ref.namespace, ref.name))
        if scaler is None:
            served = ", ".join(f"{ns}/{n}" for ns, n in sorted(self._scalers))
            _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"ScaledObject {_echo(ref.namespace)}/{_echo(ref.name)} is not served by this llmscale "
                f"scaler (serving: {served})",
            )
        return scaler

    @staticmethod
    def _desired(scaler: KedaScaler, context: grpc.ServicerContext) -> int:
        desired = scaler.desired_replicas
        if desired is None:
            _abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"no decision yet for ScaledObject {scaler.namespace}/{scaler.name}: the llmscale "
                "controller has not completed a tick; KEDA keeps the current replicas",
            )
        return desired

    @staticmethod
    def _metric_name(scaler: KedaScaler, ref: pb.ScaledObjectRef, context: grpc.ServicerContext) -> str:
        name = ref.scalerMetadata.get(METRIC_NAME_KEY) or scaler.metric_name
        if not _METRIC_NAME.fullmatch(name):
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"trigger metadata {METRIC_NAME_KEY} = {_echo(name, quote=True)}: must be 1 to 200 "
                "letters, digits, '.', '_' or '-', starting with a letter or digit",
            )
        return name

    # --- RPCs ---------------------------------------------------------------------------

    def IsActive(self, request: pb.ScaledObjectRef, context: grpc.ServicerContext) -> pb.IsActiveResponse:
        scaler = self._find(request, context)
        self._desired(scaler, context)  # UNAVAILABLE before the first decision
        return pb.IsActiveResponse(result=bool(scaler.active))

    def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: grpc.ServicerContext
    ) -> Iterator[pb.IsActiveResponse]:
        scaler = self._find(request, context)
        peer = peer_host(context.peer())
        with self._lock:
            if self._closing.is_set():
                _abort(context, grpc.StatusCode.UNAVAILABLE, "the llmscale KEDA scaler is shutting down")
            mine = self._open_by_peer.get(peer, 0)
            # Per client first: one client at its share is refused even while slots are free, so
            # it can never take the slots another client (KEDA) needs.
            if mine >= self._max_per_peer:
                _abort(
                    context,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{mine} StreamIsActive calls already open from {peer} "
                    f"(max_streams_per_peer = {self._max_per_peer})",
                )
            if self._open_streams >= self._max_streams:
                _abort(
                    context,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{self._open_streams} StreamIsActive calls already open "
                    f"(max_streams = {self._max_streams})",
                )
            self._open_streams += 1
            self._open_by_peer[peer] = mine + 1
        try:
            yield from self._activity_stream(scaler, context)
        finally:
            with self._lock:
                self._open_streams -= 1
                left = self._open_by_peer[peer] - 1
                if left:
                    self._open_by_peer[peer] = left
                else:
                    del self._open_by_peer[peer]

    def _activity_stream(
        self, scaler: KedaScaler, context: grpc.ServicerContext
    ) -> Iterator[pb.IsActiveResponse]:
        # The RPC ending (client cancel, deadline, server stop after its grace) runs this callback,
        # which wakes the wait below; close() wakes it too.
        context.add_callback(scaler._wake)

        def done() -> bool:
            return self._closing.is_set() or not context.is_active()

        while not done():
            active, generation = scaler._activity()
            # No decision yet: send nothing (not a made-up false) and wait for the first one.
            if active is not None:
                yield pb.IsActiveResponse(result=active)
            # Wait for a change after the state just sent (one made while the message was on its
            # way is seen at once); a time-out falls through to a keep-alive resend.
            scaler._wait_for_activity_change(generation, self._keepalive_s, done)

    def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.ServicerContext
    ) -> pb.GetMetricSpecResponse:
        scaler = self._find(request, context)
        # targetSize 1 with KEDA's default metric type AverageValue makes the HPA ask for exactly
        # our replicas. For an External metric with an AverageValue target the HPA computes
        #     usageRatio = metricValue / (target * currentReplicas)
        #     desired    = ceil(metricValue / target)    if |1 - usageRatio| > tolerance (0.1 by default)
        # and metricValue is our decision, so with target = 1 the HPA's answer is our number
        # whatever currentReplicas is: current 4, ours 7 -> ratio 1.75 -> ceil(7 / 1) = 7; current 7,
        # ours 3 -> ratio 0.43 -> 3. The one exception is the tolerance: within 10 % of current
        # (current 20, ours 21 -> ratio 1.05) the HPA keeps 20. The HPA's own behavior (a 300 s
        # scale-down stabilization window by default) still applies after this; configure
        # advanced.horizontalPodAutoscalerConfig.behavior so it does not stack on llmscale's guards.
        # A trigger with metricType: Value would instead compute ceil(metricValue * readyPods): wrong.
        # Pinned by tests/keda/test_keda_server.py::test_metric_spec_is_one_average_value_per_replica.
        spec = pb.MetricSpec(
            metricName=self._metric_name(scaler, request, context), targetSize=1, targetSizeFloat=1.0
        )
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.ServicerContext
    ) -> pb.GetMetricsResponse:
        ref = request.scaledObjectRef
        scaler = self._find(ref, context)
        name = self._metric_name(scaler, ref, context)
        # KEDA strips its "s<index>-" prefix before asking, so it sends the name GetMetricSpec gave;
        # an empty name (a hand-made request) means the only metric there is.
        if request.metricName not in ("", name):
            _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"metric {_echo(request.metricName, quote=True)} is not served for ScaledObject "
                f"{ref.namespace}/{ref.name}; GetMetricSpec names it {name!r}",
            )
        desired = self._desired(scaler, context)
        value = pb.MetricValue(metricName=name, metricValue=desired, metricValueFloat=float(desired))
        return pb.GetMetricsResponse(metricValues=[value])


class KedaServer:
    """A running external scaler: its gRPC server, servicer and bound port."""

    def __init__(self, server: grpc.Server, servicer: ExternalScalerServicer, port: int) -> None:
        self.grpc_server = server
        self.servicer = servicer
        self.port = port

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop serving: open streams end at once with status OK (KEDA then reconnects to
        whichever scaler is up), new calls are refused, and unary calls in flight get up to
        ``grace_s`` seconds before they are cancelled. Returns when the server has shut down.
        """
        self.servicer.close()
        self.grpc_server.stop(grace_s).wait(timeout=grace_s + 5.0)

    def __enter__(self) -> KedaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    scalers: KedaScaler | Iterable[KedaScaler],
    address: str = "127.0.0.1:0",
    *,
    keepalive_s: float = 30.0,
    max_workers: int = 16,
    max_streams: int = 8,
    max_streams_per_peer: int | None = None,
    tls: ServerTls | None = None,
) -> tuple[KedaServer, int]:
    """Serve ``scalers`` to KEDA on ``address`` (host:port, port 0 = a free one); returns (server, port).

    Plain-text gRPC without ``tls`` (KEDA's ``external`` trigger without ``enableTLS``); with it, TLS
    and, when ``tls.client_ca_pem`` is set, a client certificate required (mTLS). ``max_streams``
    must leave worker threads for unary calls: pre: max_streams < max_workers; one client
    address holds at most ``max_streams_per_peer`` of them (see ExternalScalerServicer).
    Anyone who reaches the port can call it: in a cluster, deploy/controller/networkpolicy.yaml
    admits only KEDA. Raises ConfigError when the address cannot be bound.
    """
    if max_streams >= max_workers:
        raise ConfigError(f"max_streams = {max_streams}, must be < max_workers ({max_workers})")
    servicer = ExternalScalerServicer(
        [scalers] if isinstance(scalers, KedaScaler) else scalers,
        keepalive_s=keepalive_s,
        max_streams=max_streams,
        max_streams_per_peer=max_streams_per_peer,
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="keda-scaler")
    )
    # protoc's gRPC module is untyped (see pyproject's mypy override for the generated modules)
    pb_grpc.add_ExternalScalerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    try:
        port = (
            server.add_insecure_port(address)
            if tls is None
            else server.add_secure_port(address, tls.credentials())
        )
    except RuntimeError as e:
        raise ConfigError(f"KEDA scaler address {address!r} cannot be bound: {e}") from e
    if port == 0:
        raise ConfigError(f"KEDA scaler address {address!r} cannot be bound")
    server.start()
    return KedaServer(server, servicer, port), port


if TYPE_CHECKING:

    def _is_a_cluster(s: KedaScaler) -> Cluster:
        return s
