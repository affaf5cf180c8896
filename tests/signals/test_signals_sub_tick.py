"""Seed 004's signals at their own resolution: bandwidth P95 of 600 100 ms samples, entropy of 30 s."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from signals_fixtures import obs, sample, vllm_values

from llmscale.metrics.names import DCGM, DERIVED, VLLM
from llmscale.signals import compute_signals
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


def tokens_obs(time_s: float, **per_replica: list[float] | tuple[float, list[float]]) -> object:
    """One observation whose replicas carry 100 ms generated-token counts, each ending at ``time_s``
    or, given as ``(end_s, counts)``, at ``end_s`` (a replica mid-step hands over fewer buckets)."""
    samples = []
    for name, given in per_replica.items():
        end_s, counts = given if isinstance(given, tuple) else (time_s, given)
        s = sample(name, vllm_values())
        series = SubTickSeries(0.1, end_s, tuple(counts))
        samples.append(replace(s, sub_tick={VLLM.generation_tokens: series}))
    return obs(time_s, *samples)


def adaptive(*observations):
    values = compute_signals(list(observations)).values
    return values["throughput_window_ms"], values["generation_tps_adaptive"]


def test_adaptive_window_worked_example():
    """Seed 000 2.4: seconds of 1000, 1000, 1000, 1000, 1100 tokens: std 40 tokens/s ->
    int(1000 / (1 + 0.02 x 40)) = 555 ms -> 6 buckets of 110 tokens -> 660 / 0.6 s = 1100 tokens/s."""
    window, tps = adaptive(tokens_obs(5.0, a=[100.0] * 40 + [110.0] * 10))
    assert window.value == 555.0 and window.note.startswith("std of the last 5 one-second")
    assert tps.value == pytest.approx(1100.0)
    assert tps.note == "over the last 600 ms"


def test_the_raw_reading_is_the_newest_100_ms():
    """The seed's raw sampling: the newest bucket alone, 110 tokens / 0.1 s = 1100 tokens/s (the
    adaptive window of the same counts spans 600 ms); with fewer than 2 seconds of counts the
    window is unknown but the raw reading is not."""
    values = compute_signals([tokens_obs(5.0, a=[100.0] * 49 + [130.0])]).values
    assert values["generation_tps_100ms"].value == pytest.approx(1300.0)
    assert values["generation_tps_100ms"].note == "over the last 100 ms"
    short = compute_signals([tokens_obs(1.5, a=[100.0] * 14 + [70.0])]).values
    assert short["generation_tps_adaptive"].value is None
    assert short["generation_tps_100ms"].value == pytest.approx(700.0)


def test_the_tick_reading_is_the_last_step():
    """Without 100 ms counts the per-step rate still reads: (counter at 30 s - at 15 s) / 15 s."""
    ticks = [obs(15.0 * k, sample("a", vllm_values(gen_tokens=g))) for k, g in enumerate((0, 300, 1200))]
    values = compute_signals(ticks).values
    assert values["generation_tps_tick"].value == pytest.approx(900.0 / 15.0)
    assert values["generation_tps_100ms"].value is None


@pytest.mark.parametrize(
    ("seconds", "window_ms", "tps"),
    [
        pytest.param([1000] * 5, 1000.0, 1000.0, id="std-0-1000ms"),
        pytest.param([1000, 1050, 1000, 1050, 1000], 671.0, 850.0 / 0.7, id="std-24.5-671ms"),
        pytest.param([500, 1500, 500, 1500, 500], 200.0, 150.0 / 0.2, id="std-490-floor-200ms"),
    ],
)
def test_the_window_narrows_as_the_throughput_spreads(seconds, window_ms, tps):
    """The formula as written: std 0 -> 1000 ms (10 buckets); std 24.5 -> int(1000 / 1.49) = 671 ms
    (7 buckets); std 490 -> int(1000 / 10.8) = 92 -> the 200 ms floor (2 buckets). The last second
    holds its tokens in two halves, the second 3x the first (1000 = 5 x 50 + 5 x 150), so the rate
    over the window's last buckets tells the window: 7 buckets hold 2 x 50 + 5 x 150 = 850 tokens.
    (Seed 000's prose says the window widens with the spread; its formula narrows it:
    signals/rates.py's adaptive_window_ms notes this.)"""
    counts = [sec / 10.0 for sec in seconds[:-1] for _ in range(10)]
    last = seconds[-1]
    counts += [last / 20.0] * 5 + [3.0 * last / 20.0] * 5
    window, rate = adaptive(tokens_obs(5.0, a=counts))
    assert window.value == window_ms
    assert rate.value == pytest.approx(tps)


def test_the_fleet_sums_replicas_on_one_grid_up_to_the_laggard():
    """Replica b's newest bucket ends at 4.9 s (it is mid-step): the fleet's series ends there, so
    4 whole seconds (4.9 s of history) make the spread. Ticks 2 s apart: the history spans three
    observations. a makes 100 tokens a bucket, b 50, but a's last bucket (4.9-5.0) holds 400 and
    is not summed: 1500 tokens/s each second -> std 0 -> 1000 ms -> 1500 tokens/s."""
    window, rate = adaptive(
        tokens_obs(1.0, a=[100.0] * 10, b=[50.0] * 10),
        tokens_obs(3.0, a=[100.0] * 20, b=[50.0] * 20),
        tokens_obs(5.0, a=[100.0] * 19 + [400.0], b=(4.9, [50.0] * 19)),
    )
    assert window.value == 1000.0 and "last 4 one-second" in window.note
    assert rate.value == pytest.approx(1500.0)


def test_without_token_counts_the_window_comes_from_the_ticks():
    ticks = [obs(15.0 * k, sample("a", vllm_values(gen_tokens=15_000.0 * k))) for k in range(3)]
    window, rate = adaptive(*ticks)
    assert window.value == 1000.0 and "per-step" in window.note  # 1000 tokens/s each step: std 0
    assert rate.value is None and "100 ms token counts" in rate.note
