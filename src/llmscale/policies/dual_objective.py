"""``dual-objective``: seed 003 3.2's trigger on sliding-window P95 latency AND OOM-risk probability.

Seed 003 ("2 a.m., the OOM alert again"), section 3.2 "a dual-objective
scaling trigger on sliding-window P95 latency and OOM risk probability":

    shouldScaleUp = P95 over a 1-minute sliding window > 200 ms
                    AND OOM probability > 0.35   # "both high-risk signals at once: no aggressive scale-out"

and its weight table: P95 latency 0.6, OOM risk 0.4.

Readings where the seed is ambiguous:

* **P95 of what.** The seed's is request latency of a web service, 60 s
  window sampled every 5 s. For an LLM service the response the user waits
  for is the first token: ``ttft_p95_s`` (the signals' 60 s window), 200 ms
  (``p95_threshold_s``) a realistic interactive TTFT target. Parameter
  ``latency_signal`` picks another (e.g. ``e2e_p95_s``). With no request
  finished in the window and nothing running or waiting (idle) the latency
  reads 0; otherwise an undefined percentile is missing data.
* **OOM risk.** ``oom_risk``: llmscale's logistic of KV usage, its slope and
  the preemption rate, the probability that the most loaded replica
  preempts within a minute (vLLM preempts rather than crashing: its "OOM").
* **How the weights combine.** The trigger is the seed's AND: both
  normalised pressures ``l = P95 / 200 ms`` and ``r = risk / 0.35`` must
  exceed 1. The weights form the combined pressure ``S = 0.6 l + 0.4 r``
  (in the decision's inputs), which the scale-down rule uses.
* **Scale-down.** The seed has none. llmscale's conservative symmetric rule:
  -1 when ``S < 0.5`` (``down_pressure``) with each of ``l`` and ``r``
  below 1, i.e. the weighted pressure is under half of the trigger level.
  Worked (``test_seed_dual_objective.py``): TTFT 80 ms and risk 0.07 ->
  S = 0.6 x 0.4 + 0.4 x 0.2 = 0.32 -> -1; TTFT 150 ms and risk 0.1 ->
  S = 0.45 + 0.114 = 0.564 -> hold.
* **Step.** +1 per trigger (``up_step``), -1 per scale-down; the guard's
  pending-aware check keeps replicas on the way from being asked for twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmscale.deployment import Deployment
from llmscale.policies.base import register
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

__all__ = ["DualObjectiveConfig", "DualObjectivePolicy"]


@dataclass(frozen=True)
class DualObjectiveConfig:
    latency_signal: str = param("ttft_p95_s")
    p95_threshold_s: float = param(0.2, WINDOW_RANGE, unit="s")
    oom_threshold: float = param(0.35, AMOUNT_RANGE)
    w_latency: float = param(0.6, NONNEG_RANGE)
    w_oom: float = param(0.4, NONNEG_RANGE)
    down_pressure: float = param(0.5, NONNEG_RANGE)
    up_step: int = param(1, f"[1, {COUNT_MAX}]")
    tick_s: float = param(15.0, TICK_RANGE, unit="s")


@dataclass(frozen=True)
class DualObjectivePolicy:
    config: DualObjectiveConfig
    name: str = "dual-objective"

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    def initial_state(self) -> None:
        return None

    def decide(self, signals: Signals, state: None, now_s: float) -> tuple[Decision, None]:
        cfg = self.config
        current = signals.fleet.spec_replicas
        p95 = signals.get(cfg.latency_signal)
        risk = signals.get("oom_risk")
        idle = signals.get("queue_waiting") == 0.0 and signals.get("running") == 0.0
        if p95 is None and idle:
            p95 = 0.0
        inputs: dict[str, float | None] = {"p95_s": p95, "oom_risk": risk}
        if p95 is None or risk is None:
            missing = [n for n, v in ((cfg.latency_signal, p95), ("oom_risk", risk)) if v is None]
            return Decision(
                current, "no-data", inputs, f"missing {', '.join(missing)}", no_data=NoData(tuple(missing))
            ), None
        lat = p95 / cfg.p95_threshold_s
        oom = risk / cfg.oom_threshold
        pressure = cfg.w_latency * lat + cfg.w_oom * oom
        inputs.update(
            {
                "latency_pressure": lat,
                "oom_pressure": oom,
                "weighted_pressure": pressure,
                "p95_threshold_s": cfg.p95_threshold_s,
                "oom_threshold": cfg.oom_threshold,
            }
        )
        if lat > 1.0 and oom > 1.0:
            note = (
                f"P95 {p95 * 1000:.0f} ms > {cfg.p95_threshold_s * 1000:.0f} ms "
                f"AND OOM {risk:.2f} > {cfg.oom_threshold:g}"
            )
            return Decision(current + cfg.up_step, "p95-and-oom-high", inputs, note, relative=True), None
        if pressure < cfg.down_pressure and lat < 1.0 and oom < 1.0 and current > 0:
            note = f"weighted pressure {pressure:.2f} < {cfg.down_pressure:g}"
            return Decision(current - 1, "pressure-low", inputs, note), None
        if lat > 1.0 or oom > 1.0:
            one = "P95" if lat > 1.0 else "OOM risk"
            return Decision(current, "one-objective-only", inputs, f"only {one} is high: the AND holds"), None
        return Decision(current, "hold", inputs, f"weighted pressure {pressure:.2f}"), None


_PARAMS: dict[str, Param] = params_of(DualObjectiveConfig)


@register(
    "dual-objective",
    "latency and memory together: TTFT P95 > 200 ms AND OOM risk > 0.35 -> +1; "
    "0.6/0.4-weighted pressure < 0.5 -> -1",
    _PARAMS,
    reads=("queue_waiting", "running", "oom_risk"),
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> DualObjectivePolicy:
    cfg = config_from(
        DualObjectiveConfig,
        params,
    )
    return DualObjectivePolicy(cfg)
