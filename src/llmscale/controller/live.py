"""The live controller: the controller core (``controller/core.py``) driven by wall time.

Each tick runs the core the backtest runs (:func:`~llmscale.controller.core.observe`, then
:func:`~llmscale.controller.core.decide`) with ``now_s`` given as an argument, so a test drives
ticks with explicit times, and :meth:`LiveController.run` sleeps until the next tick the core
scheduled: every policy's own ``tick_s`` (Knative's 2 s, HPA's 15 s), unless the configuration's
``tick_s`` overrides it. Around the core the live loop adds what a real fleet needs:

- the cluster is the authority on which replicas exist (:class:`ClusterAlignedSource`):
  a replica the metric source missed is *unknown*, never absent or idle;
- modes: ``apply`` scales, ``dry-run`` decides and logs only, ``shadow`` runs a second
  policy on the same signals with its own guard state and logs both side by side;
- the core holds a scale-down through a total metrics outage (no replica reports) and settles
  what this loop learns around its decision (:func:`~llmscale.controller.core.settle`): the node
  layer's admission of a scale-up, whether this replica leads, a fenced or failed scale; the
  policy's standby pool is kept through :class:`~llmscale.cluster.base.StandbyCapable`;
- a tick that scales first saves the guard state the scale leads to, then writes its
  decision record, and only then scales: a tick whose state or record cannot be written
  does not act (a saved state is then put back), and a controller killed between the save
  and the scale restarts inside the cooldown the scale started (it may wait one cooldown
  too long, never act twice);
- a failed scale is counted by reason, recorded (a second line with the tick's trace id) and
  leaves the guard state as it was (the saved one is put back), so the next tick retries
  instead of waiting out a cooldown for a scale that never happened;
- the saved state is loaded at start, so a restarted controller takes no extra action within
  its cooldowns; when the controller acts, start-up also writes it back, and opens the
  decision log, so an unwritable store or log stops it before its first tick;
- the only broad ``except`` is at the top of :meth:`LiveController.tick`: a failing tick is
  logged, counted and recorded with its error (every replica it knew of counts as unknown),
  and the loop goes on;
- :meth:`LiveController.run` runs each tick in a worker thread under a deadline
  (``tick_deadline_s``, default the larger of 3 ticks and 30 s): a tick past it is abandoned,
  counted and recorded as failed, may no longer scale (its scale raises ActuationError), and no
  new tick starts while it still runs; :meth:`LiveController.healthy` (``/healthz``) turns false
  when no tick has decided for ``unhealthy_after_ticks`` ticks (and two deadlines), so a
  liveness probe restarts a controller stuck in anything; ``stop`` (SIGTERM) ends ``run`` within
  0.1 s whatever the tick is blocked on (issue 19: a tick that looped for minutes ignored both).

In ``dry-run`` and for the shadow policy the guard state advances as if the decision had
been applied: the log then shows the cadence of actions the policy would take (one
scale-up, then cooldown holds), not the same proposal repeated every tick.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from llmscale.clock import Clock, WallClock
from llmscale.cluster.base import Cluster, StandbyCapable
from llmscale.controller.admission import check_scale_up
from llmscale.controller.core import (
    SCRAPED_PHASES,
    SPEC_MOVED,
    Controller,
    ControllerState,
    TickFacts,
    decide,
    next_tick_after,
    observe,
    settle,
)
from llmscale.controller.decision_log import DecisionLog, DecisionLogError, LogEntry, new_trace_id
from llmscale.controller.persist import (
    StateFormatError,
    StateStore,
    decision_to_dict,
    state_from_dict,
    state_to_dict,
)
from llmscale.controller.server import ACTUATION_REASONS, ControllerMetrics
from llmscale.deployment import Deployment
from llmscale.errors import ActuationError, ConfigError, LlmscaleError
from llmscale.gc_tick import TickCollector
from llmscale.guards import GuardConfig, GuardState
from llmscale.metrics.source import MetricSource
from llmscale.policies.base import Policy
from llmscale.types import FleetView, Mode, Observation, Phase, ReplicaSample, TickRecord

__all__ = ["ClusterAlignedSource", "Elector", "LiveController", "PolicyRun", "actuation_reason"]


if TYPE_CHECKING:
    from llmscale.controller.admission import MigQuota, NodeAdmission
    from llmscale.controller.drift import DriftMonitor


class Elector(Protocol):
    """Leader election as the live loop reads it (``cluster/leader.py``'s LeaseElector)."""

    def start(self) -> None:
        """Begin campaigning (the first attempt happens before this returns)."""

    def is_leader(self) -> bool:
        """Whether this replica may act now (false once the renew deadline passed)."""

    @property
    def term(self) -> int | None:
        """The leadership term while leading, else None."""

    @property
    def identity(self) -> str:
        """This replica's name in the Lease."""


log = logging.getLogger(__name__)

#: how often run() looks at ``stop`` while a tick runs: SIGTERM ends the loop within this
_STOP_POLL_S = 0.1

#: a replica in these phases should answer its /metrics: no data from it is a scrape error
_SCRAPED_PHASES = SCRAPED_PHASES


class ClusterAlignedSource:
    """A MetricSource whose fleet is the cluster's: phases from the cluster, gaps as unknown.

    Per the contract: the source's ``Observation.fleet`` is replaced by the cluster's view;
    every replica the cluster lists that the source did not return becomes an unknown sample
    (``ok=False``); a sample of a replica the cluster does not list (a stale series of a
    deleted pod) is dropped. A cluster that lists no replicas at all (KEDA without pod
    discovery) keeps the source's samples, with the cluster's spec.
    """

    def __init__(self, source: MetricSource, cluster: Cluster) -> None:
        self.source = source
        self.cluster = cluster
        #: replicas in READY/DRAINING without data at the last observe (failed or missing scrapes)
        self.last_missing = 0
        #: replicas in READY/DRAINING at the last observe that got that far: the ones whose load
        #: is unknown when a later tick fails before it observes anything
        self.last_serving = 0

    def observe(self, now_s: float) -> Observation:
        obs = self.source.observe(now_s)
        views = self.cluster.replicas_view()
        spec = self.cluster.spec_replicas
        if not views:
            counts = {p: 0 for p in Phase}
            for s in obs.replicas:
                counts[s.phase] += 1
            fleet = FleetView(
                spec_replicas=spec,
                pending=counts[Phase.PENDING],
                loading=counts[Phase.LOADING],
                warmup=counts[Phase.WARMUP],
                ready=counts[Phase.READY],
                draining=counts[Phase.DRAINING],
                node_pending=counts[Phase.NODE_PENDING],
            )
            self.last_missing = sum(1 for s in obs.replicas if not s.ok and s.phase in _SCRAPED_PHASES)
            self.last_serving = sum(1 for s in obs.replicas if s.phase in _SCRAPED_PHASES)
            return replace(obs, fleet=fleet)
        by_name = {s.replica: s for s in obs.replicas}
        samples = []
        missing = 0
        for v in views:
            found = by_name.get(v.name)
            s = ReplicaSample(v.name, v.phase, ok=False) if found is None else found
            if s.phase != v.phase:
                s = replace(s, phase=v.phase)
            if not s.ok and v.phase in _SCRAPED_PHASES:
                missing += 1
            samples.append(s)
        self.last_missing = missing
        self.last_serving = sum(1 for v in views if v.phase in _SCRAPED_PHASES)
        return replace(obs, fleet=FleetView.from_replicas(spec, views), replicas=tuple(samples))


def actuation_reason(e: BaseException) -> str:
    """conflict / server_error / forbidden / other, from the error's ``reason`` or HTTP ``status``.

    ``cluster/kubernetes.py`` sets ``reason``; for other actuators the status of the error or
    of its cause (an ``ApiException`` or HTTP error) decides: 409, 5xx, 401/403.
    """
    reason = getattr(e, "reason", None)
    if reason in ACTUATION_REASONS:
        return str(reason)
    for err in (e, e.__cause__):
        status = getattr(err, "status", None) or getattr(err, "status_code", None)
        if status is None:
            resp = getattr(err, "response", None)
            status = getattr(resp, "status_code", None)
        if isinstance(status, int):
            if status == 409:
                return "conflict"
            if status >= 500:
                return "server_error"
            if status in (401, 403):
                return "forbidden"
    return "other"


@dataclass(frozen=True)
class PolicyRun:
    """A policy with its guards and the version string the decision log names it by."""

    policy: Policy[Any]
    guards: GuardConfig
    version: str


class LiveController:
    """Ticks the control loop against ``source`` and ``cluster``; see the module docstring."""

    def __init__(
        self,
        *,
        source: MetricSource,
        cluster: Cluster,
        primary: PolicyRun,
        mode: Mode,
        target: str,
        metrics: ControllerMetrics,
        clock: Clock,
        tick_s: float | None = None,
        shadow: PolicyRun | None = None,
        primary_acts: bool | None = None,
        decision_log: DecisionLog | None = None,
        store: StateStore | None = None,
        deployment: Deployment | None = None,
        timer: Clock | None = None,
        config_name: str | None = None,
        drift: DriftMonitor | None = None,
        elector: Elector | None = None,
        admission: NodeAdmission | None = None,
        quota: MigQuota | None = None,
    ) -> None:
        """``tick_s``: seconds between ticks, overriding the primary policy's own ``tick_s`` (None:
        the policy's cadence; the shadow policy decides at the primary's ticks). ``deployment``:
        whose SLOs each record's fleet state is judged by (None: none). ``clock``: the controller's
        time line (epoch seconds live, so saved state survives a restart). ``timer``: what tick
        durations are measured with (monotonic by default).
        ``primary_acts``: whether the primary's decision scales the target (default: in apply and
        shadow modes; config's ``shadow.primary: dry-run`` turns it off). ``config_name``: the
        config file, named in start-up errors about its settings. ``drift``: the model-drift
        hook (``controller/drift.py``), run on each tick's signals before the policies.
        ``elector``: leader election (``cluster/leader.py``); only the leader acts and saves state.
        ``admission``: seed 003 3.1's node checks (``controller/admission.py``): a scale-up no node
        can take is held at the current spec. ``quota``: the tenant's MIG quota (the same file and
        check as ``llmscale tenants``), checked before the nodes.
        """
        if mode is Mode.SHADOW and shadow is None:
            raise ConfigError("mode shadow needs a shadow policy")
        self.source = ClusterAlignedSource(source, cluster)
        self.cluster = cluster
        self.primary = primary
        self.shadow = shadow
        self.mode = mode
        self.primary_acts = mode is not Mode.DRY_RUN if primary_acts is None else primary_acts
        if self.primary_acts and mode is Mode.DRY_RUN:
            raise ConfigError("dry-run never scales: primary_acts must be False")
        self.target = target
        self.metrics = metrics
        self.clock = clock
        self._timer = timer or WallClock()
        self.decision_log = decision_log
        self.store = store
        self.deployment = deployment
        self._tick_override_s = tick_s
        # The first tick is due at once; the core schedules the rest.
        self.state = ControllerState(policy_state=primary.policy.initial_state(), next_tick_s=clock.now_s())
        self.shadow_state = ControllerState(policy_state=shadow.policy.initial_state()) if shadow else None
        self.last_decision: Mapping[str, Any] | None = None
        self.last_tick_s: float | None = None
        self.ticks = 0
        self.failed_ticks = 0
        #: why the last tick did not complete what it decided (it raised, its record or state could
        #: not be written, or its scale failed); None when it did
        self.last_failure: str | None = None
        self.config_name = config_name
        self.drift = drift
        self.elector = elector
        self.admission = admission
        self.quota = quota
        #: whether this replica led at its previous tick: a standby that becomes the leader
        #: reloads the saved state first, so it honours the cooldowns its predecessor started
        self._was_leading = elector is None
        self._started = False
        self._errors_seen = 0

    @property
    def tick_s(self) -> float:
        """Seconds between ticks: the primary policy's cadence, or the configuration's override."""
        return self._core(self.primary).cadence_s

    def _core(self, run: PolicyRun) -> Controller:
        """What the core ticks for ``run``; a shadow policy decides at the primary's ticks."""
        return Controller(run.policy, run.guards, self.deployment, tick_s=self._tick_override_s)

    # -- start ------------------------------------------------------------------------------

    def start(self) -> None:
        """Check ownership (when the primary acts) and load the saved state. Raises ConfigError.

        Ownership first: a controller that would fight an HPA must refuse before it acts,
        with the owner named (``KubernetesCluster.check_ownership``).
        """
        check = getattr(self.cluster, "check_ownership", None)
        if self.primary_acts and callable(check):
            check()
        where = f"{self.config_name}: " if self.config_name else ""
        if self.decision_log is not None:
            try:
                self.decision_log.open()
            except DecisionLogError as e:
                raise ConfigError(f"{where}decision_log.path: {e}") from e
        if self.elector is not None:
            self.elector.start()
            self._was_leading = self.elector.is_leader()
        if self.store is not None:
            self._load_state()
            if self.primary_acts and self._leading():
                # Written back now, so a store this controller cannot write (a read-only file, a
                # Role without update on the ConfigMap) stops it here, not at its first scale.
                try:
                    self._persist(self.state.guard_state, self.last_decision)
                except LlmscaleError as e:
                    raise ConfigError(f"{where}state: cannot save the controller state: {e}") from e
        self._started = True

    def _load_state(self) -> None:
        assert self.store is not None
        doc = self.store.load()
        if doc is None:
            log.info("no saved controller state for %s: starting fresh", self.target)
            return
        try:
            saved = state_from_dict(doc)
        except StateFormatError as e:
            # Refusing to start over an unreadable annotation would leave the fleet unmanaged;
            # starting fresh costs at most one early action.
            log.warning("ignoring saved controller state for %s: %s", self.target, e)
            return
        if saved.target and saved.target != self.target:
            log.warning("ignoring saved state of %s (this controller scales %s)", saved.target, self.target)
            return
        self.state = replace(self.state, guard_state=saved.guard_state)
        self.last_decision = saved.last_decision
        log.info("loaded controller state for %s: last decision %s", self.target, saved.last_decision)
        if self.drift is not None and self.drift.settings.adapt:
            why_not = self.drift.restore(doc.get("drift"))
            log.info("step-time factors for %s: %s", self.target, why_not or f"restored {self.drift.factors}")

    # -- the tick ---------------------------------------------------------------------------

    def tick(self, now_s: float) -> LogEntry | None:
        """One tick at ``now_s`` (the controller's clock); None when the tick failed.

        Every tick writes a decision record, a failed one with its error (see the decision log).
        """
        if not self._started:
            self.start()
        t0 = self._timer.now_s()
        trace_id = new_trace_id()
        try:
            entry = self._tick(now_s, t0, trace_id)
        except Exception as e:  # the loop's one broad except: a bad tick must not stop the controller
            self.failed_ticks += 1
            self.last_failure = f"{type(e).__name__}: {e}"
            self.metrics.tick_errors.inc()
            log.exception("tick at %.3f failed; the loop goes on", now_s)
            self._record_failure(now_s, t0, trace_id, self.last_failure)
            # A failed tick still keeps the cadence: the next one is one interval later, not at once.
            due = next_tick_after(self.state.next_tick_s, self.tick_s, now_s)
            self.state = replace(self.state, next_tick_s=due)
            return None
        finally:
            self.metrics.tick_duration.observe(max(0.0, self._timer.now_s() - t0))
        return entry

    def _leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def _lease_fields(self, leading: bool) -> dict[str, Any]:
        if self.elector is None:
            return {}
        self.metrics.leader.set(1.0 if leading else 0.0)
        return {"leader": leading, "lease_term": self.elector.term, "identity": self.elector.identity}

    def _tick(self, now_s: float, t0: float, trace_id: str) -> LogEntry:
        leading = self._leading()
        if leading and not self._was_leading and self.store is not None:
            # Taking over: the predecessor's cooldown clocks are in the store, not in this
            # replica's standby state (tests/kubernetes/test_kube_leader.py pins it). Nothing
            # saved means no leader ever scaled: start from fresh clocks, not from the standby's
            # as-if-applied ones, which would hold a needed scale-up for a cooldown no scale began.
            self.state = replace(self.state, guard_state=GuardState())
            self._load_state()
        self._was_leading = leading
        before = self.state
        observed, signals = observe(before, self.source.observe(now_s))
        window = observed.window
        if self.drift is not None:
            signals = self.drift.tick(now_s, window, signals)
        obs = window[-1]
        held = getattr(self.cluster, "set_held_requests", None)
        if callable(held):  # KEDA: requests held at the activator make the ScaledObject active at once
            held(obs.gateway_queue)
        run = self.primary
        # The core decides, holds a scale-down through a total metrics outage, and settles what
        # this adapter learns: the resource layer's admission of a scale-up (the tenant's MIG
        # quota, then the nodes), and whether it leads.
        record, state = decide(self._core(run), observed, signals, now_s)
        outage = record.metrics_outage
        if outage:
            log.warning(
                "metrics outage for %s: none of %d replica(s) reported; holding any scale-down",
                self.target, len(obs.replicas),
            )  # fmt: skip
        verdict, admitted = check_scale_up(obs.fleet, record.final, self.quota, self.admission)
        if verdict is not None:
            log.warning("holding %s's scale-up at %d: %s", self.target, verdict.limit, verdict.note)
        current = self.cluster.spec_replicas
        record, state = settle(
            record, state, before, TickFacts(admission=verdict, leading=leading, spec_now=current)
        )
        if record.guard == SPEC_MOVED:
            log.info("%s: %s", self.target, record.guard_note)
        # A KEDA scaler serves nothing until its first decision is published, even one that
        # equals the starting spec (KEDA would see UNAVAILABLE and the ScaledObject its fallback).
        unpublished = getattr(self.cluster, "has_decision", True) is False
        act = self.primary_acts and leading and (record.final != current or unpublished)
        if act and not self._leading():
            # Fencing: the renew deadline passed since the tick began; nothing is saved or scaled.
            act = leading = False
        changes = act and record.final != current
        # Written ahead of the scale: ``applied`` says the scale is asked for (see decision_log.py).
        record = replace(record, applied=changes)

        if not leading:
            # Fenced before anything was saved: settled as a standby, whose guard clocks are the
            # leader's (the core puts back the ones before the tick).
            record, state = settle(record, state, before, TickFacts(leading=False))

        shadow_record = None
        shadow_state = self.shadow_state
        if self.shadow is not None and shadow_state is not None:
            shadow_record, shadow_state = decide(
                self._core(self.shadow), replace(shadow_state, window=window), signals, now_s
            )

        entry = LogEntry(
            record=record,
            trace_id=trace_id,
            policy_version=run.version,
            mode=str(self.mode),
            target=self.target,
            unknown_replicas=signals.unknown_replicas,
            metrics_outage=outage,
            shadow=shadow_record,
            shadow_version=self.shadow.version if self.shadow else None,
            tick_duration_s=max(0.0, self._timer.now_s() - t0),
            drift=self.drift.last.as_json() if self.drift is not None and self.drift.last else None,
            admission=admitted,
            **self._lease_fields(leading),
        )
        saved = before.guard_state, self.last_decision
        decision = decision_to_dict(record) if changes else self.last_decision
        # An acting controller also saves when the step-time factors moved (by 1%), so a restart
        # plans with them at once instead of learning them again over the adjustment's time constant.
        if not changes and self.primary_acts and leading and self.drift is not None and self.drift.moved:
            try:
                self._persist(state.guard_state, decision)
            except LlmscaleError as e:
                log.warning("could not save the adjusted step-time factors of %s: %s", self.target, e)
        if changes:
            # The state the scale leads to, before the scale: a kill between the two must not lose
            # the cooldown clock it starts. Raises: then nothing is written or scaled.
            self._persist(state.guard_state, decision)
        try:
            self._write(entry)
        except LlmscaleError:
            if changes:
                self._restore(*saved)
            raise

        error: dict[str, str] | None = None
        if act and not self._leading():
            # Fencing: the renew deadline passed while this tick ran. The state saved above may
            # start a cooldown for a scale that never happens: one cooldown too long, never twice.
            log.warning("lost the lease during the tick: not scaling %s to %d", self.target, record.final)
            act = False
            record = replace(record, applied=False)
            entry = replace(
                entry,
                record=record,
                leader=False,
                lease_term=None,
                actuation_error={"reason": "not_leader", "message": "lease lost before the scale"},
            )
            record, state = settle(record, state, before, TickFacts(scale_failed=True))
            decision = self.last_decision
            self.last_failure = "lost the lease before the scale"
            error = dict(entry.actuation_error or {})
            self._write(entry)
        if act:
            try:
                self.cluster.scale_to(record.final, now_s, drain_until_idle=run.guards.drain_aware)
            except ActuationError as e:
                reason = actuation_reason(e)
                error = {"reason": reason, "message": str(e)}
                self.metrics.actuation_errors.labels(reason=reason).inc()
                log.warning(
                    "scaling %s %d -> %d failed (%s): %s", self.target, current, record.final, reason, e
                )
                # The scale did not happen: no cooldown starts, the next tick decides afresh.
                record, state = settle(record, state, before, TickFacts(scale_failed=True))
                decision = self.last_decision
                if changes:
                    self._restore(*saved)
                record = replace(record, applied=False)
                entry = replace(entry, record=record, actuation_error=error)
                self.last_failure = f"scaling to {record.final} failed ({reason}): {e}"
                self._write(entry)  # the outcome, under the same trace id
            else:
                if changes:
                    direction = "up" if record.final > current else "down"
                    self.metrics.scale_actions.labels(direction=direction).inc()
        if (
            record.standby is not None
            and self.primary_acts
            and leading
            and (error is None or error.get("reason") != "not_leader")
            and isinstance(self.cluster, StandbyCapable)
        ):
            # The policy's standby pool (Decision.standby), kept on every tick that has one, as the
            # backtest does: a declarative target the cluster reconciles (a drained replica may
            # have gone instead of falling asleep). Not guarded: it serves nothing.
            try:
                self.cluster.set_standby(record.standby, now_s)
            except ActuationError as e:
                reason = actuation_reason(e)
                self.metrics.actuation_errors.labels(reason=reason).inc()
                log.warning("keeping %d of %s asleep failed (%s): %s", record.standby, self.target, reason, e)
                error = {"reason": reason, "message": f"standby {record.standby}: {e}"}
                entry = replace(entry, record=record, actuation_error=error)
                self.last_failure = f"keeping {record.standby} asleep failed ({reason}): {e}"
                self._write(entry)
        if error is None:
            self.last_failure = None
        self.state = state
        self.shadow_state = shadow_state
        self.last_decision = decision

        self._export(record, shadow_record, signals.unknown_replicas)
        self.metrics.observe_signals({k: v.value for k, v in signals.values.items()})
        self.metrics.scrape_errors.labels(source=self.metrics.source_kind).inc(self._scrape_errors())
        self.last_tick_s = now_s
        self.ticks += 1
        self.metrics.last_tick.set(now_s)
        return entry

    def _write(self, entry: LogEntry) -> None:
        if self.decision_log is not None:
            # An abandoned tick's worker may still write while run() records it as failed.
            with _WRITE_LOCK:
                self.decision_log.write(entry)

    def _record_failure(self, now_s: float, t0: float, trace_id: str, error: str) -> None:
        """A failed tick's line, and its unknowns: every serving replica the controller knew of,
        since a tick that failed saw none of them (the gauge must not keep the last good tick's 0)."""
        unknown = self.source.last_serving
        self.metrics.unknown.set(unknown)
        entry = LogEntry(
            record=None,
            trace_id=trace_id,
            policy_version=self.primary.version,
            mode=str(self.mode),
            target=self.target,
            unknown_replicas=unknown,
            metrics_outage=False,
            shadow_version=self.shadow.version if self.shadow else None,
            tick_duration_s=max(0.0, self._timer.now_s() - t0),
            error=error,
            time_s=now_s,
            **self._lease_fields(self._leading()),
        )
        try:
            self._write(entry)
        except LlmscaleError as e:
            log.error("cannot record the failed tick at %.3f either: %s", now_s, e)

    def _scrape_errors(self) -> int:
        """Failed fetches this tick: the source's own ``errors_total`` when it keeps one
        (``PodScrapeSource`` does: it also counts a failed target listing or DCGM page),
        else the serving replicas that came back without data."""
        total = getattr(self.source.source, "errors_total", None)
        if isinstance(total, int):
            delta = max(0, total - self._errors_seen)
            self._errors_seen = total
            return delta
        return self.source.last_missing

    def _export(self, record: TickRecord, shadow: TickRecord | None, unknown: int) -> None:
        m = self.metrics
        m.observe_fleet(record.fleet)
        m.unknown.set(unknown)
        m.desired.labels(target=self.target, policy=record.policy).set(record.final)
        m.proposed.labels(target=self.target, policy=record.policy).set(record.proposed.desired)
        m.decisions.labels(policy=record.policy, rule=record.proposed.rule).inc()
        if record.guard is not None:
            m.guard_actions.labels(guard=record.guard).inc()
        if shadow is not None:
            m.shadow_desired.labels(policy=shadow.policy).set(shadow.final)
            m.decisions.labels(policy=shadow.policy, rule=shadow.proposed.rule).inc()

    def _persist(self, guard_state: GuardState, last_decision: Mapping[str, Any] | None) -> None:
        """Save the state document; raises LlmscaleError (a store's failure) when it cannot."""
        if self.store is None:
            return
        doc = state_to_dict(guard_state, last_decision, target=self.target)
        if self.drift is not None and self.drift.settings.adapt:
            doc["drift"] = self.drift.to_state()
        self.store.save(doc)

    def _restore(self, guard_state: GuardState, last_decision: Mapping[str, Any] | None) -> None:
        """Put back the state saved before a scale that did not happen (best effort: if this fails
        too, the saved clock only delays a restarted controller's next action by one cooldown)."""
        try:
            self._persist(guard_state, last_decision)
        except LlmscaleError as e:
            log.warning("could not restore the controller state of %s: %s", self.target, e)

    # -- readiness and the loop -------------------------------------------------------------

    def ready(self) -> bool:
        """A tick completed, and the last one is younger than three tick intervals."""
        last = self.last_tick_s
        return last is not None and self.clock.now_s() - last < 3.0 * self.tick_s

    #: seconds a tick may run under :meth:`run` before it is abandoned; None: the larger of three
    #: tick intervals and 30 s (a scrape's own time-outs are 2 s a target; 30 s is never a tick)
    tick_deadline_s: float | None = None
    #: tick intervals without a decision after which :meth:`healthy` is false (at least two deadlines)
    unhealthy_after_ticks: int = 10
    #: the controller's time when run() started (None: not running)
    _run_started_s: float | None = None

    @property
    def deadline_s(self) -> float:
        """Seconds a tick may run (see ``tick_deadline_s``)."""
        return self.tick_deadline_s if self.tick_deadline_s is not None else max(3.0 * self.tick_s, 30.0)

    def healthy(self) -> bool:
        """Whether the loop decides: a tick completed within the last ``unhealthy_after_ticks``
        intervals (and two deadlines) of the controller's clock, counted from when :meth:`run`
        started. True before ``run`` (starting up). ``/healthz`` answers it, so a liveness probe
        restarts a controller whose ticks hang or fail, e.g. at 15 s ticks after 150 s."""
        since = self._run_started_s
        if since is None:
            return True
        last = self.last_tick_s
        ref = since if last is None else max(since, last)
        limit = max(self.unhealthy_after_ticks * self.tick_s, 2.0 * self.deadline_s)
        return self.clock.now_s() - ref < limit

    def run(self, stop: threading.Event, *, max_ticks: int | None = None) -> int:
        """Tick when the core says the next tick is due, until ``stop`` is set or ``max_ticks``
        ticks ran; returns ticks run (a tick abandoned past its deadline counts).

        A tick that overruns its interval starts the next one at once, without trying to catch
        up on the missed ones (:func:`~llmscale.controller.core.next_tick_after`: a burst of
        ticks would only repeat the same observation). Each tick runs in a worker thread under
        :attr:`deadline_s` (see the module docstring); ``stop`` ends the loop within 0.1 s.
        """
        self._run_started_s = self.clock.now_s()
        if not isinstance(self.cluster, _FencedCluster):
            self.cluster = _FencedCluster(self.cluster)
        n = 0
        # The window's objects are frozen between ticks, not walked by every full collection
        # (gc_tick.py: at 5,000 replicas that walk cost about one full collection a tick).
        collector = TickCollector()
        try:
            while not stop.is_set():
                delay = self.state.next_tick_s - self.clock.now_s()
                if delay > 0 and stop.wait(delay):
                    break
                collector.before_tick()
                if not self._tick_within_deadline(self.clock.now_s(), stop):
                    break
                collector.after_tick()
                n += 1
                if max_ticks is not None and n >= max_ticks:
                    break
        finally:
            collector.close()
        return n

    def _tick_within_deadline(self, now_s: float, stop: threading.Event) -> bool:
        """Run :meth:`tick` in a worker thread for at most :attr:`deadline_s`; False when ``stop``
        was set meanwhile (the tick is left to itself: the process is ending)."""
        fence = self.cluster
        assert isinstance(fence, _FencedCluster)
        late = fence.abandoned
        if late is not None and late.is_alive():
            # The abandoned tick still runs: a second one would race it on the state. Record the
            # tick interval as failed, so the log shows every interval and /healthz the hang.
            self._fail_tick(
                now_s, f"the tick abandoned past its {self.deadline_s:g} s deadline is still running"
            )
            return not stop.is_set()
        done = threading.Event()

        def work() -> None:
            try:
                self.tick(now_s)
            finally:
                done.set()

        worker = threading.Thread(target=work, name="llmscale-tick", daemon=True)
        t0 = self._timer.now_s()
        worker.start()
        while not done.wait(_STOP_POLL_S):
            if stop.is_set():
                fence.abandon(worker)
                return False
            if self._timer.now_s() - t0 > self.deadline_s:
                fence.abandon(worker)
                log.error("tick at %.3f passed its %g s deadline: abandoned", now_s, self.deadline_s)
                self._fail_tick(
                    now_s, f"tick abandoned: still running after its {self.deadline_s:g} s deadline"
                )
                return True
        return True

    def _fail_tick(self, now_s: float, why: str) -> None:
        """Count and record a tick that did not decide; the next one is due one interval later."""
        self.failed_ticks += 1
        self.last_failure = why
        self.metrics.tick_errors.inc()
        self._record_failure(now_s, self._timer.now_s(), new_trace_id(), why)
        self.state = replace(
            self.state, next_tick_s=next_tick_after(self.state.next_tick_s, self.tick_s, now_s)
        )


_WRITE_LOCK = threading.Lock()


class _FencedCluster:
    """The controller's cluster, refusing scales from a tick :meth:`LiveController.run` abandoned.

    A tick past its deadline decided on an observation that old; if it ever reaches its scale,
    the scale raises :class:`ActuationError`, which the tick records (the guard state is put back)
    as for any failed scale. Everything else is the cluster's own.
    """

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self.abandoned: threading.Thread | None = None

    def abandon(self, worker: threading.Thread) -> None:
        self.abandoned = worker

    def scale_to(self, n: int, now_s: float, **kw: Any) -> None:
        if threading.current_thread() is self.abandoned:
            raise ActuationError(f"not scaling to {n}: this tick was abandoned past its deadline")
        self._cluster.scale_to(n, now_s, **kw)

    def set_standby(self, n: int, now_s: float) -> None:
        if threading.current_thread() is self.abandoned:
            raise ActuationError(f"not keeping {n} asleep: this tick was abandoned past its deadline")
        if not isinstance(self._cluster, StandbyCapable):
            # as a plain attribute look-up would: isinstance(fenced, StandbyCapable) stays False
            raise AttributeError("set_standby")
        self._cluster.set_standby(n, now_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)
