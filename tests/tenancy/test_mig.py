"""MIG profiles as NVIDIA lists them, and what a slice is worth to the step-time model."""

from __future__ import annotations

import pytest

from llmscale.errors import ConfigError
from llmscale.perf import get_gpu, get_perf_model
from llmscale.perf.mig import MIG_GPUS, get_mig_gpu, slice_gpu_spec

# The MIG user guide's "Number of Instances Available" per profile (Supported MIG Profiles).
GUIDE_INSTANCES = {
    "h100-80gb": {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "a100-80gb": {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "a100-40gb": {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
}


@pytest.mark.parametrize("gpu", sorted(GUIDE_INSTANCES))
def test_instances_follow_from_placements(gpu: str) -> None:
    """The guide's instance counts are the disjoint -lgipp placements, so placements are the whole rule."""
    mig = MIG_GPUS[gpu]
    assert {n: p.max_instances for n, p in mig.profiles.items()} == GUIDE_INSTANCES[gpu]
    for p in mig.profiles.values():
        # An Ng instance's compute slices lie inside its memory span (N <= span), and the span fits 8.
        assert p.compute_slices <= p.memory_slices
        assert all(s + p.memory_slices <= 8 for s in p.starts)


def test_profile_names_resolve_and_unknown_ones_say_which_exist() -> None:
    mig = get_mig_gpu("h100")  # an alias of h100-80gb
    assert mig.profile("MIG-3g.40gb").name == "3g.40gb"
    with pytest.raises(ConfigError, match=r"3g\.20gb.*not one of h100-80gb's: 1g\.10gb"):
        mig.profile("3g.20gb")
    with pytest.raises(ConfigError, match="no MIG profiles known for h200"):
        get_mig_gpu("h200")


def test_slice_spec_worked_numbers() -> None:
    """H100 3g.40gb: 989 TFLOP/s x 60/132 SMs, 3.35 TB/s x 4/8 memory slices, 39.50 GiB, no NVLink."""
    s = slice_gpu_spec("h100-80gb", "3g.40gb")
    assert s.name == "h100-80gb:3g.40gb"
    assert s.peak_bf16_flops == pytest.approx(449.5e12, rel=1e-3)
    assert s.hbm_bandwidth_bytes_s == pytest.approx(1.675e12)
    assert s.memory_bytes == int(39.50 * 2**30)
    assert s.nvlink_bandwidth_bytes_s == 0.0
    assert s.family == "h100"  # the family's fitted efficiencies apply
    assert get_gpu("h100-80gb:3g.40gb") == s  # the name works wherever a GPU name is taken
    # A100's 7g has 98 of the 108 SMs the data sheet's 312 TFLOP/s are quoted for.
    a = slice_gpu_spec("a100-80gb", "7g.80gb")
    assert a.peak_bf16_flops == pytest.approx(312e12 * 98 / 108)
    assert a.hbm_bandwidth_bytes_s == get_gpu("a100-80gb").hbm_bandwidth_bytes_s


def test_h100_7g_slice_is_the_whole_gpu() -> None:
    """132 of 132 SMs and 8 of 8 memory slices: every step costs what it costs on the GPU."""
    full = get_perf_model("llama-3-8b", "h100-80gb", 1)
    whole = get_perf_model("llama-3-8b", "h100-80gb:7g.80gb", 1)
    for args in ((2048, 2048 * 1024.5, 1, 0, 0), (0, 0.0, 0, 64, 64_000), (512, 512 * 256.5, 1, 32, 32_000)):
        assert whole.step(*args) == full.step(*args)


def test_slice_step_time_ratios() -> None:
    """Work bound by what the slice lost slows by at most that share; host work does not slow at all.

    H100 3g.40gb keeps 60/132 of the SMs and 4/8 of the bandwidth. A 2,048-token prefill is
    compute-bound: slower than on the GPU but by less than 132/60 = 2.2 (host phases stay).
    A batch-1 decode streams the weights (bandwidth) and pays host overheads: slower by less
    than 8/4 = 2. The prefill loses more than the decode.
    """
    full = get_perf_model("llama-3-8b", "h100-80gb", 1)
    part = get_perf_model("llama-3-8b", "h100-80gb:3g.40gb", 1)
    prefill = part.prefill(2048).duration_s / full.prefill(2048).duration_s
    decode = part.decode(1, 1000).duration_s / full.decode(1, 1000).duration_s
    assert 1.0 < prefill < 132 / 60
    assert 1.0 < decode < 8 / 4
    assert prefill > decode
    # 4g.40gb: the same memory slices as 3g (same decode stream), 64 SMs: a faster prefill.
    four = get_perf_model("llama-3-8b", "h100-80gb:4g.40gb", 1)
    assert four.prefill(2048).duration_s < part.prefill(2048).duration_s
    assert four.decode(1, 1000).duration_s == pytest.approx(part.decode(1, 1000).duration_s, rel=0.01)


def test_slice_memory_holds_weights_and_kv() -> None:
    """Llama-3-8B on H100 3g.40gb: (39.50 GiB x 0.9 - 16.06 GB weights - 1.94 GB reserve) / 128 KiB."""
    pm = get_perf_model("llama-3-8b", "h100-80gb:3g.40gb", 1)
    free = 39.50 * 2**30 * 0.9 - pm.weights_bytes_per_gpu - pm.activation_reserve_bytes()
    assert pm.kv_capacity_tokens() == int(free // 131_072) == 153_867
    # 2g.20gb (19.62 GiB) leaves 7,296 tokens: less than one 8,192-token context.
    assert get_perf_model("llama-3-8b", "h100-80gb:2g.20gb", 1).kv_capacity_tokens() == 7_296
    # 1g.10gb cannot hold the 16 GB of weights at all.
    with pytest.raises(ConfigError, match="needs 16 GB of weights"):
        get_perf_model("llama-3-8b", "h100-80gb:1g.10gb", 1).kv_capacity_tokens()


def test_a_slice_serves_at_tp_1() -> None:
    with pytest.raises(ConfigError, match=r"h100-80gb:3g\.40gb is a MIG slice: .*tp must be 1 \(got 2\)"):
        get_perf_model("llama-3-8b", "h100-80gb:3g.40gb", 2)


def test_a_single_tenant_backtest_bills_a_slice_as_its_share_of_a_gpu() -> None:
    """`backtest --gpu h100-80gb:3g.40gb` billed each slice as a whole GPU; it is 3/7 of one."""
    from llmscale.backtest.runner import BacktestSettings, build_fleet
    from llmscale.perf.mig import gpu_share
    from llmscale.workloads import make_preset, window

    assert gpu_share("h100-80gb") == 1.0
    assert gpu_share("h100-80gb:3g.40gb") == 3 / 7
    assert gpu_share("a100-80gb:1g.10gb") == 1 / 7
    w = window(make_preset("flash-crowd", seed=0), 0.0, 120.0)
    billed = {}
    for gpu in ("h100-80gb:3g.40gb", "h100-80gb"):
        fleet = build_fleet(
            w, BacktestSettings(gpu=gpu, min_replicas=2, max_replicas=2, initial_replicas=2), 2
        )
        fleet.run_until(60.0)
        billed[gpu] = fleet.gpu_seconds(60.0)
    # Two ready replicas for a minute: 120 GPU-seconds on whole H100s, 3/7 of that on 3g slices.
    assert billed["h100-80gb"] == pytest.approx(120.0)
    assert billed["h100-80gb:3g.40gb"] == pytest.approx(120.0 * 3 / 7)
