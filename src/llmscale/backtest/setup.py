"""A backtest's settings built from what its user chose: the fleet's bounds sized from the workload
where the user left them open, then the start tiers, the node pool, the standby pool and faults.

``llmscale backtest`` and ``llmscale tune`` call these in this order (the command line only
checks each option's range and prints what :class:`Sizing` found):

1. :func:`engine_settings` — the engine's scheduler settings: given, else the calibration
   profile's, else vLLM V1's;
2. :func:`sized_settings` — the :class:`~llmscale.backtest.runner.BacktestSettings` of a workload,
   ``max_replicas``, ``initial_replicas`` and the ``static`` policy's replicas sized from what one
   replica sustains on the workload's own lengths (:mod:`llmscale.backtest.sizing`);
3. :func:`with_start_tiers`, :func:`with_node_pool`, :func:`with_standby_replicas`,
   :func:`with_faults` — each a new settings value, nothing changed in place.

The faults join after sizing: the defaults are sized for the fleet as it runs when healthy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from llmscale.backtest.context_check import ContextCheck, check_context, within_context
from llmscale.backtest.feasibility import feasible_only, infeasible_summary
from llmscale.backtest.runner import BacktestSettings, build_fleet
from llmscale.backtest.sizing import replica_capacity_rps, replicas_for_rate
from llmscale.errors import ConfigError
from llmscale.sim.config import SimConfig
from llmscale.sim.faults import AdaptiveBatchConfig, HbmGlitch, parse_glitch
from llmscale.workloads.model import Workload

if TYPE_CHECKING:
    from llmscale.mix.prices import GpuPrices

__all__ = [
    "ROUTERS",
    "Engine",
    "Faults",
    "FleetRequest",
    "Sizing",
    "engine_settings",
    "faults_from_text",
    "needs_capacity_probe",
    "sized_settings",
    "with_faults",
    "with_node_pool",
    "with_standby_replicas",
    "with_start_tiers",
]

#: how the gateway may spread requests (SimConfig's routers)
ROUTERS = ("least-outstanding", "round-robin")

#: the window whose arrival rate sizes the fleet a backtest starts with (its first 5 minutes)
_FIRST_WINDOW_S = 300.0
#: headroom of that starting fleet over the first window's rate: 10 % (a fleet sized exactly for
#: the mean of 3 req/s over 5 minutes queues in the first minute that runs at 3.3)
_FIRST_WINDOW_HEADROOM = 1.1
#: the least max_replicas sizing gives: 64, or twice the peak minute's need when that is more
_MIN_MAX_REPLICAS = 64


@dataclass(frozen=True, slots=True)
class Engine:
    """The scheduler settings of a vLLM-like engine that shape its batches (SimConfig's fields)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool


@dataclass(frozen=True, slots=True)
class FleetRequest:
    """What the user chose for a backtest's fleet; ``None`` is sized from the workload.

    ``static_replicas``: the ``static`` policy's fleet; None sizes it for the peak minute, 0
    leaves it unsized (static is not run). ``policy_params`` are the ``--policy-config``
    parameters per policy; they are copied, never changed.
    """

    model: str
    gpu: str
    tp: int
    min_replicas: int
    max_replicas: int | None
    initial_replicas: int | None
    static_replicas: int | None
    slo_ttft_s: float
    slo_tpot_s: float
    slo_ttft_per_1k_tokens_s: float
    seed: int
    timeout_s: float
    grace_s: float
    router: str
    engine: Engine
    calibration: str | None
    policy_params: Mapping[str, Mapping[str, Any]]
    #: the served model's number formats as vLLM names them (docs/fp8.md): the capacity probe and
    #: every run price FP8 weights and KV cache when asked
    dtype: str = "auto"
    quantization: str = "none"
    kv_cache_dtype: str = "auto"


@dataclass(frozen=True, slots=True)
class Sizing:
    """The settings :func:`sized_settings` built, with what it found on the way (for the user)."""

    settings: BacktestSettings
    #: requests whose 0-token prompt or output the loader replayed as 1 token
    clamped_requests: int
    #: requests longer than the model's context (rejected in the replay, not sized for)
    context: ContextCheck
    #: requests whose prefill alone on an idle replica is past their TTFT target (not sized for)
    prefill_past_ttft_target: int
    #: req/s one replica sustains within the SLO, and replicas the peak minute needs; None when
    #: every bound was given and nothing was measured
    capacity_rps: float | None
    peak_need: int | None


def engine_settings(
    calibration: Path | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    chunked_prefill: bool | None,
) -> Engine:
    """Engine scheduler settings: those given, else the calibration profile's engine, else vLLM V1's
    (:class:`~llmscale.sim.config.SimConfig`'s defaults: 256 sequences, 8,192 tokens, chunked prefill).

    ``None`` means "not given"; an explicit 0 is kept (the caller refuses it by its option name).
    """
    recorded: dict[str, Any] = {}
    if calibration is not None:
        from llmscale.perf.profile import load_profile

        recorded = dict(load_profile(calibration).engine)
    default = SimConfig()
    return Engine(
        max_num_seqs=max_num_seqs
        if max_num_seqs is not None
        else int(recorded.get("max_num_seqs", default.max_num_seqs)),
        max_num_batched_tokens=max_num_batched_tokens
        if max_num_batched_tokens is not None
        else int(recorded.get("max_num_batched_tokens", default.max_num_batched_tokens)),
        chunked_prefill=bool(recorded.get("chunked_prefill", default.chunked_prefill))
        if chunked_prefill is None
        else chunked_prefill,
    )


def needs_capacity_probe(request: FleetRequest) -> bool:
    """Whether :func:`sized_settings` measures one replica (some bound is left to size)."""
    return request.static_replicas is None or request.max_replicas is None or request.initial_replicas is None


def sized_settings(
    w: Workload,
    request: FleetRequest,
    on_context: Callable[[int, ContextCheck], None] | None = None,
) -> Sizing:
    """The BacktestSettings of workload ``w``: the bounds and initial fleet the request leaves open
    sized from what one replica sustains on ``w``'s lengths, counting only the requests some fleet
    can serve within the SLO (the replay itself keeps every request).

    ``max_replicas``: max(64, 2 x the peak minute's need, min_replicas); ``initial_replicas``: the
    first 5 minutes' rate x 1.1 within the bounds; ``static``: the peak minute's need.

    ``on_context(clamped_requests, context)`` is called once the workload is checked against the
    model's context, before a workload no replica admits raises ConfigError (so a caller can show
    the over-context warning first).
    """
    e = request.engine
    sim = SimConfig(
        seed=request.seed,
        timeout_s=request.timeout_s,
        grace_s=request.grace_s,
        router=request.router,
        max_num_seqs=e.max_num_seqs,
        max_num_batched_tokens=e.max_num_batched_tokens,
        chunked_prefill=e.chunked_prefill,
    )
    base = BacktestSettings(
        model=request.model,
        gpu=request.gpu,
        tp=request.tp,
        min_replicas=request.min_replicas,
        max_replicas=request.min_replicas,
        initial_replicas=request.min_replicas,
        slo_ttft_s=request.slo_ttft_s,
        slo_tpot_s=request.slo_tpot_s,
        slo_ttft_per_1k_tokens_s=request.slo_ttft_per_1k_tokens_s,
        seed=request.seed,
        sim=sim,
        calibration=request.calibration,
        dtype=request.dtype,
        quantization=request.quantization,
        kv_cache_dtype=request.kv_cache_dtype,
    ).with_cold_start()

    clamped = int(cast(float, w.meta.get("clamped_rows", 0)) or 0)
    context = check_context(w, base.model, base.gpu, base.tp, base.sim, base.calibration)
    if on_context is not None:
        on_context(clamped, context)
    within_context(w, context)  # raises ConfigError when no request fits
    slow = int(infeasible_summary(w, base)["prefill_past_ttft_target"])
    sized = feasible_only(w, base)
    cap: float | None = None
    peak_need: int | None = None
    first_rate = 0.0
    if needs_capacity_probe(request):
        # Only the probe's performance model is needed: a fleet built for the whole workload
        # (~15 MB of per-request arrays) must not outlive this, or every worker process and
        # every oracle trial forked later carries a copy of its pages.
        perf = build_fleet(sized, base, 0).perf
        cap = replica_capacity_rps(
            perf,
            base.sim,
            sized.input_tokens,
            sized.output_tokens,
            request.slo_ttft_s,
            request.slo_tpot_s,
            seed=request.seed,
            slo_ttft_per_1k_tokens_s=request.slo_ttft_per_1k_tokens_s,
        )
        peak_need = replicas_for_rate(float(cast(float, sized.summary()["peak_1min_rps"])), cap)
        first = sized.arrival_s < min(_FIRST_WINDOW_S, sized.duration_s + 1.0)
        first_rate = float(first.sum()) / min(_FIRST_WINDOW_S, max(sized.duration_s, 1.0))

    max_replicas = request.max_replicas
    if max_replicas is None:
        assert peak_need is not None
        max_replicas = max(_MIN_MAX_REPLICAS, 2 * peak_need, request.min_replicas)
    initial_replicas = request.initial_replicas
    if initial_replicas is None:
        assert cap is not None
        initial_replicas = min(
            max_replicas,
            max(request.min_replicas, replicas_for_rate(first_rate * _FIRST_WINDOW_HEADROOM, cap)),
        )
    static_replicas = request.static_replicas
    if static_replicas is None:
        static_replicas = peak_need
    params = {name: dict(values) for name, values in request.policy_params.items()}
    if static_replicas:
        params.setdefault("static", {}).setdefault("replicas", static_replicas)
    settings = replace(
        base, max_replicas=max_replicas, initial_replicas=initial_replicas, policy_params=params
    )
    return Sizing(settings, clamped, context, slow, cap, peak_need)


def with_start_tiers(
    base: BacktestSettings,
    cold_start_s: float | None,
    warm_node_start_s: float | None,
    wake_s: float | None,
    node_keep_s: float,
) -> BacktestSettings:
    """``base`` with the start tiers given (None keeps the catalogue's): a tier's total is scaled
    keeping the catalogue's split, e.g. a cold start of 54 s where the catalogue says 108 s halves
    each of pending, loading and warm-up."""
    sim = replace(base.sim, node_keep_s=node_keep_s)
    if cold_start_s is not None:
        total = sim.pending_s + sim.loading_s + sim.warmup_s
        f = cold_start_s / total if total > 0 else 0.0
        sim = replace(
            sim, pending_s=sim.pending_s * f, loading_s=sim.loading_s * f, warmup_s=sim.warmup_s * f
        )
    if warm_node_start_s is not None:
        total = sim.warm_node_pending_s + sim.warm_node_loading_s + sim.warm_node_warmup_s
        f = warm_node_start_s / total if total > 0 else 0.0
        sim = replace(
            sim,
            warm_node_pending_s=sim.warm_node_pending_s * f,
            warm_node_loading_s=sim.warm_node_loading_s * f,
            warm_node_warmup_s=sim.warm_node_warmup_s * f,
        )
    if wake_s is not None:
        sim = replace(sim, wake_s=wake_s)
    return replace(base, sim=sim)


def with_gpus_and_history(
    settings: BacktestSettings,
    gpus: str | None,
    gpu_prices: GpuPrices | None,
    history: Workload | None,
    history_period_s: float,
) -> BacktestSettings:
    """``settings`` with a mixed fleet's GPU types (``--gpus a100-80gb,h100-80gb``) and prices
    (``--gpu-prices``, read by ``load_gpu_prices``; docs/gpu-mix.md), and the same-hour rate
    history seeded from ``history``, a workload of the days before the run (``--history-from``,
    docs/history.md)."""
    from llmscale.history import RateHistory, history_before

    if gpus is not None:
        names = tuple(g.strip() for g in gpus.split(",") if g.strip())
        if not names:
            raise ConfigError(f"--gpus {gpus!r}: name at least one GPU type, e.g. a100-80gb,h100-80gb")
        settings = replace(settings, gpus=names)
    if gpu_prices is not None:
        settings = replace(settings, gpu_prices=gpu_prices)
    if not 60.0 <= history_period_s <= 30 * 86400.0:
        raise ConfigError(f"--history-period-s = {history_period_s:g}, must be within [60, 2592000]")
    if history is not None:
        seeded = history_before(history.arrival_s, settings.start_unix_s, period_s=history_period_s)
        settings = replace(settings, history=seeded)
    elif history_period_s != 86400.0:
        settings = replace(settings, history=RateHistory(period_s=history_period_s))
    return settings


def with_node_pool(
    base: BacktestSettings, node_start_s: float | None, max_nodes: int | None
) -> BacktestSettings:
    """``base`` with a node pool: a start no kept node takes waits ``node_start_s`` for a new node,
    at most ``max_nodes`` nodes (None: no pool / unbounded). The caller has checked that the fleet
    a backtest starts with fits the pool (``initial_replicas <= max_nodes``)."""
    return replace(base, sim=replace(base.sim, node_start_s=node_start_s, max_nodes=max_nodes))


def with_standby_replicas(base: BacktestSettings, standby_replicas: int) -> BacktestSettings:
    """``base`` with slo's standby pool of ``standby_replicas`` sleeping replicas (its parameter)."""
    params = {name: dict(values) for name, values in base.policy_params.items()}
    params.setdefault("slo", {})["standby_replicas"] = standby_replicas
    return replace(base, policy_params=params)


@dataclass(frozen=True, slots=True)
class Faults:
    """The simulator's injected faults: HBM-bandwidth glitch windows and the adaptive batch fuse."""

    hbm_glitches: tuple[HbmGlitch, ...] = ()
    adaptive_batch: AdaptiveBatchConfig | None = None


def faults_from_text(hbm_glitches: Sequence[str], adaptive_batch: bool) -> Faults:
    """Faults from ``START_S:DURATION_S[:REPLICA_SHARE[:RETAINED_SHARE]]`` windows
    (:func:`~llmscale.sim.faults.parse_glitch`) and whether the adaptive batch fuse is on."""
    return Faults(
        tuple(parse_glitch(g) for g in hbm_glitches), AdaptiveBatchConfig() if adaptive_batch else None
    )


def with_faults(base: BacktestSettings, faults: Faults) -> BacktestSettings:
    """``base`` with ``faults`` injected into every replica of its simulated fleet."""
    return replace(
        base,
        sim=replace(base.sim, hbm_glitches=faults.hbm_glitches, adaptive_batch=faults.adaptive_batch),
    )
