"""Seed 004's signals at their own resolution: bandwidth P95 of 600 100 ms samples, entropy of 30 s."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from signals_fixtures import obs, sample, vllm_values

from llmscale.metrics.names import DCGM, DERIVED, VLLM
from llmscale.signals.gpu import gpu_signals, in_window
from llmscale.signals.window import FleetWindow
from llmscale.types import Phase, SubTickSeries

TICK_S = 15.0


def with_fine(time_s: float, values_100ms: list[float], coarse: float, phase: Phase = Phase.READY):
    """One replica observed at ``time_s`` with the 100 ms samples of the tick before it."""
    s = sample("a", vllm_values(dram_active=coarse), phase=phase)
    fine = SubTickSeries(0.1, time_s, tuple(values_100ms))
    return replace(s, sub_tick={DCGM.DRAM_ACTIVE: fine})


def test_in_window_keeps_the_periods_that_end_after_the_cut():
    s = SubTickSeries(0.1, 60.0, (0.1, 0.2, 0.3))  # ends 59.8, 59.9, 60.0
    assert in_window(s, 59.85) == (0.2, 0.3)
    assert in_window(s, 59.7) == (0.1, 0.2, 0.3)
    assert in_window(s, 60.0) == ()


def test_bw_p95_of_600_samples_sees_a_3_second_burst():
    """60 s = 4 ticks of 150 samples. 570 samples at 0.5 and a 3 s burst (30 samples) at 0.95:
    the P95 is at position 0.95 x 599 = 569.05 of the sorted 600, 0.5 + 0.05 x 0.45 = 0.5225.
    The per-tick readings (the mean over each 15 s: 0.5 three times, 0.5 + 30/150 x 0.45 = 0.59
    once) give a P95 of 0.572 from 5 samples; neither sees 0.95, but 34 samples at 0.95 would."""
    ticks = []
    for k in range(5):  # t = 0 (outside the 60 s window but its edge observation), 15, ..., 60
        t = TICK_S * k
        burst = 30 if k == 2 else 0
        fine = [0.95] * burst + [0.5] * (150 - burst)
        ticks.append(obs(t, with_fine(t, fine, sum(fine) / 150)))
    bw = gpu_signals(FleetWindow.build(ticks))["bw_saturation_p95"]
    assert bw.value == pytest.approx(0.5 + 0.05 * 0.45)
    assert "600.0 100 ms samples each in 60 s" in bw.note
    # 34 samples at 0.95: positions 566..599 sorted, 569 and 570 both 0.95
    ticks[2] = obs(30.0, with_fine(30.0, [0.95] * 34 + [0.5] * 116, 0.6))
    assert gpu_signals(FleetWindow.build(ticks))["bw_saturation_p95"].value == pytest.approx(0.95)


def test_bw_p95_takes_only_samples_while_serving():
    """A replica warming up at t = 15 then serving: its 150 zeros of warm-up are not in the P95."""
    ticks = [
        obs(15.0, with_fine(15.0, [0.0] * 150, 0.0, phase=Phase.WARMUP)),
        obs(30.0, with_fine(30.0, [0.6] * 150, 0.6)),
        obs(45.0, with_fine(45.0, [0.8] * 150, 0.8)),
    ]
    bw = gpu_signals(FleetWindow.build(ticks))["bw_saturation_p95"]
    # 300 samples, 150 at 0.6 then 150 at 0.8: position 0.95 x 299 = 284.05 -> 0.8
    assert bw.value == pytest.approx(0.8)
    assert "300.0 100 ms samples" in bw.note


def test_bw_p95_falls_back_to_one_sample_per_observation():
    ticks = [
        obs(15.0 * k, sample("a", vllm_values(dram_active=x)))
        for k, x in enumerate((0.2, 0.4, 0.5, 0.7, 0.9))
    ]
    bw = gpu_signals(FleetWindow.build(ticks))["bw_saturation_p95"]
    assert bw.value == pytest.approx(0.86)
    assert "5.0 sample(s)" in bw.note


def queue_obs(time_s: float, per_s: list[float] | None, waiting: float) -> object:
    o = obs(time_s, sample("a", {VLLM.waiting: waiting}), gateway=0)
    return o if per_s is None else replace(o, queue_per_s=SubTickSeries(1.0, time_s, tuple(per_s)))


def test_queue_entropy_of_30_one_second_samples():
    """Queue 2 in 15 of the last 30 seconds, 0 in the others: p = 1/15 on 15 seconds,
    H = log2(15) = 3.907 bits, / log2(30) = 4.907 -> 0.796. The 3 per-tick readings
    (2, 0, 2) would give p = (1/2, 1/2), 1 bit / log2(3) = 0.631."""
    ticks = [
        queue_obs(0.0, None, 9.0),
        queue_obs(15.0, [5.0] * 15, 2.0),  # outside the 30 s window
        queue_obs(30.0, [2.0, 0.0] * 7 + [2.0], 0.0),  # 8 twos
        queue_obs(45.0, [0.0, 2.0] * 7 + [0.0], 2.0),  # 7 twos
    ]
    h = gpu_signals(FleetWindow.build(ticks))["queue_entropy"]
    assert h.value == pytest.approx(math.log2(15) / math.log2(30))
    assert h.note.startswith("30 one-second sample(s)")
    coarse = [replace(o, queue_per_s=None) for o in ticks]
    assert gpu_signals(FleetWindow.build(coarse))["queue_entropy"].value == pytest.approx(1 / math.log2(3))


def test_bw_p95_reads_an_exporters_windowed_p95_gauge():
    """Pages with ``llmscale:dram_active_p95_60s`` (the emulator's, or a Prometheus query's): their
    P95s are taken as they are, 0.52 and 0.9 -> 0.71, not the P95 of the per-tick readings."""
    a = vllm_values(dram_active=0.3) | {DERIVED.DRAM_ACTIVE_P95_60S: 0.52}
    b = vllm_values(dram_active=0.4) | {DERIVED.DRAM_ACTIVE_P95_60S: 0.9}
    ticks = [obs(15.0 * k, sample("a", a), sample("b", b)) for k in range(5)]
    bw = gpu_signals(FleetWindow.build(ticks))["bw_saturation_p95"]
    assert bw.value == pytest.approx(0.71)
    assert bw.note == "2 replica(s), each its exporter's llmscale:dram_active_p95_60s"
