"""NVIDIA Dynamo's planner, aggregated (non-disaggregated) mode: ``dynamo-sla`` and ``dynamo-load``.

Both re-implement (not copy) the planner of the ``ai-dynamo==1.6.1`` wheel,
``dynamo/planner/``: the throughput planner of ``core/throughput_scaling.py``
with the capacity search of ``core/perf_model/engine_query.py``
(``_find_aggregated_capacity``, ``_capacity_batch_sizes``, ``_select_capacity``),
the GPU budget of ``core/budget.py`` (``guard_single_scaling_budget``), the
defaults of ``config/defaults.py``, the offered-load query of
``monitoring/traffic_metrics.py`` (``get_avg_request_count``), the load
predictors of ``core/load/predictors.py`` and the FPM-driven load scaling of
``core/load_scaling.py``. Where Dynamo asks its forward-pass model (a fitted
regression or AIConfigurator's simulator), llmscale asks its calibrated
execution-time model (:mod:`llmscale.perf`): the same question -- how long
does one engine iteration take with this much prefill and this much decode
KV -- answered by the model the simulator itself runs.

``dynamo-sla`` (the throughput planner, ``mode = "agg"``)
    Observes every ``tick_s`` (60 s) and decides every ``adjustment_interval``
    (180 s): the interval's request count, mean ISL (``prompt_len_mean_tokens``)
    and OSL (``decode_steps_mean``) are fed to one load predictor each. The
    request count is the *offered* load: 1.6.1 reads the frontend's
    ``requests_started_total`` and falls back to the completed count only when
    that series is missing; here ``arrival_rate_rps`` (the simulator's arrivals
    counter) with ``request_rate_rps`` (completions) as the fallback. The next
    interval's demand ``num_req / interval`` is divided by the engine's capacity,
    ``wanted = ceil(demand / engine_rps)``; then, in 1.6.1's order: at most
    ``max_throughput_scaling_replicas`` (8) replicas up or down from the ready
    count, at least ``min_endpoint``; no scale-up while a previous change is
    still starting; and the GPU budget ``max_gpu_budget`` (8 GPUs, -1 disables)
    with ``gpus_per_engine`` = TP (:func:`gpu_budget_guard`).
    ``engine_rps`` follows the capacity search (:func:`agg_engine_capacity`): up
    to 128 batch sizes up to ``min(max_num_seqs, max_kv_tokens // ctx,
    max_num_batched_tokens - 1)``, each with its ITL, TTFT and rate
    ``bs / (OSL x ITL)``; the best rate within both SLOs wins, and when none is
    within them the best rate overall (flagged ``throughput-sla-unreachable``).
    Worked example in ``tests/policies/test_peer_dynamo.py`` (a stub model: ITL =
    0.01 + 0.0115 bs s, SLO 50 ms -> bs = 3, 3 / (100 x 0.0445) = 0.674 req/s;
    10 req/s -> 15 replicas, 10 from 2 under the +-8 cap, 8 under the budget).
    Load predictors: ``constant`` (the last value, the default here) and
    ``kalman`` (local linear trend, ``kalman_q_level`` 1.0, ``kalman_q_trend`` 0.1,
    ``kalman_r`` 10.0); like Dynamo, non-finite readings count as 0 and leading
    zeros (the idle period before the first traffic) are skipped.

``dynamo-load`` (FPM-driven load scaling, ``mode = "agg"``)
    Every ``load_adjustment_interval`` (5 s) it estimates, per engine, the TTFT of
    a new request (its queued prefill ahead of it, chunked by
    ``max_num_batched_tokens``, at the engine's decode KV) and the ITL of the next
    iteration; per engine: decode KV = ``kv_cache_usage_perc`` x KV capacity,
    queued prefill = ``num_requests_waiting`` x mean ISL. Scale up by 1 when ALL
    engines' TTFT exceed the SLO or ALL engines' ITL do; scale down by 1 only
    when every engine passes the consolidation check with its load multiplied
    by N/(N-1): the queue-induced TTFT stays within ``(SLO - own prefill) x
    sensitivity`` and the combined KV both fits the cache and keeps the ITL
    under ``SLO x sensitivity`` (``load_scaling_down_sensitivity`` 80 %). While a
    previous change is still in progress (ready != desired) it only observes.
    ``optimization_target`` "throughput" / "latency" switch to Dynamo's static
    "easy mode" thresholds on combined KV utilisation (up if ANY engine > 1.0 /
    0.4, down if ALL < 0.6 / 0.1); 1.6.1 refuses that scale-down when the
    busiest engine's share spread over the survivors (``max util x N / (N-1)``)
    would reach the scale-up threshold, so it cannot flap.

SLOs are llmscale's (``slo_ttft_s``, ``slo_tpot_s`` as the ITL target) instead of
Dynamo's ``--ttft 500 ms`` / ``--itl 50 ms``; ``max_num_batched_tokens`` 8192 and
``max_num_seqs`` 256 are vLLM's defaults (or the simulator's, from
the ``Deployment``). ``min_endpoint`` is ``max(1, min_replicas)``.

Deviations: Dynamo's default load predictor is ARIMA (pmdarima) and Prophet
is offered; both need heavy libraries and are not reproduced (``constant`` is
the default here, ``kalman`` the model-based option). The SLA planner's
correction factors (observed / expected TTFT and ITL) are not applied: the
profile here is the model the fleet runs. ``dynamo-load`` defaults to
``optimization_target = "sla"`` (Dynamo's unified config defaults to
"throughput", the static thresholds) so that its SLO estimates and the N/(N-1)
check are what runs; its throughput floor (throughput scaling as a lower
bound) and its GPU budget are off, as in a load-only deployment. A missing
scrape, a per-pod gap or a worker count that does not match the metrics gives
a ``no-data`` decision that holds.

Guards: ``guard_overrides`` =
:data:`~llmscale.policies._hpa_behavior.PEER_GUARD_OVERRIDES`: the planners'
adjustment intervals (and ``dynamo-load``'s "scaling in progress" wait and
steps of one) run inside ``decide``; llmscale's pending-aware cap and KV-
headroom check, which the real project does not have, are off. Hold-on-
missing-data, drain-aware scale-down and the bounds stay on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

from llmscale.errors import ConfigError
from llmscale.metrics.names import VllmMetric
from llmscale.policies._hpa_behavior import PEER_GUARD_OVERRIDES, check_positive, clamp
from llmscale.policies.base import PolicyContext, PolicyParamError, register
from llmscale.policies.params import (
    AMOUNT_RANGE,
    COUNT_MAX,
    NONNEG_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    Param,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = [
    "AggCapacity",
    "DynamoLoadConfig",
    "DynamoLoadPolicy",
    "DynamoSlaConfig",
    "DynamoSlaPolicy",
    "DynamoSlaState",
    "StepModel",
    "agg_engine_capacity",
    "constant_forecast",
    "kalman_forecast",
]

KV_METRIC: str = VllmMetric.KV_USAGE
WAITING_METRIC: str = VllmMetric.WAITING
RUNNING_METRIC: str = VllmMetric.RUNNING

#: Dynamo's ``defaults.py`` request shape, used until the fleet has finished a request.
DEFAULT_ISL_TOKENS = 3000.0
DEFAULT_OSL_TOKENS = 150.0
#: predictor history kept (one point per adjustment interval: 1024 x 180 s = 2 days)
_HISTORY_LEN = 1024


class _Cost(Protocol):
    @property
    def duration_s(self) -> float: ...


class StepModel(Protocol):
    """What the planner needs of a performance model: one engine iteration's duration.

    :class:`llmscale.perf.PerfModel` satisfies it; unit tests pass a small stub.
    """

    def step(
        self,
        prefill_tokens: int,
        prefill_attn_pairs: float,
        num_prefill_seqs: int,
        num_decode: int,
        decode_ctx_tokens: int,
    ) -> _Cost: ...


def iteration_s(
    perf: StepModel, prefill_tokens: float, decode_kv_tokens: float, num_decode: int, isl: float
) -> float:
    """Duration of one mixed iteration: ``prefill_tokens`` of whole prompts of ``isl`` tokens + decodes.

    Prefill attention is counted as (ISL + 1)/2 key positions per prompt token
    (whole prompts packed into the chunk).
    """
    p = max(0, round(prefill_tokens))
    seqs = max(1, math.ceil(p / max(1.0, isl))) if p > 0 else 0
    pairs = p * (max(1.0, isl) + 1.0) / 2.0
    return perf.step(p, pairs, seqs, max(0, num_decode), max(0, round(decode_kv_tokens))).duration_s


#: full chunks :func:`chunked_prefill_s` adds one by one before it prices the rest at once
_MAX_CHUNK_STEPS = 10_000


def chunked_prefill_s(
    perf: StepModel,
    queued_tokens: float,
    isl: float,
    max_num_batched_tokens: int,
    decode_kv: float,
    num_decode: int,
) -> float:
    """``AggRegressionModel.estimate_next_ttft``: a new prompt behind ``queued_tokens``, chunk by chunk."""
    remaining = queued_tokens + isl
    total = 0.0
    full = float(max_num_batched_tokens)
    if remaining > _MAX_CHUNK_STEPS * full:
        # Bounded whatever the queue a page reports: 1e12 queued tokens in 8,192-token chunks were
        # 1.2e8 iterations of this loop (issue 19). Past 10,000 full chunks (82M tokens at 8,192,
        # no backtest comes near) they are priced at once; the rest as before.
        n = math.floor(remaining / full) - 1 if math.isfinite(remaining) else 0
        if n <= 0:
            return math.inf
        total = n * iteration_s(perf, full, decode_kv, num_decode, isl)
        remaining -= n * full
    while remaining > 0:
        chunk = min(remaining, full)
        total += iteration_s(perf, chunk, decode_kv, num_decode, isl)
        remaining -= chunk
    return total


@dataclass(frozen=True)
class AggCapacity:
    """An agg engine's sustainable request rate, the batch that gives it and whether it meets the SLOs."""

    engine_rps: float
    batch: int
    ttft_s: float
    itl_s: float
    eligible: bool = True


#: ai-dynamo 1.6.1 ``MAX_CAPACITY_SEARCH_CANDIDATES``: at most this many batch sizes are tried
MAX_CAPACITY_SEARCH_CANDIDATES = 128


def capacity_batch_sizes(max_batch: int) -> list[int]:
    """The batch sizes the capacity search tries: all of 1..max_batch up to 128, else 128 spread evenly.

    E.g. 256 -> 1, 3, 5, ..., 253, 256 (``1 + i x 255 // 127``); 1000 -> 1, 8, 16, ..., 992, 1000.
    """
    if max_batch <= 0:
        return []
    if max_batch <= MAX_CAPACITY_SEARCH_CANDIDATES:
        return list(range(1, max_batch + 1))
    span, steps = max_batch - 1, MAX_CAPACITY_SEARCH_CANDIDATES - 1
    return [1 + i * span // steps for i in range(MAX_CAPACITY_SEARCH_CANDIDATES)]


def _better(best: AggCapacity | None, candidate: AggCapacity) -> AggCapacity:
    """Dynamo's throughput selection: a candidate within the SLOs beats one outside; then the higher rate."""
    if best is None or (candidate.eligible and not best.eligible):
        return candidate
    if best.eligible and not candidate.eligible:
        return best
    return candidate if candidate.engine_rps > best.engine_rps else best


def agg_engine_capacity(
    perf: StepModel,
    isl: float,
    osl: float,
    ttft_sla_s: float,
    itl_sla_s: float,
    max_num_batched_tokens: int,
    max_kv_tokens: int | None,
    max_num_seqs: int | None,
) -> AggCapacity:
    """ai-dynamo 1.6.1's aggregated capacity search (``_find_aggregated_capacity``), throughput target.

    The request shape is rounded up to whole tokens (ISL = ceil, OSL = max(1, ceil));
    a decode holds ``ctx = ISL + OSL // 2`` tokens. Batch sizes run up to
    ``min(max_num_seqs, max_kv_tokens // ctx, max_num_batched_tokens - 1)``, at most
    128 of them (:func:`capacity_batch_sizes`); a batch whose piggybacked prefill
    ``ceil(bs x ISL / OSL)`` does not fit next to its decodes (``<= mbt - bs``) is
    skipped. Each batch's ITL is one mixed iteration, its TTFT the chunked prefill
    of that prefill plus a new prompt at the same decode load; its rate is
    ``bs / (OSL x ITL)``. The best batch within both SLOs wins by rate; when none
    is within them, the highest-rate batch is returned with ``eligible = False``
    (the previous port returned batch 1's rate instead). Zero capacity when the
    shape is not positive or no batch fits.
    """
    if isl <= 0 or osl <= 0 or max_num_batched_tokens <= 1:
        return AggCapacity(0.0, 0, 0.0, 0.0, eligible=False)
    isl_t, osl_t = math.ceil(isl), max(1, math.ceil(osl))
    ctx = max(1, isl_t + osl_t // 2)
    decode_cap = max_num_seqs if max_num_seqs else 1 << 31
    if max_kv_tokens:
        decode_cap = min(decode_cap, max_kv_tokens // ctx)
    hard_cap = min(decode_cap, max(1, max_num_batched_tokens - 1))
    best: AggCapacity | None = None
    for bs in capacity_batch_sizes(hard_cap):
        prefill = math.ceil(bs * isl_t / osl_t)
        budget = max(0, max_num_batched_tokens - bs)
        if budget == 0 or prefill > budget:
            continue
        prefill = min(prefill, max_num_batched_tokens)
        decode_kv = float(bs * ctx)
        itl = iteration_s(perf, prefill, decode_kv, bs, isl_t)
        if itl <= 0:
            continue
        ttft = chunked_prefill_s(perf, float(prefill), isl_t, max_num_batched_tokens, decode_kv, bs)
        ok = ttft <= ttft_sla_s and itl <= itl_sla_s
        best = _better(best, AggCapacity(bs / (osl_t * itl), bs, ttft, itl, ok))
    return best if best is not None else AggCapacity(0.0, 0, 0.0, 0.0, eligible=False)


def cap_adjustment(desired: int, current: int, limit: int) -> int:
    """ai-dynamo 1.6.1 ``_cap_throughput_replicas``: one adjustment moves at most ``limit`` replicas.

    E.g. 3 running, 20 wanted, limit 8 -> 11; 20 running, 2 wanted -> 12.
    """
    return min(max(desired, max(0, current - limit)), current + limit)


def gpu_budget_guard(
    current: int, proposed: int, gpus_per_engine: int, max_gpu_budget: int, min_endpoint: int
) -> tuple[int, str | None]:
    """ai-dynamo 1.6.1 ``guard_single_scaling_budget`` with its floor off (``min_gpu_budget`` -1).

    A negative budget disables it. Over the budget already: back to what fits
    (``max(min_endpoint, budget // gpus)``; 0 if not even that fits). At the
    budget: no scale-up. Otherwise the proposal is cut to what fits, and never
    turned into a move in the other direction. E.g. budget 8, 1 GPU each:
    6 -> 11 gives 8; 8 -> 9 holds 8; 10 running gives 8.
    """
    if max_gpu_budget < 0 or gpus_per_engine <= 0:
        return proposed, None

    def fit(n: int) -> int:
        if n * gpus_per_engine <= max_gpu_budget:
            return n
        if max_gpu_budget < min_endpoint * gpus_per_engine:
            return 0
        return max(min_endpoint, max_gpu_budget // gpus_per_engine)

    if current * gpus_per_engine > max_gpu_budget:
        return fit(current), "gpu-budget-reconcile"
    if current * gpus_per_engine >= max_gpu_budget and proposed > current:
        return current, "gpu-budget-hold"
    final = fit(proposed)
    if not min(current, proposed) <= final <= max(current, proposed):
        return current, "gpu-budget-hold"
    return final, ("gpu-budget" if final != proposed else None)


# -- load predictors (pure functions of the history) ---------------------------------------------


def add_point(history: tuple[float, ...], value: float | None) -> tuple[float, ...]:
    """Dynamo's ``BasePredictor.add_data_point``: non-finite -> 0; leading zeros are skipped."""
    if value is None:
        return history
    v = value if math.isfinite(value) else 0.0
    if v == 0.0 and not history:
        return history
    return (*history, v)[-_HISTORY_LEN:]


def constant_forecast(history: Sequence[float]) -> float | None:
    """``ConstantPredictor``: the next value is the last one (None before any data)."""
    return history[-1] if history else None


def kalman_forecast(history: Sequence[float], q_level: float, q_trend: float, r: float) -> float | None:
    """``KalmanPredictor``: local linear trend (level, trend), one-step-ahead level.

    F = [[1, 1], [0, 1]], H = [1, 0], P0 = 1000 I, Q = diag(q_level, q_trend),
    R = r; the state starts at (first value, 0) and each later value is one
    predict + update. E.g. a steady ramp 10, 20, 30, ... converges to
    forecasting the next step of the ramp.
    """
    if not history:
        return None
    x0, x1 = history[0], 0.0
    p00, p01, p11 = 1000.0, 0.0, 1000.0  # symmetric covariance
    for z in history[1:]:
        # predict: x = F x, P = F P F' + Q
        x0 = x0 + x1
        p00, p01, p11 = p00 + 2 * p01 + p11 + q_level, p01 + p11, p11 + q_trend
        # update with z
        s = p00 + r
        k0, k1 = p00 / s, p01 / s
        y = z - x0
        x0, x1 = x0 + k0 * y, x1 + k1 * y
        p00, p01, p11 = (1 - k0) * p00, (1 - k0) * p01, p11 - k1 * p01
    return x0 + x1


PREDICTORS = ("constant", "kalman")


# -- dynamo-sla -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DynamoSlaConfig:
    adjustment_interval_s: float = param(180.0, WINDOW_RANGE, unit="s")
    #: The controller ticks at observe_s (the planner's metric pull).
    observe_s: float = param(60.0, TICK_RANGE, unit="s")
    load_predictor: str = param(
        "constant",
        choices=PREDICTORS,
        help="Dynamo's arima and prophet need pmdarima / prophet and are not reproduced",
    )
    kalman_q_level: float = param(1.0, NONNEG_RANGE)
    kalman_q_trend: float = param(0.1, NONNEG_RANGE)
    kalman_r: float = param(10.0, AMOUNT_RANGE)
    ttft_sla_s: float = 2.0
    itl_sla_s: float = 0.1
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_kv_tokens: int | None = None
    gpus_per_engine: int = 1
    #: GPUs the planner may use; -1 disables (ai-dynamo 1.6.1 ``max_gpu_budget`` default 8)
    max_gpu_budget: int = param(8, f"[-1, {COUNT_MAX}]", help="GPUs the planner may use; -1: unlimited")
    #: most replicas one adjustment adds or removes (ai-dynamo 1.6.1 default 8)
    max_throughput_scaling_replicas: int = param(
        8, f"[1, {COUNT_MAX}]", help="most replicas one adjustment moves"
    )
    min_replicas: int = 1
    max_replicas: int = 100

    @property
    def min_endpoint(self) -> int:
        return max(1, self.min_replicas)

    @classmethod
    def check_params(cls, p: Mapping[str, Any]) -> None:
        """The rule across the parameters (registered, run before the policy is built): the
        planner observes at least once per adjustment (observe_s 300 with a 180 s interval would
        adjust on intervals with no observation)."""
        if p["observe_s"] > p["adjustment_interval_s"]:
            raise PolicyParamError(
                f"dynamo-sla.observe_s = {p['observe_s']}: must be <= adjustment_interval_s "
                f"({p['adjustment_interval_s']})",
                "observe_s",
            )


@dataclass(frozen=True)
class DynamoSlaState:
    #: start of the adjustment interval being observed (None before the first tick)
    interval_start_s: float | None = None
    #: (request rate, mean ISL, mean OSL) per observation of the interval
    observed: tuple[tuple[float, float | None, float | None], ...] = ()
    #: predictor histories, one point per interval
    num_req: tuple[float, ...] = ()
    isl: tuple[float, ...] = ()
    osl: tuple[float, ...] = ()
    #: the replica count the last adjustment set (None before the first): Dynamo sets a target
    #: once per interval and leaves it, so it is proposed again at every tick until the next one
    #: (a proposal held for one tick only would never outlast the drain guard's eviction window)
    planned: int | None = None


def _weighted_mean(pairs: Sequence[tuple[float, float | None]]) -> float | None:
    """Mean of the values weighted by rate (plain mean when every rate is 0); None without values."""
    vals = [(w, v) for w, v in pairs if v is not None and math.isfinite(v)]
    if not vals:
        return None
    wsum = sum(w for w, _ in vals)
    if wsum > 0:
        return sum(w * v for w, v in vals) / wsum
    return sum(v for _, v in vals) / len(vals)


@dataclass(frozen=True)
class DynamoSlaPolicy:
    config: DynamoSlaConfig
    perf: StepModel
    name: str = "dynamo-sla"
    guard_overrides: ClassVar[Mapping[str, Any]] = PEER_GUARD_OVERRIDES

    @property
    def tick_s(self) -> float:
        return self.config.observe_s

    def initial_state(self) -> DynamoSlaState:
        return DynamoSlaState()

    def _forecast(self, history: Sequence[float]) -> float | None:
        cfg = self.config
        if cfg.load_predictor == "kalman":
            return kalman_forecast(history, cfg.kalman_q_level, cfg.kalman_q_trend, cfg.kalman_r)
        return constant_forecast(history)

    def decide(
        self, signals: Signals, state: DynamoSlaState, now_s: float
    ) -> tuple[Decision, DynamoSlaState]:
        cfg = self.config
        spec = signals.fleet.spec_replicas
        held = clamp(spec if state.planned is None else state.planned, cfg.min_replicas, cfg.max_replicas)
        # 1.6.1 counts requests the frontend started (offered load) and falls back to the
        # completed count when that series is missing: a saturated fleet completes only what
        # it can serve, so planning on completions holds it saturated.
        rate = signals.get("arrival_rate_rps")
        if rate is None:
            rate = signals.get("request_rate_rps")
        observed = state.observed
        if rate is not None and math.isfinite(rate):
            observed = (
                *observed,
                (rate, signals.get("prompt_len_mean_tokens"), signals.get("decode_steps_mean")),
            )
        # The first observation covers the tick before it.
        start = now_s - cfg.observe_s if state.interval_start_s is None else state.interval_start_s
        if now_s - start < cfg.adjustment_interval_s - 1e-6:
            return (
                Decision(held, "observing", {"observations": float(len(observed))}),
                DynamoSlaState(start, observed, state.num_req, state.isl, state.osl, state.planned),
            )

        # The interval closes: one data point per predictor, then plan the next interval.
        interval_s = now_s - start
        if not observed:
            decision = Decision(
                held, "no-data", {}, "no request rate observed in the interval", no_data=NoData()
            )
            return decision, DynamoSlaState(now_s, (), state.num_req, state.isl, state.osl, state.planned)
        mean_rate = sum(r for r, _, _ in observed) / len(observed)
        num_req_hist = add_point(state.num_req, mean_rate * interval_s)
        isl_hist = add_point(state.isl, _weighted_mean([(r, i) for r, i, _ in observed]))
        osl_hist = add_point(state.osl, _weighted_mean([(r, o) for r, _, o in observed]))
        next_state = DynamoSlaState(now_s, (), num_req_hist, isl_hist, osl_hist, state.planned)

        next_num_req = self._forecast(num_req_hist)
        next_isl = self._forecast(isl_hist)
        next_osl = self._forecast(osl_hist)
        demand_rps = max(0.0, next_num_req or 0.0) / cfg.adjustment_interval_s
        inputs: dict[str, float | None] = {
            "observed_rate_rps": mean_rate,
            "predicted_num_req": next_num_req,
            "predicted_isl": next_isl,
            "predicted_osl": next_osl,
            "demand_rps": demand_rps,
        }
        if next_isl is None or next_osl is None or next_isl <= 0 or next_osl <= 0:
            return Decision(
                held, "no-data-request-shape", inputs, "no mean ISL/OSL observed yet", no_data=NoData()
            ), next_state
        cap = agg_engine_capacity(
            self.perf,
            next_isl,
            next_osl,
            cfg.ttft_sla_s,
            cfg.itl_sla_s,
            cfg.max_num_batched_tokens,
            cfg.max_kv_tokens,
            cfg.max_num_seqs,
        )
        inputs.update(
            engine_rps=cap.engine_rps,
            engine_batch=float(cap.batch),
            est_ttft_s=cap.ttft_s,
            est_itl_s=cap.itl_s,
        )
        current = signals.fleet.ready
        inputs["eligible"] = 1.0 if cap.eligible else 0.0
        if cap.engine_rps <= 0.0:
            # 1.6.1: the model is not ready -> hold the workers, still lifted to the endpoint floor.
            wanted, rule = current, "no-data-profile"
        else:
            wanted = math.ceil(demand_rps / cap.engine_rps)
            rule = "throughput" if cap.eligible else "throughput-sla-unreachable"
            rule = "no-demand" if wanted == 0 else rule
        inputs["raw_replicas"] = float(wanted)
        capped = cap_adjustment(wanted, current, cfg.max_throughput_scaling_replicas)
        if capped != wanted:
            rule = "throughput-capped"
        desired = max(capped, cfg.min_endpoint)
        if spec != current and desired > current:
            # A previous change is still starting: 1.6.1 waits rather than ask for more.
            note = f"{current} ready of {spec} desired"
            return Decision(held, "scaling-in-progress", inputs, note), next_state
        desired, budget_rule = gpu_budget_guard(
            current, desired, cfg.gpus_per_engine, cfg.max_gpu_budget, cfg.min_endpoint
        )
        rule = budget_rule or rule
        desired = clamp(desired, cfg.min_replicas, cfg.max_replicas)
        # Held for want of a profile (wanted = current: the cap cannot change it), unless the GPU
        # budget decided instead.
        no_data = NoData(("profile",)) if cap.engine_rps <= 0.0 and not budget_rule else None
        return Decision(desired, rule, inputs, no_data=no_data), replace(next_state, planned=desired)


# -- dynamo-load ------------------------------------------------------------------------------------

#: Dynamo's easy-mode thresholds on combined KV utilisation: (scale up if ANY >, scale down if ALL <)
EASY_KV_THRESHOLDS: dict[str, tuple[float, float]] = {"throughput": (1.0, 0.6), "latency": (0.4, 0.1)}
OPTIMIZATION_TARGETS = ("sla", "throughput", "latency")


@dataclass(frozen=True)
class DynamoLoadConfig:
    optimization_target: str = param("sla", choices=OPTIMIZATION_TARGETS)
    interval_s: float = param(5.0, TICK_RANGE, unit="s")
    #: scale down only if the remaining engines keep TTFT and ITL under the SLO x this share
    load_scaling_down_sensitivity: float = param(80.0, "[0, 100]", unit="%")
    ttft_sla_s: float = 2.0
    itl_sla_s: float = 0.1
    max_num_batched_tokens: int = 8192
    #: KV-cache capacity of one engine in tokens (the factory asks the perf model)
    max_kv_tokens: int = 450_000
    min_replicas: int = 1
    max_replicas: int = 100

    @property
    def min_endpoint(self) -> int:
        return max(1, self.min_replicas)

    @property
    def sensitivity(self) -> float:
        """``load_scaling_down_sensitivity`` as a share: 80 % -> 0.8."""
        return self.load_scaling_down_sensitivity / 100.0


@dataclass(frozen=True)
class _Engine:
    decode_kv: float  # KV tokens of the running requests
    queued_prefill: float  # prompt tokens waiting
    running: int


def _scale_decision(estimates: Sequence[float], sla: float, n: int, can_scale_down: bool) -> int | None:
    """``_scale_decision``: +1 when ALL engines exceed the SLO, -1 when the consolidation check passed."""
    if estimates and all(t > sla for t in estimates):
        return n + 1
    if n > 1 and can_scale_down:
        return n - 1
    return None


@dataclass(frozen=True)
class DynamoLoadPolicy:
    config: DynamoLoadConfig
    perf: StepModel
    name: str = "dynamo-load"
    guard_overrides: ClassVar[Mapping[str, Any]] = PEER_GUARD_OVERRIDES

    @property
    def tick_s(self) -> float:
        return self.config.interval_s

    def initial_state(self) -> None:
        return None

    def decide(self, signals: Signals, state: None, now_s: float) -> tuple[Decision, None]:
        cfg = self.config
        fleet = signals.fleet
        n = fleet.ready
        held = clamp(fleet.spec_replicas, cfg.min_replicas, cfg.max_replicas)
        if fleet.spec_replicas != n:
            note = f"{n} ready of {fleet.spec_replicas} desired: observing only"
            return Decision(held, "scaling-in-progress", {"ready": float(n)}, note), None
        if signals.unknown_replicas > 0 or n == 0:
            return Decision(
                held, "no-data", {"ready": float(n)}, "an engine's metrics are unknown", no_data=NoData()
            ), None
        isl = signals.get("prompt_len_mean_tokens") or DEFAULT_ISL_TOKENS
        osl = signals.get("decode_steps_mean") or DEFAULT_OSL_TOKENS
        engines: list[_Engine] = []
        for pod, m in sorted(signals.per_replica.items()):
            kv, waiting, running = m.get(KV_METRIC), m.get(WAITING_METRIC), m.get(RUNNING_METRIC)
            if kv is None or waiting is None or running is None:
                return Decision(
                    held, "no-data", {}, f"{pod} reports no KV / queue / running", no_data=NoData()
                ), None
            engines.append(_Engine(kv * cfg.max_kv_tokens, waiting * isl, round(running)))
        if len(engines) != n:
            note = f"{len(engines)} engines report metrics, {n} are ready"
            return Decision(held, "no-data-worker-count-mismatch", {}, note, no_data=NoData()), None

        if cfg.optimization_target in EASY_KV_THRESHOLDS:
            desired, rule, inputs = self._easy(engines, n)
        else:
            desired, rule, inputs = self._sla(engines, n, isl, osl, signals.get("prompt_tps") or 0.0)
        inputs.update(engines=float(n), isl=isl, osl=osl)
        desired = clamp(max(desired, cfg.min_endpoint), cfg.min_replicas, cfg.max_replicas)
        return Decision(desired, rule, inputs), None

    def _easy(self, engines: Sequence[_Engine], n: int) -> tuple[int, str, dict[str, float | None]]:
        cfg = self.config
        up, down = EASY_KV_THRESHOLDS[cfg.optimization_target]
        utils = [(e.decode_kv + e.queued_prefill) / cfg.max_kv_tokens for e in engines]
        inputs: dict[str, float | None] = {
            "kv_util_max": max(utils),
            "scale_up_above": up,
            "scale_down_below": down,
        }
        if any(u > up for u in utils):
            return n + 1, "scale-up-kv", inputs
        if n > 1 and all(u < down for u in utils):
            # 1.6.1 ``_consolidation_safe_easy_target``: the survivors take the busiest engine's
            # share; if that lands on the scale-up threshold, stay. E.g. throughput target, 3
            # engines, busiest 0.55 (all < 0.6): 0.55 x 3/2 = 0.825 < 1.0 -> 2; but 2 engines
            # at 0.55 / 0.5: 0.55 x 2/1 = 1.1 >= 1.0 -> stay at 2.
            survivors = max(n - 1, cfg.min_endpoint)
            inputs["post_consolidation_kv_util_max"] = max(utils) * n / survivors
            if 0 < survivors < n and max(utils) * n / survivors >= up:
                return n, "scale-down-refused-consolidation", inputs
            return survivors, "scale-down-kv", inputs
        return n, "no-change", inputs

    def _sla(
        self, engines: Sequence[_Engine], n: int, isl: float, osl: float, prompt_tps: float
    ) -> tuple[int, str, dict[str, float | None]]:
        cfg, perf, mbt = self.config, self.perf, self.config.max_num_batched_tokens
        total_kv = sum(e.decode_kv for e in engines)
        total_running = sum(e.running for e in engines)
        avg_decode_len = total_kv / total_running if total_running > 0 else isl + osl / 2.0
        # Prefill tokens piggybacked on an average iteration: the fleet's prompt rate per engine
        # times the time of a decode-only iteration at the mean load.
        t0 = iteration_s(perf, 0.0, total_kv / n, round(total_running / n), isl)
        avg_prefill = min(float(mbt), prompt_tps / n * t0)
        c = n / (n - 1) if n > 1 else 1.0

        ttfts: list[float] = []
        itls: list[float] = []
        p_down = d_down = n > 1
        p_refused = d_refused = False
        for e in engines:
            ttfts.append(chunked_prefill_s(perf, e.queued_prefill, isl, mbt, e.decode_kv, e.running))
            itls.append(iteration_s(perf, avg_prefill, e.decode_kv + avg_decode_len, e.running + 1, isl))
            if n <= 1:
                continue
            post_kv, post_running = e.decode_kv * c, math.ceil(e.running * c)
            if p_down:
                t_own = chunked_prefill_s(perf, 0.0, isl, mbt, post_kv, post_running)
                post = chunked_prefill_s(perf, e.queued_prefill * c, isl, mbt, post_kv, post_running)
                budget = (cfg.ttft_sla_s - t_own) * cfg.sensitivity
                if budget <= 0 or post - t_own >= budget:
                    p_down, p_refused = False, True
            if d_down:
                combined = (e.decode_kv + e.queued_prefill) * c
                if combined >= cfg.max_kv_tokens:
                    d_down, d_refused = False, True
                else:
                    post_itl = iteration_s(
                        perf, avg_prefill, combined + avg_decode_len, post_running + 1, isl
                    )
                    if post_itl >= cfg.itl_sla_s * cfg.sensitivity:
                        d_down, d_refused = False, True
        p = _scale_decision(ttfts, cfg.ttft_sla_s, n, p_down)
        d = _scale_decision(itls, cfg.itl_sla_s, n, d_down)
        # A refused consolidation means "stay", not "no signal".
        p = n if p is None and p_refused else p
        d = n if d is None and d_refused else d
        inputs: dict[str, float | None] = {
            "est_ttft_max_s": max(ttfts),
            "est_itl_max_s": max(itls),
            "ttft_sla_s": cfg.ttft_sla_s,
            "itl_sla_s": cfg.itl_sla_s,
            "consolidation_factor": c,
            "avg_prefill_tokens_per_iter": avg_prefill,
        }
        if p is not None and p > n:
            return p, "scale-up-ttft", inputs
        if d is not None and d > n:
            return d, "scale-up-itl", inputs
        if p is None and d is not None and d < n:
            return d, "scale-down-consolidation-ok", inputs
        if p is not None and p < n and d is not None and d < n:
            return max(p, d), "scale-down-consolidation-ok", inputs
        rule = "scale-down-refused-consolidation" if (p_refused or d_refused) else "no-change"
        return n, rule, inputs


# -- registration -----------------------------------------------------------------------------------


def _perf_for(ctx: PolicyContext) -> tuple[StepModel, int | None]:
    """The calibrated model of ``ctx``'s replica and its KV capacity in tokens (None if unknown)."""
    from llmscale.perf import get_perf_model

    perf = get_perf_model(ctx.model, ctx.gpu, ctx.tp, calibration=ctx.calibration, scale=ctx.perf_scale)
    try:
        kv_tokens: int | None = perf.kv_capacity_tokens(
            max_num_batched_tokens=ctx.max_num_batched_tokens,
            max_num_seqs=ctx.max_num_seqs,
        )
    except ConfigError:
        kv_tokens = None
    return perf, kv_tokens


_SLA_PARAMS: dict[str, Param] = params_of(DynamoSlaConfig)


@register(
    "dynamo-sla",
    "NVIDIA Dynamo SLA planner (agg): predicted demand / engine capacity at the SLOs, every 180 s",
    _SLA_PARAMS,
    check=DynamoSlaConfig.check_params,
    needs_step_model=True,
    reads=("arrival_rate_rps", "request_rate_rps", "prompt_len_mean_tokens", "decode_steps_mean"),
)
def _make_sla(ctx: PolicyContext, params: Mapping[str, Any]) -> DynamoSlaPolicy:
    perf, kv_tokens = _perf_for(ctx)
    cfg = config_from(
        DynamoSlaConfig,
        params,
        ttft_sla_s=ctx.slo_ttft_s,
        itl_sla_s=ctx.slo_tpot_s,
        max_num_batched_tokens=ctx.max_num_batched_tokens,
        max_num_seqs=ctx.max_num_seqs,
        max_kv_tokens=kv_tokens,
        gpus_per_engine=ctx.tp,
        min_replicas=ctx.min_replicas,
        max_replicas=ctx.max_replicas,
    )
    # The SLOs come from the deployment, not from a parameter.
    check_positive("dynamo-sla", slo_ttft_s=cfg.ttft_sla_s, slo_tpot_s=cfg.itl_sla_s)
    return DynamoSlaPolicy(cfg, perf)


_LOAD_PARAMS: dict[str, Param] = params_of(DynamoLoadConfig)


@register(
    "dynamo-load",
    "NVIDIA Dynamo load planner (agg): +1 when all engines miss the SLO, -1 after an N/(N-1) check",
    _LOAD_PARAMS,
    needs_step_model=True,
    reads=("prompt_len_mean_tokens", "decode_steps_mean", "prompt_tps"),
)
def _make_load(ctx: PolicyContext, params: Mapping[str, Any]) -> DynamoLoadPolicy:
    perf, kv_tokens = _perf_for(ctx)
    if kv_tokens is None or kv_tokens <= 0:
        raise ConfigError(f"dynamo-load: no KV capacity for {ctx.model} on {ctx.tp} x {ctx.gpu}")
    cfg = config_from(
        DynamoLoadConfig,
        params,
        ttft_sla_s=ctx.slo_ttft_s,
        itl_sla_s=ctx.slo_tpot_s,
        max_num_batched_tokens=ctx.max_num_batched_tokens,
        max_kv_tokens=kv_tokens,
        min_replicas=ctx.min_replicas,
        max_replicas=ctx.max_replicas,
    )
    check_positive("dynamo-load", slo_ttft_s=cfg.ttft_sla_s, slo_tpot_s=cfg.itl_sla_s)
    return DynamoLoadPolicy(cfg, perf)
