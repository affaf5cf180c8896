"""Start tiers from physics: a new node, a kept node, a replica woken from vLLM level-1 sleep."""

from __future__ import annotations

import pytest

from llmscale.perf import MODELS, cold_start, start_tiers
from llmscale.perf.cold_start import (
    BOOTSTRAP_S,
    DEFAULT_PENDING_S,
    HOST_TO_GPU_BYTES_S,
    NETWORK_LOAD_BYTES_S,
    NODE_PROVISION_S,
    WAKE_BASE_S,
    WARM_NODE_PENDING_S,
)


def test_llama_3_8b_on_one_h100() -> None:
    """The module docstring's worked numbers: cold 253 s, warm node 53 s, sleeping 1.6 s."""
    t = start_tiers("llama-3-8b", "h100-80gb", 1)
    assert t.cold.total_s == pytest.approx(253.2, abs=0.1)
    assert t.warm_node.total_s == pytest.approx(52.9, abs=0.1)
    assert t.sleeping.total_s == pytest.approx(1.64, abs=0.01)
    # The backtest's default start (a node the cluster has) lies between the tiers it mixes.
    assert t.warm_node.total_s < cold_start("llama-3-8b", "h100-80gb", 1).total_s < t.cold.total_s


def test_each_tier_is_its_physics() -> None:
    """Weights (16.06 GB) at each tier's bandwidth: network storage, local disk, host memory."""
    weights = MODELS["llama-3-8b"].weights_bytes
    base = cold_start("llama-3-8b", "h100-80gb", 1)
    t = start_tiers("llama-3-8b", "h100-80gb", 1)
    assert t.cold.pending_s == NODE_PROVISION_S + DEFAULT_PENDING_S
    assert t.cold.loading_s == pytest.approx(BOOTSTRAP_S + weights / NETWORK_LOAD_BYTES_S)
    assert t.warm_node.pending_s == WARM_NODE_PENDING_S
    assert t.warm_node.loading_s == base.loading_s
    # Level-1 sleep keeps the process, compiled kernels and CUDA graphs: no bootstrap, no warm-up.
    assert t.sleeping.pending_s == 0.0 and t.sleeping.warmup_s == 0.0
    assert t.sleeping.loading_s == pytest.approx(WAKE_BASE_S + weights / HOST_TO_GPU_BYTES_S)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_tiers_are_ordered_and_wakes_within_the_published_range(model: str) -> None:
    spec = MODELS[model]
    tp = next(tp for tp in (1, 2, 4, 8) if spec.weights_bytes / tp < 70e9)
    t = start_tiers(model, "h100-80gb", tp)
    assert t.cold.total_s > t.warm_node.total_s > t.sleeping.total_s > 0
    # vLLM's sleep-mode posts: level-1 wake-ups of 0.1 s (small models) to ~6 s (the largest).
    assert 0.1 <= t.sleeping.total_s <= 6.0
