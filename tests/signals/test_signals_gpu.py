"""GPU signals: composite utilisation, effective VRAM, bandwidth P95 and queue entropy (seeds 000, 004)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from signals_fixtures import obs, sample, vllm_values

from llmscale.metrics.names import DCGM, VLLM
from llmscale.signals.gpu import (
    bandwidth_ratio,
    composite_util,
    effective_vram,
    fb_used_ratio,
    gpu_signals,
    normalized_entropy,
    percentile_linear,
    seed_composite_util,
)
from llmscale.signals.window import FleetWindow


@pytest.mark.parametrize(
    ("gpu", "copy", "expected"),
    [
        pytest.param(9.0, 92.0, 92.0, id="decode-bound-reads-92"),
        pytest.param(41.7, 20.0, 41.7, id="compute-bound"),
        pytest.param(None, 30.0, 30.0, id="only-copy"),
        pytest.param(12.0, None, 12.0, id="only-gpu"),
        pytest.param(None, None, None, id="neither"),
    ],
)
def test_composite_util_is_max(gpu, copy, expected):
    assert composite_util(gpu, copy) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # a decode-bound replica with a request in flight: GPU_UTIL 100 is not the compute term
        pytest.param({DCGM.GPU_UTIL: 100.0, DCGM.SM_ACTIVE: 0.09, DCGM.MEM_COPY_UTIL: 92.0}, 92.0, id="seed"),
        pytest.param(
            {DCGM.GPU_UTIL: 100.0, DCGM.SM_ACTIVE: 0.7, DCGM.MEM_COPY_UTIL: 10.0}, 70.0, id="prefill"
        ),
        # dcgm-exporter's default counters: no profiling field -> memory alone, never GPU_UTIL
        pytest.param({DCGM.GPU_UTIL: 100.0, DCGM.MEM_COPY_UTIL: 20.0}, 20.0, id="no-profiling-fields"),
        pytest.param({DCGM.GPU_UTIL: 100.0}, None, id="gpu-util-alone"),
    ],
)
def test_seed_composite_reads_sm_activity_and_memory_not_gpu_util(values, expected):
    got = seed_composite_util(values)
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("used", "bw", "l2", "expected"),
    [
        # 0.4 x 0.9 + 0.3 x 0.6 + 0.3 x 0.4/0.8 = 0.36 + 0.18 + 0.15
        pytest.param(0.9, 0.6, 0.4, 0.69, id="worked-0.69"),
        pytest.param(1.0, 1.0, 0.8, 1.0, id="all-saturated"),
        pytest.param(1.0, 1.0, 0.95, 1.0, id="l2-above-0.8-capped"),
        pytest.param(0.0, 0.0, 0.0, 0.0, id="idle"),
    ],
)
def test_effective_vram(used, bw, l2, expected):
    assert effective_vram(used, bw, l2) == pytest.approx(expected)


def test_fb_used_ratio_seed_example():
    # seed 000: 14820 MiB / 24576 MiB
    assert fb_used_ratio({DCGM.FB_USED: 14820.0, DCGM.FB_FREE: 24576.0 - 14820.0}) == pytest.approx(
        0.603, abs=1e-3
    )
    assert fb_used_ratio({DCGM.FB_USED: 1.0}) is None


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({DCGM.DRAM_ACTIVE: 0.7, DCGM.MEM_COPY_UTIL: 10.0}, 0.7, id="dram-active-preferred"),
        pytest.param({DCGM.MEM_COPY_UTIL: 35.0}, 0.35, id="mem-copy-percent"),
        pytest.param({DCGM.DRAM_ACTIVE: 1.3}, 1.0, id="clamped"),
        pytest.param({}, None, id="missing"),
    ],
)
def test_bandwidth_ratio(values, expected):
    got = bandwidth_ratio(values)
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("xs", "q", "expected"),
    [
        pytest.param((0.2, 0.4, 0.5, 0.7, 0.9), 0.95, 0.86, id="position-3.8"),
        pytest.param((0.9, 0.2, 0.7, 0.4, 0.5), 0.95, 0.86, id="unsorted"),
        pytest.param((0.3,), 0.95, 0.3, id="one-sample"),
        pytest.param((0.1, 0.3), 0.5, 0.2, id="midpoint"),
    ],
)
def test_percentile_linear(xs, q, expected):
    assert percentile_linear(xs, q) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("queue", "expected"),
    [
        pytest.param((5, 5, 5), 1.0, id="steady-queue-is-1"),
        pytest.param((0, 0, 9), 0.0, id="one-burst-is-0"),
        # p = (1/6, 1/3, 1/2): H = 1.459 bits / log2(3) = 0.921
        pytest.param((1, 2, 3), 0.9206, id="worked-0.921"),
        pytest.param((0, 0, 0), 0.0, id="empty-queue"),
        pytest.param((4,), None, id="one-sample"),
        pytest.param((), None, id="no-sample"),
    ],
)
def test_normalized_entropy(queue, expected):
    got = normalized_entropy(queue)
    assert got == (None if expected is None else pytest.approx(expected, abs=1e-4))


@given(st.lists(st.floats(0.0, 1e6), min_size=2, max_size=40))
def test_entropy_is_a_ratio(queue):
    h = normalized_entropy(queue)
    assert h is not None and 0.0 <= h <= 1.0


def test_gpu_signals_worked_fleet():
    # a: seed 000's decode-bound replica, compute 9 % while memory is 92 % busy; both have
    # requests in flight, so GPU_UTIL reads 100 and 90
    kw = {"fb_used_mib": 72_000, "fb_free_mib": 8_000, "dram_active": 0.9, "l2_miss": 0.8}
    a = vllm_values(gpu_util=100.0, sm_active=0.09, mem_copy=92.0, **kw)
    kw = {"fb_used_mib": 40_000, "fb_free_mib": 40_000, "dram_active": 0.3, "l2_miss": 0.2}
    b = vllm_values(gpu_util=90.0, sm_active=0.5, mem_copy=30.0, **kw)
    values = gpu_signals(FleetWindow.build([obs(0.0, sample("a", a), sample("b", b), sample("c", ok=False))]))
    assert values["gpu_util_mean"].value == pytest.approx(95.0)
    assert values["sm_active_mean"].value == pytest.approx(0.295)
    assert values["mem_copy_util_mean"].value == pytest.approx(61.0)
    # max(SM active %, memory %): a 92, b 50 -- GPU_UTIL is not a term
    assert values["gpu_composite_util"].value == pytest.approx((92 + 50) / 2)
    assert values["vram_used_ratio"].value == pytest.approx((0.9 + 0.5) / 2)
    # a: 0.36 + 0.27 + 0.3 = 0.93; b: 0.2 + 0.09 + 0.075 = 0.365
    assert values["effective_vram"].value == pytest.approx((0.93 + 0.365) / 2)
    # one sample per replica: P95 = that sample
    assert values["bw_saturation_p95"].value == pytest.approx((0.9 + 0.3) / 2)


def test_effective_vram_invalid_without_l2_miss():
    v = vllm_values(l2_miss=None)
    values = gpu_signals(FleetWindow.build([obs(0.0, sample("a", v))]))
    assert values["effective_vram"].value is None
    assert "L2" in values["effective_vram"].note
    assert values["vram_used_ratio"].value is not None


def test_bw_saturation_p95_over_60s():
    # samples every 15 s for 90 s: the window is t = 30..90 (5 samples 0.2, 0.4, 0.5, 0.7, 0.9) -> 0.86
    series = (1.0, 1.0, 0.2, 0.4, 0.5, 0.7, 0.9)
    window = [obs(15.0 * k, sample("a", vllm_values(dram_active=x))) for k, x in enumerate(series)]
    values = gpu_signals(FleetWindow.build(window))
    assert values["bw_saturation_p95"].value == pytest.approx(0.86)
    assert "5.0 sample(s)" in values["bw_saturation_p95"].note


def test_queue_entropy_over_30s_includes_the_gateway():
    # window 30 s at a 15 s tick: t = 30, 45, 60 with queues 1+0, 2+0, 1+2 (replica + gateway) -> (1, 2, 3)
    window = [
        obs(0.0, sample("a", {VLLM.waiting: 50.0}), gateway=0),
        obs(15.0, sample("a", {VLLM.waiting: 50.0}), gateway=0),
        obs(30.0, sample("a", {VLLM.waiting: 1.0}), gateway=0),
        obs(45.0, sample("a", {VLLM.waiting: 2.0}), gateway=0),
        obs(60.0, sample("a", {VLLM.waiting: 1.0}), gateway=2),
    ]
    values = gpu_signals(FleetWindow.build(window))
    assert values["queue_entropy"].value == pytest.approx(0.9206, abs=1e-4)


def test_queue_entropy_extrapolates_over_a_failed_scrape():
    # 2 replicas with 3 each; at 45 s one scrape fails: read 3 x 2/1 = 6, not 3 -> steady queue, entropy 1
    r = lambda n, q: sample(n, {VLLM.waiting: q})  # noqa: E731
    window = [
        obs(30.0, r("a", 3.0), r("b", 3.0)),
        obs(45.0, r("a", 3.0), sample("b", ok=False)),
        obs(60.0, r("a", 3.0), r("b", 3.0)),
    ]
    values = gpu_signals(FleetWindow.build(window))
    assert values["queue_entropy"].value == pytest.approx(1.0)
    assert not math.isnan(values["queue_entropy"].value)
