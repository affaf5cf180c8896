"""The controller core: one tick, no I/O, and when the next one is due.

``tick(controller, state, observation) -> (record, new state, next tick time)``. The core appends
the observation to its window, computes the signals the policy and the guards read (lazily: a
signal nobody reads is never computed), lets the policy decide and the guards dispose, and
returns the record of the tick with the time of the next one, from the policy's own cadence.
It never scrapes, scales, sleeps or reads a clock: time is the observation's ``time_s``.

Two thin adapters drive it (NVIDIA Dynamo's planner core is split the same way, its replay and
its live loop only fulfilling the ticks the core schedules):

- the backtest (``backtest/runner.py``, and ``backtest/tenants.py`` for tenants on one MIG pool):
  simulated time; it runs the fleet up to the next tick, observes the simulator, ticks, and
  scales the simulated fleet to the record's ``final`` and its standby pool to ``standby``;
- the live controller (``controller/live.py``): wall time; it observes Prometheus or pod pages
  aligned with the cluster, runs the model-drift hook between :func:`observe` and
  :func:`decide`, adds what only a real fleet has (leases, persisted state, actuation errors)
  and sleeps until the time the core returned.

Every step that changes a decision is here, whichever adapter runs it: the policy, the guards,
the hold on a total metrics outage (:func:`total_outage`, read off the observation), and
:func:`settle`, which applies what the adapter learnt around the decision (:class:`TickFacts`:
the resource layer's admission of a scale-up, whether this replica leads, whether the scale
failed) and rolls the guard state back, in one place, whenever no scale follows from the guards'
number. ``tests/controller/test_adapter_parity.py`` runs the live controller and the backtest on
one simulated trace and compares their decision logs line for line.

``tests/controller/test_core_purity.py`` checks that this module's import closure holds nothing
that does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from llmscale.deployment import Deployment
from llmscale.guards import GuardConfig, GuardState, apply_guards
from llmscale.history import EMPTY_HISTORY, RateHistory
from llmscale.policies.base import Policy
from llmscale.signals.fleet import window_signals
from llmscale.signals.window import FleetWindow
from llmscale.slo import ttft_target_s
from llmscale.types import Observation, Phase, Signals, TickRecord

__all__ = [
    "LOGGED_SIGNALS",
    "WINDOW_LEN",
    "AdmissionVerdict",
    "Controller",
    "ControllerState",
    "TickFacts",
    "decide",
    "fleet_state",
    "initial_state",
    "next_tick_after",
    "observe",
    "settle",
    "tick",
    "total_outage",
]

#: observations kept for windowed signals (at a 15 s tick: the last 5 minutes)
WINDOW_LEN = 20

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


@dataclass(frozen=True)
class Controller:
    """What the core ticks: a policy, its guards (:func:`llmscale.deployment.guard_config`), the
    deployment whose SLOs the fleet state is judged against, and the cadence.

    ``tick_s`` None: the policy's own ``tick_s`` (HPA's 15 s sync, Knative's 2 s); a number
    overrides it (``llmscale run``'s ``tick_s``, e.g. 0.5 s ticks of a time-scaled chaos run).
    ``assess`` False leaves a record's ``fleet_state`` and ``observed`` None: they read the TTFT
    and inter-token P99 windows, which a policy that does not use them would not compute, and a
    backtest writing no decision log has no reader for them.
    """

    policy: Policy[Any]
    guards: GuardConfig
    #: whose SLOs ``fleet_state`` judges the fleet by (None: no SLO, never ``degraded``)
    deployment: Deployment | None = None
    tick_s: float | None = None
    assess: bool = True
    #: Unix time of ``now_s`` 0, which places the guards' schedule on the calendar: 0 live (the
    #: time line is Unix seconds), the run's start time in a backtest (``--start-at``)
    clock_epoch_s: float = 0.0
    #: the same-hour rate history the run starts from (:mod:`llmscale.history`; a trace of the
    #: days before, ``history_from_arrivals``). None: an empty one (a day per hour's bin). Either
    #: way each tick files the observed rate into it, and the guards' eviction window reads it
    #: once the hour has two past days (seed 003 4.3), so a run shorter than a day decides as before.
    history: RateHistory | None = None

    @property
    def cadence_s(self) -> float:
        """Seconds from one tick to the next."""
        return float(self.policy.tick_s if self.tick_s is None else self.tick_s)


@dataclass(frozen=True)
class ControllerState:
    """Everything the core carries from one tick to the next."""

    policy_state: Any
    window: tuple[Observation, ...] = ()
    guard_state: GuardState = field(default_factory=GuardState)
    #: ``window`` as indexed for the last tick's signals, reused for the observations the next
    #: window shares (None: nothing to reuse; a stale one is only not reused)
    indexed: FleetWindow | None = field(default=None, compare=False, repr=False)
    #: when the next tick is due (the adapter's time line: simulated or epoch seconds)
    next_tick_s: float = 0.0
    #: the request rate of each hour of the past days, as observed (None: the controller's seed)
    history: RateHistory | None = None


@dataclass(frozen=True, slots=True)
class AdmissionVerdict:
    """The resource layer's answer to a tick's scale-up: how far it may go.

    Live (``controller/admission.py``), a tenant's MIG quota and seed 003 3.1's node checks (no
    node passes: ``limit`` is the current spec); in the tenants backtest, the quota, the pool's
    free placements and the node checks (``tenancy/pool.py``'s ``admit``: 1 of 2 new replicas
    admitted, ``limit`` is the spec + 1).
    """

    #: the most replicas the target may have after this tick (>= 0)
    limit: int
    #: the guard name the record gives a held scale-up (``node-check``, ``mig-quota``, ...)
    guard: str
    #: why, for the record's ``guard_note``
    note: str = ""


@dataclass(frozen=True, slots=True)
class TickFacts:
    """What an adapter learnt about a tick around the core's decision, for :func:`settle`."""

    #: the resource layer's verdict on the decision's scale-up (None: not asked, or none needed)
    admission: AdmissionVerdict | None = None
    #: this replica may act (leader election); a standby decides and logs but never scales
    leading: bool = True
    #: the scale was asked for and failed (an ActuationError), or fenced off by a lost lease
    scale_failed: bool = False
    #: the spec read again just before actuation (None: not read again, as in the backtest). It
    #: differs from the observation's when someone else scaled in between (an admin's patch, a
    #: former leader's last scale): the decision was made for a fleet that is no longer there.
    spec_now: int | None = None


def initial_state(controller: Controller, first_tick_s: float) -> ControllerState:
    """A fresh state whose first tick is due at ``first_tick_s``."""
    return ControllerState(policy_state=controller.policy.initial_state(), next_tick_s=first_tick_s)


def tick(
    controller: Controller, state: ControllerState, observation: Observation
) -> tuple[TickRecord, ControllerState, float]:
    """One tick at ``observation.time_s``: the record (``applied`` False: the adapter actuates),
    the next state and when the next tick is due. An adapter that learns more about the tick
    (an admission verdict: ``backtest/tenants.py``) settles the record and state with
    :func:`settle` against the state it passed here."""
    state, signals = observe(state, observation)
    record, state = decide(controller, state, signals, observation.time_s)
    return record, state, state.next_tick_s


def observe(state: ControllerState, observation: Observation) -> tuple[ControllerState, Signals]:
    """Append ``observation`` to the window (keeping :data:`WINDOW_LEN`); the signals at it."""
    window = (*state.window, observation)[-WINDOW_LEN:]
    indexed = FleetWindow.build(window, state.indexed)
    return replace(state, window=window, indexed=indexed), window_signals(indexed)


def decide(
    controller: Controller, state: ControllerState, signals: Signals, now_s: float
) -> tuple[TickRecord, ControllerState]:
    """Decide and guard on ``signals`` (``state.window`` already holds them); the record and the
    state with the next tick scheduled. Split from :func:`tick` so that the live controller's
    model-drift hook can adjust the signals in between, and its shadow policy decide on the very
    signals the primary saw."""
    policy, guards = controller.policy, controller.guards
    # filed before the policy decides, so a policy's seasonal forecast sees this hour so far
    history = _filed(controller, state, signals, now_s)
    signals = replace(signals, rate_history=history, clock_epoch_s=controller.clock_epoch_s)
    decision, policy_state = policy.decide(signals, state.policy_state, now_s)
    outcome, guard_state = apply_guards(
        decision, signals, guards, state.guard_state, now_s, controller.clock_epoch_s, history
    )
    final, guard, guard_note = outcome.desired, outcome.guard, outcome.note
    spec = signals.fleet.spec_replicas
    outage = bool(state.window) and total_outage(state.window[-1])
    if outage and final < spec:
        # No replica reported: the load is unknown, not zero (Knative's ErrNoData for the whole
        # fleet), whatever the guards let through. No scale follows: no cooldown starts either.
        final, guard = spec, "metrics-outage"
        guard_note = _join(guard_note, "no replica reported metrics: load unknown, not zero")
        guard_state = state.guard_state
    assess = controller.assess
    d = controller.deployment
    slo = (None, None, 0.0) if d is None else (d.slo_ttft_s, d.slo_tpot_s, d.slo_ttft_per_1k_tokens_s)
    record = TickRecord(
        time_s=now_s,
        policy=policy.name,
        fleet=signals.fleet,
        proposed=decision,
        final=final,
        guard=guard,
        guard_note=guard_note,
        applied=False,
        fleet_state=(decision.fleet_state or fleet_state(signals, *slo)) if assess else None,
        observed={name: signals.get(name) for name in LOGGED_SIGNALS} if assess else None,
        standby=decision.standby,
        metrics_outage=outage,
    )
    return record, ControllerState(
        policy_state=policy_state,
        window=state.window,
        guard_state=guard_state,
        indexed=state.indexed,
        next_tick_s=next_tick_after(state.next_tick_s, controller.cadence_s, now_s),
        history=history,
    )


def _filed(controller: Controller, state: ControllerState, signals: Signals, now_s: float) -> RateHistory:
    """The history with this tick's offered rate filed (arrivals; finished requests where the
    metrics have no arrival counter; unchanged when neither is known: a gap is no sample)."""
    history = state.history if state.history is not None else controller.history
    if history is None:
        history = EMPTY_HISTORY
    rate = signals.get("arrival_rate_rps")
    if rate is None:
        rate = signals.get("request_rate_rps")
    return history.observe(now_s + controller.clock_epoch_s, rate)


def settle(
    record: TickRecord, decided: ControllerState, before: ControllerState, facts: TickFacts
) -> tuple[TickRecord, ControllerState]:
    """Apply what the adapter learnt around the decision to ``record`` and ``decided`` (the state
    :func:`decide` returned from ``before``); returns both settled. Idempotent: an adapter may
    settle again once it learns more (the live loop after a failed scale).

    An admission ``limit`` below ``record.final`` holds the scale-up there, under the verdict's
    guard name. The guard state is ``before``'s, as if the tick had proposed no change, whenever
    no scale follows from it: a scale-up held at the current spec (the next tick asks again,
    instead of waiting out a cooldown no scale started), a standby replica (its clocks are the
    leader's, read from the store when it takes over), a scale that failed or was fenced off.
    A partly admitted scale-up (2 wanted, 1 admitted) scales, and keeps the cooldown it starts.

    A spec that moved between the observation and the actuation (observed 3, an admin scaled to
    2 since) holds the fleet where it now is, under the guard ``spec-moved``: acting on the old
    decision would scale 2 -> 3 as if no change were asked, so without the cooldown a change
    starts (3 -> 3 starts none). The next tick observes 2 and decides with its guards.
    """
    spec = record.fleet.spec_replicas
    state = decided
    if facts.spec_now is not None and facts.spec_now != spec:
        if record.guard != SPEC_MOVED:
            note = f"the spec moved {spec} -> {facts.spec_now} after the observation; deciding next tick"
            record = replace(
                record, final=facts.spec_now, guard=SPEC_MOVED, guard_note=_join(record.guard_note, note)
            )
        return record, replace(state, guard_state=before.guard_state)
    a = facts.admission
    if a is not None and a.limit < record.final:
        record = replace(
            record, final=max(spec, a.limit), guard=a.guard, guard_note=_join(record.guard_note, a.note)
        )
        if record.final == spec:
            state = replace(state, guard_state=before.guard_state)
    if not facts.leading or facts.scale_failed:
        state = replace(state, guard_state=before.guard_state)
    return record, state


#: the guard of a decision held because the spec moved under it (see :func:`settle`)
SPEC_MOVED = "spec-moved"

#: a replica in these phases should answer its /metrics: no data from it is a scrape error
SCRAPED_PHASES = (Phase.READY, Phase.DRAINING)


def total_outage(obs: Observation) -> bool:
    """Replicas that should report exist and none did; or the source saw nothing of a fleet
    that should exist (a cluster without pod discovery, e.g. KEDA, and the source down).

    Replicas still starting are not an outage: their /metrics are not up yet. The simulator
    never has one (it scrapes every replica that is up), so a backtest's lines never show it.
    """
    scraped = [s for s in obs.replicas if s.phase in SCRAPED_PHASES]
    if scraped:
        return not any(s.ok for s in scraped)
    return not obs.replicas and obs.fleet.spec_replicas > 0


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def next_tick_after(due_s: float, cadence_s: float, now_s: float) -> float:
    """When the tick after one due at ``due_s`` and run at ``now_s`` is due.

    On schedule (``now_s`` within one cadence of ``due_s``, the backtest's every tick): ``due_s +
    cadence_s``, the same sums as before the core owned the schedule. A tick that ran a whole
    cadence late (a live tick that overran: a 15 s tick that took 20 s) is not caught up with a
    burst of ticks that would only repeat the same observation: the next is one cadence after it.
    """
    nxt = due_s + cadence_s
    return nxt if nxt > now_s else now_s + cadence_s


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
        target_s = ttft_target_s(float(prompt or 0.0), slo_ttft_s, slo_ttft_per_1k_tokens_s)
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
