"""The Kubernetes external metrics API (``external.metrics.k8s.io/v1beta1``), served by llmscale.

An ``APIService`` registers this server with the cluster's aggregation layer; an HPA whose metric
is ``type: External`` then reads llmscale's decision through the API server, with no KEDA and no
Prometheus adapter in between (docs/hpa-external-metrics.md)::

    metrics:
      - type: External
        external:
          metric: {name: llmscale-desired-replicas}
          target: {type: AverageValue, averageValue: "1"}

Two metrics are served in the target's namespace:

* ``llmscale-desired-replicas`` (the name is ``actuator.hpa.metric_name``): the last decision, after
  guards. With an ``AverageValue`` target of 1 the HPA computes ``ceil(value / 1)`` = our number
  whatever the current replicas (current 2, ours 5 -> 5), within its 10 % tolerance; a ``Value``
  target would multiply by ready pods instead, which is wrong here.
* ``llmscale-signal``: every valid signal of the last tick, one item per signal with the label
  ``signal=<name>``; an HPA picks one with ``metric.selector.matchLabels: {signal: queue_depth}``.

Before the first decision both answer 503: the HPA then keeps the current replicas
(``ScalingActive=False``, ``FailedGetExternalMetric``) rather than reading a made-up 0.

Authentication is the aggregation layer's: the API server connects with its front-proxy client
certificate (``--proxy-client-cert-file``), signed by the request-header CA, and names the user in
``X-Remote-User``. The server requires that certificate when ``client_ca_file`` is set and, when
``allowed_names`` is not empty, that its common name be one of them (the API server's
``--requestheader-allowed-names``); anything else gets 401 before a metric is read. Authorization
of the user is left to the API server, which has checked RBAC on the ``external.metrics.k8s.io``
resource before it proxied the request.
"""

from __future__ import annotations

import json
import logging
import math
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from llmscale.errors import ConfigError

__all__ = [
    "GROUP_VERSION",
    "SIGNAL_METRIC",
    "ExternalMetricsServer",
    "MetricsSnapshot",
    "format_quantity",
    "parse_label_selector",
]

GROUP_VERSION = "external.metrics.k8s.io/v1beta1"
#: the metric holding every valid signal, one item per signal labelled ``signal=<name>``
SIGNAL_METRIC = "llmscale-signal"
_PREFIX = f"/apis/{GROUP_VERSION}"
#: how long one read or write of a caller's connection may wait (the TLS handshake included): the
#: API server sends a request at once; a caller silent this long is dropped, its thread freed
CALLER_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetricsSnapshot:
    """What the server publishes: the decision (None before the first) and the last tick's signals."""

    desired_replicas: int | None
    signals: Mapping[str, float]
    #: when it was decided (epoch s); the items' ``timestamp``
    time_s: float


def format_quantity(value: float) -> str:
    """A Kubernetes quantity string: integers as they are, anything else in milli-units.

    ``5 -> "5"``, ``0.875 -> "875m"``, ``12.3456 -> "12346m"`` (rounded to 1/1000: what the HPA's
    ``MilliValue()`` reads anyway). Pre: ``value`` is finite.
    """
    if not math.isfinite(value):
        raise ValueError(f"{value} is not a finite quantity")
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def parse_label_selector(text: str) -> dict[str, str]:
    """``"a=b,c==d"`` -> ``{"a": "b", "c": "d"}``; only equality terms (what an HPA's
    ``matchLabels`` becomes). Raises ValueError naming a term it cannot read."""
    out: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in text.split(","))):
        key, sep, value = term.partition("==") if "==" in term else term.partition("=")
        if not sep or not key.strip() or "!" in key:
            raise ValueError(f"label selector term {term!r}: only key=value is served")
        out[key.strip()] = value.strip()
    return out


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _rfc3339(t_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_s))


class ExternalMetricsServer:
    """HTTPS server of ``external.metrics.k8s.io/v1beta1`` for one target (namespace, label).

    ``snapshot()`` is called per request from the server's threads: it must be cheap and
    thread-safe (the live loop's ``ControllerMetrics.external_snapshot`` is a dict read).
    """

    def __init__(
        self,
        snapshot: Callable[[], MetricsSnapshot],
        *,
        namespace: str,
        target: str,
        metric_name: str,
        host: str,
        port: int,
        cert_file: str,
        key_file: str,
        client_ca_file: str | None = None,
        allowed_names: tuple[str, ...] = (),
    ) -> None:
        self.snapshot = snapshot
        self.namespace = namespace
        self.target = target
        self.metric_name = metric_name
        self.client_ca_file = client_ca_file
        self.allowed_names = frozenset(allowed_names)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(
                f"actuator.hpa.tls: cert_file {cert_file!r} / key_file {key_file!r} cannot be loaded: {e}"
            ) from e
        if client_ca_file is not None:
            try:
                ctx.load_verify_locations(cafile=client_ca_file)
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(
                    f"actuator.hpa.tls.client_ca_file {client_ca_file!r} cannot be loaded: {e}"
                ) from e
            # Required: every caller is the API server's front proxy, which always presents its
            # certificate; a peer without one is refused in the handshake.
            ctx.verify_mode = ssl.CERT_REQUIRED
        try:
            self._httpd = ThreadingHTTPServer((host, port), _handler(self))
        except OSError as e:
            raise ConfigError(f"actuator.hpa.listen {host}:{port} cannot be bound: {e.strerror or e}") from e
        self._httpd.daemon_threads = True
        # The handshake runs in the request's own thread, under its time-out (Handler.handle): done
        # in accept(), as wrap_socket does by default, one caller that connected and sent nothing
        # held the server's only accepting thread, and the HPA's requests all timed out behind it
        # (tests/fuzz/test_hostile_callers.py).
        self._httpd.socket = ctx.wrap_socket(
            self._httpd.socket, server_side=True, do_handshake_on_connect=False
        )
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="external-metrics", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread.is_alive():
            self._thread.join(5)

    # --- request handling (server threads) ------------------------------------------------

    def authenticate(self, peer_cert: dict[str, Any] | None, headers: Mapping[str, str]) -> str | None:
        """The requesting user's name, or None when the caller is not the front proxy."""
        if self.client_ca_file is None:
            return headers.get("X-Remote-User") or "system:anonymous"
        if not peer_cert:
            return None
        cn = next((v for rdn in peer_cert.get("subject", ()) for k, v in rdn if k == "commonName"), None)
        if self.allowed_names and cn not in self.allowed_names:
            return None
        # The aggregator's availability probe sends no user: the certificate alone admits it.
        return headers.get("X-Remote-User") or "system:anonymous"

    def answer(self, path: str, query: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for a GET of ``path?query``."""
        if path in (_PREFIX, _PREFIX + "/"):
            return 200, self._resource_list()
        parts = path[len(_PREFIX) :].strip("/").split("/") if path.startswith(_PREFIX + "/") else []
        if len(parts) != 3 or parts[0] != "namespaces":
            return 404, _status(404, "NotFound", f"{path} is not served")
        namespace, metric = parts[1], parts[2]
        if metric not in (self.metric_name, SIGNAL_METRIC):
            return 404, _status(
                404,
                "NotFound",
                f"external metric {metric!r} is not served (served: {self.metric_name}, {SIGNAL_METRIC})",
            )
        if namespace != self.namespace:
            return 404, _status(
                404,
                "NotFound",
                f"llmscale publishes {self.target} in namespace {self.namespace}, not {namespace}",
            )
        try:
            selector = parse_label_selector(parse_qs(query).get("labelSelector", [""])[0])
        except ValueError as e:
            return 400, _status(400, "BadRequest", str(e))
        snap = self.snapshot()
        if snap.desired_replicas is None:
            # Never a made-up 0: the HPA holds its current replicas on an error.
            return 503, _status(503, "ServiceUnavailable", f"{self.target}: no decision yet")
        stamp = _rfc3339(snap.time_s)
        items: list[dict[str, Any]] = []
        if metric == self.metric_name:
            labels = {"target": self.target}
            items.append(self._item(metric, labels, float(snap.desired_replicas), stamp))
        else:
            for name, value in sorted(snap.signals.items()):
                if math.isfinite(value):
                    items.append(self._item(metric, {"target": self.target, "signal": name}, value, stamp))
        items = [i for i in items if all(i["metricLabels"].get(k) == v for k, v in selector.items())]
        return 200, {
            "kind": "ExternalMetricValueList",
            "apiVersion": GROUP_VERSION,
            "metadata": {},
            "items": items,
        }

    @staticmethod
    def _item(metric: str, labels: dict[str, str], value: float, stamp: str) -> dict[str, Any]:
        return {
            "metricName": metric,
            "metricLabels": labels,
            "timestamp": stamp,
            "value": format_quantity(value),
        }

    def _resource_list(self) -> dict[str, Any]:
        resources = [
            {
                "name": name,
                "singularName": "",
                "namespaced": True,
                "kind": "ExternalMetricValueList",
                "verbs": ["get"],
            }
            for name in (self.metric_name, SIGNAL_METRIC)
        ]
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": GROUP_VERSION,
            "resources": resources,
        }


def _handler(server: ExternalMetricsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = CALLER_TIMEOUT_S  # each read and write of the connection, see CALLER_TIMEOUT_S

        def handle(self) -> None:
            if isinstance(self.connection, ssl.SSLSocket):
                try:
                    self.connection.do_handshake()
                except (OSError, ssl.SSLError) as e:  # a time-out, a plain-text caller, a bad certificate
                    log.debug("external metrics: TLS handshake with %s failed: %s", self.client_address, e)
                    return
            super().handle()

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path in ("/healthz", "/livez", "/readyz"):
                self._send(200, b"ok", "text/plain; charset=utf-8")
                return
            peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
            user = server.authenticate(peer, {"X-Remote-User": self.headers.get("X-Remote-User", "")})
            if user is None:
                body = _status(401, "Unauthorized", "the caller is not the API server's front proxy")
                self._send(401, json.dumps(body).encode())
                return
            code, doc = server.answer(url.path, url.query)
            self._send(code, json.dumps(doc).encode())

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("external metrics: " + format, *args)

    return Handler
