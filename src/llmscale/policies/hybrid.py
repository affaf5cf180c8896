"""``hybrid`` and ``hybrid-predictive``: seed 002's latency + GPU-utilisation trigger, reactive or predictive.

Seed 002 ("AI inference autoscaling: a hybrid trigger on latency and GPU
utilisation"), section 三 3.2 ``InferenceAutoScaler.makeDecision``, in its
order of priority (queue depth first: "the most direct backlog signal"):

1. queue depth > ``QUEUE_DEPTH_CRITICAL`` 50 -> scale up (strictly greater:
   50 does not fire);
2. P99 latency > ``P99_LATENCY_CRITICAL_MS`` 5000 ms *and* GPU utilisation >
   ``GPU_UTIL_HIGH`` 85 % -> scale up;
3. GPU < ``GPU_UTIL_LOW`` 30 % *and* queue == 0 *and* P99 < ``P99_LATENCY_WARN_MS``
   2000 ms *and* replicas > 2 ("keep at least 2 replicas") -> scale down;
4. otherwise hold.

``executeScaleUp``/``executeScaleDown`` move one replica (+1 / -1). The
cooldowns (``SCALE_UP_COOLDOWN_SEC`` 120 s, ``SCALE_DOWN_COOLDOWN_SEC`` 600 s,
"scale up fast, scale down slowly") are :attr:`HybridPolicy.guard_overrides`
(``cooldown_up_s`` / ``cooldown_down_s``), so the shared guard applies them.
The guard's down cooldown counts from the last change of either direction,
the seed's from the last scale-down: a little more conservative after a
scale-up. When a metric cannot be read the seed's ``evaluate`` makes no
decision ("a collection failure suggests a monitoring fault; scaling then
may make things worse"): rule ``no-data``, the current replicas.

Readings where the seed is ambiguous:

* **Which GPU counter.** ``gpu_util_mean``, the mean of
  ``DCGM_FI_DEV_GPU_UTIL``: the share of time a replica had a kernel
  executing (NVML's definition), ~100 % with any request in flight. It is
  the seed's: its collector is DCGM's GPU utilisation and its failure path
  reads it as time ("the GPU is always working, so the utilisation looks
  normal" while the queue grows). With it the rules mean what they say: P99
  over 5 s *with* no idle time on the GPUs (85 %) is a saturated fleet, not a
  cold start or a client; queue over 20 on GPUs busy 95 % of the time is a
  backlog the fleet cannot absorb; under 30 % the GPUs sit idle most of the
  time, spare capacity to shed. SM activity (``sm_active_mean``) would break
  the scale-up rules: a decode-bound replica reads 0.64 at batch 1 down to
  0.49 at batch 256 in the simulator (Llama-3-8B, H100), a prefill-bound one
  0.74-0.80, so "above 85 %" and "above 95 %" would never fire. The cost of
  the seed's choice, kept: a light load that the router spreads over every
  replica keeps each one "busy" and the fleet does not shrink below the
  replicas that have a request.
* **Which P99.** The seed's P99 is request latency over a sliding window of
  the last 100 requests: ``e2e_p99_s`` (parameter ``p99_signal``; an
  interactive service may prefer ``ttft_p99_s``: LLM answers of a few hundred
  tokens take longer than 2 s end to end even on an idle fleet, which keeps
  rule 3 from ever firing on ``e2e_p99_s``; and answers longer than 5 s end to
  end fire rule 2 on any fleet with requests in flight, since GPU utilisation
  then reads above 85 %: on the ``bandwidth-bound`` preset at 1 request/s
  (900-token answers, ~12 s each), which one replica serves within the SLO,
  ``hybrid`` climbs to 9 replicas). An empty window reads 0 in the
  seed's ``calculateP99Latency``; here the P99 is undefined when no request
  finished in the signal window, read as 0 only when nothing is running or
  waiting (an idle fleet), and otherwise as unknown (``no-data-p99`` when no
  other rule fires: the guard then holds).
* **Which queue.** The seed's engine reads one queue depth for the service:
  ``queue_waiting`` (serving replicas plus the gateway), parameter
  ``queue_signal`` (section 四's KEDA trigger uses a per-pod average, 20).
* **The warn levels.** ``QUEUE_DEPTH_WARN`` 20 and ``GPU_UTIL_CRITICAL`` 95 %
  are declared "so that scaling is gradual and does not thrash at one
  threshold" but not used by ``makeDecision``; section 二's failure path is
  exactly "GPU goes from 85 % to 95 %, HPA sees nothing, the queue grows".
  Read as an earlier, single-step rule: queue > 20 *and* GPU > 95 % -> +1
  (``warn-queue-gpu-saturated``; ``warn_scale_up: false`` switches it off).
  Below that, a warn level crossed is named in the decision's note only.
  ``P99_LATENCY_WARN_MS`` is the scale-down rule's latency bound, as in the seed.
* **The minimum.** ``keep_min_replicas`` (2) is the seed's floor for the
  scale-down rule; the effective floor is the larger of it and min_replicas.

``hybrid-predictive`` (seed 002 5.1: "predictive scaling for the expected
changes, reactive scaling as the fallback for what the prediction misses"):
Holt's linear exponential smoothing of ``request_rate_rps`` kept in the state
forecasts the rate one cold start ahead (``ctx.cold_start_s``). The capacity
of a replica is the highest request rate per serving replica seen while the
fleet was healthy (no reactive scale-up, queue <= the warn level 20), a lower
bound that decays with a one-day half-life (each daily peak refreshes it;
GPU utilisation is no gate: it reads ~100 % on a replica with one request as
on one at capacity). When the forecast exceeds what the current
replicas carry at that capacity by more than 10 % (``tolerance``, HPA's),
predicted replicas = ceil(forecast / capacity); no predictive scale-up while
the reactive rules find the fleet idle (their scale-down zone), nor without
a request rate this tick. On the way up the larger of the predictive and the
reactive proposals wins; the reactive scale-down applies only when the
forecast fits in one replica fewer. Worked
(``test_seed_hybrid.py::test_predictive_scales_ahead_of_a_ramp``): 4 healthy
replicas, the rate rising 0.02 req/s every second from 8 req/s; Holt's trend
catches up, and at t = 240 s (12.8 req/s, 3.2 req/s per replica learned) the
forecast 90 s ahead is 14.13 req/s > 1.1 x 12.8 -> ceil(14.13 / 3.2) = 5
replicas, while the reactive rules still hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmscale.deployment import DEFAULT_DEPLOYMENT, Deployment
from llmscale.policies.base import register
from llmscale.policies.params import (
    COUNT_MAX,
    DURATION_RANGE,
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

__all__ = [
    "HybridConfig",
    "HybridPolicy",
    "HybridPredictivePolicy",
    "HybridVerdict",
    "PredictiveConfig",
    "PredictiveState",
    "holt_update",
    "hybrid_verdict",
]


@dataclass(frozen=True)
class HybridConfig:
    """Seed 002 3.2's thresholds (GPU in percent, latency in seconds)."""

    queue_signal: str = param("queue_waiting")
    p99_signal: str = param("e2e_p99_s")
    queue_critical: float = param(50.0, NONNEG_RANGE)
    queue_warn: float = param(20.0, NONNEG_RANGE)
    p99_critical_s: float = param(5.0, DURATION_RANGE, unit="s")
    p99_warn_s: float = param(2.0, DURATION_RANGE, unit="s")
    gpu_high_pct: float = param(85.0, "[0, 100]", unit="%")
    gpu_critical_pct: float = param(95.0, "[0, 100]", unit="%")
    gpu_low_pct: float = param(30.0, "[0, 100]", unit="%")
    keep_min_replicas: int = param(2, f"[0, {COUNT_MAX}]")
    warn_scale_up: bool = param(True)
    cooldown_up_s: float = param(120.0, DURATION_RANGE, unit="s")
    cooldown_down_s: float = param(600.0, DURATION_RANGE, unit="s")
    tick_s: float = param(15.0, TICK_RANGE, unit="s")
    min_replicas: int = DEFAULT_DEPLOYMENT.min_replicas

    @classmethod
    def check_params(cls, p: Mapping[str, Any]) -> None:
        """The rules across the parameters (registered, run before the policy is built): each
        warning level at most its critical level, and the GPU levels in order, or a rule would fire
        on a reading its neighbour also claims (gpu_low_pct 90 over gpu_high_pct 85: a GPU at 87%
        is both idle and busy)."""
        for warn, critical in (("queue_warn", "queue_critical"), ("p99_warn_s", "p99_critical_s")):
            if p[warn] > p[critical]:
                raise PolicyParamError(
                    f"hybrid.{warn} = {p[warn]}: must be <= {critical} ({p[critical]})", warn
                )
        low, high, top = p["gpu_low_pct"], p["gpu_high_pct"], p["gpu_critical_pct"]
        if not low <= high <= top:
            raise PolicyParamError(
                f"hybrid.gpu_high_pct = {high}: the GPU thresholds must satisfy gpu_low_pct ({low}) "
                f"<= gpu_high_pct ({high}) <= gpu_critical_pct ({top})",
                "gpu_high_pct",
            )


@dataclass(frozen=True)
class HybridVerdict:
    """The reactive rules' answer: direction (+1, 0, -1), the rule, the inputs and a note."""

    step: int
    rule: str
    inputs: Mapping[str, float | None]
    note: str = ""
    #: the rules could not read their inputs (a step of 0)
    no_data: NoData | None = None


def hybrid_verdict(cfg: HybridConfig, signals: Signals) -> HybridVerdict:
    """Seed 002 3.2's ``makeDecision`` on ``signals`` (see the module docstring for the readings).

    E.g. queue 51 -> +1 ``queue-critical``; queue 50, P99 5.1 s, GPU 86 % -> +1
    ``p99-and-gpu-high``; GPU 29 %, queue 0, P99 1.9 s, 3 replicas > 2 -> -1.
    """
    current = signals.fleet.spec_replicas
    queue = signals.get(cfg.queue_signal)
    gpu = signals.get("gpu_util_mean")
    p99 = signals.get(cfg.p99_signal)
    running = signals.get("running")
    idle = queue == 0.0 and running == 0.0
    p99_known = p99 is not None or idle
    p99_v = p99 if p99 is not None else (0.0 if idle else None)
    floor = max(cfg.keep_min_replicas, cfg.min_replicas)
    inputs: dict[str, float | None] = {
        "queue": queue,
        "p99_s": p99_v,
        "gpu_util_pct": gpu,
        "replicas": float(current),
        "floor_replicas": float(floor),
    }
    missing = [n for n, v in ((cfg.queue_signal, queue), ("gpu_util_mean", gpu)) if v is None]
    if queue is None or gpu is None:
        return HybridVerdict(
            0,
            "no-data",
            inputs,
            f"missing {', '.join(missing)}: the seed makes no decision",
            no_data=NoData(tuple(missing)),
        )
    if queue > cfg.queue_critical:
        inputs["threshold"] = cfg.queue_critical
        return HybridVerdict(+1, "queue-critical", inputs, f"queue {queue:.0f} > {cfg.queue_critical:.0f}")
    if p99_v is not None and p99_v > cfg.p99_critical_s and gpu > cfg.gpu_high_pct:
        return HybridVerdict(
            +1,
            "p99-and-gpu-high",
            inputs,
            f"P99 {p99_v:.2f}s > {cfg.p99_critical_s:g}s and GPU {gpu:.0f}% > {cfg.gpu_high_pct:g}%",
        )
    if cfg.warn_scale_up and queue > cfg.queue_warn and gpu > cfg.gpu_critical_pct:
        return HybridVerdict(
            +1,
            "warn-queue-gpu-saturated",
            inputs,
            f"queue {queue:.0f} > warn {cfg.queue_warn:g} and GPU {gpu:.0f}% > {cfg.gpu_critical_pct:g}%",
        )
    if p99_v is not None and gpu < cfg.gpu_low_pct and queue == 0.0 and p99_v < cfg.p99_warn_s:
        if current > floor:
            return HybridVerdict(
                -1,
                "idle-gpu-low",
                inputs,
                f"GPU {gpu:.0f}% < {cfg.gpu_low_pct:g}%, queue 0, P99 {p99_v:.2f}s < {cfg.p99_warn_s:g}s",
            )
        return HybridVerdict(0, "at-floor", inputs, f"idle but {current} replica(s) <= floor {floor}")
    warns = []
    if queue > cfg.queue_warn:
        warns.append(f"queue {queue:.0f} > warn {cfg.queue_warn:g}")
    if p99_v is not None and p99_v > cfg.p99_warn_s:
        warns.append(f"P99 {p99_v:.2f}s > warn {cfg.p99_warn_s:g}s")
    if gpu > cfg.gpu_critical_pct:
        warns.append(f"GPU {gpu:.0f}% > critical {cfg.gpu_critical_pct:g}%")
    note = "; ".join(warns)
    if not p99_known:
        note = f"{cfg.p99_signal} undefined with requests in flight"
        return HybridVerdict(0, "no-data-p99", inputs, note, no_data=NoData((cfg.p99_signal,)))
    return HybridVerdict(0, "hold", inputs, note)


def _guard_overrides(cfg: HybridConfig) -> dict[str, Any]:
    return {"cooldown_up_s": cfg.cooldown_up_s, "cooldown_down_s": cfg.cooldown_down_s}


@dataclass(frozen=True)
class HybridPolicy:
    """Seed 002 3.2, reactive: +1 / -1 steps; cooldowns via the guard."""

    config: HybridConfig
    name: str = "hybrid"

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    @property
    def guard_overrides(self) -> Mapping[str, Any]:
        return _guard_overrides(self.config)

    def initial_state(self) -> None:
        return None

    def decide(self, signals: Signals, state: None, now_s: float) -> tuple[Decision, None]:
        v = hybrid_verdict(self.config, signals)
        current = signals.fleet.spec_replicas
        return Decision(current + v.step, v.rule, v.inputs, v.note, relative=True, no_data=v.no_data), None


# -- hybrid-predictive -----------------------------------------------------------------


@dataclass(frozen=True)
class PredictiveConfig:
    #: Holt's smoothing of the level and the trend, per update
    alpha: float = param(0.3, "(0, 1]")
    beta: float = param(0.1, "(0, 1]")
    #: forecast horizon, s (None: the context's cold start)
    horizon_s: float = 90.0
    #: half-life of the learned capacity per replica, s (a day: each daily peak refreshes it)
    capacity_half_life_s: float = param(86400.0, WINDOW_RANGE, unit="s")
    #: the forecast must exceed what the current replicas carry by this fraction (HPA's 0.1)
    tolerance: float = param(0.1, NONNEG_RANGE)


@dataclass(frozen=True)
class PredictiveState:
    #: Holt's level (req/s) and trend (req/s per s); None before the first rate
    level_rps: float | None = None
    trend_rps_per_s: float = 0.0
    last_t_s: float | None = None
    #: highest healthy request rate per serving replica seen (decayed), req/s
    capacity_rps: float | None = None
    capacity_t_s: float | None = None


def holt_update(
    level: float | None, trend: float, last_t: float | None, x: float, now_s: float, alpha: float, beta: float
) -> tuple[float, float]:
    """One step of Holt's linear smoothing over an uneven time step; trend per second.

    Worked: level 8, trend 0.02/s, 15 s later x = 8.3: prediction 8.3,
    level = 0.3 x 8.3 + 0.7 x 8.3 = 8.3, trend stays 0.02.
    """
    if level is None or last_t is None or now_s <= last_t:
        return x, trend if level is not None else 0.0
    dt = now_s - last_t
    pred = level + trend * dt
    new_level = alpha * x + (1.0 - alpha) * pred
    new_trend = beta * (new_level - level) / dt + (1.0 - beta) * trend
    return new_level, new_trend


@dataclass(frozen=True)
class HybridPredictivePolicy:
    """Seed 002 5.1: Holt forecast one cold start ahead, with the reactive rules as the fallback."""

    config: HybridConfig
    predictive: PredictiveConfig
    name: str = "hybrid-predictive"

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    @property
    def guard_overrides(self) -> Mapping[str, Any]:
        return _guard_overrides(self.config)

    def initial_state(self) -> PredictiveState:
        return PredictiveState()

    def decide(
        self, signals: Signals, state: PredictiveState, now_s: float
    ) -> tuple[Decision, PredictiveState]:
        cfg, pc = self.config, self.predictive
        current = signals.fleet.spec_replicas
        v = hybrid_verdict(cfg, signals)
        rate = signals.get("request_rate_rps")
        serving = signals.get("serving_replicas")
        if serving is None:
            serving = float(signals.fleet.ready)
        # A ghost replica (VRAM resident, GPU idle, no request for 60 s: seed 000 chapter 1) is not
        # capacity: the rate is carried by the others. 8 req/s on 4 serving replicas, one a ghost,
        # is 8/3 = 2.67 req/s per working replica, not 2; and the ghost stays in the fleet, so the
        # replicas a forecast needs are ceil(forecast / capacity) + the ghosts. Unknown: none.
        ghosts = math.floor(signals.get("ghost_replicas") or 0.0)
        working = serving - ghosts
        level, trend, last_t = state.level_rps, state.trend_rps_per_s, state.last_t_s
        if rate is not None:
            level, trend = holt_update(level, trend, last_t, rate, now_s, pc.alpha, pc.beta)
            last_t = now_s
        # Capacity: a lower bound learned while the fleet was busy and healthy.
        cap, cap_t = state.capacity_rps, state.capacity_t_s
        if cap is not None and cap_t is not None and now_s > cap_t:
            cap *= 0.5 ** ((now_s - cap_t) / pc.capacity_half_life_s)
            cap_t = now_s
        queue = signals.get(cfg.queue_signal)
        no_data = v.no_data is not None
        healthy = v.step <= 0 and not no_data and queue is not None and queue <= cfg.queue_warn
        if healthy and rate is not None and rate > 0.0 and working >= 1.0:
            observed = rate / working
            if cap is None or observed > cap:
                cap = observed
            cap_t = now_s
        new_state = PredictiveState(level, trend, last_t, cap, cap_t)

        forecast = None if level is None else max(0.0, level + trend * pc.horizon_s)
        needed = None
        if forecast is not None and cap is not None and cap > 0.0:
            needed = math.ceil(forecast / cap) + ghosts
        inputs = dict(v.inputs)
        inputs.update(
            {
                "rate_rps": rate,
                "forecast_rps": forecast,
                "trend_rps_per_s": trend if level is not None else None,
                "capacity_rps_per_replica": cap,
                "predicted_replicas": None if needed is None else float(needed),
                "horizon_s": pc.horizon_s,
                "ghost_replicas": float(ghosts),
            }
        )
        if no_data or rate is None:
            return Decision(
                current + v.step, v.rule, inputs, v.note, relative=True, no_data=v.no_data
            ), new_state
        # Predictive scale-up, not where the reactive rules find the fleet idle (their scale-down zone).
        ahead = (
            forecast is not None
            and cap is not None
            and forecast > (1.0 + pc.tolerance) * (current - ghosts) * cap
        )
        if needed is not None and ahead and v.step >= 0 and needed > current + v.step:
            note = f"forecast {forecast:.2f} req/s in {pc.horizon_s:.0f}s / {cap:.2f} req/s per replica"
            return Decision(needed, "predictive-up", inputs, note), new_state
        if v.step < 0 and needed is not None and needed > current + v.step:
            note = f"forecast needs {needed} replica(s): {v.rule} overruled"
            return Decision(current, "predictive-hold", inputs, note), new_state
        return Decision(current + v.step, v.rule, inputs, v.note, relative=True, no_data=v.no_data), new_state


# -- registry ----------------------------------------------------------------------------

_PARAMS: dict[str, Param] = params_of(HybridConfig)

_PREDICTIVE_PARAMS: dict[str, Param] = {
    **_PARAMS,
    **params_of(PredictiveConfig),
    "horizon_s": Param(None, DURATION_RANGE, kind=float, unit="s", help="default: the cold start"),
}


def _config(ctx: Deployment, p: Mapping[str, Any]) -> HybridConfig:
    cfg = config_from(
        HybridConfig,
        p,
        min_replicas=ctx.min_replicas,
    )
    return cfg


@register(
    "hybrid",
    "queue and latency hybrid: queue > 50, or P99 > 5 s with GPU > 85% -> +1; "
    "GPU < 30%, queue 0, P99 < 2 s -> -1; "
    "cooldowns 120 s up / 600 s down",
    _PARAMS,
    check=HybridConfig.check_params,
    reads=("gpu_util_mean", "running"),
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> HybridPolicy:
    return HybridPolicy(_config(ctx, params))


@register(
    "hybrid-predictive",
    "predictive hybrid: Holt forecast of the request rate one cold start ahead, "
    "reactive hybrid as the fallback",
    _PREDICTIVE_PARAMS,
    check=HybridConfig.check_params,
    reads=("gpu_util_mean", "running", "request_rate_rps", "serving_replicas", "ghost_replicas"),
)
def _make_predictive(ctx: Deployment, params: Mapping[str, Any]) -> HybridPredictivePolicy:
    horizon = params["horizon_s"]
    pc = config_from(
        PredictiveConfig,
        params,
        horizon_s=ctx.cold_start_s if horizon is None else float(horizon),
    )
    return HybridPredictivePolicy(_config(ctx, params), pc)
