"""One emulated replica's ``/metrics`` page: vLLM's names and buckets plus the DCGM exporter's fields.

The numbers are the ones the backtest reads: :class:`SimMetricSource` computes
them for a fleet (the DCGM fields with :mod:`llmscale.sim.gpu_counters`, so
emulated and simulated counters agree by construction), and each replica gets
its own source over a one-replica view of the fleet. That keeps a scrape O(1)
in the fleet size and gives every replica its own averaging window for the
DCGM utilisation gauges (the time since that replica's previous scrape, as a
sampling exporter would).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from llmscale.metrics.names import VllmMetric as V
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.sim.gpu_counters import DCGM_HELP
from llmscale.sim.replica import Replica
from llmscale.types import ReplicaView

__all__ = ["ReplicaCollector", "render_metrics"]

#: Families vLLM exports as counters (their names carry ``_total``, as metrics/names.py spells them).
_COUNTERS = frozenset({V.PREEMPTIONS, V.PROMPT_TOKENS, V.GENERATION_TOKENS})

_HELP = {
    V.RUNNING: "Number of requests in model execution batches.",
    V.WAITING: "Number of requests waiting to be processed.",
    V.KV_USAGE: "KV-cache usage. 1 means 100 percent usage.",
    V.KV_USAGE_OLD: "GPU KV-cache usage (pre-0.11 name). 1 means 100 percent usage.",
    V.PREEMPTIONS: "Cumulative number of preemptions from the engine.",
    V.PROMPT_TOKENS: "Number of prefill tokens processed.",
    V.GENERATION_TOKENS: "Number of generation tokens processed.",
    V.TTFT: "Histogram of time to first token in seconds.",
    V.E2E: "Histogram of end-to-end request latency in seconds.",
    V.ITL: "Histogram of inter-token latency in seconds.",
    V.ITL_OLD: "Histogram of time per output token in seconds (pre-0.11 name).",
    V.TPOT: "Histogram of the per-request mean time per output token in seconds.",
    V.QUEUE_TIME: "Histogram of time spent waiting in the queue in seconds.",
    **DCGM_HELP,  # dcgm-exporter's help strings, next to the formulas that produce the values
}


def _le(bound: float) -> str:
    """A bucket's ``le`` label as Prometheus writes it (``+Inf``, ``0.5``, ``1.0``)."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class _OneReplicaFleet:
    """The slice of :class:`Fleet` that SimMetricSource reads, holding a single replica."""

    def __init__(self, fleet: Fleet, replica: Replica) -> None:
        self.perf = fleet.perf
        self.config = fleet.config
        self.replicas = [replica]
        self.spec_replicas = 1
        self.gateway: deque[Any] = deque()
        self._r = replica

    def sync_all(self, now: float) -> None:
        self._r.sync(now)

    def replicas_view(self) -> tuple[ReplicaView, ...]:
        r = self._r
        return (ReplicaView(r.name, r.phase, r.phase_since_s, r.created_s),)


class ReplicaCollector(Collector):
    """Yields one replica's families at the emulator's current simulated time (``now_s()``).

    Pre: the fleet has been run up to ``now_s()`` before a scrape (the server
    advances the emulator first), so the counters are those of the present.
    """

    def __init__(
        self, fleet: Fleet, replica: Replica, served_model: str, gpu_model: str, now_s: Callable[[], float]
    ) -> None:
        view = cast(Fleet, _OneReplicaFleet(fleet, replica))  # duck-typed: only the attributes read
        self._source = SimMetricSource(view)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._name = replica.name
        self._now_s = now_s
        self._vllm_labels = (("model_name", served_model), ("engine", "0"))
        # dcgm-exporter labels each series with the GPU index, device, UUID, model and host;
        # one series for GPU 0 (all TP ranks of a replica run the same batch).
        self._dcgm_labels = (
            ("gpu", "0"),
            ("UUID", f"GPU-emulated-{replica.name}"),
            ("device", "nvidia0"),
            ("modelName", gpu_model),
            ("Hostname", replica.name),
        )

    def collect(self) -> Iterator[Metric]:
        obs = self._source.observe(self._now_s())
        if not obs.replicas or not obs.replicas[0].ok:
            return  # Pending: no container, nothing to expose
        sample = obs.replicas[0]
        for name, value in sample.values.items():
            dcgm = name.startswith("DCGM_")
            labels = self._dcgm_labels if dcgm else self._vllm_labels
            keys = [k for k, _ in labels]
            family: GaugeMetricFamily | CounterMetricFamily
            doc = _HELP.get(name, f"{name} (DCGM field)" if dcgm else name)
            if name in _COUNTERS:
                family = CounterMetricFamily(name.removesuffix("_total"), doc, labels=keys)
            else:
                family = GaugeMetricFamily(name, doc, labels=keys)
            family.add_metric([v for _, v in labels], value)
            yield family
        keys = [k for k, _ in self._vllm_labels]
        for name, hist in sample.histograms.items():
            h = HistogramMetricFamily(name, _HELP.get(name, name), labels=keys)
            buckets = [(_le(b), c) for b, c in zip(hist.bounds, hist.cumulative, strict=True)]
            h.add_metric([v for _, v in self._vllm_labels], buckets, hist.sum)
            yield h


def render_metrics(collector: ReplicaCollector) -> bytes:
    """The text exposition of one replica (Prometheus format 0.0.4)."""
    return generate_latest(collector.registry)
