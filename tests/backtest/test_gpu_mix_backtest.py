"""A mixed-GPU backtest end to end: ``gpu-mix`` on A100s / H100s / H200s with an A100 limit, the
cost in currency per policy, and the oracle still a lower bound (``--gpus``, ``--gpu-prices``)."""

from __future__ import annotations

import numpy as np
import pytest

from llmscale.backtest.compare import run_backtest
from llmscale.backtest.runner import BacktestSettings
from llmscale.errors import ConfigError
from llmscale.mix.prices import GpuPrice, GpuPrices
from llmscale.sim.config import SimConfig
from llmscale.workloads import Workload, poisson

GPUS = ("a100-80gb", "h100-80gb", "h200")
# The defaults' prices; at most 4 A100 GPUs, so the cheapest fleet for ~25 req/s is a mix.
PRICES = GpuPrices(
    (GpuPrice("a100-80gb", 1.30, 4), GpuPrice("h100-80gb", 3.00), GpuPrice("h200", 4.00)), "USD", "test"
)
SIM = SimConfig(pending_s=20.0, loading_s=10.0, warmup_s=5.0, grace_s=10.0, timeout_s=30.0)


@pytest.fixture(scope="module")
def chat() -> Workload:
    rng = np.random.default_rng(3)
    base = poisson(20.0, 240.0, seed=3)
    n = base.num_requests
    inp = rng.integers(500, 1500, n).astype(np.int64)
    out = rng.integers(100, 400, n).astype(np.int64)
    return Workload.from_arrays("chat", base.arrival_s, inp, out, {})


def _settings(**kw) -> BacktestSettings:
    return BacktestSettings(min_replicas=1, max_replicas=12, initial_replicas=3, sim=SIM, **kw)


@pytest.mark.slow
def test_a_mixed_fleet_backtest_costs_and_the_oracle_bounds_it(chat: Workload) -> None:
    # At most 3 A100s here: four carry this load alone (3.9 GPUs on average over its 240 s), so a
    # cap of four need not bind.
    prices = GpuPrices((GpuPrice("a100-80gb", 1.30, 3), *PRICES.prices[1:]), "USD", "test")
    mixed = _settings(gpu="a100-80gb", gpus=GPUS, gpu_prices=prices)
    results, oracle, _ = run_backtest(chat, ["gpu-mix", "slo"], mixed, include_oracle=True)
    assert oracle is not None
    rows = {r.policy: r.summary for r in results}
    mix = rows["gpu-mix"]
    by_gpu = mix["gpu_hours_by_gpu"]
    # The A100 limit (3) binds, so the solver adds Hopper GPUs: a mix, not one type.
    assert by_gpu["a100-80gb"] > 0 and by_gpu["h100-80gb"] + by_gpu["h200"] > 0
    # The cost is the GPU-hours per type at their prices.
    want = 1.30 * by_gpu["a100-80gb"] + 3.00 * by_gpu["h100-80gb"] + 4.00 * by_gpu["h200"]
    assert mix["cost"] == pytest.approx(want, abs=1e-3)
    assert mix["cost_currency"] == "USD"
    assert mix["gpu_hours"] == pytest.approx(sum(by_gpu.values()), abs=1e-3)
    # The oracle stays a lower bound: no policy reaches its attainment (or 99%) for less.
    bar = min(0.99, oracle.summary["slo_attainment"])
    for name, row in rows.items():
        if row["slo_attainment"] >= bar:
            assert row["cost"] >= oracle.summary["cost"], name
            assert row["gpu_hours"] >= oracle.summary["gpu_hours"], name
    # Against the same policy family on H100s alone: the mix pays less for the same load.
    h100, _, _ = run_backtest(chat, ["slo"], _settings(gpu="h100-80gb"), include_oracle=False)
    assert mix["slo_attainment"] >= 0.95
    assert mix["cost"] < h100[0].summary["cost"]


def test_gpus_are_checked_at_the_edge() -> None:
    with pytest.raises(ConfigError, match=r"gpu = h100-80gb must be one of gpus \(a100-80gb,h200\)"):
        _settings(gpu="h100-80gb", gpus=("a100-80gb", "h200"))
    with pytest.raises(ConfigError, match="listed twice"):
        _settings(gpu="h100-80gb", gpus=("h100", "h100-80gb"))


@pytest.mark.slow
def test_switching_type_keeps_the_serving_replicas_until_the_new_ones_serve(chat: Workload) -> None:
    # One H100 serving ~9 req/s (within its ~13); the A100s are cheaper per request, so gpu-mix
    # asks for two A100s instead. Cutting the H100 at once left the load on nothing for a cold
    # start (time-outs); held until its replacements serve, nothing times out, and the held
    # replica is not counted again into the guards' total (which grew the fleet every tick).
    settings = BacktestSettings(
        min_replicas=1, max_replicas=12, initial_replicas=1, sim=SIM, gpu="h100-80gb", gpus=GPUS[:2]
    )
    keep = np.arange(chat.num_requests) % 9 < 4
    light = Workload.from_arrays(
        "chat-light", chat.arrival_s[keep], chat.input_tokens[keep], chat.output_tokens[keep], {}
    )
    results, _, _ = run_backtest(light, ["gpu-mix"], settings, include_oracle=False)
    row = results[0].summary
    assert row["gpu_hours_by_gpu"]["a100-80gb"] > 0, row
    assert row["timed_out"] == 0 and row["slo_attainment"] >= 0.99, row
    assert row["replicas_max"] <= 5, row


@pytest.mark.slow
def test_the_l40s_joins_the_mix_where_the_model_fits(chat: Workload) -> None:
    # --gpus a100-80gb,h100-80gb,h200,l40s on Llama-3-8B (17.1 GB with a full-context sequence, in
    # an L40S's 48 GB x 0.9). Per replica at this chat shape the tail model gives A100 6.9, H100
    # 12.6, H200 14.1 and L40S 4.1 req/s: per $/h 5.3, 4.2, 3.5 and 4.7. With the A100s capped at
    # four, what is left goes to the next best value, the L40S, not to a Hopper GPU.
    prices = GpuPrices((*PRICES.prices, GpuPrice("l40s", 0.87)), "USD", "test")
    settings = _settings(gpu="a100-80gb", gpus=(*GPUS, "l40s"), gpu_prices=prices)
    results, _, _ = run_backtest(chat, ["gpu-mix"], settings, include_oracle=False)
    row = results[0].summary
    by_gpu = row["gpu_hours_by_gpu"]
    assert by_gpu["l40s"] > 0 and by_gpu["a100-80gb"] > 0, by_gpu
    assert by_gpu["h100-80gb"] == 0 and by_gpu["h200"] == 0, by_gpu
    assert row["cost"] == pytest.approx(1.30 * by_gpu["a100-80gb"] + 0.87 * by_gpu["l40s"], abs=1e-3)
    assert row["slo_attainment"] >= 0.99 and row["timed_out"] == 0, row


def test_the_l40s_is_left_out_where_the_model_does_not_fit(chat: Workload) -> None:
    # CodeLlama-34B: 67.5 GB of weights fit an H100's 80 GB x 0.9, not an L40S's 48 GB x 0.9.
    from llmscale.backtest.runner import mixed_pools
    from llmscale.mix.fleet import unavailable_reason

    settings = _settings(model="codellama-34b", gpu="h100-80gb", gpus=("h100-80gb", "l40s"))
    assert [p.gpu for p in mixed_pools(chat, settings)] == ["h100-80gb"]
    assert unavailable_reason("codellama-34b", "l40s", 1) == "codellama-34b does not fit 1 x l40s"
