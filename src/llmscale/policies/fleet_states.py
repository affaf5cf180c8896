"""Seed 004 3.2's scaling state machine: Idle -> WarmUp -> Saturated -> Degraded -> GracefulShrink.

Seed 004 3.2 ("an elastic scaling state machine for LLM SLOs: closed-loop
control from overload warning to graceful scale-in") names five states,
triggered by an SLO deviation ("P99 latency > 2 s or success rate < 99.5%"),
and gives two transitions with their numbers:

* Saturated -> Degraded: "SLO violation持续60s且CPU>90%", the SLO missed for
  60 s without a break while the processor is busy more than 90 % of the
  time. The seed's whole point is that the host CPU says nothing about an
  LLM fleet (its title: "stop scaling LLMs on CPU utilisation"), so the
  utilisation read here is the same kind of counter on the processor that
  does the work: ``DCGM_FI_DEV_GPU_UTIL``, the share of time a kernel ran
  (``gpu_util_mean``, percent). It says the misses come with a busy fleet,
  not a cold or idle one. (The bandwidth P95 at the seed's "severe" 0.9 is
  not it: a simulated H100 streams at most 0.89 of its peak, so a fleet
  could never degrade.)
* Degraded -> GracefulShrink: "连续3个采样周期SLO达标且负载下降40%": the
  SLO met on 3 consecutive sampling periods (ticks) and the load 40 % below
  its peak in Degraded. The load is the offered request rate
  (``arrival_rate_rps``, else the finished-request rate).

The seed leaves the other edges to its order of states; they are read here as:

* Idle -> WarmUp when replicas start (a scale-up from a quiet fleet), and
  WarmUp ends 90 s after the last starting replica became ready (seed 004
  4.2's warm-up buffer: "the warm-up period is 90 s"), into Saturated if
  the fleet is overloaded or missing its SLO then, else back to Idle;
* Idle -> Saturated on the overload warning: chapter 1's ``shouldScaleUp``
  (bandwidth P95 > 0.85 and queue entropy > 0.72), or the SLO missed;
* Saturated -> Idle when the warning has cleared and the SLO was met on
  3 consecutive ticks (the same count as Degraded's way out);
* GracefulShrink -> Saturated when the SLO is missed again, and
  GracefulShrink -> Idle once no replica is draining and nothing queues:
  the fleet-wide reading of ``canShrink`` (no queued requests, no stream
  cut off) after at least one tick in the state.

The success-rate half of the trigger is not read: no catalogue signal counts
failed requests. A P99 that cannot be computed (no request in the window) is
no evidence either way: it neither restarts nor extends a streak.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from llmscale.policies.params import DURATION_RANGE, param

__all__ = ["FleetMode", "MachineConfig", "MachineInputs", "MachineState", "step"]


class FleetMode(enum.StrEnum):
    """The five states, as the decision log spells them."""

    IDLE = "idle"
    WARMUP = "warmup"
    SATURATED = "saturated"
    DEGRADED = "degraded"
    GRACEFUL_SHRINK = "graceful-shrink"


@dataclass(frozen=True, kw_only=True)
class MachineConfig:
    """The machine's thresholds. Its parameters are declared here (bandwidth-entropy registers
    them); the overload warning and the warm-up buffer are bandwidth-entropy's own thresholds, which
    its factory passes (no default here: that would be a second copy of theirs)."""

    #: seed 004 3.2: "P99 latency > 2 s" is an SLO violation
    slo_p99_s: float = 2.0
    #: seed 004 3.2: Saturated -> Degraded after the SLO is missed for 60 s ...
    degrade_after_s: float = param(60.0, DURATION_RANGE, unit="s", help="SLO missed this long -> Degraded")
    #: ... with the GPUs busy more than this share of the time, percent ("CPU > 90%", read on the GPU)
    degrade_busy_pct: float = 90.0
    #: chapter 1's ``shouldScaleUp``: the overload warning (bandwidth-entropy's bw_up, entropy_up)
    overload_bw: float
    overload_entropy: float
    #: seed 004 3.2: "3 consecutive sampling periods" with the SLO met
    recover_ticks: int = param(3, "[1, 1000]", help="ticks within the SLO to leave Degraded / Saturated")
    #: seed 004 3.2: "load down 40%" from its peak in Degraded
    load_drop: float = param(0.4, "(0, 1]", help="load this far below its peak to leave Degraded")
    #: seed 004 4.2: the warm-up buffer (bandwidth-entropy's warmup_buffer_s)
    warmup_buffer_s: float


@dataclass(frozen=True)
class MachineInputs:
    """One tick's readings (None: not observed)."""

    now_s: float
    p99_s: float | None
    bw_p95: float | None
    entropy: float | None
    #: ``gpu_util_mean``: percent of time a kernel ran, mean over serving replicas
    busy_pct: float | None
    load_rps: float | None
    starting: int
    draining: int
    queue: float | None


@dataclass(frozen=True)
class MachineState:
    mode: FleetMode = FleetMode.IDLE
    #: when the state was entered
    since_s: float = 0.0
    #: when the current unbroken SLO violation began (None: the SLO is not being missed)
    violated_since_s: float | None = None
    #: consecutive ticks with the SLO met
    met_streak: int = 0
    #: the highest load seen in Degraded
    load_peak_rps: float | None = None
    #: the last tick that saw a replica starting
    last_starting_s: float | None = None


def _enter(st: MachineState, mode: FleetMode, now_s: float) -> MachineState:
    return replace(st, mode=mode, since_s=now_s, load_peak_rps=None)


def step(cfg: MachineConfig, st: MachineState, x: MachineInputs) -> tuple[MachineState, str]:
    """The state after one tick's readings, and why it moved ("" when it stayed).

    Worked (defaults): Saturated with P99 3.1 s since t = 100 and the GPUs
    busy 97 % of the time: at t = 150 it stays (missed for 50 s), at t = 160 it
    moves to Degraded ("SLO missed for 60s >= 60s, GPUs busy 97% > 90%").
    """
    now = x.now_s
    violated = x.p99_s is not None and x.p99_s > cfg.slo_p99_s
    met = x.p99_s is not None and not violated
    violated_since = st.violated_since_s
    streak = st.met_streak
    if violated:
        violated_since = now if violated_since is None else violated_since
        streak = 0
    elif met:
        violated_since = None
        streak += 1
    last_starting = now if x.starting > 0 else st.last_starting_s
    st = replace(st, violated_since_s=violated_since, met_streak=streak, last_starting_s=last_starting)
    overload = (
        x.bw_p95 is not None
        and x.entropy is not None
        and x.bw_p95 > cfg.overload_bw
        and x.entropy > cfg.overload_entropy
    )
    mode = st.mode
    if mode == FleetMode.IDLE:
        if x.starting > 0:
            return _enter(st, FleetMode.WARMUP, now), f"{x.starting} replica(s) starting"
        if violated or overload:
            return _enter(st, FleetMode.SATURATED, now), _pressure(cfg, x, violated)
        return st, ""
    if mode == FleetMode.WARMUP:
        if x.starting > 0 or last_starting is None or now - last_starting < cfg.warmup_buffer_s:
            return st, ""
        if violated or overload:
            return _enter(st, FleetMode.SATURATED, now), _pressure(cfg, x, violated)
        why = f"warm-up buffer of {cfg.warmup_buffer_s:.0f}s over, no pressure"
        return _enter(st, FleetMode.IDLE, now), why
    if mode == FleetMode.SATURATED:
        missed_s = None if violated_since is None else now - violated_since
        busy = x.busy_pct
        if (
            missed_s is not None
            and missed_s >= cfg.degrade_after_s
            and busy is not None
            and busy > cfg.degrade_busy_pct
        ):
            st = replace(_enter(st, FleetMode.DEGRADED, now), load_peak_rps=x.load_rps)
            why = (
                f"SLO missed for {missed_s:.0f}s >= {cfg.degrade_after_s:.0f}s, "
                f"GPUs busy {busy:.0f}% > {cfg.degrade_busy_pct:g}%"
            )
            return st, why
        if streak >= cfg.recover_ticks and not overload:
            return _enter(st, FleetMode.IDLE, now), f"SLO met {streak} ticks running, no overload"
        return st, ""
    if mode == FleetMode.DEGRADED:
        peak = st.load_peak_rps
        if x.load_rps is not None:
            peak = x.load_rps if peak is None else max(peak, x.load_rps)
        st = replace(st, load_peak_rps=peak)
        if (
            streak >= cfg.recover_ticks
            and peak is not None
            and x.load_rps is not None
            and x.load_rps <= (1.0 - cfg.load_drop) * peak
        ):
            why = (
                f"SLO met {streak} ticks running, load {x.load_rps:.3g} <= "
                f"{1.0 - cfg.load_drop:g} x peak {peak:.3g} req/s"
            )
            return _enter(st, FleetMode.GRACEFUL_SHRINK, now), why
        return st, ""
    # GRACEFUL_SHRINK
    if violated:
        return _enter(st, FleetMode.SATURATED, now), _pressure(cfg, x, violated)
    if now > st.since_s and x.draining == 0 and (x.queue or 0.0) == 0.0:
        return _enter(st, FleetMode.IDLE, now), "no replica draining, nothing queued"
    return st, ""


def _pressure(cfg: MachineConfig, x: MachineInputs, violated: bool) -> str:
    if violated:
        return f"P99 {x.p99_s:.2f}s > SLO {cfg.slo_p99_s:g}s"
    return (
        f"overload: bandwidth {x.bw_p95:.2f} > {cfg.overload_bw:g} and "
        f"entropy {x.entropy:.2f} > {cfg.overload_entropy:g}"
    )
