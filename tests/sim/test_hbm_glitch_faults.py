"""HBM-bandwidth glitches and the adaptive batch fuse of seed 004 section 4.4 (llmscale.sim.faults)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmscale.errors import ConfigError
from llmscale.perf import get_perf_model
from llmscale.sim.config import SimConfig
from llmscale.sim.faults import (
    GLITCH_PERIOD_S,
    THRESHOLD_LOW_SHARE,
    AdaptiveBatchConfig,
    AdaptiveBatchState,
    HbmGlitch,
    adaptive_batch_step,
    degraded_perf,
    parse_glitch,
)
from llmscale.sim.fleet import Fleet

H100_HBM_BYTES_S = 3.35e12


@pytest.fixture(scope="module")
def perf():  # type: ignore[no-untyped-def]
    return get_perf_model("llama-3-8b", "h100-80gb", 1)


def _fleet(perf, n, input_tokens, output_tokens, replicas=1, **sim):  # type: ignore[no-untyped-def]
    return Fleet(
        perf,
        SimConfig(**sim),
        np.zeros(n),
        np.full(n, input_tokens, dtype=np.int64),
        np.full(n, output_tokens, dtype=np.int64),
        initial_replicas=replicas,
        gpus_per_replica=1,
    )


# ------------------------------------------------------------- the step-time model


def test_half_bandwidth_slows_the_memory_part_of_a_step_not_the_whole_step(perf) -> None:  # type: ignore[no-untyped-def]
    # Llama-3-8B on one H100. A decode step of 32 sequences at 1,000 tokens of context moves
    # 21.9 GB (weights 15.0 GB + KV + activations): 6.53 ms at the 3.35 TB/s peak, ~7.8 ms at
    # the fitted efficiencies (0.58-0.88), of a 12.29 ms step. Halving the bandwidth adds that
    # memory time once: 12.29 -> 20.00 ms (x1.63). A 4,096-token prefill is compute-bound
    # (93.3 ms of its 126.7 ms are SM-busy math); only its element-wise traffic slows:
    # 126.7 -> 138.0 ms (x1.09). A flat multiplier on the whole step would have given x2 both.
    half = degraded_perf(perf, 0.5)
    decode, decode_half = perf.decode(32, 1000), half.decode(32, 1000)
    prefill, prefill_half = perf.prefill(4096), half.prefill(4096)
    assert decode.duration_s == pytest.approx(12.29e-3, rel=2e-3)
    assert decode_half.duration_s == pytest.approx(20.00e-3, rel=2e-3)
    assert prefill_half.duration_s / prefill.duration_s == pytest.approx(1.090, abs=0.005)
    # Decode: every byte it moves is on its critical path, so the added time is its HBM
    # traffic at an efficiency between the fitted ones (0.58 activations .. 0.89 weights).
    added_s = decode_half.duration_s - decode.duration_s
    assert 1 / 0.9 <= added_s / (decode.dram_bytes / H100_HBM_BYTES_S) <= 1 / 0.58
    # Prefill: the 15.0 GB weight stream hides behind the math (the GEMM roofline takes the
    # larger of the two); only its 22.1 GB of element-wise traffic, at the fitted activation
    # efficiency 0.582, adds: 22.1e9 / (3.35e12 x 0.582) = 11.3 ms.
    act_eff = perf.coeffs.family("h100").act_bw_eff
    elementwise_bytes = prefill.dram_bytes - 15.0e9
    assert prefill_half.duration_s - prefill.duration_s == pytest.approx(
        elementwise_bytes / (H100_HBM_BYTES_S * act_eff), rel=0.01
    )
    for full, slow in ((decode, decode_half), (prefill, prefill_half)):
        assert slow.dram_bytes == full.dram_bytes  # the same bytes, moved slower
        assert slow.sm_busy_s == full.sm_busy_s


def test_the_seeds_glitch_depth_on_decode_and_prefill(perf) -> None:  # type: ignore[no-untyped-def]
    # Seed 004 4.4: 128 -> 8 MB/s keeps 6.25 % of the bandwidth. A memory-bound decode step
    # then takes ~10x as long (12.3 -> 128 ms at batch 32); a 4,096-token prefill 2.35x.
    glitched = degraded_perf(perf, 8 / 128)
    assert glitched.decode(32, 1000).duration_s / perf.decode(32, 1000).duration_s == pytest.approx(
        10.42, abs=0.05
    )
    assert glitched.prefill(4096).duration_s / perf.prefill(4096).duration_s == pytest.approx(2.35, abs=0.02)


# ------------------------------------------------------------------ the fuse


FULL = AdaptiveBatchState(256)
LOW = 8 / 128  # the seed's glitch level


@pytest.mark.parametrize(
    ("state", "bw_share", "expected"),
    [
        pytest.param(FULL, LOW, AdaptiveBatchState(256, 1, 0), id="first-glitched-period-counts"),
        pytest.param(
            AdaptiveBatchState(256, 2), LOW, AdaptiveBatchState(256, 3), id="three-is-not-more-than-3"
        ),
        pytest.param(
            AdaptiveBatchState(256, 3), LOW, AdaptiveBatchState(128, 0), id="fourth-halves-and-resets"
        ),
        pytest.param(AdaptiveBatchState(64, 3), LOW, AdaptiveBatchState(32, 0), id="halves-to-min-batch"),
        pytest.param(AdaptiveBatchState(32, 3), LOW, AdaptiveBatchState(32, 0), id="floor-is-min-batch"),
        pytest.param(
            AdaptiveBatchState(256, 3),
            THRESHOLD_LOW_SHARE,
            AdaptiveBatchState(256, 0, 1),
            id="at-threshold-is-healthy",
        ),
        pytest.param(
            AdaptiveBatchState(256, 3), 0.124, AdaptiveBatchState(128, 0), id="just-below-16-of-128-mb-s"
        ),
        pytest.param(
            AdaptiveBatchState(32, 0, 2), 1.0, AdaptiveBatchState(32, 0, 3), id="three-healthy-wait"
        ),
        pytest.param(
            AdaptiveBatchState(32, 0, 3), 1.0, AdaptiveBatchState(64, 0, 0), id="fourth-healthy-doubles"
        ),
        pytest.param(
            AdaptiveBatchState(200, 0, 3), 1.0, AdaptiveBatchState(256, 0, 0), id="doubles-up-to-max"
        ),
        pytest.param(
            AdaptiveBatchState(32, 2, 0), 1.0, AdaptiveBatchState(32, 0, 1), id="healthy-breaks-glitch-run"
        ),
        pytest.param(FULL, 1.0, AdaptiveBatchState(256, 0, 1), id="steady"),
    ],
)
def test_adaptive_batch_step(
    state: AdaptiveBatchState, bw_share: float, expected: AdaptiveBatchState
) -> None:
    assert adaptive_batch_step(AdaptiveBatchConfig(), state, bw_share, 256) == expected


def test_the_fuse_runs_down_and_back_in_the_seeds_periods() -> None:
    cfg = AdaptiveBatchConfig()
    state, batches = FULL, []
    for bw in [LOW] * 16 + [1.0] * 12:
        state = adaptive_batch_step(cfg, state, bw, 256)
        batches.append(state.batch)
    # 4 glitched periods per halving: 128 after the 4th, 64 after the 8th, 32 from the 12th on.
    assert batches[:16] == [256] * 3 + [128] * 4 + [64] * 4 + [32] * 5
    # Back up: x2 every 4 healthy periods.
    assert batches[16:] == [32] * 3 + [64] * 4 + [128] * 4 + [256]


# ----------------------------------------------------------------- in the fleet


def test_a_glitch_over_the_whole_run_is_the_slower_gpu(perf) -> None:  # type: ignore[no-untyped-def]
    # A window from 0 with duty 1 prices every iteration with the degraded model, exactly.
    glitch = HbmGlitch(0.0, 1000.0, retained_share=0.5, period_s=1000.0, duty=1.0)
    glitched = _fleet(perf, 32, 1000, 500, hbm_glitches=(glitch,))
    slower = _fleet(degraded_perf(perf, 0.5), 32, 1000, 500)
    normal = _fleet(perf, 32, 1000, 500)
    for f in (glitched, slower, normal):
        f.run_until(100.0)
    assert np.asarray(glitched.finish_at_s) == pytest.approx(np.asarray(slower.finish_at_s), rel=1e-12)
    # Mostly decode steps at batch 32: ~x1.5 the makespan.
    ratio = max(glitched.finish_at_s) / max(normal.finish_at_s)
    assert 1.45 < ratio < 1.62


def test_a_glitch_inside_an_iteration_slows_only_its_part_of_it(perf) -> None:  # type: ignore[no-untyped-def]
    # One 8,000-token prompt: one prefill iteration of T s. A glitch at 6.25 % from 0.1 to 0.15 s
    # runs that 50 ms of work q = d_glitched / d_normal (2.23) times slower, so the first token
    # comes 0.05 x (1 - 1/q) = 27.6 ms late, not T x (q - 1) = 332 ms (the whole iteration).
    normal = _fleet(perf, 1, 8000, 1)
    normal.run_until(10.0)
    t_s = normal.first_token_at_s[0]
    q = degraded_perf(perf, 8 / 128).prefill(8000).duration_s / perf.prefill(8000).duration_s
    assert q == pytest.approx(2.23, abs=0.01)
    glitch = HbmGlitch(0.1, 0.05, period_s=0.05, duty=1.0)
    glitched = _fleet(perf, 1, 8000, 1, hbm_glitches=(glitch,))
    glitched.run_until(10.0)
    assert glitched.first_token_at_s[0] - t_s == pytest.approx(0.05 * (1 - 1 / q), rel=1e-9)


def test_the_seeds_glitch_train_costs_its_duty_cycle_not_more(perf) -> None:  # type: ignore[no-untyped-def]
    # 14.1 ms of every 83 ms at ~1/10 the speed: the replica does 69 + 1.4 ms of work per 83 ms,
    # 85 % of its speed, so 64 x 500-token decodes (10.7 s) take ~12.5 s, not 17 s (which
    # pricing a whole iteration at the glitch's rate whenever it started inside one gave).
    normal = _fleet(perf, 64, 1000, 500)
    glitched = _fleet(perf, 64, 1000, 500, hbm_glitches=(HbmGlitch(0.0, 20.0),))
    normal.run_until(100.0)
    glitched.run_until(100.0)
    base, slow = max(normal.finish_at_s), max(glitched.finish_at_s)
    assert base == pytest.approx(10.70, abs=0.05)
    assert 1.10 < slow / base < 1.20


def test_the_glitch_hits_the_oldest_share_of_replicas(perf) -> None:  # type: ignore[no-untyped-def]
    f = _fleet(
        perf,
        1,
        10,
        2,
        replicas=4,
        hbm_glitches=(HbmGlitch(1.0, 2.0, replica_share=0.5, duty=1.0, period_s=2.0),),
    )
    f.run_until(1.5)
    assert [r.costs is f.costs for r in f.replicas] == [False, False, True, True]
    f.run_until(3.5)
    assert all(r.costs is f.costs for r in f.replicas)


def test_the_fuse_in_the_fleet_follows_the_seeds_periods(perf) -> None:  # type: ignore[no-untyped-def]
    # The seed's glitch train for 10 s = 120 whole periods of 83 ms (ends at 9.96 s). The fuse
    # halves after periods 4, 8 and 12 (0.332, 0.664, 0.996 s) down to 32. After the window, one
    # tick closes the last glitched period, then x2 every 4 healthy periods: 9.96 + 4 x 0.083.
    t = GLITCH_PERIOD_S
    f = _fleet(
        perf, 64, 1000, 500, hbm_glitches=(HbmGlitch(0.0, 10.0),), adaptive_batch=AdaptiveBatchConfig()
    )
    running_after_cut = []
    while f.now < 30.0:
        f.run_until(f.now + 0.05)
        r = f.replicas[0]
        if 1.0 < f.now < 9.9 and r.max_seqs == 32:
            running_after_cut.append(r.num_running)
    end = 120 * t
    expected = [
        (4 * t, 128),
        (8 * t, 64),
        (12 * t, 32),
        (end + 4 * t, 64),
        (end + 8 * t, 128),
        (end + 12 * t, 256),
    ]
    log = f.faults.batch_log
    assert [(b, name) for _, name, b in log] == [(b, "replica-1") for _, b in expected]
    assert [x for x, _, _ in log] == pytest.approx([x for x, _ in expected], abs=1e-9)
    # Those admitted before the cut (41 of the 64: the prompts prefilled in the first second) run
    # on to their last token (~9.8 s); once the replica is below the cap, admissions keep it.
    below = [i for i, n in enumerate(running_after_cut) if n <= 32]
    assert below and max(running_after_cut[below[0] :]) <= 32, running_after_cut
    assert int(f.counts[1]) == 64  # all completed


def test_without_the_fuse_the_batch_never_changes(perf) -> None:  # type: ignore[no-untyped-def]
    f = _fleet(perf, 64, 1000, 500, hbm_glitches=(HbmGlitch(0.0, 10.0),))
    f.run_until(30.0)
    assert f.faults.batch_log == []
    assert f.replicas[0].max_seqs == 256


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("10", "expected START_S:DURATION_S", id="too-few"),
        pytest.param("10:x", "duration_s 'x' is not a number", id="not-a-number"),
        pytest.param("10:0", "duration_s = 0.0, must be a finite number in (0", id="empty-window"),
        pytest.param("10:5:1.5", "replica_share = 1.5", id="share-above-1"),
        pytest.param("10:5:1:0", "retained_share = 0.0", id="no-bandwidth-left"),
        pytest.param("-1:5", "start_s = -1.0", id="negative-start"),
    ],
)
def test_parse_glitch_refuses_bad_input(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"--hbm-glitch '{text}'.*" + message.replace("(", r"\(")):
        parse_glitch(text)


def test_parse_glitch() -> None:
    g = parse_glitch("1200:300:0.5")
    assert (g.start_s, g.duration_s, g.replica_share, g.retained_share) == (1200.0, 300.0, 0.5, 8 / 128)
    assert g.num_periods == 3614  # 300 / 0.083 = 3614.5
    assert g.end_s == pytest.approx(1200 + 3614 * 0.083)


def test_overlapping_windows_are_refused(perf) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="overlap"):
        _fleet(perf, 1, 10, 2, hbm_glitches=(HbmGlitch(0.0, 10.0), HbmGlitch(5.0, 10.0)))


def test_glitch_windows_need_whole_periods() -> None:
    assert HbmGlitch(0.0, 0.01).num_periods == 1
    assert math.isclose(HbmGlitch(0.0, 0.166).end_s, 0.166)


@settings(max_examples=25, deadline=None)
@given(
    start_s=st.floats(0.0, 5.0),
    duration_s=st.floats(0.05, 10.0),
    share=st.floats(0.1, 1.0),
    retained=st.floats(0.01, 1.0),
    duty=st.floats(0.05, 1.0),
    period_s=st.floats(0.02, 2.0),
    fuse=st.booleans(),
)
def test_faults_lose_no_request_and_respect_the_batch_limit(
    start_s: float, duration_s: float, share: float, retained: float, duty: float, period_s: float, fuse: bool
) -> None:
    perf = get_perf_model("llama-3-8b", "h100-80gb", 1)
    rng = np.random.default_rng(7)
    n = 120
    glitch = HbmGlitch(start_s, duration_s, share, retained, period_s, duty)
    f = Fleet(
        perf,
        SimConfig(
            max_num_seqs=64,
            hbm_glitches=(glitch,),
            adaptive_batch=AdaptiveBatchConfig(min_batch=8) if fuse else None,
        ),
        np.sort(rng.uniform(0.0, 6.0, n)),
        rng.integers(50, 2000, n),
        rng.integers(2, 300, n),
        initial_replicas=3,
        gpus_per_replica=1,
    )
    # Until every request is resolved and the fuse had 2 s after the window to recover
    # (8 -> 64 is 3 doublings of 4 periods of 83 ms: 1.0 s).
    while (f.now < 400.0 and f.unresolved) or f.now < glitch.end_s + 2.0:
        f.run_until(f.now + 0.25)
        for r in f.replicas:
            assert r.num_running <= 64
    assert int(f.counts[1]) == n  # every request completed: a glitch slows, it loses nothing
    if not fuse:
        assert f.faults.batch_log == []
    assert all(r.max_seqs == 64 for r in f.replicas)  # the fuse gave the batch back
