"""``dynamo-load``: Dynamo's FPM-driven load scaling in aggregated mode (see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.errors import ConfigError
from llmscale.metrics.names import VllmMetric
from llmscale.policies._hpa_behavior import PEER_GUARD_OVERRIDES, check_positive, clamp
from llmscale.policies.base import register
from llmscale.policies.dynamo.capacity import (
    DEFAULT_ISL_TOKENS,
    DEFAULT_OSL_TOKENS,
    StepModel,
    chunked_prefill_s,
    iteration_s,
    perf_for,
)
from llmscale.policies.params import (
    TICK_RANGE,
    Param,
    config_from,
    param,
    params_of,
)
from llmscale.types import Decision, NoData, Signals

__all__ = [
    "EASY_KV_THRESHOLDS",
    "KV_METRIC",
    "OPTIMIZATION_TARGETS",
    "RUNNING_METRIC",
    "WAITING_METRIC",
    "DynamoLoadConfig",
    "DynamoLoadPolicy",
]

KV_METRIC: str = VllmMetric.KV_USAGE
WAITING_METRIC: str = VllmMetric.WAITING
RUNNING_METRIC: str = VllmMetric.RUNNING


#: Dynamo's easy-mode thresholds on combined KV utilisation: (scale up if ANY >, scale down if ALL <)
EASY_KV_THRESHOLDS: dict[str, tuple[float, float]] = {"throughput": (1.0, 0.6), "latency": (0.4, 0.1)}
OPTIMIZATION_TARGETS = ("sla", "throughput", "latency")


@dataclass(frozen=True)
class DynamoLoadConfig:
    optimization_target: str = param("sla", choices=OPTIMIZATION_TARGETS)
    interval_s: float = param(5.0, TICK_RANGE, unit="s")
    #: scale down only if the remaining engines keep TTFT and ITL under the SLO x this share
    load_scaling_down_sensitivity: float = param(80.0, "[0, 100]", unit="%")
    ttft_sla_s: float = DEFAULT_DEPLOYMENT.slo_ttft_s
    itl_sla_s: float = DEFAULT_DEPLOYMENT.slo_tpot_s
    max_num_batched_tokens: int = DEFAULT_DEPLOYMENT.max_num_batched_tokens
    #: KV-cache capacity of one engine in tokens (the factory asks the perf model)
    max_kv_tokens: int = 450_000
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas
    max_replicas: int = DEFAULT_DEPLOYMENT.max_replicas

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


_LOAD_PARAMS: dict[str, Param] = params_of(DynamoLoadConfig)


@register(
    "dynamo-load",
    "NVIDIA Dynamo load planner (agg): +1 when all engines miss the SLO, -1 after an N/(N-1) check",
    _LOAD_PARAMS,
    needs_step_model=True,
    reads=("prompt_len_mean_tokens", "decode_steps_mean", "prompt_tps"),
)
def _make_load(ctx: Deployment, params: Mapping[str, Any]) -> DynamoLoadPolicy:
    perf, kv_tokens = perf_for(ctx)
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
