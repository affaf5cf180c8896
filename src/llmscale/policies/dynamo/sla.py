"""``dynamo-sla``: Dynamo's throughput planner in aggregated mode (see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.policies._hpa_behavior import PEER_GUARD_OVERRIDES, check_positive, clamp
from llmscale.policies.base import register
from llmscale.policies.dynamo.capacity import StepModel, agg_engine_capacity, perf_for
from llmscale.policies.dynamo.interval import (
    ClosedInterval,
    PlannerState,
    advance_interval,
    forecast,
)
from llmscale.policies.dynamo.predictors import PREDICTORS
from llmscale.policies.params import (
    AMOUNT_RANGE,
    COUNT_MAX,
    NONNEG_RANGE,
    TICK_RANGE,
    WINDOW_RANGE,
    Param,
    PolicyParamError,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = ["DynamoSlaConfig", "DynamoSlaPolicy", "cap_adjustment", "gpu_budget_guard"]


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
    ttft_sla_s: float = DEFAULT_DEPLOYMENT.slo_ttft_s
    itl_sla_s: float = DEFAULT_DEPLOYMENT.slo_tpot_s
    max_num_batched_tokens: int = DEFAULT_DEPLOYMENT.max_num_batched_tokens
    max_num_seqs: int = DEFAULT_DEPLOYMENT.max_num_seqs
    max_kv_tokens: int | None = None
    gpus_per_engine: int = 1
    #: GPUs the planner may use; -1 disables (ai-dynamo 1.6.1 ``max_gpu_budget`` default 8)
    max_gpu_budget: int = param(8, f"[-1, {COUNT_MAX}]", help="GPUs the planner may use; -1: unlimited")
    #: most replicas one adjustment adds or removes (ai-dynamo 1.6.1 default 8)
    max_throughput_scaling_replicas: int = param(
        8, f"[1, {COUNT_MAX}]", help="most replicas one adjustment moves"
    )
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas

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
class DynamoSlaPolicy:
    config: DynamoSlaConfig
    perf: StepModel
    name: str = "dynamo-sla"
    guard_overrides: ClassVar[Mapping[str, Any]] = PEER_GUARD_OVERRIDES

    @property
    def tick_s(self) -> float:
        return self.config.observe_s

    def initial_state(self) -> PlannerState:
        return PlannerState()

    def decide(self, signals: Signals, state: PlannerState, now_s: float) -> tuple[Decision, PlannerState]:
        cfg = self.config
        step = advance_interval(
            cfg,
            state,
            signals,
            now_s,
            record_osl=True,
            weight_by_rate=True,
            no_data_note="no request rate observed in the interval",
        )
        if not isinstance(step, ClosedInterval):
            return step
        # The interval closed: plan the next one.
        mean_rate, held, next_state = step.mean_rate_rps, step.held, step.state
        next_num_req = forecast(cfg, next_state.num_req)
        next_isl = forecast(cfg, next_state.isl)
        next_osl = forecast(cfg, next_state.osl)
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
        spec, current = signals.fleet.spec_replicas, signals.fleet.ready
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


_SLA_PARAMS: dict[str, Param] = params_of(DynamoSlaConfig)


@register(
    "dynamo-sla",
    "NVIDIA Dynamo SLA planner (agg): predicted demand / engine capacity at the SLOs, every 180 s",
    _SLA_PARAMS,
    check=DynamoSlaConfig.check_params,
    needs_step_model=True,
    reads=("arrival_rate_rps", "request_rate_rps", "prompt_len_mean_tokens", "decode_steps_mean"),
)
def _make_sla(ctx: Deployment, params: Mapping[str, Any]) -> DynamoSlaPolicy:
    perf, kv_tokens = perf_for(ctx)
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
