"""Frozen value types that cross layers.

Observation flows from a MetricSource to the signal functions, Signals to a
Policy, a Decision back to the controller and a TickRecord into the decision
log. Units are in the names; ``None`` means "no observation", never zero.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar, Final, Protocol

if TYPE_CHECKING:
    from llmscale.history import RateHistory

__all__ = [
    "Decision",
    "FleetView",
    "Histogram",
    "HistogramView",
    "Mode",
    "NoData",
    "Observation",
    "Phase",
    "ReplicaSample",
    "ReplicaView",
    "SignalValue",
    "Signals",
    "Status",
    "SubTickSeries",
    "TickRecord",
]


class Mode(StrEnum):
    """What the live controller does with a decision (``run``'s ``mode:``): scale the target
    (``apply``), only log it (``dry-run``), or log it beside another autoscaler's (``shadow``).

    Here, not in ``config.py``, because the live loop reads it and must not import the
    configuration edge.
    """

    APPLY = "apply"
    DRY_RUN = "dry-run"
    SHADOW = "shadow"


class Status:
    """A request's final outcome codes (``Final`` ints: the compiled simulator folds them into constants).

    Here, not in ``sim/request.py``, because the SLO test (``slo.py``), the backtest's results and
    the emulator read them too, and none of those may import the simulator's internals.
    """

    IN_FLIGHT: Final = 0
    COMPLETED: Final = 1
    REJECTED: Final = 2
    TIMED_OUT: Final = 3
    KILLED: Final = 4  # in flight on a draining replica when its grace period ran out
    ABORTED: Final = 5  # its client went away (the emulator's HTTP client disconnected): Fleet.abort

    NAMES: ClassVar[tuple[str, ...]] = (
        "in_flight",
        "completed",
        "rejected",
        "timed_out",
        "killed_by_scale_down",
        "aborted",
    )


class Phase(enum.IntEnum):
    """Replica lifecycle. Only READY replicas take new requests."""

    PENDING = 0  # scheduled or waiting for a node; image pull
    LOADING = 1  # process up, loading weights
    WARMUP = 2  # compiling, capturing CUDA graphs, profiling KV memory
    READY = 3
    DRAINING = 4  # no new requests; finishes in-flight work or is killed at the grace deadline
    GONE = 5
    #: vLLM level-1 sleep (standby pool): weights in host memory, GPU still held and charged;
    #: neither capacity nor on the way until woken
    SLEEPING = 6
    #: waiting for a node: unschedulable until the cluster autoscaler (or Karpenter) provisions
    #: one, or until a node of a full pool frees up. On the way, like PENDING, but on the cluster's
    #: time, not the replica's: a GPU node takes minutes (perf/cold_start.py's NODE_PROVISION_S,
    #: 120 s) before the pod's own start even begins. Numbered last so the order of the others
    #: (``phase < Phase.DRAINING``) keeps its meaning; compare with STARTING_PHASES, not with ``<``
    NODE_PENDING = 7

    @property
    def label(self) -> str:
        return self.name.lower()


#: Phases that are capacity on the way: a policy must not scale up again for them.
STARTING_PHASES = (Phase.NODE_PENDING, Phase.PENDING, Phase.LOADING, Phase.WARMUP)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the cluster says about one replica."""

    name: str
    phase: Phase
    since_s: float  # when it entered ``phase``
    created_s: float


@dataclass(frozen=True, slots=True)
class FleetView:
    """Replica counts by lifecycle phase plus the target's desired count (the scale spec)."""

    spec_replicas: int
    pending: int = 0
    loading: int = 0
    warmup: int = 0
    ready: int = 0
    draining: int = 0
    #: replicas waiting for a node (Phase.NODE_PENDING); not part of ``pending``
    node_pending: int = 0

    @property
    def starting(self) -> int:
        """Replicas on the way (node_pending + pending + loading + warmup): asked for, not serving yet.

        A pod waiting 4 minutes for its GPU node is as much on the way as one pulling its image:
        counting it here is what keeps the pending-aware guard and the policies that read
        ``starting`` from asking for it again.
        """
        return self.node_pending + self.pending + self.loading + self.warmup

    @property
    def active(self) -> int:
        """Replicas that are or will become ready (not draining)."""
        return self.starting + self.ready

    @staticmethod
    def from_replicas(spec_replicas: int, replicas: tuple[ReplicaView, ...]) -> FleetView:
        counts = [0] * len(Phase)
        for r in replicas:
            counts[r.phase] += 1
        return FleetView(
            spec_replicas=spec_replicas,
            pending=counts[Phase.PENDING],
            loading=counts[Phase.LOADING],
            warmup=counts[Phase.WARMUP],
            ready=counts[Phase.READY],
            draining=counts[Phase.DRAINING],
            node_pending=counts[Phase.NODE_PENDING],
        )

    def as_dict(self) -> dict[str, int]:
        """The counts by phase label; ``node_pending`` only when some replica waits for a node, so
        the decision log of a fleet that never waits for one reads as it did before that state."""
        out = {
            "spec": self.spec_replicas,
            "pending": self.pending,
            "loading": self.loading,
            "warmup": self.warmup,
            "ready": self.ready,
            "draining": self.draining,
        }
        if self.node_pending:
            out["node_pending"] = self.node_pending
        return out


class HistogramView(Protocol):
    """What the signals read of a histogram at one scrape (read-only).

    :class:`Histogram` is the plain value a parsed exposition gives; the
    simulator hands out its own snapshots, which make the cumulative counts
    only when first read (most scraped families are never read by the policy
    running); a scraper keeps its counts packed in an array (``metrics/scrape.py``).
    """

    @property
    def bounds(self) -> tuple[float, ...]: ...
    @property
    def cumulative(self) -> Sequence[float]: ...
    @property
    def sum(self) -> float: ...
    @property
    def count(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Histogram:
    """A Prometheus-style histogram: upper bounds (ascending, last is +Inf) and cumulative counts."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float


@dataclass(frozen=True, slots=True)
class SubTickSeries:
    """A series sampled at a fixed period between two observations, oldest first.

    ``values[i]`` covers the period ending at ``end_s - (len(values) - 1 - i) x
    period_s``: a gauge's reading over it, or a counter's increase in it. Seed 004 samples memory
    bandwidth every 100 ms and the queue every second, finer than any
    controller tick: a 15 s tick carries 150 bandwidth samples per replica here.
    """

    period_s: float
    end_s: float
    values: tuple[float, ...]

    def ends_s(self) -> list[float]:
        """The end time of each value's period, oldest first (0.1 s period ending at 2.0: ..., 1.9, 2.0)."""
        n = len(self.values)
        return [self.end_s - (n - 1 - i) * self.period_s for i in range(n)]


@dataclass(frozen=True, slots=True)
class ReplicaSample:
    """One replica's metrics at one scrape, under the exporters' own metric names.

    ``ok`` is False when the scrape failed: the replica is *unknown*, and its
    ``values`` are empty; it must never be read as zero load.
    """

    replica: str
    phase: Phase
    ok: bool
    values: Mapping[str, float] = field(default_factory=dict)
    histograms: Mapping[str, HistogramView] = field(default_factory=dict)
    #: series sampled finer than the observations (exporter name -> the samples since the
    #: previous observation), when the source has them: the simulator's 100 ms
    #: ``DCGM_FI_PROF_DRAM_ACTIVE`` readings and ``vllm:generation_tokens_total`` increases
    #: (``sim/sub_tick.py``)
    sub_tick: Mapping[str, SubTickSeries] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything observed at ``time_s``: per-replica samples plus the fleet's lifecycle view."""

    time_s: float
    fleet: FleetView
    replicas: tuple[ReplicaSample, ...]
    #: requests waiting in front of the fleet (a gateway queue), when the source can see one
    gateway_queue: int | None = None
    #: requests that have arrived at the fleet's front door so far (a counter: admitted, queued,
    #: rejected or timed out alike), when the source can see one; Dynamo's frontend counts the same
    #: as ``dynamo_frontend_requests_started_total``
    arrivals_total: int | None = None
    #: the fleet's waiting queue (serving replicas plus the gateway) sampled every second since the
    #: previous observation, when the source has it (seed 004's per-second q[t]; ``sim/sub_tick.py``)
    queue_per_s: SubTickSeries | None = None
    #: how late after ``time_s`` a replica's page may have been made: a pod scrape stamps every
    #: page with the tick's start, but a replica renders its counters when it answers, up to the
    #: scrape's time-out later (the scrape's slowest page received); 0 where samples are taken at
    #: ``time_s`` (the simulator)
    sample_lag_s: float = 0.0
    #: replicas whose page this observation cannot date: the first page accepted from the
    #: replica's target, or the same bytes again since (a pod scrape); the replica's read series
    #: all recent in Prometheus and unchanged since their first sample (``metrics/promql.py``
    #: ``undated_query``). Nothing on a page says when its counters were read (exporters rarely
    #: stamp), and a cache or a sidecar that starts cold hands over an old copy first; a counter
    #: rate never starts from such a sample (``signals/rates.py``).
    #: Empty where samples are read at ``time_s`` (the simulator)
    undated_replicas: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class SignalValue:
    """A signal's value; ``value is None`` means invalid (missing, stale or undefined)."""

    value: float | None
    note: str = ""

    @property
    def valid(self) -> bool:
        return self.value is not None


@dataclass(frozen=True, slots=True)
class Signals:
    """Named signal values computed from a window of observations, plus the fleet view."""

    time_s: float
    fleet: FleetView
    values: Mapping[str, SignalValue]
    #: per-replica values of a few signals, for policies that reason per pod (HPA)
    per_replica: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: replicas whose scrape failed: unknown load
    unknown_replicas: int = 0
    #: the request rate of each hour of the past days, as the controller has filed it up to this
    #: tick (:mod:`llmscale.history`; None outside the controller): what a policy passes to
    #: :func:`llmscale.seasonal.seasonal_forecast`, at Unix time ``time_s + clock_epoch_s``
    rate_history: RateHistory | None = None
    #: Unix time of ``time_s`` 0 (the backtest's ``--start-at``; 0 live, where ``time_s`` is Unix)
    clock_epoch_s: float = 0.0

    def get(self, name: str) -> float | None:
        v = self.values.get(name)
        return None if v is None else v.value


@dataclass(frozen=True, slots=True)
class NoData:
    """A decision that rests on missing data: the policy could not read ``missing`` (signal names;
    empty when it did not say). Whatever ``desired`` it proposes, the hold-on-missing-data guard
    never lets such a decision shrink the fleet (Knative's ``ErrNoData``): a scrape gap is
    unknown load, not zero load.
    """

    missing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer: desired replicas and why, with the numbers that fired the rule."""

    desired: int
    rule: str
    inputs: Mapping[str, float | None] = field(default_factory=dict)
    note: str = ""
    #: ``desired`` is the current spec plus a step the policy sized for the load its serving
    #: replicas see (+1 per trigger, ``current x queue / threshold``), not a total sized from the
    #: load (``static``'s fixed count, capacity models, HPA's formula). Only the pending-aware guard
    #: reads it, on a scale-up: replicas already starting were asked for by earlier steps for that
    #: same load, so they cover a relative step first (``guards.py``, step 5)
    relative: bool = False
    #: set when the policy decided without the data it needs (:class:`NoData`); None otherwise
    no_data: NoData | None = None
    #: the policy's own fleet state, when it keeps one (``bandwidth-entropy``: seed 004 3.2's
    #: state machine); the decision log's ``fleet_state`` is then this, not the per-tick reading
    fleet_state: str | None = None
    #: replicas to keep asleep beside ``desired`` (vLLM sleep mode: a wake of seconds instead of a
    #: cold start; ``policies/standby.py``); None: the policy keeps no standby pool, and the
    #: adapters leave the cluster's as it is. Not guarded: sleeping replicas serve nothing
    standby: int | None = None
    #: replicas per GPU type, ``((gpu, count), ...)``, of a policy that chooses a mix of types
    #: (``gpu-mix``); the adapters apply it to a mixed fleet, fitted to the guarded ``final``
    #: (:func:`llmscale.mix.fleet.fit_mix`). None: a count of one type, as every other policy
    mix: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True, slots=True)
class TickRecord:
    """One controller tick, as written to the decision log (one JSON line)."""

    time_s: float
    policy: str
    fleet: FleetView
    proposed: Decision
    final: int
    guard: str | None
    guard_note: str
    applied: bool
    #: seed 004 3.2's fleet state: idle, warmup, steady, saturated, degraded, graceful-shrink;
    #: None when the tick was not asked to assess it (a backtest writing no decision log)
    fleet_state: str | None = None
    #: the fleet's numbers that ``llmscale analyze`` / ``diagnose`` read, whatever the policy read
    #: (``controller/core.py``'s LOGGED_SIGNALS); None when not assessed, as ``fleet_state``
    observed: Mapping[str, float | None] | None = None
    #: replicas the adapter keeps asleep beside ``final`` (the policy's ``Decision.standby``);
    #: None: no standby pool, the cluster's is left as it is
    standby: int | None = None
    #: no replica reported metrics this tick: the core held any scale-down (``metrics-outage``)
    metrics_outage: bool = False

    def as_json(self) -> dict[str, object]:
        return {
            "time_s": round(self.time_s, 3),
            "policy": self.policy,
            "replicas": self.fleet.as_dict(),
            "desired_before_guards": self.proposed.desired,
            "desired": self.final,
            "rule": self.proposed.rule,
            "inputs": {k: (None if v is None else round(v, 6)) for k, v in self.proposed.inputs.items()},
            "note": self.proposed.note,
            "guard": self.guard,
            "guard_note": self.guard_note,
            "applied": self.applied,
            "fleet_state": self.fleet_state,
            # Only a policy with a standby pool says so: every other line keeps its bytes.
            **({} if self.standby is None else {"standby": self.standby}),
            # Only a policy that chooses a GPU mix says so (the proposed mix, before the guards).
            **({} if self.proposed.mix is None else {"mix": dict(self.proposed.mix)}),
            **(
                {}
                if self.observed is None
                else {"observed": {k: (None if v is None else round(v, 6)) for k, v in self.observed.items()}}
            ),
        }
