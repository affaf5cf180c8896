"""The live controller's own endpoints: ``/metrics``, ``/healthz``, ``/readyz``.

Metric names and labels are a contract with ``deploy/`` (rules, dashboards): see
``docs/notes/live-controller-contracts.md``. They live in their own CollectorRegistry, so
two controllers in one process (tests) never clash, and the process's default collectors
stay out of the contract.

The server is the stdlib ThreadingHTTPServer in one daemon thread: a scrape every few
seconds needs nothing more, and it stops cleanly (``shutdown`` then ``server_close``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from llmscale.types import FleetView

__all__ = ["CONTRACT_METRICS", "ControllerMetrics", "ControllerServer"]

log = logging.getLogger(__name__)

#: every name of the contract, as exposed (counters with their ``_total`` sample name)
CONTRACT_METRICS: tuple[str, ...] = (
    "llmscale_desired_replicas",
    "llmscale_proposed_replicas",
    "llmscale_current_replicas",
    "llmscale_spec_replicas",
    "llmscale_signal_value",
    "llmscale_decisions_total",
    "llmscale_guard_actions_total",
    "llmscale_scale_actions_total",
    "llmscale_tick_duration_seconds",
    "llmscale_scrape_errors_total",
    "llmscale_unknown_replicas",
    "llmscale_actuation_errors_total",
    "llmscale_last_tick_timestamp_seconds",
    "llmscale_shadow_desired_replicas",
)

#: how long one read or write of a caller's connection may wait: a caller that connects and sends
#: nothing (or one byte a minute) is dropped after this, not holding its thread for the process's life
CALLER_TIMEOUT_S = 10.0

_PHASES = ("node_pending", "pending", "loading", "warmup", "ready", "draining")
ACTUATION_REASONS = ("conflict", "server_error", "forbidden", "other")


class ControllerMetrics:
    """The contract's metrics in a private registry, with setters the live loop calls per tick."""

    def __init__(self, target: str, source_kind: str) -> None:
        self.target = target
        self.source_kind = source_kind
        #: every valid signal of the last tick (``observe_signals``), for the external metrics API
        self.last_signals: dict[str, float] = {}
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.desired = Gauge(
            "llmscale_desired_replicas", "Replicas decided, after guards", ["target", "policy"], registry=r
        )
        self.proposed = Gauge(
            "llmscale_proposed_replicas",
            "The policy's own answer, before guards",
            ["target", "policy"],
            registry=r,
        )
        self.current = Gauge(
            "llmscale_current_replicas",
            "Replicas of the target by lifecycle phase",
            ["target", "phase"],
            registry=r,
        )
        self.spec = Gauge("llmscale_spec_replicas", "The target's scale spec", ["target"], registry=r)
        self.signal = Gauge(
            "llmscale_signal_value", "Every valid signal of the last tick", ["signal"], registry=r
        )
        self.decisions = Counter(
            "llmscale_decisions",
            "Decisions by policy and the rule that fired",
            ["policy", "rule"],
            registry=r,
        )
        self.guard_actions = Counter(
            "llmscale_guard_actions", "Decisions a guard changed, by the first guard", ["guard"], registry=r
        )
        self.scale_actions = Counter(
            "llmscale_scale_actions", "Scale requests sent to the target", ["direction"], registry=r
        )
        self.tick_duration = Histogram(
            "llmscale_tick_duration_seconds",
            "Wall time of one tick: observe, signals, decide, guard, actuate",
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        )
        self.scrape_errors = Counter(
            "llmscale_scrape_errors",
            "Replica observations that brought no data (failed or missing scrapes)",
            ["source"],
            registry=r,
        )
        self.unknown = Gauge(
            "llmscale_unknown_replicas", "Serving replicas whose load is unknown this tick", registry=r
        )
        self.actuation_errors = Counter(
            "llmscale_actuation_errors", "Failed scale requests by reason", ["reason"], registry=r
        )
        self.last_tick = Gauge(
            "llmscale_last_tick_timestamp_seconds", "When the last tick completed (epoch s)", registry=r
        )
        self.shadow_desired = Gauge(
            "llmscale_shadow_desired_replicas",
            "The shadow policy's decision after guards",
            ["policy"],
            registry=r,
        )
        self.tick_errors = Counter(
            "llmscale_tick_errors",
            "Ticks that failed with an unexpected error (the loop went on)",
            registry=r,
        )
        self.leader = Gauge(
            "llmscale_leader",
            "1 while this replica holds the leader Lease and may scale, else 0 (leader_election only)",
            registry=r,
        )
        # Zero-valued series from the start, so rate() and absent() work before the first event.
        self.scrape_errors.labels(source=source_kind)
        for reason in ACTUATION_REASONS:
            self.actuation_errors.labels(reason=reason)
        for direction in ("up", "down"):
            self.scale_actions.labels(direction=direction)

    def observe_fleet(self, fleet: FleetView) -> None:
        self.spec.labels(target=self.target).set(fleet.spec_replicas)
        counts = fleet.as_dict()
        for phase in _PHASES:
            # as_dict leaves node_pending out while it is 0; the gauge reads 0 then, not absent
            self.current.labels(target=self.target, phase=phase).set(counts.get(phase, 0))

    def observe_signals(self, values: Mapping[str, float | None]) -> None:
        """Replace the signal gauges: a signal invalid this tick disappears rather than going stale."""
        self.signal.clear()
        # One dict assigned whole: the external metrics server's threads read it without a lock.
        self.last_signals = {name: v for name, v in values.items() if v is not None}
        for name, v in values.items():
            if v is not None:
                self.signal.labels(signal=name).set(v)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class ControllerServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0: a free one)."""

    def __init__(
        self,
        host: str,
        port: int,
        metrics: ControllerMetrics,
        ready: Callable[[], bool],
        healthy: Callable[[], bool] | None = None,
    ) -> None:
        """``healthy`` answers ``/healthz`` (None: always healthy while serving); ``ready`` ``/readyz``."""
        self._host = host
        self._port = port
        self._metrics = metrics
        self._ready = ready
        self._healthy = healthy
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound address; pre: started."""
        if self._httpd is None:
            raise RuntimeError("server not started")
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        handler = _handler(self._metrics, self._ready, self._healthy)
        httpd = ThreadingHTTPServer((self._host, self._port), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="llmscale-http", daemon=True)
        self._thread.start()
        log.info("serving /metrics, /healthz, /readyz on %s:%d", *self.address)

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ControllerServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler(
    metrics: ControllerMetrics, ready: Callable[[], bool], healthy: Callable[[], bool] | None
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = CALLER_TIMEOUT_S  # see CALLER_TIMEOUT_S

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics.render(), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                # Liveness: a loop that has not decided for many ticks (a hung tick) is restarted.
                ok = healthy is None or healthy()
                self._send(200 if ok else 503, b"ok\n" if ok else b"no decision for too long\n")
            elif path == "/readyz":
                ok = ready()
                self._send(200 if ok else 503, b"ready\n" if ok else b"no recent tick\n")
            else:
                self._send(404, b"not found\n")

        def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # A scrape every 15 s would flood stderr; keep request lines at debug level.
            log.debug("%s " + format, self.address_string(), *args)

    return Handler
