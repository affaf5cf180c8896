"""The front door as an activator: the requests it holds while no replica is ready, on its ``/metrics``.

With every replica gone (a fleet scaled to zero) or still starting, the front door keeps each
request it is given (the simulator's gateway queue) until a replica is ready, or until the
request's time-out. No engine exists to count those requests in ``vllm:num_requests_waiting``,
so the front door counts them itself under :attr:`llmscale.metrics.names.ACTIVATOR.REQUESTS_HELD`
(Knative's activator plays the same part in front of a revision at zero). A controller reading
that gauge sees the demand that should start the first replica: one request held reads 1, where
the replicas' pages (there are none) read nothing at all.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmscale.emulate.engine import Emulator
from llmscale.metrics.names import ACTIVATOR

__all__ = ["ActivatorCollector", "render_activator"]


class ActivatorCollector(Collector):
    """The front door's families, read from the emulator at scrape time."""

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def collect(self) -> list[Metric]:
        held = GaugeMetricFamily(
            ACTIVATOR.REQUESTS_HELD,
            "Requests held at the front door until a replica is ready (none is ready now).",
        )
        held.add_metric([], float(len(self.emu.fleet.gateway)))
        return [held]


def render_activator(collector: ActivatorCollector) -> bytes:
    """The front door's text exposition (Prometheus format 0.0.4); the caller advances the fleet first."""
    return generate_latest(collector.registry)
