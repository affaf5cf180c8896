"""``gpu-mix``: the cheapest mix of GPU types that carries the load within the SLO, every tick.

Each tick (15 s) the demand is the window's request rate with headroom plus the backlog drained
over ``backlog_drain_s``::

    demand_rps = request_rate_rps / target_utilization + queue_waiting / backlog_drain_s

and the fleet is the integer program of :mod:`llmscale.mix.solver` over the deployment's GPU
types (``Deployment.gpus``; its one ``gpu`` when none): replicas per type, each type's capacity
from the one capacity model (:func:`llmscale.perf.replica_tails.replica_capacity`, mode
``"tail"``, at the window's mean request shape), each type's price from ``--gpu-prices`` (or the
cited defaults), its limit from ``max_gpus``. The decision carries the mix (``Decision.mix``),
listed best value first, so the adapter can fit it to what the guards allow
(:func:`llmscale.mix.fleet.fit_mix`).

Worked (``tests/policies/test_gpu_mix_policy.py``): Llama-3-8B chat at 32 req/s and no queue,
utilization 0.8: demand 40 req/s. Per replica: A100 6.88 req/s at $1.30/h, H100 12.62 at $3.00,
H200 14.0 at $4.00: 6 A100s (41.3 req/s, $7.80/h); with ``max_gpus: 4`` A100s, 4 A100 + 1 H100
($8.20/h).

It sizes outright like ``capacity-calibrated`` and keeps the ``slo`` policy's scale-down
stabilization (180 s), so a dip in a noisy rate does not swap types back and forth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmscale.deployment import Deployment
from llmscale.policies.base import register
from llmscale.policies.params import AMOUNT_RANGE, TICK_RANGE, Param, config_from, param, params_of
from llmscale.types import Decision, NoData, Signals

__all__ = ["GpuMixConfig", "GpuMixPolicy", "GpuMixState"]


@dataclass(frozen=True)
class GpuMixConfig:
    tick_s: float = param(15.0, TICK_RANGE, unit="s", help="how often the mix is solved")
    target_utilization: float = param(
        0.8, "(0, 1]", help="share of the capacity planned to be used: demand = rate / this (headroom)"
    )
    backlog_drain_s: float = param(
        60.0,
        AMOUNT_RANGE,
        unit="s",
        help="the queue is planned to drain within this: demand += waiting / this",
    )
    miss_budget: float = param(
        0.01, "(0, 0.5]", help="share of requests a replica may put over the SLO at its capacity (tail model)"
    )
    plan_prompt_tokens: float = param(
        1000.0, "[1, 1e7]", unit="tokens", help="request shape planned before any request finished"
    )
    plan_output_tokens: float = param(
        200.0, "[1, 1e7]", unit="tokens", help="request shape planned before any request finished"
    )


@dataclass(frozen=True)
class GpuMixState:
    #: the last request shape seen (prompt tokens, output tokens), for windows where none finished
    shape: tuple[float, float] | None = None


@dataclass(frozen=True)
class GpuMixPolicy:
    config: GpuMixConfig
    deployment: Deployment
    name: str = "gpu-mix"
    guard_overrides: Mapping[str, Any] = field(
        default_factory=lambda: {"pending_aware": False, "stabilization_down_s": 180.0}
    )

    @property
    def tick_s(self) -> float:
        return self.config.tick_s

    def initial_state(self) -> GpuMixState:
        return GpuMixState()

    def decide(self, signals: Signals, state: GpuMixState, now_s: float) -> tuple[Decision, GpuMixState]:
        from llmscale.mix.fleet import fit_mix, gpu_options, per_dollar, value_order
        from llmscale.mix.solver import cheapest_mix
        from llmscale.slo import ttft_target_s

        c, d = self.config, self.deployment
        current = signals.fleet.spec_replicas
        rate = signals.get("request_rate_rps")
        queue = signals.get("queue_waiting")
        if rate is None or queue is None:
            missing = tuple(n for n, v in (("request_rate_rps", rate), ("queue_waiting", queue)) if v is None)
            return Decision(current, "no-data", {"request_rate_rps": rate, "queue_waiting": queue},
                            no_data=NoData(missing)), state  # fmt: skip
        prompt = signals.get("prompt_len_mean_tokens")
        output = signals.get("decode_steps_mean")
        if prompt is not None and output is not None and prompt > 0 and output > 0:
            state = GpuMixState((prompt, output))
        shape = state.shape or (c.plan_prompt_tokens, c.plan_output_tokens)
        ttft = float(ttft_target_s(shape[0], d.slo_ttft_s, d.slo_ttft_per_1k_tokens_s))
        demand = rate / c.target_utilization + queue / c.backlog_drain_s
        options = gpu_options(
            d, shape[0], shape[1], ttft, replicas=max(1, current), miss_budget=c.miss_budget
        )
        if not options:
            return Decision(current, "no-gpu-type", {"demand_rps": demand},
                            "no GPU type of the deployment holds the model"), state  # fmt: skip
        order = value_order(options)
        ranked = [options[i] for i in order]
        choice = cheapest_mix(ranked, demand, min_replicas=d.min_replicas)
        mix = fit_mix(choice.counts, choice.total)
        inputs: dict[str, float | None] = {
            "request_rate_rps": rate,
            "queue_waiting": queue,
            "demand_rps": round(demand, 6),
            "capacity_rps": round(choice.capacity_rps, 6),
            "price_per_hour": round(choice.price_per_hour, 6),
        }
        for o in ranked:
            inputs[f"capacity_rps_{o.gpu}"] = round(o.capacity_rps, 4)
        parts = ", ".join(f"{n} x {g}" for g, n in mix if n)
        note = (
            f"{parts or 'no replica'} carry {choice.capacity_rps:.2f} req/s for "
            f"{choice.price_per_hour:.2f}/h (demand {demand:.2f}; best value "
            f"{ranked[0].gpu} {per_dollar(ranked[0]):.2f} req/s per currency-hour)"
        )
        if not choice.feasible:
            note += "; the limits cannot carry the demand: every allowed replica"
        return Decision(choice.total, "cheapest-mix", inputs, note, mix=mix), state


_PARAMS: dict[str, Param] = params_of(GpuMixConfig)


@register(
    "gpu-mix",
    "the cheapest mix of GPU types (integer program, HiGHS) whose capacity by the tail model carries "
    "the request rate with headroom, at the GPU prices per hour",
    _PARAMS,
    needs_step_model=True,
    reads=("request_rate_rps", "queue_waiting", "prompt_len_mean_tokens", "decode_steps_mean"),
)
def _make(ctx: Deployment, params: Mapping[str, Any]) -> GpuMixPolicy:
    return GpuMixPolicy(config_from(GpuMixConfig, params), ctx)
