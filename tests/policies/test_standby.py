"""The standby pool's sizing from observed bursts and its worth test (policies/standby.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmscale.policies.standby import StandbyConfig, StandbyState, standby_pool

AUTO = StandbyConfig(replicas=None, memory_s=3600.0, gpu_s_per_miss=5.0, cold_start_s=108.0, wake_s=1.6)
PLANNED = 7.5 * 0.95  # req/s one replica is planned to carry


def feed(config: StandbyConfig, ticks: list[tuple[float, float, float]]) -> tuple[int, StandbyState, dict]:
    """Run (now_s, arrivals, level) ticks through the sizing; the last tick's answer."""
    state = StandbyState()
    out: tuple[int, StandbyState, dict] = (0, state, {})
    for now, arrivals, level in ticks:
        out = standby_pool(config, state, now, arrivals, level, PLANNED)
        state = out[1]
    return out


CROWD = [(15.0 * i, 60.0, 60.0) for i in range(1, 5)] + [(75.0, 180.0, 60.0)]


@pytest.mark.parametrize(
    ("config", "ticks", "expected"),
    [
        pytest.param(AUTO, [(15.0 * i, 61.0, 60.0) for i in range(1, 10)], 0, id="noise-is-not-a-burst"),
        # The docstring's worked example: 17 replicas cost 61,200 GPU-s an hour, the crowd's
        # 120 req/s x 106.4 s = 12,768 misses are worth it from 4.79 GPU-s a miss.
        pytest.param(AUTO, CROWD, 17, id="worth-at-5-gpu-s-a-miss"),
        pytest.param(replace(AUTO, gpu_s_per_miss=4.7), CROWD, 0, id="not-worth-at-4.7"),
        pytest.param(replace(AUTO, replicas=3), CROWD, 3, id="fixed-pool"),
        pytest.param(replace(AUTO, replicas=3), [(15.0, 60.0, 60.0)], 3, id="fixed-pool-before-any-burst"),
        pytest.param(AUTO, [*CROWD, (75.0 + 3600.0, 60.0, 60.0)], 0, id="forgotten-after-memory"),
        pytest.param(replace(AUTO, max_replicas=10), CROWD, 10, id="bounded-by-max-replicas"),
    ],
)
def test_pool_size(config: StandbyConfig, ticks: list, expected: int) -> None:
    pool, _, inputs = feed(config, ticks)
    assert pool == expected
    assert inputs["standby_replicas"] == expected


def test_worked_example_numbers() -> None:
    _, state, inputs = feed(AUTO, CROWD)
    assert inputs["standby_sized"] == 17
    assert inputs["burst_peak_excess_rps"] == 120.0
    assert inputs["standby_prevented_misses_per_h"] == pytest.approx(12_768.0)
    assert inputs["standby_cost_gpu_s_per_h"] == 61_200.0
    assert state.bursts == ((75.0, 120.0),) and state.in_burst


def test_the_peak_decays_over_the_memory() -> None:
    """exp(-age / memory_s): after 1,800 s of calm a 120 req/s peak counts as 72.8 req/s."""
    _, _, inputs = feed(AUTO, [*CROWD, (75.0 + 1800.0, 60.0, 60.0)])
    assert inputs["burst_peak_excess_rps"] == pytest.approx(120.0 * 0.6065, abs=0.01)
    assert inputs["standby_sized"] == 11  # ceil(72.78 / 7.125)


def test_one_crowd_over_several_ticks_is_one_burst() -> None:
    ticks = [*CROWD, (90.0, 170.0, 100.0), (105.0, 150.0, 110.0), (120.0, 60.0, 100.0), (135.0, 180.0, 90.0)]
    _, state, _ = feed(AUTO, ticks)
    # The dip at 120 s and the rise at 135 s are within two cold starts (216 s): the same crowd.
    assert state.bursts == ((75.0, 120.0),)
    _, state, _ = feed(AUTO, [*ticks, (300.0, 60.0, 60.0), (315.0, 180.0, 60.0)])
    assert state.bursts == ((75.0, 120.0), (315.0, 120.0))  # 240 s later: a second crowd


def test_ripples_count_for_their_own_excess() -> None:
    """Two 20 req/s ripples before the crowd add 2 x 20 x 106.4 s, not two crowds' worth."""
    ripples = [(15.0, 60.0, 60.0), (30.0, 80.0, 60.0), (300.0, 60.0, 60.0), (315.0, 80.0, 60.0)]
    crowd = [(600.0, 60.0, 60.0), (615.0, 180.0, 60.0)]
    _, state, inputs = feed(replace(AUTO, gpu_s_per_miss=3.0), ripples + crowd)
    assert [top for _, top in state.bursts] == [20.0, 20.0, 120.0]
    assert inputs["standby_prevented_misses_per_h"] == pytest.approx(160.0 * 106.4)
    # 17,024 misses x 3 GPU-s < 17 replicas' 61,200 GPU-s (three crowds' 38,304 would pass).
    assert inputs["standby_replicas"] == 0
