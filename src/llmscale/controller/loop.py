"""One controller tick: observe -> signals -> decide -> guard -> actuate, and its record.

The backtest drives :func:`reconcile_once` with a simulated clock; the live
loop calls the same function with wall time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from llmscale.cluster.base import Cluster
from llmscale.guards import GuardConfig, GuardState, apply_guards
from llmscale.metrics.source import MetricSource
from llmscale.policies.base import Policy
from llmscale.signals.fleet import compute_signals, window_signals
from llmscale.signals.window import FleetWindow
from llmscale.types import Observation, Signals, TickRecord

__all__ = [
    "LOGGED_SIGNALS",
    "ControllerState",
    "decide_and_act",
    "fleet_state",
    "observe_signals",
    "reconcile_once",
    "scale_if_changed",
]

#: observations kept for windowed signals (at a 15 s tick: the last 5 minutes)
WINDOW_LEN = 20


@dataclass(frozen=True)
class ControllerState:
    policy_state: Any
    window: tuple[Observation, ...] = ()
    guard_state: GuardState = field(default_factory=GuardState)
    #: ``window`` as indexed for the last tick's signals, reused for the observations the next
    #: window shares (None: nothing to reuse; a stale one is only not reused)
    indexed: FleetWindow | None = field(default=None, compare=False, repr=False)


def fleet_state(
    signals: Signals,
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
    slo_ttft_per_1k_tokens_s: float = 0.0,
) -> str:
    """Seed 004 3.2's fleet states, read off one tick's signals (first match wins).

    A per-tick reading for the decision log of any policy, without the seed's
    transitions (dwell times, recovery counts): ``bandwidth-entropy`` runs the
    state machine itself (``policies/fleet_states.py``) and its state replaces
    this reading in its records (``Decision.fleet_state``).

    degraded: the SLO is being missed (TTFT or inter-token P99 over target);
    graceful-shrink: replicas are draining; warmup: replicas are starting;
    saturated: requests queue or the KV cache is over 80%; idle: nothing running or
    waiting; steady otherwise.
    """
    # Signals are computed when read: a percentile the verdict does not need is not computed.
    if slo_ttft_s is not None and (ttft := signals.get("ttft_p99_s")) is not None:
        # A length-aware SLO (s more per 1,000 prompt tokens) gives each request its own target;
        # a P99 has no length, so it is held to the target of the window's mean prompt (2 s +
        # 0.5 s per 1k at a 1,155-token mean: 2.58 s), or to the base target without one.
        prompt = signals.get("prompt_len_mean_tokens") if slo_ttft_per_1k_tokens_s else None
        target_s = slo_ttft_s + slo_ttft_per_1k_tokens_s * (prompt or 0.0) / 1000.0
        if ttft > target_s:
            return "degraded"
    if slo_tpot_s is not None and (itl := signals.get("itl_p99_s")) is not None and itl > slo_tpot_s:
        return "degraded"
    if signals.fleet.draining:
        return "graceful-shrink"
    if signals.fleet.starting:
        return "warmup"
    queue = signals.get("queue_waiting") or 0.0
    kv = signals.get("kv_usage_mean") or 0.0
    if queue > 0 or kv > 0.8:
        return "saturated"
    if (signals.get("running") or 0.0) == 0 and queue == 0:
        return "idle"
    return "steady"


#: What every decision line carries besides the policy's own inputs (``observed``), so that
#: ``llmscale analyze`` and ``diagnose`` read the same quantities whichever policy decided: load,
#: throughput and P99 for the knee, the effect of scaling and the predictors; entropy and
#: bandwidth for the phase diagram; the diagnostics. Computed only when the tick is assessed
#: (a decision log is written): +3-8% user CPU for a backtest that writes one (slo and knative-kpa
#: over 900 s of the default workload, pure Python, three runs alternating with the build before:
#: 3.00-3.12 s against 2.75-2.96 s).
LOGGED_SIGNALS = (
    "request_rate_rps",
    "generation_tps",
    "ttft_p99_s",
    "e2e_p99_s",
    "queue_waiting",
    "queue_per_replica",
    "running",
    "serving_replicas",
    "prompt_len_mean_tokens",
    "queue_entropy",
    "bw_saturation_p95",
    "ghost_replicas",
    "tenant_drift",
)


def reconcile_once(
    now_s: float,
    source: MetricSource,
    policy: Policy[Any],
    guards: GuardConfig,
    cluster: Cluster,
    state: ControllerState,
    *,
    slo: tuple[float, float] | tuple[float, float, float] | None = None,
    actuate: bool = True,
    assess: bool = True,
) -> tuple[TickRecord, ControllerState]:
    """Run one tick at ``now_s``; scales ``cluster`` when the guarded decision differs from its spec.

    ``actuate=False`` decides and records without touching ``cluster`` (``applied`` is False).
    ``assess=False`` leaves the record's ``fleet_state`` None: the verdict reads the TTFT and
    inter-token P99 windows, which a policy that does not use them would not compute otherwise,
    and a backtest writing no decision log has no reader for it.
    """
    obs = source.observe(now_s)
    window = (*state.window, obs)[-WINDOW_LEN:]
    indexed = FleetWindow.build(window, state.indexed)
    return decide_and_act(
        now_s,
        window_signals(indexed),
        policy,
        guards,
        cluster,
        replace(state, window=window, indexed=indexed),
        slo=slo,
        actuate=actuate,
        assess=assess,
    )


def observe_signals(
    now_s: float, source: MetricSource, window: tuple[Observation, ...]
) -> tuple[tuple[Observation, ...], Signals]:
    """Observe at ``now_s``, append to ``window`` (keeping :data:`WINDOW_LEN`), compute the signals."""
    obs = source.observe(now_s)
    window = (*window, obs)[-WINDOW_LEN:]
    return window, compute_signals(window)


def decide_and_act(
    now_s: float,
    signals: Signals,
    policy: Policy[Any],
    guards: GuardConfig,
    cluster: Cluster,
    state: ControllerState,
    *,
    slo: tuple[float, float] | tuple[float, float, float] | None = None,
    actuate: bool = True,
    assess: bool = True,
) -> tuple[TickRecord, ControllerState]:
    """Decide, guard and (with ``actuate``) scale on ``signals``; ``state.window`` already holds them.

    Split from :func:`reconcile_once` so the live loop's shadow policy decides on the very
    signals the primary saw, and so the live loop can actuate itself to record a failure.
    """
    decision, policy_state = policy.decide(signals, state.policy_state, now_s)
    outcome, guard_state = apply_guards(decision, signals, guards, state.guard_state, now_s)
    applied = scale_if_changed(cluster, outcome.desired, guards, now_s) if actuate else False
    record = TickRecord(
        time_s=now_s,
        policy=policy.name,
        fleet=signals.fleet,
        proposed=decision,
        final=outcome.desired,
        guard=outcome.guard,
        guard_note=outcome.note,
        applied=applied,
        fleet_state=(decision.fleet_state or fleet_state(signals, *(slo or (None, None))))
        if assess
        else None,
        observed={name: signals.get(name) for name in LOGGED_SIGNALS} if assess else None,
    )
    return record, ControllerState(
        policy_state=policy_state, window=state.window, guard_state=guard_state, indexed=state.indexed
    )


def scale_if_changed(cluster: Cluster, desired: int, guards: GuardConfig, now_s: float) -> bool:
    """Scale ``cluster`` to ``desired`` when it differs from the spec; True when a scale was asked.

    Raises ActuationError (from the cluster) when the scale fails.
    """
    if desired == cluster.spec_replicas:
        return False
    cluster.scale_to(desired, now_s, drain_until_idle=guards.drain_aware)
    return True
