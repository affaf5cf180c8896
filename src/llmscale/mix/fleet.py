"""What a mix of GPU types offers: which types hold the model, what one replica of each sustains
(the one capacity model, :func:`llmscale.perf.replica_tails.replica_capacity`), what it costs, and
how a chosen mix meets the guards' count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llmscale.mix.prices import GpuPrices, canonical_gpu, default_prices
from llmscale.mix.solver import GpuOption

if TYPE_CHECKING:
    from llmscale.deployment import Deployment

__all__ = [
    "fit_mix",
    "fleet_cost",
    "fleet_gpus",
    "gpu_options",
    "model_fits",
    "per_dollar",
    "unavailable_reason",
    "value_order",
]


def fleet_gpus(d: Deployment) -> tuple[str, ...]:
    """The deployment's GPU types: ``gpus`` when given (canonical names), else its one ``gpu``."""
    return tuple(canonical_gpu(g) for g in d.gpus) if d.gpus else (canonical_gpu(d.gpu),)


def model_fits(model: str, gpu: str, tp: int, gpu_memory_utilization: float = 0.9) -> bool:
    """Whether vLLM starts: the weights per GPU and one full-context sequence's KV cache fit in
    ``gpu_memory_utilization`` of the memory (vLLM refuses to start when ``max_model_len`` does not
    fit). Llama-3-8B (16.1 GB, 8,192 tokens x 128 KiB = 1.07 GB) fits an L40S's 48 GB x 0.9;
    Llama-3-70B on one (141 GB) does not, on four (35.3 GB each) it does."""
    from llmscale.perf.catalogue import get_gpu, get_model

    spec = get_model(model)
    memory = get_gpu(gpu).memory_bytes
    need = spec.weights_bytes / tp + spec.max_context_tokens * spec.kv_bytes_per_token / tp
    return need <= gpu_memory_utilization * memory


def unavailable_reason(model: str, gpu: str, tp: int) -> str | None:
    """Why a GPU type cannot serve the deployment (None: it can)."""
    if not model_fits(model, gpu, tp):
        return f"{model} does not fit {tp} x {gpu}"
    return None


def gpu_options(
    d: Deployment,
    prompt_tokens: float,
    output_tokens: float,
    ttft_target_s: float,
    *,
    replicas: int = 1,
    miss_budget: float = 0.01,
    prices: GpuPrices | None = None,
) -> tuple[GpuOption, ...]:
    """One :class:`GpuOption` per GPU type of the deployment that can serve it, in its order.

    Capacity: the tail model's req/s per replica for this mean shape in a fleet of ``replicas``;
    price: price per GPU-hour x TP; limit: ``max_gpus // tp`` replicas.
    """
    from llmscale.perf import replica_tails

    book = prices or d.gpu_prices or default_prices()
    out = []
    for gpu in fleet_gpus(d):
        if unavailable_reason(d.model, gpu, d.tp) is not None:
            continue
        cap = replica_tails.replica_capacity(
            d.model,
            gpu,
            d.tp,
            prompt_tokens,
            output_tokens,
            ttft_target_s,
            d.slo_tpot_s,
            mode="tail",
            max_num_seqs=d.max_num_seqs,
            max_num_batched_tokens=d.max_num_batched_tokens,
            calibration=d.calibration,
            scale=d.perf_scale,
            miss_budget=miss_budget,
            replicas=replicas,
        )
        price = book.of(gpu)
        limit = None if price.max_gpus is None else price.max_gpus // d.tp
        out.append(
            GpuOption(gpu, cap.rate_rps if cap.within_target else 0.0, price.price_per_gpu_hour * d.tp, limit)
        )
    return tuple(out)


def fit_mix(mix: Sequence[tuple[str, int]], total: int) -> tuple[tuple[str, int], ...]:
    """``mix`` (best value first) fitted to ``total`` replicas, the guards' answer.

    The guards bound a count, not a mix: replicas they add go to the first type (the policy lists
    its types by req/s per dollar, best first), replicas they remove come off the last types
    first. E.g. (a100 4, h100 1) raised to 6 -> (a100 5, h100 1); lowered to 3 -> (a100 3, h100 0).
    """
    counts = [max(0, n) for _, n in mix]
    names = [g for g, _ in mix]
    if not counts:
        return ()
    diff = total - sum(counts)
    if diff > 0:
        counts[0] += diff
    k = len(counts) - 1
    while diff < 0 and k >= 0:
        take = min(counts[k], -diff)
        counts[k] -= take
        diff += take
        k -= 1
    return tuple(zip(names, counts, strict=True))


def value_order(options: Sequence[GpuOption]) -> list[int]:
    """Indices of ``options`` by req/s per dollar-hour, best first (ties: the deployment's order)."""
    return sorted(
        range(len(options)),
        key=lambda i: (-(options[i].capacity_rps / options[i].price_per_hour), i),
    )


def per_dollar(option: GpuOption) -> float:
    """req/s per dollar-hour, e.g. an A100 at 6.88 req/s for $1.30: 5.29."""
    return option.capacity_rps / option.price_per_hour if option.price_per_hour > 0 else math.inf


def fleet_cost(
    fleet: Any, gpu: str, prices: GpuPrices | None, end_s: float
) -> tuple[float | None, str, dict[str, float] | None]:
    """(cost, currency, GPU-hours per type of a mixed fleet or None) of a simulated fleet up to ``end_s``.

    One type: its GPU-hours x its price per GPU-hour (a MIG slice ``h100-80gb:3g.40gb`` is billed
    as its share of the GPU's price, as its GPU-hours already are). Mixed: each type's hours at its
    price, plus the oracle's prepaid hours at ``gpu``'s. None when a type has no price (a GPU the
    default list does not cover, e.g. the A100 40GB, and the file does not name).
    E.g. 10 H100-hours at $3.00 and 4 A100-hours at $1.30: $35.20.
    """
    from llmscale.errors import ConfigError

    book = prices or default_prices()
    base = gpu.split(":", 1)[0]
    try:
        if not fleet.pools:
            one = fleet.gpu_seconds(end_s) / 3600.0 * book.of(base).price_per_gpu_hour
            return round(one, 4), book.currency, None
        by_gpu = {p.gpu: s / 3600.0 for p, s in zip(fleet.pools, fleet.pool_gpu_seconds(end_s), strict=True)}
        cost = book.cost(by_gpu) + fleet.prepaid_gpu_s / 3600.0 * book.of(base).price_per_gpu_hour
    except ConfigError:
        return None, book.currency, None
    return round(cost, 4), book.currency, {g: round(h, 5) for g, h in by_gpu.items()}
