"""HBM-bandwidth glitches and seed 004's adaptive batch controller (section 4.4), for the simulator.

Seed 004 section 4.4 ("fault-injection validation: high-entropy burst requests +
memory-bandwidth glitches") injects, on the GPU side, "step-shaped glitches from
128 MB/s to 8 MB/s, duty cycle 17 %, period 83 ms", and answers them with an
"adaptive batching fuse" (``AdjustOnBandwidthDrop``)::

    if currentBW < thresholdLow {            // thresholdLow = 16 MB/s
        targetBatchSize = max(minBatch, currentBatch/2)
        stableWindow.Reset()
    }

"triggered when the bandwidth glitch lasts more than 3 periods", the reset
"so that the glitch, once over, is not taken for a persistent anomaly".

The seed's absolute figures are a throttled PCIe link's; what carries over to an
HBM glitch are its ratios and its timing:

* a glitch keeps 8 / 128 = 6.25 % of the bandwidth (:data:`GLITCH_RETAINED_SHARE`);
* the fuse trips below 16 / 128 = 12.5 % of nominal (:data:`THRESHOLD_LOW_SHARE`);
* each 83 ms period holds one glitch of 0.17 x 83 = 14.1 ms.

How a glitch slows a step is not a flat factor: the replica prices its iterations
with a :class:`~llmscale.perf.step_time.PerfModel` whose GPU has the glitch's
bandwidth (:func:`degraded_perf`), so only the memory terms of the step-time model
(the weight stream in the GEMM roofline, element-wise traffic, the decode KV
stream) slow down, and the compute, kernel-launch and CPU terms do not. A
memory-bound decode step of Llama-3-8B on an H100 at half the bandwidth takes
1.76x as long, a compute-bound 4,096-token prefill 1.03x
(``tests/sim/test_hbm_glitch_faults.py``).

What the seed leaves open, chosen here and named in the parameters:

* the controller samples once per glitch period (83 ms) the *lowest* bandwidth
  its replica had in that period, so a 14 ms glitch in a period makes the period
  "glitched"; "lasts more than 3 periods" is then 4 glitched periods in a row,
  after which the batch halves and the count restarts (the seed's reset);
* ``minBatch`` has no value in the seed: :attr:`AdaptiveBatchConfig.min_batch`
  defaults to 32 (three halvings of vLLM's 256);
* the seed does not say how the batch grows back: here, mirroring the way down,
  it doubles after 4 healthy periods in a row, up to the engine's max_num_seqs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from llmscale.errors import ConfigError

if TYPE_CHECKING:
    from llmscale.sim.fleet import Fleet
    from llmscale.sim.replica import IterationCosts, Replica

__all__ = [
    "GLITCH_DUTY",
    "GLITCH_PERIOD_S",
    "GLITCH_RETAINED_SHARE",
    "PERSIST_PERIODS",
    "THRESHOLD_LOW_SHARE",
    "AdaptiveBatchConfig",
    "AdaptiveBatchState",
    "FaultDriver",
    "HbmGlitch",
    "adaptive_batch_step",
    "degraded_perf",
    "parse_glitch",
]

#: seed 004 4.4: the link drops from 128 MB/s to 8 MB/s during a glitch
GLITCH_RETAINED_SHARE = 8.0 / 128.0
#: seed 004 4.4: ``thresholdLow`` 16 MB/s of the nominal 128 MB/s
THRESHOLD_LOW_SHARE = 16.0 / 128.0
#: seed 004 4.4: one glitch every 83 ms ...
GLITCH_PERIOD_S = 0.083
#: ... lasting 17 % of the period
GLITCH_DUTY = 0.17
#: seed 004 4.4: the fuse trips when the glitch "lasts more than 3 periods"
PERSIST_PERIODS = 3


def _finite(name: str, value: float, lo: float, hi: float, *, open_lo: bool = False) -> None:
    ok = math.isfinite(value) and (value > lo if open_lo else value >= lo) and value <= hi
    if not ok:
        bracket = "(" if open_lo else "["
        raise ConfigError(f"{name} = {value}, must be a finite number in {bracket}{lo:g}, {hi:g}]")


@dataclass(frozen=True)
class HbmGlitch:
    """A window of HBM-bandwidth glitches on some replicas. Times in simulated seconds.

    From ``start_s`` for ``duration_s``, every ``period_s`` the bandwidth of the
    chosen replicas drops to ``retained_share`` of nominal for ``duty x period_s``
    (seed 004 4.4: 6.25 % for 14.1 ms of every 83 ms). The window holds
    ``max(1, floor(duration_s / period_s))`` whole periods. The replicas are the
    oldest ``ceil(replica_share x N)`` of the N replicas alive and not draining at
    ``start_s`` (a replica started during the window is not affected).
    ``duty = 1`` makes one glitch that lasts the whole window.
    """

    start_s: float
    duration_s: float
    replica_share: float = 1.0
    retained_share: float = GLITCH_RETAINED_SHARE
    period_s: float = GLITCH_PERIOD_S
    duty: float = GLITCH_DUTY

    def __post_init__(self) -> None:
        _finite("hbm glitch start_s", self.start_s, 0.0, 1e11)
        _finite("hbm glitch duration_s", self.duration_s, 0.0, 1e11, open_lo=True)
        _finite("hbm glitch replica_share", self.replica_share, 0.0, 1.0, open_lo=True)
        _finite("hbm glitch retained_share", self.retained_share, 0.0, 1.0, open_lo=True)
        _finite("hbm glitch period_s", self.period_s, 0.0, 1e11, open_lo=True)
        _finite("hbm glitch duty", self.duty, 0.0, 1.0, open_lo=True)

    @property
    def num_periods(self) -> int:
        """Whole periods in the window: 300 s at 83 ms -> 3,614."""
        return max(1, math.floor(self.duration_s / self.period_s + 1e-9))

    @property
    def end_s(self) -> float:
        """When the last period ends."""
        return self.start_s + self.num_periods * self.period_s


def parse_glitch(text: str) -> HbmGlitch:
    """``START_S:DURATION_S[:REPLICA_SHARE[:RETAINED_SHARE]]``, e.g. ``1200:300:0.5`` (CLI form).

    The period and duty cycle are the seed's (83 ms, 17 %).
    """
    parts = text.split(":")
    if not 2 <= len(parts) <= 4:
        raise ConfigError(
            f"--hbm-glitch {text!r}: expected START_S:DURATION_S[:REPLICA_SHARE[:RETAINED_SHARE]], "
            "e.g. 1200:300:0.5"
        )
    names = ("start_s", "duration_s", "replica_share", "retained_share")
    values: dict[str, float] = {}
    for name, part in zip(names, parts, strict=False):
        try:
            values[name] = float(part)
        except ValueError as e:
            raise ConfigError(f"--hbm-glitch {text!r}: {name} {part!r} is not a number") from e
    try:
        return HbmGlitch(**values)
    except ConfigError as e:
        raise ConfigError(f"--hbm-glitch {text!r}: {e}") from e


@dataclass(frozen=True)
class AdaptiveBatchConfig:
    """Seed 004 4.4's adaptive batching fuse; see the module docstring for what is the seed's."""

    #: below this share of nominal bandwidth a period counts as glitched (16 / 128 MB/s)
    threshold_low_share: float = THRESHOLD_LOW_SHARE
    #: the batch halves after more than this many glitched periods in a row
    persist_periods: int = PERSIST_PERIODS
    #: the floor of the halving (the seed's ``minBatch``, valueless there)
    min_batch: int = 32
    #: one bandwidth sample per period: the seed's glitch period
    period_s: float = GLITCH_PERIOD_S

    def __post_init__(self) -> None:
        _finite("adaptive batch threshold_low_share", self.threshold_low_share, 0.0, 1.0, open_lo=True)
        _finite("adaptive batch period_s", self.period_s, 0.0, 1e6, open_lo=True)
        if self.persist_periods < 0:
            raise ConfigError(f"adaptive batch persist_periods = {self.persist_periods}, must be >= 0")
        if self.min_batch < 1:
            raise ConfigError(f"adaptive batch min_batch = {self.min_batch}, must be >= 1")


@dataclass(frozen=True)
class AdaptiveBatchState:
    """One replica's fuse: its target batch and the runs of glitched and healthy periods behind it."""

    batch: int
    glitched_periods: int = 0
    healthy_periods: int = 0


def adaptive_batch_step(
    cfg: AdaptiveBatchConfig, state: AdaptiveBatchState, bw_share: float, max_batch: int
) -> AdaptiveBatchState:
    """The fuse after one period whose lowest bandwidth was ``bw_share`` of nominal.

    Worked, with the defaults: periods at 6.25 % (< 12.5 %) count 1, 2, 3, 4;
    the 4th is "more than 3", so 256 -> 128 and the count restarts; four more
    give 64, then 32 (``min_batch``), where it stays. Four healthy periods in a
    row double it back (32 -> 64), and so on up to ``max_batch``. A period at
    exactly 12.5 % is healthy (the seed's test is ``currentBW < thresholdLow``).
    """
    limit = cfg.persist_periods + 1
    if bw_share < cfg.threshold_low_share:
        glitched = state.glitched_periods + 1
        if glitched >= limit:
            return AdaptiveBatchState(max(min(cfg.min_batch, max_batch), state.batch // 2), 0, 0)
        return AdaptiveBatchState(state.batch, glitched, 0)
    healthy = state.healthy_periods + 1
    if state.batch < max_batch and healthy >= limit:
        return AdaptiveBatchState(min(max_batch, state.batch * 2), 0, 0)
    return AdaptiveBatchState(state.batch, 0, min(healthy, limit))


def degraded_perf(perf: Any, retained_share: float) -> Any:
    """``perf``'s step-time model on a GPU with ``retained_share`` of its HBM bandwidth.

    Every memory term of :class:`~llmscale.perf.step_time.PerfModel` divides by the
    GPU's HBM bandwidth and nothing else does, so this slows exactly the
    memory-bound part of each iteration (H100: 3.35 TB/s -> 209 GB/s at 6.25 %).
    Pre: ``perf`` is a PerfModel (it has ``model``, ``gpu``, ``tp``, ``coeffs``, ``stack``).
    """
    from llmscale.perf.step_time import PerfModel

    gpu = replace(perf.gpu, hbm_bandwidth_bytes_s=perf.gpu.hbm_bandwidth_bytes_s * retained_share)
    return PerfModel(perf.model, gpu, perf.tp, perf.coeffs, stack=perf.stack, precision=perf.precision)


# A fault event's tag, as the fleet hands it back: ((period x windows) + window) x 4 + kind.
_ON = 0  # a glitch starts (and, after the first, the previous period ends)
_OFF = 1  # a glitch ends
_TICK = 2  # a period ends after the window (the fuse samples; the batch may grow back)


class FaultDriver:
    """Applies a fleet's glitch windows and runs each affected replica's fuse, one event at a time.

    The fleet pushes the (time, tag) pairs this returns on its lifecycle heap and
    calls :meth:`on_event` when one comes due. A window makes one event per glitch
    edge (2 per 83 ms period: 7,228 for a 300 s window) and, with the fuse on, one
    per period after the window until its replicas are back at full batch (20
    periods from 32); nothing runs outside the windows. Pre: windows do not overlap.
    """

    def __init__(
        self,
        fleet: Fleet,
        perf: Any,
        glitches: tuple[HbmGlitch, ...],
        adaptive: AdaptiveBatchConfig | None,
    ) -> None:
        ordered = sorted(glitches, key=lambda g: g.start_s)
        for a, b in pairwise(ordered):
            if b.start_s < a.end_s:
                raise ConfigError(
                    f"hbm glitch windows overlap: one from {a.start_s:g} s to {a.end_s:g} s, "
                    f"the next from {b.start_s:g} s"
                )
        self.fleet = fleet
        self.glitches = tuple(ordered)
        self.adaptive = adaptive
        self.max_batch = int(fleet.config.max_num_seqs)
        self._normal: IterationCosts = fleet.costs
        self._perf = perf
        self._degraded: dict[float, IterationCosts] = {}
        self._targets: list[list[Replica]] = [[] for _ in self.glitches]
        self._fuse: dict[str, AdaptiveBatchState] = {}
        self._owner: dict[str, int] = {}  # replica name -> the window whose fuse ticks drive it
        #: (time_s, replica name, new batch) of every change the fuse made, for tests and reports
        self.batch_log: list[tuple[float, str, int]] = []

    def _tag(self, period: int, w: int, kind: int) -> int:
        return (period * len(self.glitches) + w) * 4 + kind

    def initial_events(self) -> list[tuple[float, int]]:
        """(time_s, tag) of each window's first glitch."""
        return [(g.start_s, self._tag(0, w, _ON)) for w, g in enumerate(self.glitches)]

    def _costs(self, share: float) -> IterationCosts:
        from llmscale.sim.replica import IterationCosts

        costs = self._degraded.get(share)
        if costs is None:
            costs = IterationCosts(degraded_perf(self._perf, share), self.max_batch)
            self._degraded[share] = costs
        return costs

    def on_event(self, tag: int, now: float) -> tuple[float, int] | None:
        """Apply the event ``tag`` due at ``now``; the next (time_s, tag) of its window, if any."""
        rest, kind = divmod(tag, 4)
        period, w = divmod(rest, len(self.glitches))
        g = self.glitches[w]
        if kind == _ON:
            if period == 0:
                self._targets[w] = self._choose(g)
                for r in self._targets[w]:
                    self._owner[r.name] = w
                    self._fuse.setdefault(r.name, AdaptiveBatchState(self.max_batch))
            else:
                self._sample(w, g.retained_share, now)  # the period that just ended held a glitch
            costs = self._costs(g.retained_share)
            for r in self._live(w):
                r.set_costs(costs, now)
            return g.start_s + (period + g.duty) * g.period_s, self._tag(period, w, _OFF)
        if kind == _OFF:
            for r in self._live(w):
                r.set_costs(self._normal, now)
            if period + 1 < g.num_periods:
                return g.start_s + (period + 1) * g.period_s, self._tag(period + 1, w, _ON)
            if self.adaptive is None:
                return None
            return g.end_s, self._tag(0, w, _TICK)
        # _TICK: the first closes the window's last (glitched) period; the later ones are healthy.
        assert self.adaptive is not None
        self._sample(w, g.retained_share if period == 0 else 1.0, now)
        full = AdaptiveBatchState(self.max_batch)
        if any(self._fuse.get(r.name, full).batch < self.max_batch for r in self._owned(w)):
            return now + self.adaptive.period_s, self._tag(period + 1, w, _TICK)
        return None

    def _choose(self, g: HbmGlitch) -> list[Replica]:
        from llmscale.types import Phase

        alive = [r for r in self.fleet.replicas if r.phase < Phase.DRAINING]
        return alive[: math.ceil(g.replica_share * len(alive) - 1e-9)]

    def _live(self, w: int) -> list[Replica]:
        from llmscale.types import Phase

        return [r for r in self._targets[w] if r.phase != Phase.GONE]

    def _owned(self, w: int) -> list[Replica]:
        return [r for r in self._live(w) if self._owner.get(r.name) == w]

    def _sample(self, w: int, low_share: float, now: float) -> None:
        """Feed the fuse of each replica window ``w`` drives the lowest bandwidth of the period ending now."""
        cfg = self.adaptive
        if cfg is None:
            return
        for r in self._owned(w):
            before = self._fuse.get(r.name, AdaptiveBatchState(self.max_batch))
            after = adaptive_batch_step(cfg, before, low_share, self.max_batch)
            self._fuse[r.name] = after
            if after.batch != before.batch:
                r.set_max_seqs(after.batch, now)
                self.batch_log.append((now, r.name, after.batch))
