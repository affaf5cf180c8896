"""``breathing``: seed 003's signal priorities, with the load's "breathing rhythm" (2.5) as foresight.

Seed 003 ("let the autoscaler read the LLM's breathing rhythm"), chapter 1's
priorities of the scaling signals:

* high: P99 end-to-end latency > 2 s *or* queue_length > 10 (sustained for
  30 s) -> scale out immediately (latency: see "which P99" below);
* medium: GPU SM utilisation < 30 % *and* no new requests flowing in
  (sustained for 2 min) -> gradual scale-in;
* low: memory / CPU usage: a fallback reference only, not in the main
  decision (not used).

Section 2.5's rhythm features (a sliding-window FFT of the load: dominant
amplitude ratio, decay, phase; and an online EWMA z-score, alpha 0.05) are
the "embedding that supports the autoscaler's decisions". Used here as:

* **Early scale-out on a high z-score.** While the high-priority condition
  holds but has not yet lasted 30 s, a load z-score > 3 (``zscore_up``) says
  the rise is a real surge rather than jitter: scale out now
  (``early-zscore``) instead of waiting out the 30 s. A z-score alone never
  scales out: with alpha 0.05 any step in the load reads 4.47 once, however
  small.
* **No scale-in before a periodic rise.** With a dominant rhythm
  (``rhythm_amplitude_ratio`` >= 0.4, ``rhythm_decay`` <= 0.2: present and
  not fading), a scale-in is held while the load is rising (phase in
  (-pi, 0): 0 is the peak) or when the next rise starts within a cold start
  (``ctx.cold_start_s``): a replica removed now would be needed back before
  a new one could load. The time to the next rise is (pi - phase) / omega,
  with omega (rad/s) estimated in the state from the phase's advance between
  ticks; unknown omega counts as "within a cold start".

Readings where the seed is ambiguous:

* **Which P99.** The seed says end-to-end, but an LLM answer's end-to-end
  time grows with its length, not with the fleet's load: on the ``default``
  and ``flash-crowd`` workloads (Azure chat lengths) ``e2e_p99_s`` reads
  17-27 s on a fleet at 84 % of its capacity, so a 2 s trigger on it fires on
  every tick and drives the fleet to max_replicas (measured in a backtest).
  The latency a user waits on under load is the first token: the default is
  ``ttft_p99_s`` > 2 s (the TTFT SLO's usual value); ``p99_signal:
  e2e_p99_s`` is the literal reading, for short-answer services.
* **Which queue.** chapter 1's HPA example defines ``queue_length`` as a
  per-pod metric (pending requests, averageValue 5): ``queue_per_replica``
  (parameter ``queue_signal``). The scale-out size is HPA's on it,
  ``max(current + 1, ceil(current x queue / 10))``; a latency trigger alone
  adds 1. With no serving replica the gateway queue is shared over the
  replicas on the way; with no replica at all, any waiting request asks for
  one (``scale-from-zero``).
* **"SM utilisation"** is ``gpu_util_mean`` (%), the mean of
  ``DCGM_FI_DEV_GPU_UTIL``: the seed's source is "the GPU SM utilisation NVML
  reports", and NVML's device utilisation is the share of time a kernel was
  executing. It also makes the rule meaningful: "below 30 % with nothing
  piling up" then says the GPUs idle most of the time, a replica to spare.
  ``DCGM_FI_PROF_SM_ACTIVE`` would tie it to the engine instead: SMs hold
  warps only while they compute or wait for HBM, so a loaded decode-bound
  replica reads what its host time leaves -- 0.49 at batch 256 in the
  simulator with the committed coefficients (Llama-3-8B, H100, CUDA-graph
  decode), 0.18 with the previous eager-engine fit. There "below 30 %" held
  at full load, and with vLLM admitting every request into the batch so did
  "no backlog": the rule would have shrunk a saturated fleet. The cost of
  the seed's choice, kept: a light load the router spreads over every replica
  keeps each one busy, and the fleet does not shrink (on the
  ``bandwidth-bound`` preset at 1 request/s it holds its initial 2 replicas
  where one serves the SLO).
* **"No new requests flowing in".** Literally zero arrivals would never let
  a fleet with any traffic shrink. Default reading (``no_new_requests:
  no-backlog``): new requests do not pile up, less than one waiting per
  serving replica (``queue_per_replica`` < 1), i.e. they are absorbed at
  once; a stricter ``queue-empty`` (``queue_waiting`` == 0: on a large fleet
  the queue flickers between 0 and a request or two, which restarts the
  2-minute hold) and the literal ``zero-rate`` (``request_rate_rps`` == 0).
* **Gradual.** -1 per step, at most one step per 2 minutes: the guard's
  ``cooldown_down_s: 120`` (after any change), on top of the 2-minute hold
  of the condition kept in the state.
* **The 30 s and 2 min holds** are kept in the state (``urgent_since_s``,
  ``idle_since_s``): the z-score rule must be able to act before the 30 s.
  A tick with missing data restarts both.
* **P99 undefined** (no request finished in the window) reads 0 on an idle
  fleet (nothing running or waiting), otherwise the latency trigger cannot
  fire and the queue trigger decides alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmscale.deployment import Deployment
from llmscale.policies.base import register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    DURATION_RANGE,
    NONNEG_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    Param,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = ["BreathingConfig", "BreathingPolicy", "BreathingState", "rhythm_blocks_scale_in"]

_NO_NEW_REQUESTS = ("no-backlog", "queue-empty", "zero-rate")


@dataclass(frozen=True)
class BreathingConfig:
    p99_signal: str = param("ttft_p99_s")
    p99_threshold_s: float = param(2.0, WINDOW_RANGE, unit="s")
    queue_signal: str = param("queue_per_replica")
    queue_threshold: float = param(10.0, AMOUNT_RANGE)
    sustain_up_s: float = param(30.0, DURATION_RANGE, unit="s")
    sm_low_pct: float = param(30.0, "[0, 100]", unit="%")
    idle_hold_s: float = param(120.0, DURATION_RANGE, unit="s")
    no_new_requests: str = param("no-backlog", choices=_NO_NEW_REQUESTS)
    zscore_up: float = param(3.0, AMOUNT_RANGE)
    rhythm_min_ratio: float = param(0.4, NONNEG_RANGE)
    rhythm_max_decay: float = param(0.2, NONNEG_RANGE)
    horizon_s: float = 90.0
    tick_s: float = param(15.0, TICK_RANGE, unit="s")


@dataclass(frozen=True)
class BreathingState:
    urgent_since_s: float | None = None
    idle_since_s: float | None = None
    last_phase_rad: float | None = None
    last_phase_t_s: float | None = None
    #: angular frequency of the dominant rhythm, rad/s (None until two phases were seen)
    omega_rad_s: float | None = None


def _wrap(a: float) -> float:
    """Angle in (-pi, pi]."""
    a = math.fmod(a, 2.0 * math.pi)
    if a <= -math.pi:
        a += 2.0 * math.pi
    elif a > math.pi:
        a -= 2.0 * math.pi
    return a


def rhythm_blocks_scale_in(phase: float, omega: float | None, horizon_s: float) -> tuple[bool, float | None]:
    """(hold?, seconds to the next rise) for a present, non-fading rhythm at ``phase``.

    Phase 0 is the peak, -pi/2 a quarter period before it (rising), +pi/2 after
    it (falling). Worked: phase pi/2, omega 2 pi / 120 s -> the trough is
    (pi - pi/2) / omega = 30 s away, within a 90 s cold start: hold.
    """
    if -math.pi < phase < 0.0:
        return True, 0.0
    if omega is None or omega <= 0.0:
        return True, None
    to_rise = (math.pi - phase) / omega
    return to_rise <= horizon_s, to_rise


@dataclass(frozen=True)
class BreathingPolicy:
    config: BreathingConfig
    name: str = "breathing"

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    @property
    def guard_overrides(self) -> Mapping[str, Any]:
        return {"cooldown_down_s": self.config.idle_hold_s}

    def initial_state(self) -> BreathingState:
        return BreathingState()

    def _queue(self, signals: Signals, name: str) -> float | None:
        q = signals.get(name)
        if q is None and name == "queue_per_replica":
            total = signals.get("queue_waiting")
            if total is not None and signals.fleet.ready == 0:
                q = total / max(1, signals.fleet.active)
        return q

    def decide(
        self, signals: Signals, state: BreathingState, now_s: float
    ) -> tuple[Decision, BreathingState]:
        cfg = self.config
        current = signals.fleet.spec_replicas
        queue = self._queue(signals, cfg.queue_signal)
        waiting = signals.get("queue_waiting")
        running = signals.get("running")
        p99 = signals.get(cfg.p99_signal)
        if p99 is None and waiting == 0.0 and running == 0.0:
            p99 = 0.0
        gpu = signals.get("gpu_util_mean")
        rate = signals.get("request_rate_rps")
        z = signals.get("load_zscore")
        ratio = signals.get("rhythm_amplitude_ratio")
        decay = signals.get("rhythm_decay")
        phase = signals.get("rhythm_phase")

        # The rhythm's angular frequency from the phase's advance (the phase turns forward in time).
        omega = state.omega_rad_s
        if phase is not None and state.last_phase_rad is not None and state.last_phase_t_s is not None:
            dt = now_s - state.last_phase_t_s
            dphi = _wrap(phase - state.last_phase_rad)
            if dt > 0.0 and dphi > 0.0:
                obs = dphi / dt
                omega = obs if omega is None else 0.5 * omega + 0.5 * obs
        last_phase, last_phase_t = (phase, now_s) if phase is not None else (None, None)
        if phase is None:
            omega = None

        inputs: dict[str, float | None] = {
            "queue": queue,
            "p99_s": p99,
            "gpu_util_pct": gpu,
            "load_zscore": z,
            "rhythm_amplitude_ratio": ratio,
            "rhythm_decay": decay,
            "rhythm_phase_rad": phase,
            "rhythm_omega_rad_s": omega,
        }
        if queue is None:
            new_state = BreathingState(None, None, last_phase, last_phase_t, omega)
            return Decision(
                current, "no-data", inputs, f"missing {cfg.queue_signal}", no_data=NoData((cfg.queue_signal,))
            ), new_state

        if signals.fleet.active == 0 and waiting is not None and waiting > 0.0:
            new_state = BreathingState(None, None, last_phase, last_phase_t, omega)
            return Decision(1, "scale-from-zero", inputs, f"{waiting:.0f} waiting, no replica"), new_state
        # High priority: P99 > 2 s or queue > 10, sustained 30 s.
        lat_high = p99 is not None and p99 > cfg.p99_threshold_s
        queue_high = queue > cfg.queue_threshold
        urgent = lat_high or queue_high
        urgent_since = (
            (state.urgent_since_s if state.urgent_since_s is not None else now_s) if urgent else None
        )
        if cfg.no_new_requests == "no-backlog":
            per = self._queue(signals, "queue_per_replica")
            no_new = per is not None and per < 1.0
        elif cfg.no_new_requests == "queue-empty":
            no_new = waiting == 0.0
        else:
            no_new = rate == 0.0
        idle = not urgent and gpu is not None and gpu < cfg.sm_low_pct and no_new
        idle_since = (state.idle_since_s if state.idle_since_s is not None else now_s) if idle else None
        new_state = BreathingState(urgent_since, idle_since, last_phase, last_phase_t, omega)

        if urgent and urgent_since is not None:
            held = now_s - urgent_since
            inputs["urgent_held_s"] = held
            want = current + 1
            if queue_high:
                want = max(want, math.ceil(current * queue / cfg.queue_threshold))
            why = (
                f"P99 {p99:.2f}s > {cfg.p99_threshold_s:g}s"
                if lat_high and p99 is not None
                else f"queue {queue:.1f} > {cfg.queue_threshold:g}"
            )
            if held >= cfg.sustain_up_s:
                return Decision(want, "urgent-up", inputs, f"{why} for {held:.0f}s", relative=True), new_state
            if z is not None and z > cfg.zscore_up:
                note = f"{why} for {held:.0f}s; load z-score {z:.2f} > {cfg.zscore_up:g}: a surge"
                return Decision(want, "early-zscore", inputs, note, relative=True), new_state
            note = f"{why} for {held:.0f}s < {cfg.sustain_up_s:.0f}s"
            return Decision(current, "urgent-pending", inputs, note), new_state

        if idle and idle_since is not None and current > 0:
            held = now_s - idle_since
            inputs["idle_held_s"] = held
            if held < cfg.idle_hold_s:
                note = (
                    f"GPU {gpu:.0f}% < {cfg.sm_low_pct:g}%, no new requests for {held:.0f}s "
                    f"< {cfg.idle_hold_s:.0f}s"
                )
                return Decision(current, "idle-pending", inputs, note), new_state
            strong = (
                ratio is not None
                and ratio >= cfg.rhythm_min_ratio
                and decay is not None
                and decay <= cfg.rhythm_max_decay
                and phase is not None
            )
            if strong and phase is not None:
                hold, to_rise = rhythm_blocks_scale_in(phase, omega, cfg.horizon_s)
                inputs["seconds_to_rise"] = to_rise
                if hold:
                    when = "now" if to_rise == 0.0 else ("soon" if to_rise is None else f"in {to_rise:.0f}s")
                    note = f"the load's rhythm rises {when} (cold start {cfg.horizon_s:.0f}s)"
                    return Decision(current, "rhythm-hold", inputs, note), new_state
            note = f"GPU {gpu:.0f}% < {cfg.sm_low_pct:g}%, no new requests for {held:.0f}s"
            return Decision(current - 1, "gradual-down", inputs, note), new_state
        return Decision(current, "hold", inputs), new_state


_PARAMS: dict[str, Param] = {
    **params_of(BreathingConfig),
    "horizon_s": Param(None, DURATION_RANGE, kind=float, unit="s", help="default: the cold start"),
}


@register(
    "breathing",
    "rhythm-aware reactive scaling: P99 > 2 s or queue > 10 for 30 s -> up now (early on z > 3); "
    "GPU < 30% and no new requests for 2 min -> -1, unless the load's rhythm is about to rise",
    _PARAMS,
    reads=(
        "queue_waiting",
        "running",
        "request_rate_rps",
        "gpu_util_mean",
        "load_zscore",
        "rhythm_amplitude_ratio",
        "rhythm_decay",
        "rhythm_phase",
    ),
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> BreathingPolicy:
    horizon = params["horizon_s"]
    cfg = config_from(
        BreathingConfig,
        params,
        horizon_s=ctx.cold_start_s if horizon is None else float(horizon),
    )
    return BreathingPolicy(cfg)
