"""One emulated replica's ``/metrics`` page: vLLM's names and buckets plus the DCGM exporter's fields.

The numbers are the ones the backtest reads: :class:`SimMetricSource` computes
them for a fleet (the DCGM fields with :mod:`llmscale.sim.gpu_counters`, so
emulated and simulated counters agree by construction), and each replica gets
its own source over a one-replica view of the fleet. That keeps a scrape O(1)
in the fleet size and gives every replica its own averaging window for the
DCGM utilisation gauges (the time since that replica's previous scrape, as a
sampling exporter would).

On top of those, the families only the emulator exports (:meth:`ReplicaCollector.engine_families`),
with vLLM V1's names, types, labels and buckets (vllm/v1/metrics/loggers.py):
``vllm:request_success_total{finished_reason}`` (counter), ``vllm:request_prompt_tokens``
and ``vllm:request_generation_tokens`` (histograms, 1-2-5 buckets to max_model_len),
``vllm:iteration_tokens_total`` (histogram, 1 .. 16384), ``vllm:cache_config_info``
(a gauge at 1 whose labels are the cache settings, vLLM's stand-in for an info metric),
the prefix-cache counters ``vllm:prefix_cache_queries_total``/``_hits_total``, the
per-request phase histograms ``vllm:request_{prefill,decode,inference}_time_seconds``
(request-latency buckets) and the parameter histograms ``vllm:request_params_n`` and
``vllm:request_params_max_tokens`` (emulate/request_stats.py says what each counts).

Which of vLLM's names a page carries follows the release played (emulate/versions.py):
a 0.10 page also has the names deprecated in 0.9 and the old per-token latency name,
a 0.11 page only the current ones.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from llmscale.emulate.request_stats import FINISHED_REASONS, RequestStats
from llmscale.emulate.versions import DEFAULT_VLLM_VERSION, VllmVersion, parse_vllm_version
from llmscale.metrics.names import DCGM, DERIVED
from llmscale.metrics.names import VllmMetric as V
from llmscale.signals.gpu import BW_WINDOW_S, percentile_linear
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.sim.gpu_counters import DCGM_HELP
from llmscale.sim.histogram import BucketHistogram
from llmscale.sim.replica import Replica
from llmscale.types import ReplicaSample, ReplicaView

__all__ = ["CacheConfigInfo", "ReplicaCollector", "render_metrics"]

#: Families vLLM exports as counters (their names carry ``_total``, as metrics/names.py spells them).
_COUNTERS = frozenset({V.PREEMPTIONS, V.PROMPT_TOKENS, V.GENERATION_TOKENS})
#: the release played when a collector is given none
_DEFAULT_VERSION = parse_vllm_version(DEFAULT_VLLM_VERSION)

#: histograms the simulated replica keeps that the emulator exports from its own request stats
_ENGINE_HISTOGRAMS = frozenset({V.REQUEST_GENERATION_TOKENS, V.REQUEST_PROMPT_TOKENS})

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
    V.REQUEST_SUCCESS: "Count of successfully processed requests.",
    V.REQUEST_PROMPT_TOKENS: "Number of prefill tokens processed.",
    V.REQUEST_GENERATION_TOKENS: "Number of generation tokens processed.",
    V.ITERATION_TOKENS: "Histogram of number of tokens per engine_step.",
    V.CACHE_CONFIG_INFO: "Information of the LLMEngine CacheConfig",
    **DCGM_HELP,  # dcgm-exporter's help strings, next to the formulas that produce the values
    DERIVED.DRAM_ACTIVE_P95_60S: "P95 of DCGM_FI_PROF_DRAM_ACTIVE sampled every 100 ms over the last 60 s.",
    V.ENGINE_SLEEP_STATE: "Engine sleep state; awake = 1 serving, weights_offloaded = 1 in level-1 sleep.",
    V.PREFIX_CACHE_QUERIES: "Prefix cache queries, in terms of number of queried tokens.",
    V.PREFIX_CACHE_HITS: "Prefix cache hits, in terms of number of cached tokens.",
    V.PREFIX_CACHE_QUERIES_OLD: "GPU prefix cache queries (deprecated name of vllm:prefix_cache_queries).",
    V.PREFIX_CACHE_HITS_OLD: "GPU prefix cache hits (deprecated name of vllm:prefix_cache_hits).",
    V.PREFILL_TIME: "Histogram of time spent in PREFILL phase for request.",
    V.DECODE_TIME: "Histogram of time spent in DECODE phase for request.",
    V.INFERENCE_TIME: "Histogram of time spent in RUNNING phase for request.",
    V.PARAMS_N: "Histogram of the n request parameter.",
    V.PARAMS_MAX_TOKENS: "Histogram of the max_tokens request parameter.",
}


@dataclass(frozen=True)
class CacheConfigInfo:
    """The KV-cache settings a replica runs with, as ``vllm:cache_config_info`` labels them.

    vLLM writes every field of its CacheConfig as a label (``metrics_info()``: each
    value as ``str()`` gives it, so None reads "None" and booleans "True"/"False"),
    plus ``engine``. The emulator writes the fields that describe what it
    simulates: 16-token blocks, the pool from gpu_memory_utilization, no
    prefix caching, no CPU swap or offload.
    """

    block_size: int
    gpu_memory_utilization: float
    num_gpu_blocks: int
    #: vLLM's ``--kv-cache-dtype`` as given (``auto``, ``fp8``, ...): the label vLLM writes
    cache_dtype: str = "auto"

    def labels(self) -> dict[str, str]:
        return {
            "block_size": str(self.block_size),
            "cache_dtype": self.cache_dtype,
            "cpu_offload_gb": "0",
            "enable_prefix_caching": "False",
            "gpu_memory_utilization": str(self.gpu_memory_utilization),
            "is_attention_free": "False",
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(self.num_gpu_blocks),
            "num_gpu_blocks_override": "None",
            "sliding_window": "None",
            "engine": "0",
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
        #: a replica's page has no arrivals counter (vLLM's pages count what the engine saw):
        #: the exporter reads none from a view without the fleet's outcome counts
        self.counts: tuple[int, ...] | None = None
        self.unresolved = 0
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
        self,
        fleet: Fleet,
        replica: Replica,
        served_model: str,
        gpu_model: str,
        now_s: Callable[[], float],
        *,
        stats: Callable[[], RequestStats] | None = None,
        cache_info: CacheConfigInfo | None = None,
        sleep_state: Callable[[], bool] | None = None,
        version: VllmVersion | None = None,
    ) -> None:
        """``sleep_state``: whether the replica sleeps now (emulate's sleep mode), exported as vLLM's
        ``vllm:engine_sleep_state``; None: not exported (vLLM without sleep mode). ``version``: the
        vLLM release whose names the page carries (default: emulate/versions.py's)."""
        view = cast(Fleet, _OneReplicaFleet(fleet, replica))  # duck-typed: only the attributes read
        # sub_tick: the replica's HBM bytes per 100 ms of its own (simulated) time, from every
        # span of iterations it runs, for the 60 s P95 gauge below
        self._source = SimMetricSource(view, sub_tick=True)
        #: the last 60 s of 100 ms DRAM_ACTIVE samples, (end time, value), oldest first
        self._bw: deque[tuple[float, float]] = deque()
        self._replica = replica
        self._stats = stats
        self._cache_info = cache_info
        self._sleep_state = sleep_state
        self._version = version or _DEFAULT_VERSION
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
        if self._sleep_state is not None:
            yield self._sleep_family(self._sleep_state())
        obs = self._source.observe(self._now_s())
        if not obs.replicas or not obs.replicas[0].ok:
            return  # Pending: no container, nothing to expose
        sample = obs.replicas[0]
        values = {**sample.values, DERIVED.DRAM_ACTIVE_P95_60S: self._bw_p95(sample, obs.time_s)}
        exports = self._version.exports
        for name, value in values.items():
            if not exports(name):
                continue
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
            if not exports(name):
                continue
            if name in _ENGINE_HISTOGRAMS and self._stats is not None:
                continue  # engine_families exports the emulator's own count (aborted requests too)
            h = HistogramMetricFamily(name, _HELP.get(name, name), labels=keys)
            buckets = [(_le(b), c) for b, c in zip(hist.bounds, hist.cumulative, strict=True)]
            h.add_metric([v for _, v in self._vllm_labels], buckets, hist.sum)
            yield h
        yield from self.engine_families()

    def _sleep_family(self, asleep: bool) -> GaugeMetricFamily:
        """vLLM's one-hot ``vllm:engine_sleep_state``: awake, or weights_offloaded (level 1; the
        emulator sleeps at level 1 only, so discard_all stays 0)."""
        keys = [k for k, _ in self._vllm_labels]
        values = [v for _, v in self._vllm_labels]
        family = GaugeMetricFamily(
            V.ENGINE_SLEEP_STATE, _HELP[V.ENGINE_SLEEP_STATE], labels=[*keys, "sleep_state"]
        )
        for state, on in (("awake", not asleep), ("weights_offloaded", asleep), ("discard_all", False)):
            family.add_metric([*values, state], 1.0 if on else 0.0)
        return family

    def _bw_p95(self, sample: ReplicaSample, now_s: float) -> float:
        """Seed 004's bandwidth saturation of this replica: the P95 of its 100 ms samples in 60 s.

        The samples come from the simulated replica's own iterations, not from a
        timer: the emulator's clock is the simulator's, so 100 ms of it hold the
        bytes of exactly the iterations that ran in them, however late the scrape.
        A replica up for less than 60 s has fewer samples (10 a second so far).
        Worked: 570 samples at 0.5 and 30 at 0.95 -> 0.5225 (numpy's linear rule).
        """
        bw = self._bw
        series = sample.sub_tick.get(DCGM.DRAM_ACTIVE)
        if series is not None:
            bw.extend(zip(series.ends_s(), series.values, strict=True))
        cut = now_s - BW_WINDOW_S
        while bw and bw[0][0] <= cut:
            bw.popleft()
        return percentile_linear([v for _, v in bw], 0.95) if bw else 0.0

    def engine_families(self) -> Iterator[Metric]:
        """The families the backtest's source does not compute (see the module docstring).

        Pre: called right after :meth:`collect` read the sample (the replica is synced to now).
        """
        keys = [k for k, _ in self._vllm_labels]
        values = [v for _, v in self._vllm_labels]
        if self._stats is not None:
            stats = self._stats()
            success = CounterMetricFamily(
                V.REQUEST_SUCCESS.removesuffix("_total"),
                _HELP[V.REQUEST_SUCCESS],
                labels=[*keys, "finished_reason"],
            )
            for reason in FINISHED_REASONS:
                success.add_metric([*values, reason], float(stats.finished[reason]))
            yield success
            yield _histogram(V.REQUEST_PROMPT_TOKENS, keys, values, stats.prompt_tokens)
            yield _histogram(V.REQUEST_GENERATION_TOKENS, keys, values, stats.generation_tokens)
            yield _histogram(V.PARAMS_N, keys, values, stats.params_n)
            yield _histogram(V.PARAMS_MAX_TOKENS, keys, values, stats.max_tokens)
            yield _histogram(V.PREFILL_TIME, keys, values, stats.prefill_s)
            yield _histogram(V.DECODE_TIME, keys, values, stats.decode_s)
            yield _histogram(V.INFERENCE_TIME, keys, values, stats.inference_s)
            for name, count in (
                (V.PREFIX_CACHE_QUERIES, stats.prefix_cache_queries),
                (V.PREFIX_CACHE_HITS, stats.prefix_cache_hits),
                (V.PREFIX_CACHE_QUERIES_OLD, stats.prefix_cache_queries),
                (V.PREFIX_CACHE_HITS_OLD, stats.prefix_cache_hits),
            ):
                if self._version.exports(name):
                    counter = CounterMetricFamily(name.removesuffix("_total"), _HELP[name], labels=keys)
                    counter.add_metric(values, float(count))
                    yield counter
        yield _iteration_tokens(keys, values, self._replica)
        if self._cache_info is not None:
            labels = self._cache_info.labels()
            info = GaugeMetricFamily(V.CACHE_CONFIG_INFO, _HELP[V.CACHE_CONFIG_INFO], labels=list(labels))
            info.add_metric(list(labels.values()), 1.0)
            yield info


def _iteration_tokens(keys: list[str], values: list[str], r: Replica) -> HistogramMetricFamily:
    """``vllm:iteration_tokens_total``: the replica's mixed steps (a histogram) plus its decode-only
    steps, which it counts per batch size (a step of b sequences carries b tokens)."""
    mixed = r.hist_mixed_step_tokens
    bounds = mixed.bounds
    counts = mixed.counts
    total = mixed.sum
    for batch, steps in enumerate(r.decode_steps_by_batch):
        if steps:
            counts[bisect.bisect_left(bounds, batch)] += float(steps)
            total += float(batch) * float(steps)
    family = HistogramMetricFamily(V.ITERATION_TOKENS, _HELP[V.ITERATION_TOKENS], labels=keys)
    family.add_metric(
        values, [(_le(b), c) for b, c in zip(bounds, itertools.accumulate(counts), strict=True)], total
    )
    return family


def _histogram(name: str, keys: list[str], values: list[str], h: BucketHistogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, _HELP[name], labels=keys)
    snap = h.snapshot()
    buckets = [(_le(b), c) for b, c in zip(snap.bounds, snap.cumulative, strict=True)]
    family.add_metric(values, buckets, snap.sum)
    return family


def render_metrics(collector: ReplicaCollector) -> bytes:
    """The text exposition of one replica (Prometheus format 0.0.4)."""
    return generate_latest(collector.registry)
