"""``bandwidth-entropy``: seed 004's decoder memory-bandwidth saturation x request-queue entropy.

Seed 004 ("stop scaling LLMs on CPU utilisation: decoder bandwidth saturation
+ queue entropy"), chapter 1's decision functions on ``bw_saturation_p95``
(P95 of the bandwidth ratio over 60 s) and ``queue_entropy`` (normalised
Shannon entropy of the per-second queue over 30 s):

* ``shouldScaleUp``: bandwidth > 0.85 *and* entropy > 0.72 -> scale up. Its
  table: above 0.9 and 0.8 "severe bandwidth bottleneck, tail latency about
  to explode: scale out 1-2 instances at once" -> +2 there, +1 otherwise;
* ``shouldScaleDown``: bandwidth < 0.4 *and* entropy < 0.25, "both below the
  safe thresholds for 5 minutes (sliding window)" -> -1 (the table's "scale
  in 1 instance safely"). The 5 minutes are the guard's
  ``confirm_down_ticks`` = ceil(300 s / tick): the scale-down proposal must
  repeat on every tick of 5 minutes, and each further -1 needs 5 more.

Section 4.2's "lag compensation" (``computeCompensatedScore``: weights 1, 0.8,
0.64, ... from the newest sample back over the last 5 minutes, weighted
mean; "the decaying weights flatten short jitter so that scaling follows the
real trend") is applied to both signals before the scale-down test, where
flapping comes from (shrinking on a dip, growing back on the next sample).
The scale-up test reads the raw signals: the seed's table says "scale out
at once", and the bandwidth signal is already a 60 s P95.
``compensate_up: true`` applies the compensation to the scale-up test too.

Section 4.2's 90 s warm-up buffer ("the warm-up period is 90 s; traffic moves
to a new pod only after its readiness probe passes"): for 90 s after the
number of ready replicas rises the fleet's signals still reflect the load
without the newcomer, so no further scale-up is judged (rule
``warmup-buffer``); the state remembers the ready count and when it last rose.

Section 3.1's fusion table (entropy [0, 0.3) "stable": bandwidth 0.8 /
entropy 0.2; [0.3, 0.7) "jitter": 0.5 / 0.5; [0.7, 1] "burst": 0.2 / 0.8)
gives ``fused_score`` in the decision's inputs, for the log; the seed's
decision functions do not use it, and neither does this policy.

Section 3.2's state machine (:mod:`llmscale.policies.fleet_states`: Idle,
WarmUp, Saturated, Degraded, GracefulShrink, with the seed's transitions) is
stepped on every tick and its state is the tick's ``fleet_state`` in the
decision log. It is what the seed attaches it to, the scaling decision:

* no scale-down while the fleet warms up, is saturated or is degraded
  (rule ``shrink-blocked``: the seed's loop shrinks only on its way out of
  Degraded, "SLO met 3 periods running and load down 40%", or from Idle);
* in Degraded, a missed SLO scales up by 1 even without the bandwidth x
  entropy trigger (rule ``degraded-slo``), the seed's SLO-driven trigger.

Note the entropy as llmscale computes it (:func:`llmscale.signals.gpu.normalized_entropy`):
a queue that is non-empty and even over the window scores near 1, a lone
burst near 0 and an empty queue 0, so "entropy > 0.72" reads "requests have
been queueing all through the window".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmscale.deployment import Deployment
from llmscale.policies.base import register
from llmscale.policies.fleet_states import FleetMode, MachineConfig, MachineInputs, MachineState, step
from llmscale.policies.params import (
    DURATION_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    Param,
    PolicyParamError,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = [
    "BandwidthEntropyConfig",
    "BandwidthEntropyPolicy",
    "BandwidthEntropyState",
    "compensated",
    "fusion_weights",
]


@dataclass(frozen=True)
class BandwidthEntropyConfig:
    bw_up: float = param(0.85, "[0, 1]")
    entropy_up: float = param(0.72, "[0, 1]")
    bw_severe: float = param(0.9, "[0, 1]")
    entropy_severe: float = param(0.8, "[0, 1]")
    bw_down: float = param(0.4, "[0, 1]")
    entropy_down: float = param(0.25, "[0, 1]")
    hold_down_s: float = param(300.0, DURATION_RANGE, unit="s")
    lag_decay: float = param(0.8, "(0, 1]")
    lag_window_s: float = param(300.0, WINDOW_RANGE, unit="s")
    compensate_up: bool = param(False)
    warmup_buffer_s: float = param(90.0, DURATION_RANGE, unit="s")
    tick_s: float = param(15.0, TICK_RANGE, unit="s")
    #: section 3.2's state machine (its SLO is the deployment's TTFT target)
    machine: MachineConfig = field(default_factory=lambda: _machine_at_the_declared_thresholds())

    @classmethod
    def check_params(cls, p: Mapping[str, Any]) -> None:
        """The rule across the parameters (registered, run before the policy is built): each
        down threshold below its up threshold, or one reading could ask for +1 and -1 at once
        (bw_down 0.9 over bw_up 0.85: a bandwidth of 0.87 is both)."""
        for down, up in (("bw_down", "bw_up"), ("entropy_down", "entropy_up")):
            if not p[down] < p[up]:
                raise PolicyParamError(
                    f"bandwidth-entropy.{down} = {p[down]}: down thresholds must be below the up "
                    f"thresholds: {down} = {p[down]} ({up} = {p[up]})",
                    down,
                )


def _machine_at_the_declared_thresholds() -> MachineConfig:
    """The machine of a config built without the factory: warned at the declared bw_up and
    entropy_up, buffered by the declared warmup_buffer_s (the factory passes the values given)."""
    c = BandwidthEntropyConfig
    return MachineConfig(
        overload_bw=c.bw_up, overload_entropy=c.entropy_up, warmup_buffer_s=c.warmup_buffer_s
    )


@dataclass(frozen=True)
class BandwidthEntropyState:
    #: (time_s, bandwidth, entropy) samples within the lag window, oldest first
    history: tuple[tuple[float, float, float], ...] = ()
    prev_ready: int | None = None
    last_ready_rise_s: float | None = None
    machine: MachineState = field(default_factory=MachineState)


def compensated(samples: Sequence[float], decay: float) -> float:
    """Seed 004 4.2's ``computeCompensatedScore``: weights 1, decay, decay^2 ... from the newest back.

    Worked: (0.3, 0.5, 0.9) oldest first, decay 0.8 ->
    (0.9 + 0.8 x 0.5 + 0.64 x 0.3) / (1 + 0.8 + 0.64) = 1.492 / 2.44 = 0.611.
    Pre: samples non-empty.
    """
    w = 1.0
    total = weights = 0.0
    for x in reversed(samples):
        total += w * x
        weights += w
        w *= decay
    return total / weights


def fusion_weights(entropy: float) -> tuple[float, float]:
    """Seed 004 3.1's table: (bandwidth weight, entropy weight) for the entropy's regime."""
    if entropy < 0.3:
        return 0.8, 0.2
    if entropy < 0.7:
        return 0.5, 0.5
    return 0.2, 0.8


@dataclass(frozen=True)
class BandwidthEntropyPolicy:
    config: BandwidthEntropyConfig
    name: str = "bandwidth-entropy"

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    @property
    def guard_overrides(self) -> Mapping[str, Any]:
        # 5 min at a 15 s tick = 20 consecutive scale-down proposals.
        return {"confirm_down_ticks": max(1, math.ceil(self.config.hold_down_s / self.config.tick_s))}

    def initial_state(self) -> BandwidthEntropyState:
        return BandwidthEntropyState()

    def decide(
        self, signals: Signals, state: BandwidthEntropyState, now_s: float
    ) -> tuple[Decision, BandwidthEntropyState]:
        cfg = self.config
        fleet = signals.fleet
        current = fleet.spec_replicas
        ready_rise = state.last_ready_rise_s
        if state.prev_ready is not None and fleet.ready > state.prev_ready:
            ready_rise = now_s
        bw = signals.get("bw_saturation_p95")
        ent = signals.get("queue_entropy")
        load = signals.get("arrival_rate_rps")
        machine, moved = step(
            cfg.machine,
            state.machine,
            MachineInputs(
                now_s=now_s,
                p99_s=signals.get("ttft_p99_s"),
                bw_p95=bw,
                entropy=ent,
                busy_pct=signals.get("gpu_util_mean"),
                load_rps=load if load is not None else signals.get("request_rate_rps"),
                starting=fleet.starting,
                draining=fleet.draining,
                queue=signals.get("queue_waiting"),
            ),
        )
        mode = machine.mode
        history = tuple(h for h in state.history if now_s - h[0] < cfg.lag_window_s)
        if bw is None or ent is None:
            new_state = BandwidthEntropyState(history, fleet.ready, ready_rise, machine)
            missing = [n for n, v in (("bw_saturation_p95", bw), ("queue_entropy", ent)) if v is None]
            note = f"missing {', '.join(missing)}"
            held = Decision(
                current,
                "no-data",
                {"bw_p95": bw, "entropy": ent},
                note,
                no_data=NoData(),
                fleet_state=mode,
            )
            return held, new_state
        history = (*history, (now_s, bw, ent))
        new_state = BandwidthEntropyState(history, fleet.ready, ready_rise, machine)
        bw_c = compensated([h[1] for h in history], cfg.lag_decay)
        ent_c = compensated([h[2] for h in history], cfg.lag_decay)
        w_bw, w_ent = fusion_weights(ent)
        inputs: dict[str, float | None] = {
            "bw_p95": bw,
            "entropy": ent,
            "bw_compensated": bw_c,
            "entropy_compensated": ent_c,
            "fused_score": w_bw * bw + w_ent * ent,
            "samples": float(len(history)),
            "slo_met_ticks": float(machine.met_streak),
        }
        if machine.violated_since_s is not None:
            inputs["slo_missed_for_s"] = now_s - machine.violated_since_s
        if machine.load_peak_rps is not None:
            inputs["degraded_load_peak_rps"] = machine.load_peak_rps
        state_note = f"state {mode}" + (f" ({moved})" if moved else "")

        def decision(desired: int, rule: str, note: str, relative: bool = False) -> Decision:
            full = f"{note}; {state_note}" if note else state_note
            return Decision(desired, rule, inputs, full, relative=relative, fleet_state=mode)

        up_bw, up_ent = (bw_c, ent_c) if cfg.compensate_up else (bw, ent)
        if up_bw > cfg.bw_up and up_ent > cfg.entropy_up:
            since = None if ready_rise is None else now_s - ready_rise
            if since is not None and since < cfg.warmup_buffer_s:
                inputs["since_ready_s"] = since
                note = (
                    f"a replica became ready {since:.0f}s ago (< {cfg.warmup_buffer_s:.0f}s warm-up buffer)"
                )
                return decision(current, "warmup-buffer", note), new_state
            severe = up_bw > cfg.bw_severe and up_ent > cfg.entropy_severe
            n_up = 2 if severe else 1
            rule = "severe-bandwidth-entropy" if severe else "bandwidth-and-entropy-high"
            note = f"bandwidth {up_bw:.2f} > {cfg.bw_up:g} and entropy {up_ent:.2f} > {cfg.entropy_up:g}"
            return decision(current + n_up, rule, note, relative=True), new_state
        if mode == FleetMode.DEGRADED and machine.violated_since_s is not None:
            note = f"degraded: SLO missed for {now_s - machine.violated_since_s:.0f}s"
            return decision(current + 1, "degraded-slo", note, relative=True), new_state
        if bw_c < cfg.bw_down and ent_c < cfg.entropy_down and current > 0:
            if mode in (FleetMode.WARMUP, FleetMode.SATURATED, FleetMode.DEGRADED):
                note = f"bandwidth and entropy are low, but the fleet is {mode}: no scale-down"
                return decision(current, "shrink-blocked", note), new_state
            note = (
                f"compensated bandwidth {bw_c:.2f} < {cfg.bw_down:g} and entropy {ent_c:.2f} < "
                f"{cfg.entropy_down:g} (held {cfg.hold_down_s:.0f}s by the guard)"
            )
            return decision(current - 1, "bandwidth-and-entropy-low", note), new_state
        return decision(current, "hold", ""), new_state


# Bandwidth is a share of the HBM peak and the queue entropy is normalised: both read 0 to 1.
#: the thresholds and timings, and section 3.2's state machine's own (its overload warning and
#: warm-up buffer are the thresholds above: the factory passes them)
_PARAMS: dict[str, Param] = {**params_of(BandwidthEntropyConfig), **params_of(MachineConfig)}


@register(
    "bandwidth-entropy",
    "memory bandwidth and queue entropy: bandwidth P95 > 0.85 and queue entropy > 0.72 -> +1 "
    "(+2 above 0.9/0.8); "
    "< 0.4 and < 0.25 for 5 min -> -1; 90 s warm-up buffer; a fleet-state machine blocks shrinking "
    "while warming, saturated or degraded",
    _PARAMS,
    check=BandwidthEntropyConfig.check_params,
    reads=(
        "bw_saturation_p95",
        "queue_entropy",
        # section 3.2's state machine
        "ttft_p99_s",
        "gpu_util_mean",
        "arrival_rate_rps",
        "request_rate_rps",
        "queue_waiting",
    ),
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> BandwidthEntropyPolicy:
    cfg = config_from(
        BandwidthEntropyConfig,
        params,
        machine=config_from(
            MachineConfig,
            params,
            slo_p99_s=ctx.slo_ttft_s,
            overload_bw=float(params["bw_up"]),
            overload_entropy=float(params["entropy_up"]),
            warmup_buffer_s=float(params["warmup_buffer_s"]),
        ),
    )
    return BandwidthEntropyPolicy(cfg)
