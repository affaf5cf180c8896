"""``gpu-mix``: the cheapest mix of GPU types per tick, from the tail capacity model and the prices."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.deployment import Deployment
from llmscale.mix.fleet import fit_mix, model_fits, unavailable_reason
from llmscale.mix.prices import GpuPrice, GpuPrices
from llmscale.policies.base import create_policy
from llmscale.types import FleetView, Signals, SignalValue

GPUS = ("a100-80gb", "h100-80gb", "h200")
CTX = Deployment(min_replicas=1, max_replicas=100, gpus=GPUS)
BASE = Signals(time_s=0.0, fleet=FleetView(spec_replicas=4, ready=4), values={})
# Llama-3-8B chat, 1,000-token prompts and 250-token answers: per replica (tail model, fleet of 4)
# A100 7.19 req/s at $1.30/h, H100 12.88 at $3.00, H200 14.25 at $4.00.
CHAT = {"prompt_len_mean_tokens": 1000.0, "decode_steps_mean": 250.0}


def sig(**values: float | None) -> Signals:
    return replace(BASE, values={k: SignalValue(v) for k, v in values.items()})


def _limited(**max_gpus: int) -> GpuPrices:
    return GpuPrices(tuple(GpuPrice(g, p, max_gpus.get(g.replace("-", "_"))) for g, p in
                           (("a100-80gb", 1.30), ("h100-80gb", 3.00), ("h200", 4.00))))  # fmt: skip


@pytest.mark.parametrize(
    ("ctx", "values", "mix", "price"),
    [
        # 32 req/s at utilization 0.8 = 40 req/s: 6 A100s (43.1 req/s) for $7.80/h.
        pytest.param(
            CTX, {"request_rate_rps": 32.0, "queue_waiting": 0.0}, {"a100-80gb": 6}, 7.80, id="a100s"
        ),
        # At most 4 A100 GPUs: 4 A100 (28.75) + 1 H100 (12.88) = 41.6 req/s for $8.20/h.
        pytest.param(
            replace(CTX, gpu_prices=_limited(a100_80gb=4)),
            {"request_rate_rps": 32.0, "queue_waiting": 0.0},
            {"a100-80gb": 4, "h100-80gb": 1},
            8.20,
            id="a100-limit",
        ),
        # A backlog of 600 drained in 60 s adds 10 req/s: 50 req/s, 7 A100s (50.3) for $9.10/h.
        pytest.param(
            CTX, {"request_rate_rps": 32.0, "queue_waiting": 600.0}, {"a100-80gb": 7}, 9.10, id="backlog"
        ),
        # One type only (no gpus): the mix is that type's count, min_replicas 1 with no load.
        pytest.param(
            Deployment(),
            {"request_rate_rps": 0.0, "queue_waiting": 0.0},
            {"h100-80gb": 1},
            3.00,
            id="one-type-idle",
        ),
    ],
)
def test_the_cheapest_mix(ctx, values, mix, price) -> None:
    policy = create_policy("gpu-mix", ctx, {})
    d, _ = policy.decide(sig(**values, **CHAT), policy.initial_state(), 15.0)
    assert d.rule == "cheapest-mix"
    assert d.mix is not None and {g: n for g, n in d.mix if n} == mix
    assert d.desired == sum(mix.values())
    assert d.inputs["price_per_hour"] == pytest.approx(price)
    assert d.inputs["capacity_rps"] >= d.inputs["demand_rps"]


def test_no_rate_holds_and_says_what_is_missing() -> None:
    policy = create_policy("gpu-mix", CTX, {})
    d, _ = policy.decide(sig(queue_waiting=0.0), policy.initial_state(), 15.0)
    assert d.rule == "no-data" and d.desired == 4
    assert d.no_data is not None and d.no_data.missing == ("request_rate_rps",)


def test_the_mix_is_listed_best_value_first_so_the_guards_add_there() -> None:
    policy = create_policy("gpu-mix", replace(CTX, gpu_prices=_limited(a100_80gb=4)), {})
    d, _ = policy.decide(sig(request_rate_rps=32.0, queue_waiting=0.0, **CHAT), policy.initial_state(), 15.0)
    assert d.mix is not None and [g for g, _ in d.mix] == ["a100-80gb", "h100-80gb", "h200"]
    assert fit_mix(d.mix, 6) == (("a100-80gb", 5), ("h100-80gb", 1), ("h200", 0))
    assert fit_mix(d.mix, 3) == (("a100-80gb", 3), ("h100-80gb", 0), ("h200", 0))


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "fits"),
    [
        pytest.param("llama-3-8b", "l40s", 1, True, id="8b-on-l40s"),
        pytest.param("llama-3-70b", "l40s", 1, False, id="70b-on-one-l40s"),
        pytest.param("llama-3-70b", "h200", 1, False, id="70b-on-one-h200"),
        pytest.param("llama-3-70b", "h100-80gb", 4, True, id="70b-on-four-h100"),
    ],
)
def test_which_types_hold_the_model(model, gpu, tp, fits) -> None:
    assert model_fits(model, gpu, tp) is fits


def test_the_l40s_is_planned_where_the_model_fits() -> None:
    # the L40S has a step-time model (the Ada family's priors, docs/gpu-mix.md): only memory rules it out
    assert unavailable_reason("llama-3-8b", "l40s", 1) is None
    assert unavailable_reason("llama-3-70b", "l40s", 1) == "llama-3-70b does not fit 1 x l40s"
    assert unavailable_reason("llama-3-8b", "h100-80gb", 1) is None
