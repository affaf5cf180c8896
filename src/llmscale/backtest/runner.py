"""Run one policy over a workload on the simulated fleet, with the real controller loop.

The clock is a ManualClock; time advances to the next controller tick or the
next series sample, the fleet processes everything up to it, then the
controller core ticks (``controller/core.py``, the one the live loop drives) and this adapter
scales the simulated fleet to its decision.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any, Protocol, runtime_checkable

from llmscale.backtest.calendar import DEFAULT_START_UNIX_S
from llmscale.backtest.results import PolicyResult, summarize
from llmscale.clock import ManualClock
from llmscale.cluster.sim import SimCluster
from llmscale.controller.core import Controller, initial_state, tick
from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment, guard_config
from llmscale.errors import ConfigError
from llmscale.guards import MAX_REPLICAS, GuardConfig
from llmscale.perf.cold_start import START_TIERS
from llmscale.policies.base import POLICIES, Policy, create_policy
from llmscale.policies.static import StaticPolicy
from llmscale.signals.catalog import SUB_TICK_SIGNALS
from llmscale.sim.config import SimConfig
from llmscale.sim.disagg import DisaggConfig
from llmscale.sim.exporter import SimMetricSource
from llmscale.sim.fleet import Fleet
from llmscale.sim.gpu_counters import GpuCounterSpec, gpu_counters
from llmscale.sim.mixed import GpuPool
from llmscale.sim.sub_tick import QUEUE_SAMPLE_PERIOD_S
from llmscale.types import Phase
from llmscale.workloads.model import Workload

if TYPE_CHECKING:
    from llmscale.history import RateHistory
    from llmscale.mix.prices import GpuPrices
    from llmscale.precision import Precision

__all__ = [
    "BacktestSettings",
    "build_fleet",
    "check_policies",
    "run_policy",
    "series_step_for",
]


@runtime_checkable
class ReadsSignals(Protocol):
    """A policy object that names the catalogue signals it reads beyond its registration's."""

    @property
    def reads(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class BacktestSettings:
    """Everything a backtest needs besides the workload and the policy name."""

    model: str = DEFAULT_DEPLOYMENT.model
    gpu: str = DEFAULT_DEPLOYMENT.gpu
    tp: int = DEFAULT_DEPLOYMENT.tp
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    #: a backtest's own fleet (the command line sizes both from the workload), not the target's
    max_replicas: int = 64
    initial_replicas: int = 4
    slo_ttft_s: float = DEFAULT_DEPLOYMENT.slo_ttft_s
    slo_tpot_s: float = DEFAULT_DEPLOYMENT.slo_tpot_s
    #: length-aware TTFT SLO: this many more seconds per 1,000 prompt tokens
    #: (:func:`llmscale.backtest.feasibility.ttft_target_s`); 0 = one target for every request
    slo_ttft_per_1k_tokens_s: float = DEFAULT_DEPLOYMENT.slo_ttft_per_1k_tokens_s
    seed: int = 0
    sim: SimConfig = field(default_factory=SimConfig)
    #: path of a calibration profile (``llmscale calibrate``) for the step-time model, or None
    calibration: str | None = None
    #: parameters per policy name (from --replicas and --policy-config)
    policy_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: after the last arrival, keep simulating at most this long for in-flight work
    drain_horizon_s: float = 1800.0
    #: Unix time of the run's t = 0, which places a guards' ``schedule`` on the calendar
    #: (:func:`llmscale.backtest.calendar.run_start_unix_s`; nothing else reads it)
    start_unix_s: float = DEFAULT_START_UNIX_S
    #: GPU types of a mixed fleet (``--gpus a100-80gb,h100-80gb,h200``; () = ``gpu`` alone): the
    #: fleet runs each replica on its type (:mod:`llmscale.sim.mixed`) and ``gpu-mix`` chooses
    #: among them; ``gpu`` must be one of them (the type every other policy scales)
    gpus: tuple[str, ...] = ()
    #: prices per GPU-hour and limits (``--gpu-prices prices.yaml``,
    #: :func:`llmscale.mix.prices.load_gpu_prices`); None: the cited defaults, no limits
    gpu_prices: GpuPrices | None = None
    #: separate prefill and decode pools joined by a KV transfer (:mod:`llmscale.backtest.disagg`,
    #: ``backtest --disaggregated``); None: one aggregated pool
    disaggregated: DisaggConfig | None = None
    #: the served model's number formats, vLLM's ``--dtype`` / ``--quantization`` /
    #: ``--kv-cache-dtype`` (:mod:`llmscale.precision`; docs/fp8.md)
    dtype: str = DEFAULT_DEPLOYMENT.dtype
    quantization: str = DEFAULT_DEPLOYMENT.quantization
    kv_cache_dtype: str = DEFAULT_DEPLOYMENT.kv_cache_dtype
    #: the same-hour rate history the controller starts from (:func:`llmscale.history.history_before`:
    #: a trace of the days before the run); None: an empty one, filled as the run observes
    history: RateHistory | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        GuardConfig(self.min_replicas, self.max_replicas)  # validates the bounds
        self.precision  # validates dtype, quantization and kv_cache_dtype  # noqa: B018
        if self.gpus:
            _check_gpus(self.gpus, self.gpu, self.sim)
        if not self.min_replicas <= self.initial_replicas <= self.max_replicas:
            raise ConfigError(
                f"initial_replicas = {self.initial_replicas}, must be within "
                f"[min_replicas {self.min_replicas}, max_replicas {self.max_replicas}]"
            )
        if self.slo_ttft_s <= 0 or self.slo_tpot_s <= 0:
            raise ConfigError(
                f"SLOs must be > 0 (slo_ttft_s = {self.slo_ttft_s}, slo_tpot_s = {self.slo_tpot_s})"
            )
        if not 0.0 <= self.slo_ttft_per_1k_tokens_s < math.inf:
            raise ConfigError(
                f"slo_ttft_per_1k_tokens_s = {self.slo_ttft_per_1k_tokens_s}, must be >= 0 and finite"
            )

    @property
    def precision(self) -> Precision:
        """The validated number formats of the served model (ConfigError naming the field)."""
        from llmscale.precision import precision_of

        return precision_of(self.dtype, self.kv_cache_dtype, self.quantization)

    def with_cold_start(self) -> BacktestSettings:
        """Fill the lifecycle durations from the performance catalogue's published cold starts.

        A start on a node the cluster has is :func:`~llmscale.perf.cold_start` (Llama-3-8B on an
        H100: 108 s); the warm-node and sleeping tiers come from
        :func:`~llmscale.perf.start_tiers` (53 s and 1.6 s).
        """
        from llmscale.perf import cold_start, start_tiers

        cs = cold_start(self.model, self.gpu, self.tp)
        tiers = start_tiers(self.model, self.gpu, self.tp)
        warm = tiers.warm_node
        return replace(
            self,
            sim=replace(
                self.sim,
                pending_s=cs.pending_s,
                loading_s=cs.loading_s,
                warmup_s=cs.warmup_s,
                warm_node_pending_s=warm.pending_s,
                warm_node_loading_s=warm.loading_s,
                warm_node_warmup_s=warm.warmup_s,
                wake_s=tiers.sleeping.total_s,
            ),
        )

    def deployment(self) -> Deployment:
        """The deployment every policy of this backtest plans with (engine settings: the simulator's)."""
        s = self.sim
        return Deployment(
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
            initial_replicas=self.initial_replicas,
            slo_ttft_s=self.slo_ttft_s,
            slo_tpot_s=self.slo_tpot_s,
            slo_ttft_per_1k_tokens_s=self.slo_ttft_per_1k_tokens_s,
            model=self.model,
            gpu=self.gpu,
            tp=self.tp,
            cold_start_s=s.pending_s + s.loading_s + s.warmup_s,
            calibration=self.calibration,
            wake_s=s.wake_s,
            max_num_seqs=s.max_num_seqs,
            max_num_batched_tokens=s.max_num_batched_tokens,
            client_timeout_s=s.timeout_s,
            dtype=self.dtype,
            quantization=self.quantization,
            kv_cache_dtype=self.kv_cache_dtype,
            gpus=self.gpus,
            gpu_prices=self.gpu_prices,
        )


def _check_gpus(gpus: tuple[str, ...], gpu: str, sim: SimConfig) -> None:
    """ConfigError unless ``gpus`` names distinct known GPU types, ``gpu`` among them, no node pool."""
    from llmscale.mix.prices import canonical_gpu

    names = [canonical_gpu(g) for g in gpus]
    if len(set(names)) != len(names):
        raise ConfigError(f"gpus = {','.join(gpus)}: a GPU type is listed twice")
    if canonical_gpu(gpu) not in names:
        raise ConfigError(
            f"gpu = {gpu} must be one of gpus ({','.join(names)}): the type other policies scale"
        )
    if sim.node_pool:
        raise ConfigError(
            "gpus: a mixed-GPU fleet has no node pool (node_start_s and max_nodes must be unset)"
        )


def check_policies(names: Sequence[str], settings: BacktestSettings) -> None:
    """Build each policy and its guard settings once, as :func:`run_policy` will.

    Cross-field errors (a policy's ``bw_down`` above its ``bw_up``, a guard's ``min_replicas``
    above the backtest's ``max_replicas``) then stop the backtest before any simulation, not in
    a worker process after the other policies ran. Raises ConfigError naming the policy.
    """
    for name in names:
        params = dict(settings.policy_params.get(name) or {})
        guard_params = params.pop("guards", None) or {}
        try:
            deployment = settings.deployment()
            policy = create_policy(name, deployment, params)
            guards = guard_config(deployment, policy, guard_params)
            fleet_max = policy.replicas if isinstance(policy, StaticPolicy) else guards.max_replicas
            if fleet_max > MAX_REPLICAS:
                which = "replicas" if isinstance(policy, StaticPolicy) else "guards.max_replicas"
                raise ConfigError(f"{name}.{which} = {fleet_max}, must be <= {MAX_REPLICAS:,} in a backtest")
        except ConfigError as e:
            message = str(e)
            raise ConfigError(message if message.startswith(name) else f"{name}: {message}") from e


def series_step_for(duration_s: float) -> float:
    """Sample every 10 s, coarser for long traces so a series stays under ~1,500 points."""
    return max(10.0, math.ceil(duration_s / 1500.0 / 10.0) * 10.0)


def build_fleet(workload: Workload, settings: BacktestSettings, initial_replicas: int) -> Fleet:
    from llmscale.perf import get_perf_model

    perf = get_perf_model(
        settings.model,
        settings.gpu,
        settings.tp,
        calibration=settings.calibration,
        precision=settings.precision,
    )
    # A MIG slice is billed as its share of a GPU (3g of an H100: 3/7), whole GPUs as 1 each. Only a
    # slice name ("gpu:profile", as perf.catalogue.get_gpu tells them) imports llmscale.tenancy: its
    # four modules and their dataclasses are ~2% of benchmarks/sim_speed.py's run_policy otherwise.
    share = 1.0
    if ":" in settings.gpu:
        from llmscale.perf.mig import gpu_share

        share = gpu_share(settings.gpu)
    if settings.gpus:
        return Fleet(
            perf,
            settings.sim,
            workload.arrival_s,
            workload.input_tokens,
            workload.output_tokens,
            initial_replicas=initial_replicas,
            gpus_per_replica=settings.tp * share,
            pools=mixed_pools(workload, settings),
        )
    return Fleet(
        perf,
        settings.sim,
        workload.arrival_s,
        workload.input_tokens,
        workload.output_tokens,
        initial_replicas=initial_replicas,
        gpus_per_replica=settings.tp * share,
    )


def mixed_pools(workload: Workload, settings: BacktestSettings) -> tuple[GpuPool, ...]:
    """The GPU pools of a mixed fleet, ``settings.gpu`` first (the type other policies scale), each
    weighted for the router by what one replica of it sustains at the workload's mean shape.

    Types that cannot serve the deployment (the model's weights and one full-context sequence do
    not fit: :func:`llmscale.mix.fleet.unavailable_reason`) are left out; ``settings.gpu`` always
    serves.
    """
    from llmscale.mix.fleet import unavailable_reason
    from llmscale.mix.prices import canonical_gpu
    from llmscale.perf import get_perf_model, replica_tails

    first = canonical_gpu(settings.gpu)
    names = [first, *(g for g in (canonical_gpu(x) for x in settings.gpus) if g != first)]
    prompt = float(workload.input_tokens.mean()) if workload.num_requests else 1000.0
    output = float(workload.output_tokens.mean()) if workload.num_requests else 200.0
    pools = []
    for gpu in names:
        if gpu != first and unavailable_reason(settings.model, gpu, settings.tp) is not None:
            continue
        cap = replica_tails.replica_capacity(
            settings.model,
            gpu,
            settings.tp,
            prompt,
            output,
            settings.slo_ttft_s,
            settings.slo_tpot_s,
            max_num_seqs=settings.sim.max_num_seqs,
            max_num_batched_tokens=settings.sim.max_num_batched_tokens,
            calibration=settings.calibration,
        )
        perf = get_perf_model(settings.model, gpu, settings.tp, calibration=settings.calibration)
        pools.append(GpuPool(gpu, perf, float(settings.tp), max(cap.rate_rps, 1e-3)))
    return tuple(pools)


def apply_mix(fleet: Fleet, mix: tuple[tuple[str, int], ...], total: int, now_s: float, drain: bool) -> bool:
    """Scale a mixed fleet to ``mix`` fitted to the guarded ``total``; True when anything changed.

    A type the fleet has no pool for gets none (the policy and the fleet read the same ``gpus``).
    """
    from llmscale.mix.fleet import fit_mix

    fitted = dict(fit_mix(mix, total))
    names = [p.gpu for p in fleet.pools]
    counts = tuple(fitted.get(g, 0) for g in names)
    short = total - sum(counts)
    if short > 0:  # the mix named a type the fleet lacks: its replicas go to the first pool
        counts = (counts[0] + short, *counts[1:])
    active, ready = fleet.pool_counts(), fleet.pool_ready_counts()
    # The mix itself, without the surplus a guard's total adds to the first pool.
    own = dict(fit_mix(mix, min(total, sum(n for _, n in mix))))
    base = tuple(own.get(g, 0) for g in names)
    if any(n > r for n, r in zip(base, ready, strict=True)):
        # Make before break: while replicas of the new mix are still starting, a type the mix cuts
        # keeps its serving replicas (only its unready ones are cancelled); it shrinks at a later
        # tick, once the new ones serve. Switching one serving H100 for two A100s at once left the
        # load on nothing for a cold start: 450 time-outs in five minutes at 10 req/s. The mix is
        # applied without the guards' surplus meanwhile: the held replicas are that surplus (the
        # drain guard holds the fleet at its size), and adding it again grew the fleet every tick.
        counts = tuple(max(n, r) if n < a else n for n, a, r in zip(base, active, ready, strict=True))
    if counts == fleet.pool_counts():
        return False
    fleet.scale_mix(counts, now_s, drain_until_idle=drain)
    return True


class SeriesRecorder:
    """Samples the fleet at a fixed step for the report's time series.

    The GPU columns are the DCGM readings of the step averaged over the GPUs of
    serving replicas (:func:`llmscale.sim.gpu_counters.gpu_counters` over the
    fleet's summed counters and serving replica-seconds): ``gpu_util``
    ``DCGM_FI_DEV_GPU_UTIL`` as a 0-1 ratio (time with work in flight),
    ``sm_active`` ``DCGM_FI_PROF_SM_ACTIVE``, ``bw_util``
    ``DCGM_FI_PROF_DRAM_ACTIVE``.
    """

    def __init__(self, fleet: Fleet, step_s: float) -> None:
        self.fleet = fleet
        self.step_s = step_s
        self.cols: dict[str, list[Any]] = {
            k: []
            for k in (
                "t_s",
                "queue_depth",
                "running",
                "replicas_pending",
                "replicas_loading",
                "replicas_warmup",
                "replicas_ready",
                "replicas_draining",
                "replicas_sleeping",
                "desired_replicas",
                "gpu_util",
                "sm_active",
                "bw_util",
                "kv_usage",
                "gpu_hours_cum",
            )
        }
        if fleet.config.node_pool:
            # Only with a node pool: a run without one keeps the series (and its JSON) it had.
            self.cols["replicas_node_pending"] = []
        self._prev_t = 0.0
        self._prev = fleet.counter_totals()
        self._spec = GpuCounterSpec.from_perf(fleet.perf)

    def sample(self, t: float) -> None:
        fleet = self.fleet
        fleet.sync_all(t)
        counts = [0] * len(Phase)
        waiting = len(fleet.gateway)
        running = 0
        kv = []
        for r in fleet.replicas:
            counts[r.phase] += 1
            waiting += r.num_waiting
            running += r.num_running
            if r.phase == Phase.READY:
                kv.append(r.kv_usage())
        busy, active, dram = fleet.counter_totals()
        dt = t - self._prev_t
        serving = counts[Phase.READY] + counts[Phase.DRAINING]
        c = self.cols
        c["t_s"].append(round(t, 3))
        c["queue_depth"].append(waiting)
        c["running"].append(running)
        c["replicas_pending"].append(counts[Phase.PENDING])
        c["replicas_loading"].append(counts[Phase.LOADING])
        c["replicas_warmup"].append(counts[Phase.WARMUP])
        c["replicas_ready"].append(counts[Phase.READY])
        c["replicas_draining"].append(counts[Phase.DRAINING])
        c["replicas_sleeping"].append(len(fleet.sleeping))
        if "replicas_node_pending" in c:
            c["replicas_node_pending"].append(counts[Phase.NODE_PENDING])
        c["desired_replicas"].append(fleet.spec_replicas)
        if dt > 0 and serving:
            p_busy, p_active, p_dram = self._prev
            g = gpu_counters(self._spec, dt * serving, active - p_active, busy - p_busy, dram - p_dram)
            c["gpu_util"].append(round(g.gr_engine_active, 4))
            c["sm_active"].append(round(g.sm_active, 4))
            c["bw_util"].append(round(g.dram_active, 4))
        else:
            c["gpu_util"].append(None)
            c["sm_active"].append(None)
            c["bw_util"].append(None)
        c["kv_usage"].append(round(sum(kv) / len(kv), 4) if kv else None)
        c["gpu_hours_cum"].append(round(fleet.gpu_seconds(t) / 3600.0, 5))
        self._prev_t = t
        self._prev = (busy, active, dram)


def run_policy(
    workload: Workload,
    policy_name: str,
    settings: BacktestSettings,
    *,
    decisions_out: IO[str] | None = None,
    progress: Callable[[float], None] | None = None,
    policy: Policy[Any] | None = None,
) -> PolicyResult:
    """Simulate ``policy_name`` on ``workload``. ``progress`` gets the simulated time now and then."""
    wall0 = time.perf_counter()
    params = dict(settings.policy_params.get(policy_name) or {})
    guard_params = params.pop("guards", None) or {}
    deployment = settings.deployment()
    if policy is None:
        policy = create_policy(policy_name, deployment, params)
    initial = settings.initial_replicas
    guards = guard_config(deployment, policy, guard_params)
    if isinstance(policy, StaticPolicy):
        # A fixed fleet is the user's explicit choice, warm from the start; bounds are for autoscalers.
        initial = policy.replicas
        guards = replace(guards, min_replicas=0, max_replicas=max(initial, settings.max_replicas))
    fleet = build_fleet(workload, settings, initial)
    # The documents' sub-tick samples (seed 004's 100 ms bandwidth and per-second queue, seed 000
    # 2.4's 100 ms tokens) cost a bucket add per span of iterations and a stop every simulated
    # second: only for a policy that reads them, or a decision log (which records the bandwidth
    # and entropy for ``llmscale analyze``). A static fleet of 8 over 15 min of the default
    # preset, pure Python, 3 runs each alternating: 1.03x the time with them (median).
    info = POLICIES.get(policy_name)
    declared = info.signals_read(params) if info is not None else ()
    own = policy.reads if isinstance(policy, ReadsSignals) else ()  # a policy object may declare its own
    reads = frozenset((*declared, *own))
    sub_tick = decisions_out is not None or bool(SUB_TICK_SIGNALS & reads)
    source = SimMetricSource(fleet, sub_tick=sub_tick)
    cluster = SimCluster(fleet)
    clock = ManualClock()
    controller = Controller(
        policy,
        guards,
        deployment,
        assess=decisions_out is not None,
        clock_epoch_s=settings.start_unix_s,
        history=settings.history,
    )
    # The core schedules its ticks (every policy.tick_s, the first one tick in); this loop only
    # fulfils them and interleaves the report's samples.
    state = initial_state(controller, first_tick_s=controller.cadence_s)
    step_s = series_step_for(workload.duration_s)
    recorder = SeriesRecorder(fleet, step_s)
    next_tick = state.next_tick_s
    next_sample = step_s
    next_queue = QUEUE_SAMPLE_PERIOD_S if sub_tick else math.inf
    last_arrival = float(workload.arrival_s[-1]) if workload.num_requests else 0.0
    horizon = last_arrival + settings.drain_horizon_s
    logged = 0  # starts already written to the decision log
    while True:
        t = min(next_tick, next_sample, next_queue)
        fleet.run_until(t)
        clock.advance_to(t)
        if t >= next_queue:
            source.sample_queue(t)
            next_queue += QUEUE_SAMPLE_PERIOD_S
            if t < next_sample and t < next_tick:
                # A queue sample only: the run ends (and reports progress) at the same stops as
                # without them, so the results and the decision log's ticks are the same.
                continue
        if t >= next_sample:
            recorder.sample(t)
            next_sample += step_s
        if t >= next_tick:
            now_s = clock.now_s()
            record, state, next_tick = tick(controller, state, source.observe(now_s))
            # Only actuation here: every step that shapes the decision is the core's.
            if record.proposed.mix is not None and fleet.pools:
                # A policy that chose a GPU mix (gpu-mix) on a mixed fleet: per type.
                if apply_mix(fleet, record.proposed.mix, record.final, now_s, guards.drain_aware):
                    record = replace(record, applied=True)
            elif record.final != cluster.spec_replicas:
                cluster.scale_to(record.final, now_s, drain_until_idle=guards.drain_aware)
                record = replace(record, applied=True)
            if record.standby is not None:
                # The policy's standby pool (Decision.standby, policies/standby.py): sleeping
                # replicas kept beside the desired ones. Not guarded: it adds no serving capacity.
                cluster.set_standby(record.standby, now_s)
            if decisions_out is not None:
                line = record.as_json()
                if len(fleet.start_log) > logged:
                    # Which tier each start since the last tick took (START_TIERS' names).
                    line["starts"] = [[round(t, 3), START_TIERS[k]] for t, k in fleet.start_log[logged:]]
                    logged = len(fleet.start_log)
                decisions_out.write(json.dumps(line) + "\n")
        if progress is not None:
            progress(t)
        if fleet.arrivals_done and fleet.unresolved == 0:
            break
        if t > horizon:
            break
    fleet.finish(clock.now_s())
    # The run ends when the last request is resolved (or at the horizon), not at the next tick.
    end_s = max(fleet.last_resolved_s, last_arrival)
    wall_s = time.perf_counter() - wall0
    return summarize(
        policy_name,
        workload,
        fleet,
        recorder.cols,
        settings,
        end_s=end_s,
        wall_s=wall_s,
    )
