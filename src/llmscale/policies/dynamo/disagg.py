"""``dynamo-disagg``: NVIDIA Dynamo's SLA planner in disaggregated mode, one instance per pool.

Re-implements (not copies) the disaggregated branch of Dynamo's SLA planner
(``components/planner/src/dynamo/planner/utils/planner_core.py``,
``Planner.make_adjustments``, with ``perf_interpolation.py``'s
``PrefillInterpolator`` and ``DecodeInterpolator.find_best_throughput_per_gpu``).
Every ``adjustment_interval_s`` (180 s) the interval's request count, mean ISL and
mean OSL go to one load predictor each (:mod:`.predictors`), and:

* prefill: ``next_num_p = ceil(num_req x ISL / interval / thpt_per_gpu(ISL) /
  prefill_engine_num_gpu)``, where Dynamo's profile gives the prefill throughput
  per GPU of one prompt of ISL tokens; here ``ISL / (time to prefill it in chunks
  of max_num_batched_tokens) / TP`` from llmscale's step-time model.
* decode: ``next_num_d = ceil(num_req x OSL / interval / thpt_per_gpu /
  decode_engine_num_gpu)`` with ``thpt_per_gpu`` the best decode throughput per GPU
  whose ITL stays within the SLO at context ``ISL + OSL / 2``: Dynamo scans its
  KV-load grid from the fullest down and takes the first point within the ITL
  (none: the emptiest point); here the batch sizes from the KV-limited largest down
  to 1, each priced by the step-time model.
* both at least ``min_endpoint`` (``max(1, min_replicas)``).

Worked example (tests/policies/test_disagg_policies.py, a stub model): 600 requests in
180 s of ISL 1,000 at 10,000 prefill tokens/s per GPU -> ceil(3,333 / 10,000) = 1
prefill engine; OSL 200 with ITL = 15 ms + 0.4 ms x batch and a 25.1 ms ITL SLO -> batch
25 at 25 ms, 1,000 tokens/s per GPU -> ceil(666.7 / 1,000) = 1 decode engine; at 1,620
requests per interval (9 req/s), 9,000 / 10,000 -> 1 prefill and 1,800 / 1,000 -> 2 decode.

Deviations: each pool's planner reads its own pool's signals (the request count
of the decode pool is its hand-off rate, the same in steady state); Dynamo's
correction factors (observed / expected TTFT and ITL) are not applied, as in
``dynamo-sla``; the GPU budget across the two pools (Dynamo scales both down in
proportion when their sum exceeds ``max_gpu_budget``) is not applied, since each
pool's planner sees one pool: the backtest bounds each pool instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.errors import ConfigError
from llmscale.perf.interconnect import POOLS
from llmscale.policies._hpa_behavior import PEER_GUARD_OVERRIDES, clamp
from llmscale.policies.dynamo.interval import (
    ClosedInterval,
    PlannerState,
    advance_interval,
    forecast,
)
from llmscale.policies.dynamo.predictors import PREDICTORS
from llmscale.types import Decision, NoData, Signals

__all__ = [
    "DynamoDisaggConfig",
    "DynamoDisaggPolicy",
    "decode_thpt_per_gpu",
    "make_dynamo_disagg",
    "prefill_thpt_per_gpu",
]


def prefill_thpt_per_gpu(perf: Any, isl_tokens: float, chunk_tokens: int, gpus: int) -> float:
    """Prompt tokens/s per GPU of one prompt of ``isl_tokens`` (Dynamo's prefill profile point)."""
    return float(perf.prefill_capacity_tokens_s(chunk_tokens, max(1, round(isl_tokens)))) / max(1, gpus)


def decode_thpt_per_gpu(
    perf: Any, itl_s: float, ctx_tokens: float, max_batch: int, kv_tokens: int | None, gpus: int
) -> tuple[float, int]:
    """(tokens/s per GPU, batch) of the largest batch whose ITL at ``ctx_tokens`` is within ``itl_s``.

    The scan runs from the largest batch the KV pool holds down, as Dynamo's
    ``find_best_throughput_per_gpu`` scans its KV-load axis from full to empty; with no
    batch within the ITL it answers batch 1's (Dynamo: the grid's emptiest point).
    """
    ctx = max(1.0, ctx_tokens)
    top = max_batch if kv_tokens is None else max(1, min(max_batch, int(kv_tokens // ctx)))

    def itl(b: int) -> float:
        a = perf.decode_affine(b)
        return float(a.base_s + a.per_ctx_s * b * ctx)

    best = 1
    for b in range(top, 0, -1):
        if itl(b) <= itl_s:
            best = b
            break
    return best / itl(best) / max(1, gpus), best


@dataclass(frozen=True)
class DynamoDisaggConfig:
    pool: str
    ttft_sla_s: float
    itl_sla_s: float
    adjustment_interval_s: float = 180.0
    observe_s: float = 60.0
    load_predictor: str = "constant"
    kalman_q_level: float = 1.0
    kalman_q_trend: float = 0.1
    kalman_r: float = 10.0
    max_num_batched_tokens: int = DEFAULT_DEPLOYMENT.max_num_batched_tokens
    max_num_seqs: int = DEFAULT_DEPLOYMENT.max_num_seqs
    max_kv_tokens: int | None = None
    gpus_per_engine: int = 1
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas

    def __post_init__(self) -> None:
        if self.pool not in POOLS:
            raise ConfigError(f"pool = {self.pool!r}, must be one of {', '.join(POOLS)}")
        if self.load_predictor not in PREDICTORS:
            raise ConfigError(
                f"dynamo-disagg.load_predictor = {self.load_predictor!r}, "
                f"must be one of {', '.join(PREDICTORS)}"
            )
        if not 0 < self.observe_s <= self.adjustment_interval_s:
            raise ConfigError(
                f"dynamo-disagg.observe_s = {self.observe_s}: must be in (0, adjustment_interval_s "
                f"({self.adjustment_interval_s})]"
            )

    @property
    def min_endpoint(self) -> int:
        return max(1, self.min_replicas)


@dataclass(frozen=True)
class DynamoDisaggPolicy:
    config: DynamoDisaggConfig
    perf: Any
    guard_overrides: ClassVar[Mapping[str, Any]] = PEER_GUARD_OVERRIDES

    @property
    def name(self) -> str:
        return f"dynamo-disagg:{self.config.pool}"

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
            record_osl=cfg.pool == "decode",
            weight_by_rate=False,
            no_data_note="no request rate observed",
        )
        if not isinstance(step, ClosedInterval):
            return step
        held, nxt = step.held, step.state
        n_req = max(0.0, forecast(cfg, nxt.num_req) or 0.0)
        isl = forecast(cfg, nxt.isl)
        osl = forecast(cfg, nxt.osl) if cfg.pool == "decode" else 1.0
        inputs: dict[str, float | None] = {
            "predicted_num_req": n_req,
            "predicted_isl": isl,
            "predicted_osl": osl,
        }
        if isl is None or osl is None or isl <= 0 or osl <= 0:
            return Decision(held, "no-data-request-shape", inputs, no_data=NoData()), nxt
        interval = cfg.adjustment_interval_s
        if cfg.pool == "prefill":
            per_gpu = prefill_thpt_per_gpu(self.perf, isl, cfg.max_num_batched_tokens, cfg.gpus_per_engine)
            load = n_req * isl / interval
            rule = "prefill-throughput"
        else:
            per_gpu, batch = decode_thpt_per_gpu(
                self.perf,
                cfg.itl_sla_s,
                isl + osl / 2.0,
                cfg.max_num_seqs,
                cfg.max_kv_tokens,
                cfg.gpus_per_engine,
            )
            inputs["decode_batch"] = float(batch)
            load = n_req * osl / interval
            rule = "decode-throughput"
        wanted = math.ceil(load / per_gpu / cfg.gpus_per_engine) if per_gpu > 0 else held
        inputs.update(load_tokens_s=load, thpt_per_gpu_tokens_s=per_gpu, raw_replicas=float(wanted))
        desired = clamp(max(wanted, cfg.min_endpoint), cfg.min_replicas, cfg.max_replicas)
        return Decision(desired, rule, inputs), replace(nxt, planned=desired)


def make_dynamo_disagg(pool: str, deployment: Deployment, params: Mapping[str, Any]) -> DynamoDisaggPolicy:
    """``dynamo-disagg`` for ``pool`` (``params``: adjustment_interval_s, observe_s, load_predictor, ...)."""
    from llmscale.policies.dynamo.capacity import perf_for

    allowed = {
        "adjustment_interval_s",
        "observe_s",
        "load_predictor",
        "kalman_q_level",
        "kalman_q_trend",
        "kalman_r",
    }
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ConfigError(
            f"dynamo-disagg has no parameter {unknown[0]!r}; parameters: {', '.join(sorted(allowed))}"
        )
    perf, kv_tokens = perf_for(deployment)
    cfg = DynamoDisaggConfig(
        pool=pool,
        ttft_sla_s=deployment.slo_ttft_s,
        itl_sla_s=deployment.slo_tpot_s,
        max_num_batched_tokens=deployment.max_num_batched_tokens,
        max_num_seqs=deployment.max_num_seqs,
        max_kv_tokens=kv_tokens,
        gpus_per_engine=deployment.tp,
        min_replicas=deployment.min_replicas,
        max_replicas=deployment.max_replicas,
        **params,
    )
    return DynamoDisaggPolicy(cfg, perf)
