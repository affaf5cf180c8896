"""The simulated fleet driven in wall-clock time: submit requests as they arrive, follow their tokens.

The backtest's :class:`~llmscale.sim.fleet.Fleet` is used unchanged: simulated
time is the wall time since :meth:`Emulator.start` times ``time_scale``. Every
call that touches the fleet first runs it up to "now", so the HTTP layer only
ever sees the simulator's state at the present instant. Nothing here does I/O:
the server module calls :meth:`Emulator.advance` from its event loop and
sleeps :meth:`Emulator.wait_s` in between. A client that goes away is
:meth:`Emulator.abort`-ed: its request leaves its replica at once (Fleet.abort).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import numpy as np

from llmscale.clock import Clock, WallClock
from llmscale.emulate.config import EmulateConfig
from llmscale.emulate.request_stats import RequestStats, RequestTimes
from llmscale.errors import ConfigError
from llmscale.sim.config import SimConfig
from llmscale.sim.fleet import Fleet
from llmscale.sim.replica import Replica
from llmscale.sim.request import Req
from llmscale.types import Phase, Status

__all__ = ["Emulator", "Flight", "Outcome", "ReplicaInfo", "build_sim_config"]


class Outcome:
    """How a flight ended, as the HTTP layer reports it (None while it streams)."""

    COMPLETED = "completed"
    REJECTED = "rejected"  # longer than the model's context: vLLM answers 400
    TIMED_OUT = "timed_out"  # waited the simulator's timeout_s without a first token
    KILLED = "killed"  # in flight on a replica killed at its grace deadline
    ABORTED = "aborted"  # its client went away (disconnected)
    SHUTDOWN = "shutdown"  # the emulator stopped


_OUTCOME_OF_STATUS = {
    Status.COMPLETED: Outcome.COMPLETED,
    Status.REJECTED: Outcome.REJECTED,
    Status.TIMED_OUT: Outcome.TIMED_OUT,
    Status.KILLED: Outcome.KILLED,
    Status.ABORTED: Outcome.ABORTED,
}


class Flight:
    """One HTTP request inside the simulator: its tokens so far and a wake-up for its handler.

    ``finish_reason`` is how it ends if it completes: ``"length"`` or ``"stop"`` (a stop
    string; its output length was cut to it when it arrived).
    """

    __slots__ = ("changed", "emitted", "finish_reason", "max_tokens_param", "n_param", "outcome", "req")

    def __init__(
        self,
        req: Req,
        finish_reason: str = "length",
        *,
        changed: asyncio.Event | None = None,
        max_tokens_param: int | None = None,
        n_param: int | None = None,
    ) -> None:
        self.req = req
        self.finish_reason = finish_reason
        self.emitted = 0
        self.outcome: str | None = None
        #: set when its tokens or outcome change; the n sequences of one request share one
        self.changed = changed or asyncio.Event()
        #: what the replica's vllm:request_params_* histograms observe when it ends (n: once a request)
        self.max_tokens_param = max_tokens_param
        self.n_param = n_param

    @property
    def replica_name(self) -> str | None:
        r = self.req.replica
        return r.name if isinstance(r, Replica) else None


@dataclass(frozen=True)
class ReplicaInfo:
    """One replica in the admin API's terms. Times on the emulator's own time line (s since start)."""

    name: str
    phase: Phase
    created_s: float
    since_s: float
    #: the engine's batch limit now: max_num_seqs, or less while the adaptive batch fuse holds it down
    max_num_seqs: int = 0


def build_sim_config(cfg: EmulateConfig) -> SimConfig:
    """The simulator settings for ``cfg``: catalogue cold start unless a phase duration is given."""
    from llmscale.perf import cold_start, start_tiers

    cs = cold_start(cfg.model, cfg.gpu, cfg.tp)
    wake_s = start_tiers(cfg.model, cfg.gpu, cfg.tp).sleeping.total_s if cfg.wake_s is None else cfg.wake_s
    return SimConfig(
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        chunked_prefill=cfg.chunked_prefill,
        step_token_stats=True,
        pending_s=cs.pending_s if cfg.pending_s is None else cfg.pending_s,
        loading_s=cs.loading_s if cfg.loading_s is None else cfg.loading_s,
        warmup_s=cs.warmup_s if cfg.warmup_s is None else cfg.warmup_s,
        wake_s=wake_s,
        grace_s=cfg.grace_s,
        timeout_s=cfg.timeout_s,
        seed=cfg.seed,
        hbm_glitches=cfg.hbm_glitches,
        adaptive_batch=cfg.adaptive_batch,
    )


class Emulator:
    """A :class:`Fleet` with no workload arrays, fed online; starts with ``cfg.replicas`` Ready replicas."""

    def __init__(self, cfg: EmulateConfig, clock: Clock | None = None) -> None:
        from llmscale.perf import get_perf_model

        self.cfg = cfg
        self.perf = get_perf_model(
            cfg.model, cfg.gpu, cfg.tp, calibration=cfg.calibration, precision=cfg.precision
        )
        empty_f = np.zeros(0, dtype=np.float64)
        empty_i = np.zeros(0, dtype=np.int64)
        self.fleet = Fleet(
            self.perf,
            build_sim_config(cfg),
            empty_f,
            empty_i,
            empty_i,
            initial_replicas=cfg.replicas,
            gpus_per_replica=cfg.tp,
        )
        self._clock: Clock = clock or WallClock()
        self._t0: float | None = None
        self._flights: dict[int, Flight] = {}
        self._stats: dict[str, RequestStats] = {}  # per replica name, for its /metrics
        self.wake = asyncio.Event()  # set on a submit or a scale, so the loop re-plans its sleep

    # ------------------------------------------------------------------ time

    def start(self) -> None:
        """Simulated time 0 is now."""
        self._t0 = self._clock.now_s()

    def now_s(self) -> float:
        """Simulated seconds since :meth:`start`; never below the fleet's own time."""
        if self._t0 is None:
            raise RuntimeError("Emulator.start() was not called")
        return max(self.fleet.now, (self._clock.now_s() - self._t0) * self.cfg.time_scale)

    def advance(self) -> float:
        """Run the fleet to now, refresh every flight's token count; return now (simulated s)."""
        now = self.now_s()
        fleet = self.fleet
        fleet.run_until(now)
        fleet.sync_all(now)
        done = []
        for idx, flight in self._flights.items():
            emitted = fleet.emitted_tokens(flight.req, now)
            status = fleet.status[idx]
            if status != Status.IN_FLIGHT:
                flight.outcome = _OUTCOME_OF_STATUS.get(status, Outcome.KILLED)
                done.append(idx)
            if emitted != flight.emitted or flight.outcome is not None:
                flight.emitted = max(flight.emitted, emitted)  # a recompute never takes back sent tokens
                flight.changed.set()
        for idx in done:
            self._ended(self._flights.pop(idx))
        return now

    def _ended(self, flight: Flight) -> None:
        """Count a flight that just ended on its replica's vLLM request metrics."""
        name = flight.replica_name
        if name is None:
            return  # it never reached a replica (rejected, or gave up at the gateway)
        if flight.outcome == Outcome.COMPLETED:
            reason, generated = flight.finish_reason, flight.req.output_tokens
        elif flight.outcome in (Outcome.ABORTED, Outcome.TIMED_OUT):
            # A client that gave up is an abort to vLLM, with what it had generated by then.
            reason, generated = "abort", flight.emitted
        else:
            return  # killed with its replica: that replica's metrics are gone with it
        self.stats_of(name).record(
            reason,
            flight.req.input_tokens,
            generated,
            times=self._times(flight),
            max_tokens=flight.max_tokens_param,
            n=flight.n_param,
        )

    def _times(self, flight: Flight) -> RequestTimes | None:
        """Its phases as vLLM times them, from the simulated request's own instants; None when it
        was never scheduled (it gave up waiting). An aborted request ends now, a completed one at
        its last token; one aborted before its first token spent all of it in prefill."""
        req = flight.req
        start = req.scheduled_s
        if start < 0.0:
            return None
        end = self.fleet.now
        if flight.outcome == Outcome.COMPLETED:
            end = float(self.fleet.finish_at_s[req.idx])
        if not math.isfinite(end):
            end = self.fleet.now
        first = req.first_token_s if 0.0 <= req.first_token_s <= end else end
        return RequestTimes(prefill_s=first - start, decode_s=end - first, inference_s=end - start)

    def stats_of(self, replica_name: str) -> RequestStats:
        """The finished-request counts of a replica (made on first use)."""
        stats = self._stats.get(replica_name)
        if stats is None:
            stats = self._stats[replica_name] = RequestStats(self.max_model_len)
        return stats

    def forget_stats(self, replica_name: str) -> None:
        """Drop a gone replica's counts (its /metrics is gone too)."""
        self._stats.pop(replica_name, None)

    def wait_s(self, now_s: float) -> float:
        """Wall seconds the loop may sleep before something visible can change.

        While requests stream, at most ``tick_s`` (tokens inside a decode jump
        are not separate events); otherwise until the next queued event (a
        lifecycle step, say), capped at 0.5 s so a long sleep never hides a bug.
        """
        horizon = self.fleet.next_event_s - now_s
        cap = self.cfg.tick_s if self._flights else 0.5
        wall = horizon / self.cfg.time_scale
        return min(cap, max(0.0, wall)) if math.isfinite(wall) else cap

    # --------------------------------------------------------------- requests

    def submit(
        self,
        input_tokens: int,
        output_tokens: int,
        replica_name: str | None = None,
        *,
        finish_reason: str = "length",
        changed: asyncio.Event | None = None,
        max_tokens_param: int | None = None,
        n_param: int | None = None,
    ) -> Flight:
        """A request arriving now: routed like the simulator's router, or to one replica by name.

        ``finish_reason`` is what its ``output_tokens`` end on (``"stop"``: a stop string);
        ``changed``, ``max_tokens_param``, ``n_param``: see :class:`Flight`.
        Pre: ``replica_name`` (when given) names a READY replica; check with :meth:`phase_of`.
        """
        if input_tokens < 1 or output_tokens < 1:
            raise ConfigError(f"input_tokens = {input_tokens}, output_tokens = {output_tokens}: both >= 1")
        target = self._replica(replica_name) if replica_name is not None else None
        if target is not None and target.phase != Phase.READY:
            raise ConfigError(f"replica {replica_name} is {target.phase.label}, not ready")
        now = self.now_s()
        req = self.fleet.submit(input_tokens, output_tokens, now, target)
        flight = Flight(
            req, finish_reason, changed=changed, max_tokens_param=max_tokens_param, n_param=n_param
        )
        self._flights[req.idx] = flight
        self.advance()  # an immediate rejection, or a first token at this very instant, shows at once
        self.wake.set()
        return flight

    def abort(self, flight: Flight) -> bool:
        """The client of ``flight`` went away: take its request out of the fleet now.

        Its batch slot and KV blocks are free at once and it counts as vLLM's
        ``finished_reason="abort"``. False when it had ended already (then
        :meth:`advance` reports how).
        """
        if flight.outcome is not None:
            return False
        now = self.now_s()
        self.fleet.run_until(now)
        if not self.fleet.abort(flight.req, now):
            return False
        flight.emitted = max(flight.emitted, flight.req.generated)
        flight.outcome = Outcome.ABORTED
        self._flights.pop(flight.req.idx, None)
        self._ended(flight)
        flight.changed.set()
        self.wake.set()  # the replica may have work to schedule, or nothing left to wait for
        return True

    def close_all(self) -> None:
        """End every open flight (the emulator is stopping), so no handler waits forever."""
        for flight in self._flights.values():
            flight.outcome = Outcome.SHUTDOWN
            flight.changed.set()
        self._flights.clear()

    @property
    def max_model_len(self) -> int:
        """The longest request (prompt + max_tokens) a replica admits: vLLM's max_model_len as it runs.

        The model's context, or less when one replica's KV cache holds less (a real vLLM would
        not start then; it runs with --max-model-len lowered to what fits, and the simulator
        rejects what does not fit): what ``/v1/models`` reports and a 400 names.
        """
        from llmscale.sim.limits import context_limit

        return context_limit(self.fleet).admitted_tokens

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    # ---------------------------------------------------------------- fleet

    def _replica(self, name: str) -> Replica | None:
        for r in self.fleet.replicas:
            if r.name == name:
                return r
        for r in self.fleet.sleeping:  # a standby replica keeps its name, its port and its page
            if r.name == name:
                return r
        return None

    def phase_of(self, name: str) -> Phase:
        """The replica's phase now (GONE when it no longer exists)."""
        r = self._replica(name)
        return Phase.GONE if r is None else r.phase

    def replica(self, name: str) -> Replica | None:
        """The live replica object (for its exporter), or None once it is gone."""
        return self._replica(name)

    def replicas(self) -> list[ReplicaInfo]:
        """Every replica not gone: those in service, then the sleeping ones (sleep mode)."""
        return [
            ReplicaInfo(r.name, r.phase, r.created_s, r.phase_since_s, int(r.max_seqs))
            for r in (*self.fleet.replicas, *self.fleet.sleeping)
        ]

    @property
    def spec_replicas(self) -> int:
        return self.fleet.spec_replicas

    def scale_to(self, n: int, *, drain_until_idle: bool = False) -> None:
        """Ask for ``n`` active replicas now, with the simulator's lifecycle and drain rules."""
        if not 0 <= n <= self.cfg.max_replicas:
            raise ConfigError(f"replicas = {n}, must be within [0, max_replicas {self.cfg.max_replicas}]")
        now = self.advance()
        self.fleet.scale_to(n, now, drain_until_idle=drain_until_idle)
        self.advance()
        self.wake.set()
