"""``compute_signals(window)``: every signal of :data:`llmscale.signals.catalog.SIGNALS` from a window.

Pure: the window in, :class:`Signals` out. The window is indexed once
(:class:`FleetWindow`), then each themed module adds its values:

================  ===================================================================
queues            queue_waiting(_max), queue_per_replica, running(_per_replica), fleet
histograms        TTFT / E2E / ITL P95-P99, queue-time P95 from bucket increases
rates             request/token/preemption rates, request shape, throughput window
kv                KV usage mean / max, growth per step (seed 000 3.1)
gpu               DCGM utilisation, composite, effective VRAM, bandwidth P95, queue entropy
risk              OOM risk (seed 003 3.2)
rhythm            FFT rhythm features and EWMA z-score of the load (seed 003 2.5)
predictors        TTFT P99 predictions (seed 000 3.2, 2.3; seed 003 2.2)
diagnostics       ghost replicas, tenant drift (seed 000 chapter 1, 2.5)
(model drift)     placeholders: the live controller sets them (``controller/drift.py``)
================  ===================================================================

The values are computed when first read, a group of related signals at a
time (:class:`SignalValues`): a policy reads two to six of the 45 signals, and
the controller ticks every 2 s for Knative, so computing the whole catalogue
each tick (~13 ms of CPU for 10-15 replicas on a shared 2-core VM) cost more
than the simulation it controls. What is read is the same value an eager computation
gives (``tests/signals/test_signals_fleet.py::test_lazy_values_equal_eager``);
iterating ``Signals.values`` computes every group, in the catalogue's usual order.

"Serving" replicas are READY ones; Pending, Loading, Warmup, Draining and
Gone replicas are not. A serving replica whose scrape failed is *unknown*:
gauges average (or sum) over the known ones and ``unknown_replicas`` counts
the rest; it is never read as zero load.

Cost of the whole catalogue: 500 replicas x 20 observations at a 15 s tick,
~80 ms on a shared 2-core VM where ``sum(range(10**6))`` takes 76 ms, i.e.
~20-25 ms on a laptop core; ``tests/signals/test_signals_speed.py`` holds it
under 5x that reference. The window is indexed once (one pass over the samples)
and every fleet sum over replicas without a restart is a column sum, not a loop per sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from llmscale.metrics.names import DCGM, VLLM
from llmscale.signals.arrivals import arrival_dispersion_signal
from llmscale.signals.catalog import GROUPS, SIGNALS
from llmscale.signals.diagnostics import ghost_replicas, tenant_drift
from llmscale.signals.gpu import bw_saturation_p95, gpu_gauge_signals, queue_entropy
from llmscale.signals.histograms import WindowHistogram, family_signals, family_values, window_histogram
from llmscale.signals.kv import kv_growth_signal, kv_usage_signals
from llmscale.signals.lengths import output_length_signals
from llmscale.signals.predictors import coupled_prediction, decay_prediction, queue_prediction
from llmscale.signals.queues import queue_signals
from llmscale.signals.rates import counter_rate_signals, step_rate_signals
from llmscale.signals.rhythm import dominant_rhythm_signals, load_series, zscore_signals
from llmscale.signals.risk import oom_signals
from llmscale.signals.window import TTFT, FleetWindow
from llmscale.types import Observation, Phase, ReplicaSample, Signals, SignalValue

__all__ = [
    "PER_POD_METRICS",
    "PerPodValues",
    "SignalValues",
    "compute_signals",
    "window_signals",
]

#: per-replica series policies may read per pod (HPA-style)
PER_POD_METRICS: tuple[str, ...] = tuple(
    n
    for n in (
        DCGM.GPU_UTIL,
        DCGM.MEM_COPY_UTIL,
        DCGM.GR_ENGINE_ACTIVE,
        DCGM.SM_ACTIVE,
        DCGM.DRAM_ACTIVE,
        VLLM.waiting,
        VLLM.running,
        VLLM.kv_usage,
    )
    if n is not None
)


def compute_signals(window: Sequence[Observation], previous: FleetWindow | None = None) -> Signals:
    """Signals at the newest observation of ``window`` (oldest first). Pre: window non-empty.

    ``previous``: the previous tick's indexed window (a ``Signals``' values hold theirs as
    :attr:`SignalValues.window`); what the two windows share is carried rather than
    recomputed (:meth:`FleetWindow.build`), with the same values.
    Post: ``values`` holds every name of the catalogue, each a SignalValue
    (``value`` None with a note when it cannot be computed).
    """
    return window_signals(FleetWindow.build(window, previous))


def window_signals(fw: FleetWindow) -> Signals:
    """:func:`compute_signals` over an indexed window."""
    obs = fw.newest
    return Signals(
        time_s=obs.time_s,
        fleet=obs.fleet,
        values=SignalValues(fw),
        per_replica=PerPodValues(obs.replicas),
        unknown_replicas=fw.unknown,
    )


_NOT_COMPUTED = SignalValue(None, "not computed")
#: the model-drift ratios need the deployment's step-time model, which only the live controller
#: has (``controller/drift.py`` sets them over these)
_MODEL_DRIFT: Mapping[str, SignalValue] = {
    name: SignalValue(None, "computed by the live controller against its step-time model")
    for name in GROUPS["model_drift"]
}


def _family(family: str) -> Callable[[SignalValues], Mapping[str, SignalValue]]:
    if family == "ttft":
        # The decayed predictor's TTFT histogram (with its steps) has the same totals: reuse it
        # when it was built first, as it is when the whole catalogue is read.
        return lambda v: (
            family_values("ttft", v._ttft_steps) if v._has_ttft_steps else family_signals(v.window, "ttft")
        )
    return lambda v: family_signals(v.window, family)


def _ttft_with_steps(v: SignalValues) -> dict[str, SignalValue]:
    fw = v.window
    ttft = window_histogram(fw, TTFT, per_step=True)
    v._ttft_steps, v._has_ttft_steps = ttft, True
    return {"p99_predicted_decay_s": decay_prediction(ttft, len(fw.observations) - 1)}


#: Each group of the catalogue (:data:`~llmscale.signals.catalog.GROUPS`, which names its
#: signals), as a function of the lazy values (for its window and the other groups' values) that
#: fills them. A group is computed as a whole: the names in it share their work.
_COMPUTE: dict[str, Callable[[SignalValues], Mapping[str, SignalValue]]] = {
    "queues": lambda v: queue_signals(v.window),
    **{family: _family(family) for family in ("ttft", "e2e", "itl", "tpot", "queue_time")},
    "counter_rates": lambda v: counter_rate_signals(v.window)[0],
    "step_rates": lambda v: step_rate_signals(v.window),
    "output_lengths": lambda v: output_length_signals(v.window),
    "arrival_dispersion": lambda v: {"arrival_dispersion": arrival_dispersion_signal(v.window)},
    "kv_usage": lambda v: kv_usage_signals(v.window),
    "kv_growth": lambda v: {"kv_growth_pct_per_step": kv_growth_signal(v.window)},
    "gpu": lambda v: gpu_gauge_signals(v.window),
    "bw_saturation": lambda v: {"bw_saturation_p95": bw_saturation_p95(v.window)},
    "queue_entropy": lambda v: {"queue_entropy": queue_entropy(v.window)},
    "oom": lambda v: oom_signals(v.window),
    "zscore": lambda v: zscore_signals(load_series(v.window)),
    "rhythm": lambda v: dominant_rhythm_signals(load_series(v.window)),
    "p99_decay": _ttft_with_steps,
    "p99_queue": lambda v: {"p99_predicted_queue_s": queue_prediction(v)},
    "p99_coupled": lambda v: {"p99_predicted_coupled_s": coupled_prediction(v)},
    "ghost": lambda v: {"ghost_replicas": ghost_replicas(v.window)},
    "tenant_drift": lambda v: {"tenant_drift": tenant_drift(v.window)},
    "model_drift": lambda v: _MODEL_DRIFT,
}

#: signal name -> its group's function
_GROUP_OF: dict[str, Callable[[SignalValues], Mapping[str, SignalValue]]] = {
    name: _COMPUTE[signal.group] for name, signal in SIGNALS.items()
}
#: the names of the queue group, whose order depends on the data (see ``queue_signals``)
_QUEUE_NAMES = GROUPS["queues"]
#: every other name, in the order an eager computation inserts them: the catalogue's
_ORDER_AFTER_QUEUES: tuple[str, ...] = tuple(n for n in SIGNALS if n not in _QUEUE_NAMES)


class SignalValues(Mapping[str, SignalValue]):
    """The catalogue over one indexed window, each group of signals computed when first read.

    Behaves as a read-only dict holding every name of :data:`SIGNALS`; the value
    of a name is the same whether it is read alone or after the whole catalogue.
    """

    __slots__ = ("_cache", "_has_ttft_steps", "_keys", "_ttft_steps", "window")

    #: the indexed window every value is computed from
    window: FleetWindow

    def __init__(self, window: FleetWindow) -> None:
        self.window = window
        self._cache: dict[str, SignalValue] = {}
        self._keys: tuple[str, ...] | None = None
        #: the TTFT window histogram with its per-step increases, once built (it may be None)
        self._ttft_steps: WindowHistogram | None = None
        self._has_ttft_steps = False

    def __getitem__(self, name: str) -> SignalValue:
        v = self._cache.get(name)
        if v is not None:
            return v
        group = _GROUP_OF.get(name)
        if group is None:
            if name in SIGNALS:  # a contract gap must read as invalid, never as a KeyError in a policy
                return _NOT_COMPUTED
            raise KeyError(name)
        self._cache.update(group(self))
        return self._cache[name]

    def __contains__(self, name: object) -> bool:
        return name in SIGNALS or name in _GROUP_OF

    def __iter__(self) -> Iterator[str]:
        if self._keys is None:
            # Iterating reads every value: the TTFT histogram with steps first serves both groups.
            self["p99_predicted_decay_s"]
            self["queue_waiting"]  # the queue group, whose order depends on the data (queue_signals)
            # Its names entered the cache together, in queue_signals' order.
            first = [n for n in self._cache if n in _QUEUE_NAMES]
            seen = set(first)
            rest = [n for n in _ORDER_AFTER_QUEUES if n not in seen]
            seen.update(rest)
            self._keys = (*first, *rest, *(n for n in SIGNALS if n not in seen))
        return iter(self._keys)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"SignalValues({dict(self.items())!r})"


class PerPodValues(Mapping[str, Mapping[str, float]]):
    """Per pod, as HPA sees pods: Pending pods are ignored, terminating pods skipped;
    a running pod without a sample is present with no values (HPA's "missing").

    Built on first read: most policies never read it.
    """

    __slots__ = ("_pods", "_samples")

    def __init__(self, samples: tuple[ReplicaSample, ...]) -> None:
        self._samples = samples
        self._pods: dict[str, Mapping[str, float]] | None = None

    def _dict(self) -> dict[str, Mapping[str, float]]:
        pods = self._pods
        if pods is None:
            pods = {}
            for s in self._samples:
                if s.phase in (Phase.NODE_PENDING, Phase.PENDING, Phase.DRAINING, Phase.GONE):
                    continue
                pods[s.replica] = {k: s.values[k] for k in PER_POD_METRICS if k in s.values} if s.ok else {}
            self._pods = pods
        return pods

    def __getitem__(self, pod: str) -> Mapping[str, float]:
        return self._dict()[pod]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __repr__(self) -> str:
        return f"PerPodValues({self._dict()!r})"
